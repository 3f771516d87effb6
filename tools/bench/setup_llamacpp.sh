#!/usr/bin/env bash
# Installs llama.cpp (through PyPI's llama-cpp-python, which compiles
# llama.cpp from source with cmake) into a venv, CPU only, as an independent
# peer for tools/bench/llamacpp_bench.py and tools/golden/llamacpp_oracle.py.
# Idempotent: does nothing when the pinned version was already built there
# with the same cmake options.
#
#   bash tools/bench/setup_llamacpp.sh VENV_DIR      (e.g. .venv-llamacpp)
#
# Environment: PYTHON (default: pyenv's or the system python3),
# LLAMACPP_NATIVE=0 to build without -march=native (portable binary),
# CMAKE_ARGS_EXTRA for more llama.cpp cmake options.
# The build takes about 6 minutes on 2 cores; it needs cmake, gcc/g++ and
# (optionally) ninja, which the cpp machine image has.
#
# AMX is compiled out (-mno-amx-*): on this machine's Sapphire-Rapids-class
# CPU, -march=native turns on ggml's AMX path, and the first llama_decode
# then segfaults in ggml_backend_amx_mul_mat (as in llama.cpp issue 20824).
# GCC lets explicit -mno-* flags win over -march=native whatever their order.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION="0.3.36"

if [ $# -ne 1 ]; then
  echo "usage: $0 VENV_DIR" >&2
  exit 2
fi
venv="$1"
python="${PYTHON:-python3}"

native=ON
[ "${LLAMACPP_NATIVE:-1}" = "0" ] && native=OFF
noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
# CPU only (no CUDA/Metal/Vulkan), no BLAS, no libcurl (model downloads),
# native SIMD (AVX2/AVX-512/VNNI where the CPU has them) but no AMX.
cmake_args="-DGGML_NATIVE=$native -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_BLAS=OFF -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DLLAMA_CURL=OFF -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS='$noamx' -DCMAKE_CXX_FLAGS='$noamx' ${CMAKE_ARGS_EXTRA:-}"
stamp="llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION $cmake_args"
stamp_file="$venv/.llamacpp-build"

installed_version() {
  [ -x "$venv/bin/python" ] || return 1
  "$venv/bin/python" -c \
    'import importlib.metadata as m; print(m.version("llama-cpp-python"))' 2>/dev/null
}

if [ "$(installed_version || true)" = "$LLAMA_CPP_PYTHON_VERSION" ] &&
   [ "$(cat "$stamp_file" 2>/dev/null || true)" = "$stamp" ] &&
   "$venv/bin/python" -c 'import llama_cpp' 2>/dev/null; then
  echo "llama-cpp-python $LLAMA_CPP_PYTHON_VERSION already in $venv"
  exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
rm -f "$stamp_file"

export CMAKE_ARGS="$cmake_args"
export CMAKE_BUILD_PARALLEL_LEVEL=2
export MAKEFLAGS=-j2
export FORCE_CMAKE=1

start=$(date +%s)
"$venv/bin/pip" install -q --upgrade pip
# Dependencies first (wheels), then llama-cpp-python itself from its sdist,
# rebuilt even if that version is installed (the cmake options may differ).
"$venv/bin/pip" install -q numpy typing-extensions diskcache jinja2
"$venv/bin/pip" install --no-cache-dir --force-reinstall --no-deps \
    --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
end=$(date +%s)

"$venv/bin/python" -c '
import importlib.metadata as m, sys, llama_cpp
info = llama_cpp.llama_print_system_info().decode().strip()
print("llama-cpp-python", m.version("llama-cpp-python"), "ready; system info:", info)
if "AMX_INT8 = 1" in info:
    sys.exit("setup_llamacpp: AMX is still compiled in")
'
echo "$stamp" > "$stamp_file"
echo "llama-cpp-python build + install took $((end - start)) s"
