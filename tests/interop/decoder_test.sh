#!/usr/bin/env bash
# Bazel test runner of the numpy decoders written from
# docs/kvcache-wire-format.md alone (ac_decoder.py, xl_decoder.py) against
# the C++ decoders' output on their test vectors:
#   decoder_test.sh SUITE VECTORS_BINARY CHECK_SCRIPT
# e.g. `ac_decoder transport/kvcache/ac/ac_vectors tests/interop/ac_decoder_test.py`.
# The Python comes from KVCAST_PYTHON (`./kvcast.sh test` creates .venv with
# numpy and passes it); without it, or without numpy there, the test reports
# SKIPPED. By hand:
#   bazel test //tests/interop:ac_decoder_test //tests/interop:xl_decoder_test \
#       --test_env=KVCAST_PYTHON=$PWD/.venv/bin/python
set -uo pipefail
SUITE=$1
VECTORS_BIN=$2
CHECK=$3
# The working directory is the runfiles root of workspace "kvcast".
if [[ -n "${TEST_SRCDIR:-}" && -d "$TEST_SRCDIR/kvcast" ]]; then
  cd "$TEST_SRCDIR/kvcast"
fi
WORK=${TEST_TMPDIR:-$(mktemp -d)}
XML=${XML_OUTPUT_FILE:-$WORK/test.xml}

source tests/testing/junit_skip.sh
skip() { junit_skip "$SUITE" "SKIPPED: $1 (./kvcast.sh test provides a venv with numpy)"; }

PY=${KVCAST_PYTHON:-}
[[ -n "$PY" ]] || skip "KVCAST_PYTHON is not set"
[[ -x "$PY" ]] || skip "KVCAST_PYTHON=$PY is not an executable file"
"$PY" -c 'import numpy' 2>/dev/null || skip "KVCAST_PYTHON=$PY cannot import numpy"

VECTORS=$WORK/vectors
"$VECTORS_BIN" --out "$VECTORS" || {
  echo "$VECTORS_BIN failed"
  exit 1
}
exec "$PY" "$CHECK" --vectors "$VECTORS" --xml "$XML"
