#!/usr/bin/env bash
# Bazel smoke test: builds codec_fuzzer with clang-14 and fuzzes the MoQT
# codec for CODEC_FUZZ_SECONDS (default 20) seconds; fails on any crash.
# Skips (exit 0) only when clang-14 or its libFuzzer runtime is missing
# (Debian packages clang-14 and libclang-rt-14-dev).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CLANGXX=${CLANGXX:-clang++-14}
if ! command -v "$CLANGXX" >/dev/null 2>&1 ||
   [ ! -f "$("$CLANGXX" -print-resource-dir)/lib/linux/libclang_rt.fuzzer-$(uname -m).a" ]; then
  source "${TEST_SRCDIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../..}/${TEST_WORKSPACE:-kvcast}/tests/testing/junit_skip.sh"
  junit_skip codec_fuzz_smoke "SKIPPED: clang-14/libFuzzer not installed (apt-get install clang-14 libclang-rt-14-dev)"
fi
OUT="${TEST_TMPDIR:-$(mktemp -d)}/codec_fuzz"
exec "$HERE/build_and_run.sh" "$OUT" "${CODEC_FUZZ_SECONDS:-20}"
