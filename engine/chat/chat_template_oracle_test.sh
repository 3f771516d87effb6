#!/usr/bin/env bash
# Bazel test: tools/golden/chat_template_golden.py --check renders its seeded
# cases (six real chat templates) with Python jinja2 as Hugging Face
# configures it, live, and with chat_template_render_tool, and compares them
# byte for byte. The Python comes from KVCAST_PYTHON (`./kvcast.sh test`
# creates .venv with jinja2); without it, or without jinja2 there, the test
# reports SKIPPED. By hand:
#   bazel test //engine/chat:chat_template_oracle_test \
#       --test_env=KVCAST_PYTHON=$PWD/.venv/bin/python
set -uo pipefail
if [[ -n "${TEST_SRCDIR:-}" && -d "$TEST_SRCDIR/kvcast" ]]; then
  cd "$TEST_SRCDIR/kvcast"
fi
WORK=${TEST_TMPDIR:-$(mktemp -d)}
XML=${XML_OUTPUT_FILE:-$WORK/test.xml}

source tests/testing/junit_skip.sh
skip() { junit_skip chat_template_oracle "SKIPPED: $1 (./kvcast.sh test provides a venv with jinja2)"; }

PY=${KVCAST_PYTHON:-}
[[ -n "$PY" ]] || skip "KVCAST_PYTHON is not set"
[[ -x "$PY" ]] || skip "KVCAST_PYTHON=$PY is not an executable file"
"$PY" -c 'import jinja2.sandbox' 2>/dev/null || skip "KVCAST_PYTHON=$PY cannot import jinja2"
GEN=tools/golden/chat_template_golden.py
exec "$PY" "$GEN" --check "$PWD/engine/chat/chat_template_render_tool"
