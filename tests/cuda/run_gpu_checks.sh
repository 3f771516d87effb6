#!/usr/bin/env bash
# The checks that need a GPU, on the GPU machine (no Bazel there; binaries
# from tests/cuda/pack_gpu_checks.sh). Results go to $OUT (default /tmp/gpu_out):
#  1. cuda_backend_test and sampling_test: every CUDA op against the CPU backend;
#  2. the whole model against HF transformers (float32 on the GPU) on random
#     checkpoints of real shapes, Llama-3.2-1B and Qwen2-0.5B: logits within
#     tolerance and 64 identical greedy tokens (tools/golden/compare_logits.py);
#  3. gpu_bench (decode roofline, prefill vs cuBLAS, KV landing) and HF
#     generate on the same checkpoint and GPU, for docs/benchmarks.md.
# Usage: bash tests/cuda/run_gpu_checks.sh [PACK_DIR] [checks...]  (checks:
# test oracle bench; default all)
set -uo pipefail
cd "$(dirname "$0")/../.."
PACK="${1:-build/gpu}"
shift || true
CHECKS="${*:-test oracle bench}"
OUT="${OUT:-/tmp/gpu_out}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$PACK/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PY="${PYTHON:-python3}"
MODELS="${MODELS:-/tmp/kvcast_models}"
status=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/device.txt"

make_model() {  # arch size dir
  [[ -f "$3/config.json" ]] || "$PY" tools/golden/make_random_checkpoint.py \
      --arch "$1" --size "$2" --dtype bfloat16 --seed 1 --out "$3"
}

if [[ " $CHECKS " == *" test "* ]]; then
  for t in cuda_backend_test sampling_test; do
    "$PACK/bin/$t" --gtest_output="xml:$OUT/$t.xml" 2>&1 | tee "$OUT/$t.log" | tail -20
    [[ ${PIPESTATUS[0]} == 0 ]] || status=1
  done
fi

if [[ " $CHECKS " == *" oracle "* ]]; then
  TOKENS=$("$PY" -c "print(','.join(str((i * 7919 + 13) % 30000) for i in range(96)))")
  for spec in "llama3 1b" "qwen2 0.5b"; do
    read -r arch size <<<"$spec"
    dir="$MODELS/$arch-$size"
    make_model "$arch" "$size" "$dir" || { status=1; continue; }
    "$PY" tools/golden/hf_logits.py --model "$dir" --device cuda --tokens "$TOKENS" \
        --greedy 64 --out "$OUT/hf_$arch.json" || { status=1; continue; }
    "$PACK/bin/kvcast_logits" --model "$dir" --backend cuda --tokens "$TOKENS" --greedy 64 \
        --out "$OUT/kvcast_$arch.json" || { status=1; continue; }
    # bf16 GEMM inputs against HF's float32: logits of O(1..10) within 0.1.
    "$PY" tools/golden/compare_logits.py --hf "$OUT/hf_$arch.json" \
        --kvcast "$OUT/kvcast_$arch.json" --tol 0.1 --steps 64 | tee "$OUT/oracle_$arch.txt"
    [[ ${PIPESTATUS[0]} == 0 ]] || status=1
  done
fi

if [[ " $CHECKS " == *" bench "* ]]; then
  dir="$MODELS/llama3-1b"
  make_model llama3 1b "$dir"
  "$PACK/bin/gpu_bench" --model "$dir" | tee "$OUT/gpu_bench.md" || status=1
  "$PY" tools/bench/hf_generate_bench.py --model "$dir" | tee "$OUT/hf_bench.md" || status=1
fi
exit $status
