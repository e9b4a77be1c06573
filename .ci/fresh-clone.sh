#!/usr/bin/env bash
# Acceptance check for the README's two commands as a newcomer runs them: a fresh clone, PATH reduced to
# the system's directories (so the system's python3 — Debian's — is the only one there), every signal at
# its default action and none blocked (.ci/default-signals: as from an ordinary shell), then
# `make demo` and `make test`. Both must pass; nothing may be pip-installed outside the clone's .venv.
#
#   .ci/fresh-clone.sh [REF] [TARGET...]     REF: a commit of this repository (default HEAD; uncommitted
#                                            changes are not part of a clone); TARGETs default: demo test
#   COLD=1 .ci/fresh-clone.sh                empty pip and npm caches (as on a new machine; apt's are not
#                                            touched: its packages are installed system-wide anyway)
#   KEEP=1 .ci/fresh-clone.sh                keep the clone (else removed when everything passed)
#
# Not run by .ci/run: `make test` inside `make test` would take twice as long. Prints one line per
# command with its wall time and result; logs go to <workdir>/logs/.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
ref=${1:-HEAD}
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(demo test)

# The system's directories, less any that holds another python3 than Debian's /usr/bin/python3.
sys_path=""
for d in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
  if [ -e "$d/python3" ] && [ "$(readlink -f "$d/python3")" != "$(readlink -f /usr/bin/python3 2>/dev/null)" ]; then
    echo "fresh-clone: leaving $d out of PATH (it has another python3: $d/python3)" >&2
    continue
  fi
  sys_path=${sys_path:+$sys_path:}$d
done

# What is pip-installed in the interpreters a wrong Makefile would install into: the first python3 on
# the caller's PATH (pyenv's on the development machines) and the system's. Debian's own packages
# (/usr/lib/python3/dist-packages: apt's python3-* that `make test` installs, e.g. python3-pylibmc) are
# not pip's doing and are left out.
snapshot() {
  local py
  for py in "$(command -v python3 || true)" /usr/bin/python3; do
    [ -n "$py" ] && [ -x "$py" ] || continue
    echo "== $py"
    "$py" -m pip list --format=json -v 2>/dev/null | "$py" -c '
import json, sys
for p in json.load(sys.stdin):
    if not (p.get("location") or "").startswith("/usr/lib/python3/dist-packages"):
        print(p["name"] + "==" + p["version"])' || echo "(no pip)"
  done
}

work=$(mktemp -d /tmp/cachewarm-fresh.XXXXXX)
mkdir -p "$work/logs"
snapshot >"$work/before.txt"
git clone -q --no-hardlinks "$repo" "$work/clone"
git -C "$work/clone" checkout -q --detach "$(git -C "$repo" rev-parse "$ref")"
echo "fresh-clone: $(git -C "$work/clone" log -1 --format='%h %s') in $work/clone; PATH=$sys_path" >&2

envs=(PATH="$sys_path")
if [ -n "${COLD:-}" ]; then
  envs+=(PIP_CACHE_DIR="$work/cache/pip" npm_config_cache="$work/cache/npm")
fi

status=0
results=()
for t in "${targets[@]}"; do
  start=$(date +%s)
  if (cd "$work/clone" && env -u VIRTUAL_ENV -u PYENV_VERSION "${envs[@]}" "$repo/.ci/default-signals" make "$t") \
    >"$work/logs/$t.log" 2>&1; then
    r=pass
  else
    r="FAIL (see $work/logs/$t.log)"
    status=1
  fi
  results+=("make $t: $(($(date +%s) - start)) s, $r")
  echo "fresh-clone: ${results[-1]}" >&2
  [ $status = 0 ] || break
done

# The clone's .venv must come from the system's python3, and no other interpreter may have changed.
home=$(sed -n 's/^home = //p' "$work/clone/.venv/pyvenv.cfg" 2>/dev/null || true)
if [ "$home" != /usr/bin ] && [ -x /usr/bin/python3 ]; then
  results+=(".venv made from '$home', not /usr/bin: FAIL")
  status=1
fi
snapshot >"$work/after.txt"
if ! diff -u "$work/before.txt" "$work/after.txt" >"$work/logs/installed-outside.diff"; then
  results+=("packages changed outside .venv: FAIL (see $work/logs/installed-outside.diff)")
  status=1
fi

printf '%s\n' "${results[@]}"
if [ $status = 0 ] && [ -z "${KEEP:-}" ]; then
  rm -rf "$work"
else
  echo "fresh-clone: kept $work" >&2
fi
exit $status
