#!/usr/bin/env bash
# Bazel sh_test wrapper: runs one deploy/ Python test (argument: its path
# relative to the workspace) with the venv made by setup_deploy_venv.sh,
# passed as KVCAST_DEPLOY_VENV (`./kvcast.sh test` provides it). Without the
# venv the test cannot run: it says so and reports one SKIPPED case.
set -uo pipefail
TEST=$1
RUNFILES=${TEST_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}/${TEST_WORKSPACE:-kvcast}
[[ -d "$RUNFILES/deploy" ]] || RUNFILES=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${KVCAST_DEPLOY_VENV:-}
name=$(basename "$TEST" .py)
if [[ -z "$VENV" || ! -x "$VENV/bin/python" ]]; then
  source "$RUNFILES/tests/testing/junit_skip.sh"
  junit_skip "$name" "SKIPPED: KVCAST_DEPLOY_VENV is not a venv made by deploy/tests/setup_deploy_venv.sh"
fi
# Helm's SDK keeps its cache and config under $HOME: keep them in the sandbox.
scratch=${TEST_TMPDIR:-$(mktemp -d)}
export HOME=$scratch HELM_CACHE_HOME=$scratch/helm-cache HELM_CONFIG_HOME=$scratch/helm-config \
  HELM_DATA_HOME=$scratch/helm-data
export KVCAST_DEPLOY_DIR=$RUNFILES/deploy
export PYTHONPATH=$RUNFILES/deploy/tests PYTHONDONTWRITEBYTECODE=1
cd "$scratch" && exec "$VENV/bin/python" "$RUNFILES/$TEST"
