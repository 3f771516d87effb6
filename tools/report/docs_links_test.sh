#!/usr/bin/env bash
# Bazel test: docs_links_test.py with the system python3.
set -euo pipefail
if [[ -n "${TEST_SRCDIR:-}" && -d "$TEST_SRCDIR/kvcast" ]]; then
  cd "$TEST_SRCDIR/kvcast"
fi
exec python3 tools/report/docs_links_test.py
