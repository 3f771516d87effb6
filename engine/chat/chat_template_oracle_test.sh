#!/usr/bin/env bash
# Bazel test: tools/golden/chat_template_golden.py --check renders its seeded
# cases (six real chat templates and feature templates) with Hugging Face
# transformers' own template compiler (what apply_chat_template renders
# with), live, and with chat_template_render_tool, and compares them byte for
# byte (or, where transformers fails, requires the tool to fail too). The
# Python comes from KVCAST_PYTHON (`./kvcast.sh test` creates .venv with
# transformers and jinja2); without it the test reports SKIPPED. By hand:
#   bazel test //engine/chat:chat_template_oracle_test \
#       --test_env=KVCAST_PYTHON=$PWD/.venv/bin/python
set -uo pipefail
if [[ -n "${TEST_SRCDIR:-}" && -d "$TEST_SRCDIR/kvcast" ]]; then
  cd "$TEST_SRCDIR/kvcast"
fi
WORK=${TEST_TMPDIR:-$(mktemp -d)}
XML=${XML_OUTPUT_FILE:-$WORK/test.xml}

source tests/testing/junit_skip.sh
skip() { junit_skip chat_template_oracle "SKIPPED: $1 (./kvcast.sh test provides a venv with transformers)"; }

PY=${KVCAST_PYTHON:-}
[[ -n "$PY" ]] || skip "KVCAST_PYTHON is not set"
[[ -x "$PY" ]] || skip "KVCAST_PYTHON=$PY is not an executable file"
"$PY" -c 'import jinja2.sandbox' 2>/dev/null || skip "KVCAST_PYTHON=$PY cannot import jinja2"
"$PY" -c 'import transformers.utils.chat_template_utils' 2>/dev/null ||
  skip "KVCAST_PYTHON=$PY cannot import transformers, the oracle"
GEN=tools/golden/chat_template_golden.py
exec "$PY" "$GEN" --require_transformers --check "$PWD/engine/chat/chat_template_render_tool"
