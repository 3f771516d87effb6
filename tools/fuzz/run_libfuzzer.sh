#!/usr/bin/env bash
# Builds a libFuzzer target with clang-14 (ASan + UBSan + libFuzzer) and runs
# it for SECONDS on a seed corpus. Bazel builds with gcc, so fuzzers are built
# by this script (engine/model/fuzz/build_and_run.sh does the same for GGUF).
#
#   tools/fuzz/run_libfuzzer.sh OUT_DIR SECONDS CORPUS_DIR SOURCE.cc... [-- libFuzzer flags]
#
# SOURCE paths are relative to the workspace root (found from this script:
# works in the source tree and in Bazel runfiles); the first is the fuzzer.
# A SOURCE of the form pkg:MODULE links that pkg-config module instead
# (e.g. pkg:libpcre2-8); def:NAME[=VALUE] defines a macro for every source. Links Abseil (pkg-config); nlohmann/json and Boost
# are header-only. Prints
# "executions: N" and exits 0 if nothing crashed; 1 on a crash (reproducer
# in OUT_DIR/artifacts); 2 on a build or usage error. Run alone with
# SECONDS=0 to only build.
set -euo pipefail
if [ $# -lt 4 ]; then
  echo "usage: $0 OUT_DIR SECONDS CORPUS_DIR SOURCE.cc... [-- libFuzzer flags]" >&2
  exit 2
fi
OUT_DIR=$1 SECONDS_TO_RUN=$2 CORPUS=$3
shift 3
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SOURCES=() PKGS=() DEFS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    pkg:*) PKGS+=("${1#pkg:}") ;;
    def:*) DEFS+=("-D${1#def:}") ;;
    *) SOURCES+=("$ROOT/$1") ;;
  esac
  shift
done
[ $# -gt 0 ] && shift
CLANGXX=${CLANGXX:-clang++-14}
command -v "$CLANGXX" >/dev/null || { echo "ERROR: $CLANGXX not found" >&2; exit 2; }
ABSL=$(pkg-config --cflags --libs absl_status absl_statusor absl_strings absl_str_format \
  absl_synchronization absl_flat_hash_map absl_hash absl_time "${PKGS[@]}") ||
  { echo "ERROR: pkg-config cannot find absl ${PKGS[*]}" >&2; exit 2; }
NAME=$(basename "${SOURCES[0]}" .cc)
mkdir -p "$OUT_DIR/corpus" "$OUT_DIR/artifacts"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
# shellcheck disable=SC2086
"$CLANGXX" -std=c++17 -O1 -g $SAN -fsanitize=fuzzer -I"$ROOT" "${DEFS[@]}" "${SOURCES[@]}" $ABSL \
  -o "$OUT_DIR/$NAME" || { echo "ERROR: build failed" >&2; exit 2; }
# Seeds: the corpus directory's files up to the fuzzer's input size.
find -L "$ROOT/$CORPUS" -maxdepth 1 -type f -size -9k -exec cp {} "$OUT_DIR/corpus/" \;
if ! "$OUT_DIR/$NAME" "$OUT_DIR/corpus" -max_total_time="$SECONDS_TO_RUN" -max_len=8192 \
    -artifact_prefix="$OUT_DIR/artifacts/" -print_final_stats=1 "$@" >"$OUT_DIR/fuzz.log" 2>&1; then
  tail -40 "$OUT_DIR/fuzz.log"
  for crash in "$OUT_DIR"/artifacts/*; do [ -f "$crash" ] && xxd "$crash" | head -20; done
  exit 1
fi
echo "$NAME executions: $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$OUT_DIR/fuzz.log" | grep -o '[0-9]*$')"
