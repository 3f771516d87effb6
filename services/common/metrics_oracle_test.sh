#!/usr/bin/env bash
# Bazel test: metrics_oracle_test.py (the Prometheus exposition and the
# /metrics endpoint against PyPI's prometheus_client parser) on
# metrics_oracle_tool. The Python comes from KVCAST_PYTHON (`./kvcast.sh test`
# creates .venv with prometheus_client and passes it); without it, or without
# prometheus_client there, the test reports SKIPPED. By hand:
#   bazel test //services/common:metrics_oracle_test \
#       --test_env=KVCAST_PYTHON=$PWD/.venv/bin/python
set -uo pipefail
# The working directory is the runfiles root of workspace "kvcast".
if [[ -n "${TEST_SRCDIR:-}" && -d "$TEST_SRCDIR/kvcast" ]]; then
  cd "$TEST_SRCDIR/kvcast"
fi
WORK=${TEST_TMPDIR:-$(mktemp -d)}
XML=${XML_OUTPUT_FILE:-$WORK/test.xml}

source tests/testing/junit_skip.sh
skip() { junit_skip metrics_oracle "SKIPPED: $1 (./kvcast.sh test provides a venv with prometheus_client)"; }

PY=${KVCAST_PYTHON:-}
[[ -n "$PY" ]] || skip "KVCAST_PYTHON is not set"
[[ -x "$PY" ]] || skip "KVCAST_PYTHON=$PY is not an executable file"
"$PY" -c 'import prometheus_client.parser' 2>/dev/null || skip "KVCAST_PYTHON=$PY cannot import prometheus_client"
exec "$PY" services/common/metrics_oracle_test.py services/common/metrics_oracle_tool "$XML"
