#!/usr/bin/env bash
# Create the project's virtual environment (default .venv) from the system's Python >= 3.11.
#
#   .ci/venv.sh [DIR]          SYSTEM_PYTHON=/path/to/python3.x picks the interpreter
#
# Which interpreter, unless SYSTEM_PYTHON says: Debian's/Ubuntu's /usr/bin/python3 when it exists (it is
# "externally managed", PEP 668: pip refuses to install into it, hence the venv), else the first python3
# on PATH, else Debian's installed through apt. A python3 earlier on PATH (pyenv, conda) is never
# installed into. Debian ships the venv module's pip bootstrap (ensurepip) separately: if it is
# missing, python3-venv is installed through apt.
set -euo pipefail

venv=${1:-.venv}
here=$(cd "$(dirname "$0")" && pwd)

py=${SYSTEM_PYTHON:-}
if [ -z "$py" ]; then
  if [ -x /usr/bin/python3 ]; then
    py=/usr/bin/python3
  elif command -v python3 >/dev/null 2>&1; then
    py=$(command -v python3)
  else
    "$here/apt-ensure.sh" python3
    py=/usr/bin/python3
  fi
fi

if ! version=$("$py" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null); then
  echo "error: $py does not run as a Python interpreter (set SYSTEM_PYTHON to a python3 >= 3.11)" >&2
  exit 1
fi
if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "error: cachewarm needs Python >= 3.11, and $py is $version." \
    "Install a newer one and run make again with SYSTEM_PYTHON=/path/to/python3.11 (or newer)." >&2
  exit 1
fi

if ! "$py" -c 'import ensurepip, venv' 2>/dev/null; then
  mm=${version%.*}
  case "$(readlink -f "$py")" in
    # Debian/Ubuntu: python3-venv for the default python3, python3.X-venv for another packaged one.
    /usr/bin/python3*)
      if [ "$py" = /usr/bin/python3 ]; then pkg=python3-venv; else pkg=python$mm-venv; fi
      "$here/apt-ensure.sh" "$pkg" ;;
    *)
      echo "error: $py ($version) has no venv/ensurepip module: install them, or set SYSTEM_PYTHON" >&2
      exit 1 ;;
  esac
fi

# A leftover directory (say, a venv whose interpreter was removed by an upgrade) is rebuilt whole.
rm -rf "$venv"
trap 'rm -rf "$venv"' ERR
"$py" -m venv "$venv"
"$venv/bin/python" -m pip --version >/dev/null
echo "venv: $venv from $py ($version)" >&2
