#!/usr/bin/env bash
# Builds the GPU check binaries here (the GPU machine has no Bazel) and puts
# them, with the shared libraries they need that are neither glibc nor the
# CUDA toolkit (present there), under DEST (default build/gpu, git-ignored),
# for the device tool's `carry`. Then, on the GPU machine:
#   bash tests/cuda/run_gpu_checks.sh build/gpu
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST="${1:-build/gpu}"
TARGETS=(//kernels/cuda:cuda_backend_test //kernels/cuda:sampling_test //tools/golden:kvcast_logits //tools/bench:gpu_bench)
bazel build -c opt "${TARGETS[@]}"
rm -rf "$DEST" && mkdir -p "$DEST/bin" "$DEST/lib"
for t in "${TARGETS[@]}"; do
  bin="bazel-bin/$(echo "${t#//}" | tr ':' '/')"
  cp "$bin" "$DEST/bin/"
  ldd "$bin" | awk '/=> \//{print $3}' | while read -r lib; do
    case "$lib" in
      /usr/local/cuda*|*/libc.so*|*/libm.so*|*/libpthread.so*|*/libdl.so*|*/librt.so*|*/ld-linux*) ;;
      *) cp -Ln "$lib" "$DEST/lib/" ;;
    esac
  done
done
du -sh "$DEST"
