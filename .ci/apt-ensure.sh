#!/usr/bin/env bash
# Install whichever of the named Debian/Ubuntu packages are missing (through sudo unless root).
#
#   .ci/apt-ensure.sh memcached cmake ...
#
# A package counts as present only when dpkg says "install ok installed" (`dpkg -s` also answers 0 for
# a removed package whose config files remain). `apt-get update` runs only when something is missing.
set -euo pipefail

missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: missing packages: ${missing[*]}; this is not a Debian/Ubuntu system (no apt-get): install them yourself" >&2
  exit 1
fi
sudo=()
if [ "$(id -u)" != 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "error: installing ${missing[*]} needs root or sudo" >&2
    exit 1
  fi
  sudo=(sudo)
fi
echo "apt: installing ${missing[*]}" >&2
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
