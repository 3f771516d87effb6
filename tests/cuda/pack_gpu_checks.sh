#!/usr/bin/env bash
# Builds the GPU check binaries here (the GPU machine has no Bazel) and puts
# them, stripped, with the shared libraries they need that are neither glibc
# nor the CUDA toolkit (present there), under DEST (default build/gpu,
# git-ignored), and the same as DEST.tar.xz (~16 MB) for the device tool's
# `carry`. Then, on the GPU machine:
#   python3 -c "import tarfile; tarfile.open('build/gpu.tar.xz').extractall('build')" &&
#     bash tests/cuda/run_gpu_checks.sh build/gpu
# The service binaries and the CLI are there for the disaggregated check
# (scheduler, relay, prefill and decode workers sharing the GPU).
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST="${1:-build/gpu}"
TARGETS=(//kernels/cuda:cuda_backend_test //kernels/cuda:sampling_test //tools/golden:kvcast_logits
  //tools/bench:gpu_bench //tools/cli:kvcast //services/scheduler:kvcast-scheduler
  //services/prefill:kvcast-prefill //services/decode:kvcast-decode //services/relay:kvcast-relay)
bazel build -c opt --jobs="${KVCAST_JOBS:-2}" "${TARGETS[@]}"
rm -rf "$DEST" && mkdir -p "$DEST/bin" "$DEST/lib"
for t in "${TARGETS[@]}"; do
  bin="bazel-bin/$(echo "${t#//}" | tr ':' '/')"
  strip -o "$DEST/bin/$(basename "$bin")" "$bin"
  ldd "$bin" | awk '/=> \//{print $3}' | while read -r lib; do
    case "$lib" in
      /usr/local/cuda*|*/libc.so*|*/libm.so*|*/libpthread.so*|*/libdl.so*|*/librt.so*|*/ld-linux*) ;;
      *) [ -e "$DEST/lib/$(basename "$lib")" ] || strip --strip-unneeded -o "$DEST/lib/$(basename "$lib")" "$lib" ;;
    esac
  done
done
tar -C "$(dirname "$DEST")" -cJf "$DEST.tar.xz" "$(basename "$DEST")"
du -sh "$DEST" "$DEST.tar.xz"
