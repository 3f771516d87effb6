#!/usr/bin/env bash
# Bazel test: xl_decoder_test.py, the numpy decoder of the xl codec written
# from docs/kvcache-wire-format.md alone (xl_decoder.py), against the C++
# decoder's output on the test vectors of transport/kvcache/xl/xl_vectors.
# The Python comes from KVCAST_PYTHON (`./kvcast.sh test` creates .venv with
# numpy and passes it); without it, or without numpy there, the test reports
# SKIPPED. By hand:
#   bazel test //tests/interop:xl_decoder_test \
#       --test_env=KVCAST_PYTHON=$PWD/.venv/bin/python
set -uo pipefail
SUITE=xl_decoder
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
transport/kvcache/xl/xl_vectors --out "$VECTORS" || {
  echo "xl_vectors failed"
  exit 1
}
exec "$PY" tests/interop/xl_decoder_test.py --vectors "$VECTORS" --xml "$XML"
