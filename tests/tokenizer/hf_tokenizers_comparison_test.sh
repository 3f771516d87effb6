#!/usr/bin/env bash
# Compares //engine/tokenizer with HF `tokenizers` (Rust) on four tokenizer.json
# files: one from kvcast's own trainer (train_bpe_tool) and three trained by HF
# itself (Llama-3, Qwen2 + NFC, GPT-2 styles, see make_hf_tokenizer.py). Each
# file is one JUnit <testcase> in $XML_OUTPUT_FILE; any mismatch fails it.
#
# Runs under Bazel only; the Python comes from KVCAST_PYTHON (./kvcast.sh test
# creates .venv with tokenizers==0.23.3 and passes it). By hand:
#   bazel test //tests/tokenizer:hf_tokenizers_comparison_test \
#       --test_env=KVCAST_PYTHON=$PWD/.venv/bin/python
# Optional --test_env=KVCAST_HF_COUNT=N changes the strings per file (500).
set -uo pipefail

# The working directory is the runfiles root of workspace "kvcast".
if [[ -n "${TEST_SRCDIR:-}" && -d "$TEST_SRCDIR/kvcast" ]]; then
  cd "$TEST_SRCDIR/kvcast"
fi
TOOLS=engine/tokenizer
HERE=tests/tokenizer
COUNT=${KVCAST_HF_COUNT:-500}
WORK=${TEST_TMPDIR:-$(mktemp -d)}
XML=${XML_OUTPUT_FILE:-$WORK/test.xml}
SUITE=hf_tokenizers_comparison

xml_escape() {
  # Drops control characters XML 1.0 cannot hold, then escapes markup.
  LC_ALL=C tr -d '\000-\010\013\014\016-\037' |
    sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' -e 's/"/\&quot;/g'
}

CASES=""
NTESTS=0
NFAIL=0
# add_case NAME SECONDS STATUS OUTPUT_FILE [FAILURE_MESSAGE]
add_case() {
  local body
  body=$(xml_escape < "$4")
  NTESTS=$((NTESTS + 1))
  CASES+="  <testcase classname=\"$SUITE\" name=\"$1\" time=\"$2\">"$'\n'
  if [[ $3 -ne 0 ]]; then
    NFAIL=$((NFAIL + 1))
    local msg
    msg=$(printf '%s' "${5:-$1 differs from HF tokenizers}" | xml_escape)
    CASES+="    <failure message=\"$msg\">$body</failure>"$'\n'
  fi
  CASES+="    <system-out>$body</system-out>"$'\n'"  </testcase>"$'\n'
}

write_xml() {
  {
    echo '<?xml version="1.0" encoding="UTF-8"?>'
    echo "<testsuites tests=\"$NTESTS\" failures=\"$NFAIL\">"
    echo "<testsuite name=\"$SUITE\" tests=\"$NTESTS\" failures=\"$NFAIL\" errors=\"0\">"
    printf '%s' "$CASES"
    echo '</testsuite>'
    echo '</testsuites>'
  } > "$XML"
}

# fail_setup NAME MESSAGE: records one failed case, prints MESSAGE, exits 1.
fail_setup() {
  printf '%s\n' "$2" > "$WORK/setup.log"
  cat "$WORK/setup.log" >&2
  add_case "$1" 0 1 "$WORK/setup.log" "$(head -n 1 "$WORK/setup.log" | sed "s/:$//") (./kvcast.sh test provides it)"
  write_xml
  exit 1
}

PY=${KVCAST_PYTHON:-}
HINT="Run ./kvcast.sh test (it creates .venv with tokenizers==0.23.3 and passes it), or
  bazel test //tests/tokenizer:hf_tokenizers_comparison_test --test_env=KVCAST_PYTHON=/abs/path/to/venv/bin/python"
if [[ -z "$PY" ]]; then
  fail_setup python_with_tokenizers "FAIL: KVCAST_PYTHON is not set; this test needs a Python with HF \`tokenizers\`.
$HINT"
fi
if [[ ! -x "$PY" ]]; then
  fail_setup python_with_tokenizers "FAIL: KVCAST_PYTHON=$PY is not an executable file.
$HINT"
fi
if ! ver=$("$PY" -c 'import tokenizers; print(tokenizers.__version__)' 2>"$WORK/import.err"); then
  fail_setup python_with_tokenizers "FAIL: KVCAST_PYTHON=$PY cannot import \`tokenizers\`:
$(tail -n 3 "$WORK/import.err")
$HINT"
fi
echo "HF tokenizers $ver from $PY; $COUNT strings per tokenizer.json"

# Build the four tokenizer.json files.
if ! { "$PY" -c "import sys; sys.path.insert(0, '$HERE')
from tokenizer_test_strings import corpus; sys.stdout.write(corpus())" > "$WORK/corpus.txt" &&
       "$TOOLS/train_bpe_tool" 4000 < "$WORK/corpus.txt" > "$WORK/kvcast_trained.json"; } \
    2> "$WORK/train.err"; then
  fail_setup kvcast_trained "FAIL: training kvcast_trained.json failed:
$(tail -n 20 "$WORK/train.err")"
fi
for style in llama3 qwen2 gpt2; do
  if ! "$PY" "$HERE/make_hf_tokenizer.py" --style "$style" --vocab-size 4000 \
      "$WORK/hf_$style.json" 2> "$WORK/train.err"; then
    fail_setup "hf_$style" "FAIL: make_hf_tokenizer.py --style $style failed:
$(tail -n 20 "$WORK/train.err")"
  fi
done

for f in kvcast_trained hf_llama3 hf_qwen2 hf_gpt2; do
  start=$(date +%s%N)
  "$PY" "$HERE/compare_hf_tokenizers.py" "$WORK/$f.json" "$TOOLS/encode_tool" \
      --count "$COUNT" > "$WORK/$f.log" 2>&1
  rc=$?
  cat "$WORK/$f.log"
  ms=$((($(date +%s%N) - start) / 1000000))
  add_case "$f" "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))" "$rc" "$WORK/$f.log"
done
write_xml
echo "$((NTESTS - NFAIL)) of $NTESTS tokenizer.json files match HF tokenizers"
[[ $NFAIL -eq 0 ]]
