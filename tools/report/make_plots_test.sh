#!/usr/bin/env bash
# Bazel test: make_plots_test.py with the test venv's Python ($KVCAST_PYTHON,
# which `./kvcast.sh test` creates with matplotlib); without it, or without
# matplotlib there, the test reports SKIPPED. By hand:
#   bazel test //tools/report:make_plots_test --test_env=KVCAST_PYTHON=$PWD/.venv/bin/python
set -uo pipefail
if [[ -n "${TEST_SRCDIR:-}" && -d "$TEST_SRCDIR/kvcast" ]]; then
  cd "$TEST_SRCDIR/kvcast"
fi
source tests/testing/junit_skip.sh
skip() { junit_skip make_plots "SKIPPED: $1 (./kvcast.sh test provides a venv with matplotlib)"; }
PY=${KVCAST_PYTHON:-}
[[ -n "$PY" ]] || skip "KVCAST_PYTHON is not set"
[[ -x "$PY" ]] || skip "KVCAST_PYTHON=$PY is not an executable file"
"$PY" -c 'import matplotlib' 2>/dev/null || skip "KVCAST_PYTHON=$PY cannot import matplotlib"
export MPLCONFIGDIR=${TEST_TMPDIR:-$(mktemp -d)}
exec "$PY" tools/report/make_plots_test.py
