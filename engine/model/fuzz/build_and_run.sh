#!/usr/bin/env bash
# Builds the GGUF parser's libFuzzer target with clang-14 (ASan + UBSan) and
# runs it for SECONDS on the seed corpus next to this script.
#
#   engine/model/fuzz/build_and_run.sh OUT_DIR SECONDS [libFuzzer flags...]
#
# Bazel builds with gcc, so this is a plain script; it compiles gguf.cc,
# ggml_types.cc, dtype.cc and internal/file_util.cc (found relative to this
# script: works from the source tree and from Bazel runfiles). Needs clang-14,
# libclang-rt-14-dev, libabsl-dev, pkg-config. First checks that every seed
# in ./corpus parses. OUT_DIR gets the binary, the evolving corpus, crash
# reproducers (OUT_DIR/artifacts) and the log. Prints "executions: N" and
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
mkdir -p "$OUT_DIR/corpus" "$OUT_DIR/artifacts"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
# shellcheck disable=SC2086
"$CLANGXX" -std=c++17 -O1 -g $SAN -fsanitize=fuzzer -I"$ROOT" \
  "$HERE/gguf_fuzzer.cc" "$MODEL_DIR/gguf.cc" "$MODEL_DIR/ggml_types.cc" "$MODEL_DIR/dtype.cc" \
  "$MODEL_DIR/internal/file_util.cc" $ABSL -o "$OUT_DIR/gguf_fuzzer" ||
  { echo "ERROR: build failed" >&2; exit 2; }
# The seeds must be valid files, or the fuzzer starts from nothing.
# shellcheck disable=SC2086
"$CLANGXX" -std=c++17 -O1 -I"$ROOT" -x c++ - "$MODEL_DIR/gguf.cc" "$MODEL_DIR/ggml_types.cc" \
  "$MODEL_DIR/dtype.cc" "$MODEL_DIR/internal/file_util.cc" $ABSL -o "$OUT_DIR/check_seed" <<'CC' ||
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
cp "$HERE"/corpus/* "$OUT_DIR/corpus/"
if ! "$OUT_DIR/gguf_fuzzer" "$OUT_DIR/corpus" -max_total_time="$SECONDS_TO_RUN" -max_len=4096 \
    -artifact_prefix="$OUT_DIR/artifacts/" -print_final_stats=1 "$@" >"$OUT_DIR/fuzz.log" 2>&1; then
  tail -40 "$OUT_DIR/fuzz.log"
  for crash in "$OUT_DIR"/artifacts/*; do [ -f "$crash" ] && xxd "$crash" | head -20; done
  exit 1
fi
echo "executions: $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$OUT_DIR/fuzz.log" | grep -o '[0-9]*$')"
