#!/usr/bin/env bash
# Builds the MoQT codec libFuzzer target with clang-14 (ASan + UBSan) and runs
# it for SECONDS on the seed corpus next to this script.
#
#   transport/moqt/fuzz/build_and_run.sh OUT_DIR SECONDS [libFuzzer flags...]
#
# e.g. a long run on 4 cores that keeps going after a crash:
#   transport/moqt/fuzz/build_and_run.sh /tmp/moqt-fuzz 600 -fork=4 -ignore_crashes=1
#
# Bazel builds with gcc, so this is a plain script. It compiles
# ../codec.cc, ../messages.cc and ../internal/*.cc (found relative to this
# script, so it works from the source tree and from Bazel runfiles) plus
# codec_fuzzer.cc. Needs the Debian packages clang-14, libclang-rt-14-dev
# (libFuzzer and the sanitizer runtimes), libabsl-dev and pkg-config.
#
# OUT_DIR receives the binary, the evolving corpus (OUT_DIR/corpus), crash
# reproducers (OUT_DIR/artifacts) and the full log (OUT_DIR/fuzz.log).
# First checks that every seed in ./corpus parses and re-serializes to its own
# bytes. Prints "executions: N" and exits 0 if nothing crashed; exits 1 on a
# crash or a failed seed (printing the input in hex), 2 on a build or usage
# error.
#
# Environment: CLANGXX (default clang++-14), ABSL_MODULES (pkg-config
# modules), MOQT_FUZZ_JOBS (parallel compiles, default 4).
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 OUT_DIR SECONDS [libFuzzer flags...]" >&2
  exit 2
fi
OUT_DIR=$1
SECONDS_TO_RUN=$2
shift 2
case "$SECONDS_TO_RUN" in
  ''|*[!0-9]*) echo "SECONDS must be a whole number, got '$SECONDS_TO_RUN'" >&2; exit 2 ;;
esac

# Logical paths (no symlink resolution): under Bazel the sources are
# symlinks in the runfiles tree and must be found there.
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MOQT_DIR=$(cd "$HERE/.." && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)

CLANGXX=${CLANGXX:-clang++-14}
if ! command -v "$CLANGXX" >/dev/null 2>&1; then
  echo "ERROR: $CLANGXX not found (apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 2
fi
FUZZER_RT="$("$CLANGXX" -print-resource-dir)/lib/linux/libclang_rt.fuzzer-$(uname -m).a"
if [ ! -f "$FUZZER_RT" ]; then
  echo "ERROR: libFuzzer runtime $FUZZER_RT missing (apt-get install libclang-rt-14-dev)" >&2
  exit 2
fi
ABSL_MODULES=${ABSL_MODULES:-absl_status absl_statusor absl_strings absl_str_format absl_span}
# shellcheck disable=SC2086
if ! ABSL_FLAGS=$(pkg-config --cflags --libs $ABSL_MODULES); then
  echo "ERROR: pkg-config cannot find $ABSL_MODULES (apt-get install libabsl-dev pkg-config)" >&2
  exit 2
fi

for f in codec.h codec.cc messages.h messages.cc; do
  if [ ! -f "$MOQT_DIR/$f" ]; then
    echo "ERROR: $MOQT_DIR/$f not found" >&2
    exit 2
  fi
done

mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
OBJ_DIR="$OUT_DIR/obj"
rm -rf "$OBJ_DIR"
mkdir -p "$OBJ_DIR" "$OUT_DIR/corpus" "$OUT_DIR/artifacts"

SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
CXXFLAGS="-std=c++17 -O1 -g -fno-omit-frame-pointer $SAN -I$ROOT"
# Flags for pkg-config's -D/-I part at compile time; libraries at link time.
ABSL_CFLAGS=$(echo "$ABSL_FLAGS" | tr ' ' '\n' | grep -E '^-(D|I|pthread)' | tr '\n' ' ' || true)
ABSL_LIBS=$(echo "$ABSL_FLAGS" | tr ' ' '\n' | grep -vE '^-(D|I)' | tr '\n' ' ' || true)

# Compile the codec with coverage instrumentation (fuzzer-no-link) and the
# fuzzer itself; internal/*.cc go into an archive so that only the objects
# the codec uses are linked.
compile() {  # compile SRC OBJ EXTRA_FLAGS
  # shellcheck disable=SC2086
  "$CLANGXX" $CXXFLAGS $3 $ABSL_CFLAGS -c "$1" -o "$2" 2>"$2.log" || {
    echo "ERROR: compiling $1 failed:" >&2
    cat "$2.log" >&2
    return 1
  }
}
echo "building codec_fuzzer with $("$CLANGXX" --version | head -1)"
pids=()
objs=()
for src in "$MOQT_DIR/codec.cc" "$MOQT_DIR/messages.cc"; do
  obj="$OBJ_DIR/$(basename "$src" .cc).o"
  objs+=("$obj")
  compile "$src" "$obj" "-fsanitize=fuzzer-no-link" & pids+=($!)
done
internal_objs=()
if [ -d "$MOQT_DIR/internal" ]; then
  for src in "$MOQT_DIR"/internal/*.cc; do
    [ -f "$src" ] || continue
    obj="$OBJ_DIR/internal_$(basename "$src" .cc).o"
    internal_objs+=("$obj")
    compile "$src" "$obj" "-fsanitize=fuzzer-no-link" & pids+=($!)
  done
fi
compile "$HERE/codec_fuzzer.cc" "$OBJ_DIR/codec_fuzzer.o" "-fsanitize=fuzzer" & pids+=($!)
build_ok=1
for pid in "${pids[@]}"; do wait "$pid" || build_ok=0; done
[ "$build_ok" = 1 ] || exit 2
archive=()
if [ ${#internal_objs[@]} -gt 0 ]; then
  ar rcs "$OBJ_DIR/libmoqt_internal.a" "${internal_objs[@]}"
  archive=("$OBJ_DIR/libmoqt_internal.a")
fi
BIN="$OUT_DIR/codec_fuzzer"
# shellcheck disable=SC2086
if ! "$CLANGXX" $CXXFLAGS -fsanitize=fuzzer "$OBJ_DIR/codec_fuzzer.o" "${objs[@]}" \
    "${archive[@]}" $ABSL_LIBS -o "$BIN" 2>"$OBJ_DIR/link.log"; then
  echo "ERROR: linking codec_fuzzer failed:" >&2
  cat "$OBJ_DIR/link.log" >&2
  exit 2
fi

export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

hex_of() { od -An -v -tx1 "$1" | tr -d ' \n'; }

# The seeds are valid, canonical draft-14 inputs (make_corpus.py): each must
# parse cleanly and re-serialize to its own bytes (MOQT_FUZZ_EXPECT_VALID).
# A seed that does not is a conformance failure and fails the run.
SEED_DIR="$HERE/corpus"
seed_dirs=()
if [ -d "$SEED_DIR" ]; then
  seed_dirs=("$SEED_DIR")
  total=0
  for seed in "$SEED_DIR"/*; do
    [ -f "$seed" ] || continue
    total=$((total + 1))
    if ! MOQT_FUZZ_EXPECT_VALID=1 timeout 60 "$BIN" -runs=1 "$seed" \
        >"$OBJ_DIR/seed.log" 2>&1; then
      echo "FAILED: seed $(basename "$seed") (a valid draft-14 input) is not handled cleanly:"
      grep -E -A2 'INVARIANT BROKEN|ERROR: (AddressSanitizer|LeakSanitizer)|runtime error' \
        "$OBJ_DIR/seed.log" | head -20 || true
      echo "input hex: $(hex_of "$seed")"
      exit 1
    fi
  done
  echo "seed corpus: all $total inputs parse and re-serialize to their own bytes"
fi

echo "fuzzing for ${SECONDS_TO_RUN}s (log: $OUT_DIR/fuzz.log)"
set +e
timeout --kill-after=30 $((SECONDS_TO_RUN + 120)) "$BIN" \
  -max_total_time="$SECONDS_TO_RUN" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
  -max_len=4096 -artifact_prefix="$OUT_DIR/artifacts/" "$@" \
  "$OUT_DIR/corpus" "${seed_dirs[@]}" >"$OUT_DIR/fuzz.log" 2>&1
rc=$?
set -e

# Executions: the final stats line (single process), or the sum of the
# workers' "Done N runs" lines / the last "#N" progress line.
execs=$(grep -E '^stat::number_of_executed_units:' "$OUT_DIR/fuzz.log" | awk '{s+=$2} END {print s+0}')
if [ "$execs" = 0 ]; then
  execs=$(grep -oE '^#[0-9]+' "$OUT_DIR/fuzz.log" | tail -1 | tr -d '#' || true)
fi
echo "executions: ${execs:-0}"
grep -E '^(stat::|Done [0-9]+ runs|INFO: fuzzed for)' "$OUT_DIR/fuzz.log" | sort | uniq -c | \
  sed 's/^ *[0-9]* //' | head -20 || true

crashes=$(find "$OUT_DIR/artifacts" -type f | sort)
if [ "$rc" -ne 0 ] || [ -n "$crashes" ]; then
  echo "FUZZER FOUND A PROBLEM (exit code $rc)"
  grep -E -A12 'INVARIANT BROKEN|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|SUMMARY' \
    "$OUT_DIR/fuzz.log" | head -80 || true
  for f in $crashes; do
    echo "reproducer $f ($(wc -c <"$f") bytes): $(hex_of "$f" | head -c 8192)"
  done
  [ -n "$crashes" ] || tail -40 "$OUT_DIR/fuzz.log"
  exit 1
fi
if [ "${execs:-0}" -eq 0 ]; then
  echo "ERROR: the fuzzer executed nothing" >&2
  tail -40 "$OUT_DIR/fuzz.log" >&2
  exit 1
fi
echo "OK: no crash in ${SECONDS_TO_RUN}s"
