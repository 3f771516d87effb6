#!/usr/bin/env bash
# Bazel test: kv_codec_oracle_test.py (the KV wire codecs against numpy and
# PyPI's ml_dtypes) on kv_codec_tool. The Python comes from KVCAST_PYTHON
# (`./kvcast.sh test` creates .venv with ml_dtypes and passes it); without it,
# or without ml_dtypes there, the test reports SKIPPED. By hand:
#   bazel test //kernels:kv_codec_oracle_test \
#       --test_env=KVCAST_PYTHON=$PWD/.venv/bin/python
set -uo pipefail
# The working directory is the runfiles root of workspace "kvcast".
if [[ -n "${TEST_SRCDIR:-}" && -d "$TEST_SRCDIR/kvcast" ]]; then
  cd "$TEST_SRCDIR/kvcast"
fi
WORK=${TEST_TMPDIR:-$(mktemp -d)}
XML=${XML_OUTPUT_FILE:-$WORK/test.xml}

source tests/testing/junit_skip.sh
skip() { junit_skip kv_codec_oracle "SKIPPED: $1 (./kvcast.sh test provides a venv with ml_dtypes)"; }

PY=${KVCAST_PYTHON:-}
[[ -n "$PY" ]] || skip "KVCAST_PYTHON is not set"
[[ -x "$PY" ]] || skip "KVCAST_PYTHON=$PY is not an executable file"
"$PY" -c 'import ml_dtypes, numpy' 2>/dev/null || skip "KVCAST_PYTHON=$PY cannot import ml_dtypes"
exec "$PY" kernels/kv_codec_oracle_test.py kernels/kv_codec_tool "$XML"
