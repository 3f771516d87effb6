#!/usr/bin/env bash
# Bazel smoke test of one libFuzzer target: run_libfuzzer.sh for
# KVCAST_FUZZ_SECONDS (default 20) seconds; fails on any crash. Reports
# SKIPPED (a skipped JUnit case, exit 0) only when clang-14 or its libFuzzer runtime is missing.
#   fuzz_smoke_test.sh CORPUS_DIR SOURCE.cc...   (paths from the workspace root)
set -euo pipefail
if [[ -n "${TEST_SRCDIR:-}" && -d "$TEST_SRCDIR/kvcast" ]]; then
  cd "$TEST_SRCDIR/kvcast"
fi
CLANGXX=${CLANGXX:-clang++-14}
if ! command -v "$CLANGXX" >/dev/null 2>&1 ||
   [ ! -f "$("$CLANGXX" -print-resource-dir)/lib/linux/libclang_rt.fuzzer-$(uname -m).a" ]; then
  source "${TEST_SRCDIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../..}/${TEST_WORKSPACE:-kvcast}/tests/testing/junit_skip.sh"
  junit_skip fuzz_smoke "SKIPPED: clang-14/libFuzzer not installed (apt-get install clang-14 libclang-rt-14-dev)"
fi
exec tools/fuzz/run_libfuzzer.sh "${TEST_TMPDIR:-$(mktemp -d)}/fuzz" "${KVCAST_FUZZ_SECONDS:-20}" "$@"
