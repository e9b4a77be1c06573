#!/usr/bin/env bash
# Install this deployment's cachewarm agent (and, with --dumper-tarball, the dumper) from the stack's
# artifacts. The one installer: the populator launch template's user data and the install-agent SSM
# document (source nodes; populators again after cloud-init) both run it. Idempotent: nothing to do
# when the same bundle (by SHA-256) is installed; a new version goes into a new virtualenv and the
# `venv` link moves to it, so an agent still running from the old one is not disturbed.
#
#   install-agent.sh --agent-bundle S3_URL --agent-sha256 HEX --version V
#                    [--dumper-tarball S3_URL --dumper-sha256 HEX] [--root DIR] [--bin-dir DIR]
#
# Environment: CACHEWARM_ROOT (default /opt/cachewarm: venvs, wheels, bin/cachewarm-dump, the
# markers), CACHEWARM_BIN_DIR (default /usr/local/bin: where `cachewarm` is linked),
# CACHEWARM_PYTHON (default: the first of python3.12, python3.11, python3 that is >= 3.11),
# CACHEWARM_AWS (default: aws). The artifacts are fetched with `aws s3 cp` (AWS_ENDPOINT_URL works).
# Exit: 0 installed (or already), 2 usage, 3 no suitable Python, 4 checksum mismatch, 5 the installed
# agent does not report the expected version, 6 download failed, 7 the bundle has no hashed lock,
# 8 a wheel is missing or differs from its locked hash (nothing is ever fetched from a package index).
set -euo pipefail

ROOT=${CACHEWARM_ROOT:-/opt/cachewarm}
BIN_DIR=${CACHEWARM_BIN_DIR:-/usr/local/bin}
AWS=${CACHEWARM_AWS:-aws}
AGENT_URL="" AGENT_SHA="" DUMPER_URL="" DUMPER_SHA="" VERSION=""

die() { echo "install-agent: $2" >&2; exit "$1"; }
log() { echo "install-agent: $*"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --agent-bundle) AGENT_URL=$2; shift 2 ;;
    --agent-sha256) AGENT_SHA=$2; shift 2 ;;
    --dumper-tarball) DUMPER_URL=$2; shift 2 ;;
    --dumper-sha256) DUMPER_SHA=$2; shift 2 ;;
    --version) VERSION=$2; shift 2 ;;
    --root) ROOT=$2; shift 2 ;;
    --bin-dir) BIN_DIR=$2; shift 2 ;;
    *) die 2 "unknown argument: $1" ;;
  esac
done
[ -n "$AGENT_URL" ] && [ -n "$AGENT_SHA" ] && [ -n "$VERSION" ] || die 2 "--agent-bundle, --agent-sha256 and --version are required"
[ -z "$DUMPER_URL" ] || [ -n "$DUMPER_SHA" ] || die 2 "--dumper-tarball needs --dumper-sha256"
[[ "$AGENT_SHA$DUMPER_SHA" =~ ^[0-9a-f]*$ ]] || die 2 "checksums are lowercase hex"
[[ "$VERSION" =~ ^[0-9][0-9A-Za-z.+-]{0,63}$ ]] || die 2 "bad version: $VERSION"

installed_version() { "$ROOT/venv/bin/cachewarm" --version 2>/dev/null | awk '{print $NF}'; }

fetch() {  # url sha256 destination
  "$AWS" s3 cp --only-show-errors "$1" "$3" || die 6 "cannot download $1"
  printf '%s  %s\n' "$2" "$3" | sha256sum -c --quiet - >/dev/null 2>&1 \
    || die 4 "checksum mismatch for $1 (expected $2, got $(sha256sum "$3" | cut -d' ' -f1))"
}

pick_python() {
  local candidates=("${CACHEWARM_PYTHON:-}" python3.12 python3.11 python3) p
  for p in "${candidates[@]}"; do
    [ -n "$p" ] || continue
    command -v "$p" >/dev/null 2>&1 || continue
    if "$p" -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then echo "$p"; return; fi
  done
  die 3 "no Python >= 3.11 with venv found (set CACHEWARM_PYTHON)"
}

mkdir -p "$ROOT" "$ROOT/bin" "$BIN_DIR"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cachewarm-install.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# ---- the agent ---------------------------------------------------------------------------------
if [ "$(cat "$ROOT/agent.installed" 2>/dev/null || true)" = "$VERSION $AGENT_SHA" ] && [ "$(installed_version)" = "$VERSION" ]; then
  log "agent $VERSION already installed"
else
  PY=$(pick_python)
  fetch "$AGENT_URL" "$AGENT_SHA" "$WORK/agent.tar.gz"
  VENV="$ROOT/venv-$VERSION-${AGENT_SHA:0:12}"
  rm -rf "$VENV" "$ROOT/wheels.new"
  mkdir -p "$ROOT/wheels.new"
  tar -xzf "$WORK/agent.tar.gz" -C "$ROOT/wheels.new"
  "$PY" -m venv "$VENV"
  # The bundle is a wheelhouse (make dist): every wheel, locked by requirements.txt with its SHA-256.
  # No package index is ever asked (a production node must not install what a public index serves);
  # a wheel that is missing or differs from its hash fails the install.
  LOCK="$ROOT/wheels.new/requirements.txt"
  grep -q -- '--hash=sha256:' "$LOCK" 2>/dev/null \
    || die 7 "the agent bundle carries no hashed requirements.txt (build it with make dist)"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-index --require-hashes --only-binary=:all: \
    --find-links "$ROOT/wheels.new" -r "$LOCK" \
    || die 8 "pip refused the bundle: a wheel is missing or does not match its hash in requirements.txt"
  got=$("$VENV/bin/cachewarm" --version 2>/dev/null | awk '{print $NF}')
  [ "$got" = "$VERSION" ] || die 5 "the installed agent reports version '${got:-none}', expected $VERSION"
  rm -rf "$ROOT/wheels" && mv "$ROOT/wheels.new" "$ROOT/wheels"
  ln -sfn "$VENV" "$ROOT/venv.new" && mv -T "$ROOT/venv.new" "$ROOT/venv"
  echo "$VERSION $AGENT_SHA" >"$ROOT/agent.installed"
  log "agent $VERSION installed in $VENV"
fi
ln -sf "$ROOT/venv/bin/cachewarm" "$BIN_DIR/cachewarm"

# ---- the dumper (source nodes) -----------------------------------------------------------------
if [ -n "$DUMPER_URL" ]; then
  if [ "$(cat "$ROOT/dumper.installed" 2>/dev/null || true)" = "$DUMPER_SHA" ] && [ -x "$ROOT/bin/cachewarm-dump" ]; then
    log "dumper already installed"
  else
    fetch "$DUMPER_URL" "$DUMPER_SHA" "$WORK/dumper.tar.gz"
    mkdir -p "$WORK/dumper"
    tar -xzf "$WORK/dumper.tar.gz" -C "$WORK/dumper"
    [ -f "$WORK/dumper/cachewarm-dump" ] || die 6 "the dumper tarball holds no cachewarm-dump"
    install -m 0755 "$WORK/dumper/cachewarm-dump" "$ROOT/bin/cachewarm-dump.new"
    mv -f "$ROOT/bin/cachewarm-dump.new" "$ROOT/bin/cachewarm-dump"
    echo "$DUMPER_SHA" >"$ROOT/dumper.installed"
    log "dumper installed in $ROOT/bin"
  fi
fi
log "cachewarm $(installed_version) ready"
