#!/usr/bin/env bash
# Checks that every seed next to this script parses, then builds the GGUF
# parser's libFuzzer target and runs it for SECONDS on them through
# tools/fuzz/run_libfuzzer.sh (clang-14, ASan + UBSan).
#
#   engine/model/fuzz/build_and_run.sh OUT_DIR SECONDS [libFuzzer flags...]
#
# Bazel builds with gcc, so this is a plain script; it compiles gguf.cc,
# ggml_types.cc, common/dtype.cc and internal/file_util.cc (found relative to this
# script: works from the source tree and from Bazel runfiles). Needs clang-14,
# libclang-rt-14-dev, libabsl-dev, pkg-config. First checks that every seed
# in ./corpus parses. OUT_DIR gets the binary, the evolving corpus, crash
# reproducers (OUT_DIR/artifacts) and the log. Prints "gguf_fuzzer executions: N" and
# exits 0 if nothing crashed; 1 on a crash or a seed that does not parse; 2
# on a build or usage error.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 OUT_DIR SECONDS [libFuzzer flags...]" >&2
  exit 2
fi
OUT_DIR=$1 SECONDS_TO_RUN=$2
shift 2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MODEL_DIR=$(cd "$HERE/.." && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
CLANGXX=${CLANGXX:-clang++-14}
command -v "$CLANGXX" >/dev/null || { echo "ERROR: $CLANGXX not found" >&2; exit 2; }
ABSL=$(pkg-config --cflags --libs absl_status absl_statusor absl_strings) ||
  { echo "ERROR: pkg-config cannot find absl" >&2; exit 2; }
mkdir -p "$OUT_DIR"
# The seeds must be valid files, or the fuzzer starts from nothing.
# shellcheck disable=SC2086
"$CLANGXX" -std=c++17 -O1 -I"$ROOT" -x c++ - "$MODEL_DIR/gguf.cc" "$MODEL_DIR/ggml_types.cc" \
  "$ROOT/common/dtype.cc" "$MODEL_DIR/internal/file_util.cc" $ABSL -o "$OUT_DIR/check_seed" <<'CC' ||
#include <cstdio>
#include "engine/model/gguf.h"
int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    auto f = kvcast::GgufFile::Open(argv[i]);
    if (!f.ok()) { std::printf("seed %s: %s\n", argv[i], f.status().ToString().c_str()); return 1; }
  }
  return 0;
}
CC
  { echo "ERROR: build of the seed checker failed" >&2; exit 2; }
"$OUT_DIR/check_seed" "$HERE"/corpus/* || exit 1
SOURCES=(engine/model/fuzz/gguf_fuzzer.cc engine/model/gguf.cc engine/model/ggml_types.cc
  common/dtype.cc engine/model/internal/file_util.cc)
exec "$ROOT/tools/fuzz/run_libfuzzer.sh" "$OUT_DIR" "$SECONDS_TO_RUN" engine/model/fuzz/corpus \
  "${SOURCES[@]}" -- -max_len=4096 "$@"
