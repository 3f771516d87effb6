#!/usr/bin/env bash
# Regenerates tests/data/golden_<variant>.json from scratch: writes each tiny
# checkpoint with //tools/tiny_model:make_tiny_model, runs the HF transformers
# oracle (tools/golden/hf_logits.py, float32, eager attention) over a fixed
# prompt with --greedy 32, and packs the result (tools/golden/pack_golden.py)
# together with the exact TinyModelOptions and tool versions.
#
# Needs the oracle venv (bash tools/golden/install_oracle.sh) and Bazel.
# Usage (from anywhere):  bash tools/golden/make_golden.sh [variant...]
# Variants: llama_bf16 qwen2_f16_tied_sharded mistral_f32 llama_f32_llama3rope
# llama_f32_linearrope (default: all). Checked by //tests/golden:golden_logits_test.
#
# Llama-3 rope scaling is checked on a Llama checkpoint, not a Mistral one:
# transformers 4.45.2's MistralRotaryEmbedding takes only (dim, base) and
# ignores config.rope_scaling, so HF gives no reference for Mistral + llama3
# scaling (kvcast applies the scaling to any architecture).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PY="$ROOT/.venv-hf/bin/python"
[[ -x "$PY" ]] || { echo "no oracle venv: run bash tools/golden/install_oracle.sh" >&2; exit 1; }

bazel build //tools/tiny_model:make_tiny_model
MAKE_TINY="$ROOT/bazel-bin/tools/tiny_model/make_tiny_model"

WORK="$(mktemp -d /tmp/kvcast_golden.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

GREEDY=32

# Prompt: BOS (510) then N-1 ids < 500 from a 31-bit LCG (glibc rand's
# constants) seeded per variant, so the ids are fixed forever and never EOS.
prompt() {
  local seed=$1 n=$2 x out="510" i
  x=$seed
  for ((i = 1; i < n; i++)); do
    x=$(((x * 1103515245 + 12345) & 0x7fffffff))
    out+=",$(((x >> 16) % 500))"
  done
  echo "$out"
}

# variant arch dtype tie llama3 linear_factor shards prompt_seed prompt_len
# Every other TinyModelOptions field is the default, passed explicitly below
# so the recorded options are exactly what built the checkpoint.
VARIANTS=(
  "llama_bf16               llama   bf16 false false 0 1 11 40"
  "qwen2_f16_tied_sharded   qwen2   f16  true  false 0 2 22 41"
  "mistral_f32              mistral f32  false false 0 1 33 39"
  "llama_f32_llama3rope     llama   f32  false true  0 1 44 42"
  "llama_f32_linearrope     llama   f32  false false 4 1 55 43"
)

want=("$@")
for line in "${VARIANTS[@]}"; do
  read -r name arch dtype tie l3 linear shards pseed plen <<<"$line"
  if ((${#want[@]})) && [[ " ${want[*]} " != *" $name "* ]]; then continue; fi
  vocab=512 hidden=64 inter=176 layers=2 heads=4 kv_heads=2 maxpos=2048 theta=10000 seed=1
  dir="$WORK/$name"
  "$MAKE_TINY" --out="$dir" --arch="$arch" --dtype="$dtype" --tie_embeddings="$tie" \
    --llama3_rope_scaling="$l3" --linear_rope_factor="$linear" --shards="$shards" --vocab_size=$vocab \
    --hidden_size=$hidden --intermediate_size=$inter --num_layers=$layers \
    --num_heads=$heads --num_kv_heads=$kv_heads --max_position_embeddings=$maxpos \
    --rope_theta=$theta --seed=$seed
  options=$(printf '{"arch":"%s","vocab_size":%d,"hidden_size":%d,"intermediate_size":%d,"num_layers":%d,"num_heads":%d,"num_kv_heads":%d,"max_position_embeddings":%d,"rope_theta":%s,"llama3_rope_scaling":%s,"linear_rope_factor":%s,"tie_embeddings":%s,"dtype":"%s","shards":%d,"seed":%d}' \
    "$arch" $vocab $hidden $inter $layers $heads $kv_heads $maxpos "$theta.0" "$l3" "$linear.0" "$tie" "$dtype" "$shards" $seed)
  # One thread: torch's reductions then do not depend on the machine's cores.
  "$PY" tools/golden/hf_logits.py --model "$dir" --tokens "$(prompt "$pseed" "$plen")" \
    --greedy $GREEDY --threads 1 --out "$WORK/$name.hf.json"
  "$PY" tools/golden/pack_golden.py --variant "$name" --hf "$WORK/$name.hf.json" \
    --options "$options" --model "$dir" --out "tests/data/golden_$name.json"
done
