#!/usr/bin/env bash
# Bazel test: openai_client_test.py (or the script given as $1, e.g.
# structured_output_test.py), PyPI's official `openai` client against the
# scheduler's OpenAI-compatible HTTP API on `kvcast cluster up` serving
# SmolLM2-135M-Instruct. The Python comes from KVCAST_PYTHON and the model
# from KVCAST_SMOLLM2 (`./kvcast.sh test` provides both); without them the
# test reports SKIPPED. By hand:
#   bazel test //tests/e2e_python:openai_client_test \
#       --test_env=KVCAST_PYTHON=$PWD/.venv/bin/python \
#       --test_env=KVCAST_SMOLLM2=$PWD/build/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
set -uo pipefail
if [[ -n "${TEST_SRCDIR:-}" && -d "$TEST_SRCDIR/kvcast" ]]; then
  cd "$TEST_SRCDIR/kvcast"
fi
WORK=${TEST_TMPDIR:-$(mktemp -d)}
XML=${XML_OUTPUT_FILE:-$WORK/test.xml}

SCRIPT=${1:-tests/e2e_python/openai_client_test.py}
SUITE=$(basename "$SCRIPT" _test.py)
source tests/testing/junit_skip.sh
skip() { junit_skip "$SUITE" "SKIPPED: $1 (./kvcast.sh test provides them)"; }

PY=${KVCAST_PYTHON:-}
[[ -n "$PY" ]] || skip "KVCAST_PYTHON is not set"
[[ -x "$PY" ]] || skip "KVCAST_PYTHON=$PY is not an executable file"
"$PY" -c 'import openai' 2>/dev/null || skip "KVCAST_PYTHON=$PY cannot import openai"
MODEL=${KVCAST_SMOLLM2:-}
[[ -f "$MODEL" ]] || skip "KVCAST_SMOLLM2 (the SmolLM2 GGUF file) is not set or missing"

exec "$PY" "$SCRIPT" \
  --xml "$XML" \
  --work "$WORK" \
  --model "$MODEL" \
  --kvcast "$PWD/tools/cli/kvcast" \
  --scheduler "$PWD/services/scheduler/kvcast-scheduler" \
  --prefill "$PWD/services/prefill/kvcast-prefill" \
  --decode "$PWD/services/decode/kvcast-decode" \
  --relay "$PWD/services/relay/kvcast-relay"
