#!/usr/bin/env bash
# Compares //engine/tokenizer with HF `tokenizers` on four tokenizer.json
# files: one from kvcast's own trainer and three trained by HF itself
# (Llama-3, Qwen2 + NFC, GPT-2 styles). Exits non-zero on any mismatch.
#   tests/tokenizer/run_hf_comparison.sh [VENV] [COUNT]
# VENV defaults to .venv-tok (created with `pip install tokenizers` if absent).
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${1:-.venv-tok}
COUNT=${2:-500}
if [[ ! -x "$VENV/bin/python" ]]; then
  python3 -m venv "$VENV" && "$VENV/bin/pip" install -q tokenizers
fi
bazel build //engine/tokenizer:encode_tool //engine/tokenizer:train_bpe_tool
BIN=$(bazel info bazel-bin)/engine/tokenizer
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$VENV/bin/python" -c "import sys; sys.path.insert(0, 'tests/tokenizer')
from tokenizer_test_strings import corpus; sys.stdout.write(corpus())" > "$WORK/corpus.txt"
"$BIN/train_bpe_tool" 4000 < "$WORK/corpus.txt" > "$WORK/kvcast_trained.json"
for style in llama3 qwen2 gpt2; do
  "$VENV/bin/python" tests/tokenizer/make_hf_tokenizer.py --style "$style" \
      --vocab-size 4000 "$WORK/hf_$style.json"
done
status=0
for f in kvcast_trained hf_llama3 hf_qwen2 hf_gpt2; do
  "$VENV/bin/python" tests/tokenizer/compare_hf_tokenizers.py "$WORK/$f.json" \
      "$BIN/encode_tool" --count "$COUNT" || status=1
done
exit $status
