#!/usr/bin/env bash
# Installs the HF transformers oracle (CPU only) into <repo>/.venv-hf:
# Debian python3-torch + a venv with the pinned PyPI packages. Idempotent.
# Usage: bash tools/golden/install_oracle.sh   (as root, or with sudo)
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${HF_ORACLE_VENV:-$repo/.venv-hf}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y \
      --no-install-recommends python3-torch python3-venv
fi
if [ ! -x "$venv/bin/python" ]; then
  # Debian's interpreter: python3-torch is built for it, not for pyenv's.
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
"$venv/bin/pip" install -q -r "$repo/tools/golden/requirements-oracle.txt"
"$venv/bin/python" -c 'import torch, transformers, safetensors; print("oracle ready: torch", torch.__version__, "transformers", transformers.__version__, "safetensors", safetensors.__version__)'
