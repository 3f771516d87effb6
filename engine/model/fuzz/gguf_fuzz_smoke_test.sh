#!/usr/bin/env bash
# Bazel smoke test: builds gguf_fuzzer with clang-14 and fuzzes the GGUF
# parser for GGUF_FUZZ_SECONDS (default 20) seconds; fails on any crash.
# Skips (a skipped JUnit case, exit 0) only when clang-14 or its libFuzzer runtime is missing.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CLANGXX=${CLANGXX:-clang++-14}
if ! command -v "$CLANGXX" >/dev/null 2>&1 ||
   [ ! -f "$("$CLANGXX" -print-resource-dir)/lib/linux/libclang_rt.fuzzer-$(uname -m).a" ]; then
  source "${TEST_SRCDIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../..}/${TEST_WORKSPACE:-kvcast}/tests/testing/junit_skip.sh"
  junit_skip gguf_fuzz_smoke "SKIPPED: clang-14/libFuzzer not installed (apt-get install clang-14 libclang-rt-14-dev)"
fi
exec "$HERE/build_and_run.sh" "${TEST_TMPDIR:-$(mktemp -d)}/gguf_fuzz" "${GGUF_FUZZ_SECONDS:-20}"
