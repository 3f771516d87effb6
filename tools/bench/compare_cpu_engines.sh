#!/usr/bin/env bash
# kvcast vs llama.cpp vs HF transformers on one GGUF file, 2 threads each,
# one after the other in one run (the numbers are compared as ratios):
# prefill tokens/s of a 512-token prompt, decode tokens/s at batch 1, and
# kvcast's aggregate decode tokens/s at 8 and 32 concurrent sequences.
#
#   tools/bench/compare_cpu_engines.sh [GGUF]   (default: SmolLM2-135M-Instruct)
#
# Sets up what is missing: the model (tools/models/fetch_smollm2.sh), the
# llama.cpp venv .venv-llamacpp (tools/bench/setup_llamacpp.sh, ~6 min build)
# and the HF oracle venv .venv-hf (tools/golden/install_oracle.sh). Run it on
# a quiet machine: on 2 cores anything else running ruins 2-thread numbers
# (the load average is printed). Results go to stdout as a markdown table.
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:-$(tools/models/fetch_smollm2.sh build/models/smollm2)}
log() { printf '\033[1m[compare]\033[0m %s\n' "$*" >&2; }
[ -x .venv-llamacpp/bin/python ] || bash tools/bench/setup_llamacpp.sh .venv-llamacpp >&2
[ -x .venv-hf/bin/python ] || bash tools/golden/install_oracle.sh >&2
bazel build --jobs=2 //tools/bench:engine_bench >&2
out=$(mktemp -d)
log "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for backend in cpu cpu-bf16 cpu-f32; do
  log "kvcast engine_bench --backend $backend"
  OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 bazel-bin/tools/bench/engine_bench --model "$model" \
    --backend "$backend" --prompt_len 512 --batches 1,8,32 --decode_steps 32 >"$out/kvcast-$backend.md"
done
log "llama.cpp"
.venv-llamacpp/bin/python tools/bench/llamacpp_bench.py --model "$model" --threads 2 \
  --prompt-len 512 >"$out/llamacpp.json"
log "HF transformers"
.venv-hf/bin/python tools/bench/hf_bench.py --model "$model" --threads 2 --prompt-len 512 \
  --gen 32 --batch 8 >"$out/hf.json" 2>"$out/hf.err" || { cat "$out/hf.err" >&2; exit 1; }
log "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" <<'PY'
import json, re, sys
d = sys.argv[1]
def kv(backend):
    rows = {}
    for line in open(f"{d}/kvcast-{backend}.md"):
        m = re.match(r"\|[^|]*\| (prefill \d+ tokens|decode batch (\d+)) [^|]*\| ([\d.]+) \|", line)
        if m:
            rows["prefill" if m.group(1).startswith("prefill") else f"b{m.group(2)}"] = float(m.group(3))
    return rows
q8, bf16, f32 = kv("cpu"), kv("cpu-bf16"), kv("cpu-f32")
lc = json.load(open(f"{d}/llamacpp.json"))
hf = json.load(open(f"{d}/hf.json"))
print("| engine (2 threads) | prefill 512 tok/s | decode b=1 tok/s | decode b=8 tok/s | decode b=32 tok/s |")
print("|---|---|---|---|---|")
print(f"| kvcast cpu (Q8) | {q8['prefill']:.0f} | {q8['b1']:.1f} | {q8['b8']:.0f} | {q8['b32']:.0f} |")
print(f"| kvcast cpu-bf16 | {bf16['prefill']:.0f} | {bf16['b1']:.1f} | {bf16['b8']:.0f} | {bf16['b32']:.0f} |")
print(f"| kvcast cpu-f32 | {f32['prefill']:.0f} | {f32['b1']:.1f} | {f32['b8']:.0f} | {f32['b32']:.0f} |")
print(f"| llama.cpp {lc.get('version', '')} | {lc['prefill_tok_s']:.0f} | {lc['decode_tok_s']:.1f} | - | - |")
print(f"| HF transformers {hf['transformers']} (torch {hf['torch']}) | {hf['prefill_tok_s']:.0f} | "
      f"{hf['decode_tok_s']:.1f} | {hf.get('decode_batch8_tok_s', 0):.0f} | - |")
print()
print(f"- kvcast Q8 decode b=1 / llama.cpp b=1: {q8['b1'] / lc['decode_tok_s']:.2f}x (goal >= 1)")
print(f"- kvcast Q8 decode b=32 / llama.cpp b=1: {q8['b32'] / lc['decode_tok_s']:.2f}x (goal >= 3)")
print(f"- kvcast Q8 decode b=1 / HF b=1: {q8['b1'] / hf['decode_tok_s']:.2f}x; "
      f"b=32 / HF b=8: {q8['b32'] / hf.get('decode_batch8_tok_s', 1):.2f}x (goal >= 5)")
print(f"- kvcast Q8 prefill / llama.cpp prefill: {q8['prefill'] / lc['prefill_tok_s']:.2f}x")
PY
