#!/usr/bin/env bash
# Create (or verify) a Python virtual environment with the pinned aiomoqt
# MoQT peer used by the kvcast interop tests (and numpy, with which
# aiomoqt_kv_subscriber.py decodes KVCache payloads).
#
#   tests/interop/setup_aiomoqt.sh VENV_DIR
#
# Idempotent: if VENV_DIR already holds the pinned versions it only checks
# them and exits 0. Needs Python >= 3.12 (aiomoqt's floor) and PyPI.
#   1. "$(pyenv root)/versions/3.12.1/bin/python" when pyenv has it;
#   2. else the first of python3.14 python3.13 python3.12 python3 on PATH
#      that is >= 3.12 (override: AIOMOQT_PYTHON=/path/to/python).
# aiopquic ships binary wheels for cp312-cp314, manylinux_2_34 (glibc >=
# 2.34: Debian 12+, Ubuntu 22.04+), x86_64/aarch64; elsewhere pip builds it
# from the sdist, which needs cmake, a C compiler and OpenSSL headers.
set -euo pipefail

# Pins: the newest 0.13.x release (checked 0.13.3 against its own relay
# with every interop case, see tests/interop/README.md) and exactly what
# pip resolved for it.
AIOMOQT_VERSION=0.13.3
AIOPQUIC_VERSION=0.6.1
SORTEDCONTAINERS_VERSION=2.4.0
CERTIFI_VERSION=2026.10.18
# numpy for aiomoqt_kv_subscriber.py (wheels for cp312-cp314, x86_64 and aarch64).
NUMPY_VERSION=2.3.3

die() { echo "setup_aiomoqt: error: $*" >&2; exit 1; }

[[ $# -eq 1 && -n "$1" ]] || die "usage: $0 VENV_DIR"
VENV_DIR=$1
[[ "$VENV_DIR" == /* ]] || VENV_DIR="$PWD/$VENV_DIR"   # checks below run from /

py_ok() {  # is "$1" a Python >= 3.12 interpreter?
  "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' \
    >/dev/null 2>&1
}

find_python() {
  if [[ -n "${AIOMOQT_PYTHON:-}" ]]; then
    py_ok "$AIOMOQT_PYTHON" || die "AIOMOQT_PYTHON=$AIOMOQT_PYTHON is not a Python >= 3.12"
    echo "$AIOMOQT_PYTHON"; return
  fi
  if command -v pyenv >/dev/null 2>&1; then
    local p
    p="$(pyenv root)/versions/3.12.1/bin/python"
    if [[ -x "$p" ]] && py_ok "$p"; then echo "$p"; return; fi
  fi
  local c
  for c in python3.14 python3.13 python3.12 python3; do
    if command -v "$c" >/dev/null 2>&1 && py_ok "$(command -v "$c")"; then
      command -v "$c"; return
    fi
  done
  return 1
}

# Checks the venv from a neutral directory: running python from inside
# site-packages/aiomoqt would let aiomoqt/types.py shadow the stdlib "types".
venv_matches() {
  [[ -x "$VENV_DIR/bin/python" ]] || return 1
  (cd / && "$VENV_DIR/bin/python" - "$AIOMOQT_VERSION" "$AIOPQUIC_VERSION" "$NUMPY_VERSION" <<'EOF'
import sys
from importlib.metadata import version, PackageNotFoundError
try:
    ok = (version("aiomoqt") == sys.argv[1] and version("aiopquic") == sys.argv[2]
          and version("numpy") == sys.argv[3])
    import aiomoqt.client, aiomoqt.track, aiopquic, numpy  # noqa: F401
except (PackageNotFoundError, ImportError):
    ok = False
sys.exit(0 if ok and sys.version_info >= (3, 12) else 1)
EOF
  ) >/dev/null 2>&1
}

start=$(date +%s)
if venv_matches; then
  echo "setup_aiomoqt: $VENV_DIR already has aiomoqt==$AIOMOQT_VERSION aiopquic==$AIOPQUIC_VERSION numpy==$NUMPY_VERSION"
  exit 0
fi

PY=$(find_python) || die "no Python >= 3.12 found. Install one (pyenv install 3.12.1; or on Debian 13: apt-get install python3.13 python3.13-venv) or set AIOMOQT_PYTHON=/path/to/python3.12+"
echo "setup_aiomoqt: using $PY ($("$PY" -c 'import sys; print(sys.version.split()[0])'))"

glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}') || true
if [[ -n "${glibc:-}" ]] && ! printf '2.34\n%s\n' "$glibc" | sort -V -C; then
  echo "setup_aiomoqt: warning: glibc $glibc < 2.34: no aiopquic wheel fits, pip will build it from source (needs cmake, cc, OpenSSL headers)" >&2
fi

if [[ -e "$VENV_DIR" && ! -x "$VENV_DIR/bin/python" ]]; then
  die "$VENV_DIR exists but is not a virtual environment; remove it or pick another path"
fi
if [[ -x "$VENV_DIR/bin/python" ]] && ! py_ok "$VENV_DIR/bin/python"; then
  echo "setup_aiomoqt: $VENV_DIR has a Python < 3.12; recreating it"
  "$PY" -m venv --clear "$VENV_DIR" || die "python -m venv failed (on Debian install the matching pythonX.Y-venv package)"
elif [[ ! -x "$VENV_DIR/bin/python" ]]; then
  "$PY" -m venv "$VENV_DIR" || die "python -m venv failed (on Debian install the matching pythonX.Y-venv package)"
fi

"$VENV_DIR/bin/python" -m pip install --disable-pip-version-check --quiet \
  "aiomoqt==$AIOMOQT_VERSION" \
  "aiopquic==$AIOPQUIC_VERSION" \
  "sortedcontainers==$SORTEDCONTAINERS_VERSION" \
  "certifi==$CERTIFI_VERSION" \
  "numpy==$NUMPY_VERSION" \
  || die "pip install failed (is PyPI reachable?)"

venv_matches || die "installed, but importing aiomoqt $AIOMOQT_VERSION / aiopquic $AIOPQUIC_VERSION / numpy $NUMPY_VERSION from $VENV_DIR fails"
(cd / && "$VENV_DIR/bin/python" -m aiomoqt.versions) || true
echo "setup_aiomoqt: ready in $(( $(date +%s) - start ))s: $VENV_DIR"
