#!/usr/bin/env bash
# kvcast vs llama.cpp on one GGUF file, 2 threads each, by the same method:
# ROUNDS rounds (default 5), each running kvcast's engine_bench (default
# backend, Q8 weights) and llama.cpp's llamacpp_bench.py once, the order
# alternating round to round; each process warms up before it measures
# (one untimed prefill and decode step for kvcast, one untimed run for
# llama.cpp). Measured: prefill tokens/s of a 512-token prompt, then
# DECODE_TOKENS (default 64) decode steps at batch 1, 8 and 32 (llama.cpp's
# batches: one llama_decode of N tokens per step, N sequences in one
# context). Prints the median and range over the rounds of each number and
# of each kvcast / llama.cpp ratio, batch against batch, and the CPU;
# JSON=FILE also writes every round's numbers as a result file (tools/report).
#
#   tools/bench/compare_cpu_engines.sh [GGUF] [ROUNDS]   (default: SmolLM2-135M-Instruct, 5)
#
# Sets up what is missing: the model (tools/models/fetch_smollm2.sh) and the
# llama.cpp venv .venv-llamacpp (tools/bench/setup_llamacpp.sh, ~3-6 min
# build, AMX compiled out: see there). Run it on a quiet machine: on 2 cores
# anything else running ruins 2-thread numbers (the load average is printed).
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:-$(tools/models/fetch_smollm2.sh build/models/smollm2)}
ROUNDS=${2:-5}
DECODE_TOKENS=${DECODE_TOKENS:-64}
log() { printf '\033[1m[compare]\033[0m %s\n' "$*" >&2; }
[ -x .venv-llamacpp/bin/python ] || bash tools/bench/setup_llamacpp.sh .venv-llamacpp >&2
bazel build -c opt --jobs=2 //tools/bench:engine_bench >&2
out=$(mktemp -d)
log "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
kvcast() {
  OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 bazel-bin/tools/bench/engine_bench --model "$model" \
    --backend cpu --prompt_len 512 --batches 1,8,32 --decode_steps "$DECODE_TOKENS" \
    --json "$out/kvcast-$1.json" >"$out/kvcast-$1.md"
}
llamacpp() {
  .venv-llamacpp/bin/python tools/bench/llamacpp_bench.py --model "$model" --threads 2 \
    --prompt-len 512 --gen "$DECODE_TOKENS" --runs 1 --warmup 1 --batches 8,32 \
    --n-ctx $((512 + DECODE_TOKENS + 8)) >"$out/llamacpp-$1.json" 2>/dev/null
}
for r in $(seq 1 "$ROUNDS"); do
  if ((r % 2)); then kvcast "$r"; llamacpp "$r"; else llamacpp "$r"; kvcast "$r"; fi
  log "round $r of $ROUNDS done"
done
log "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
PYTHONPATH=tools/report python3 - "$out" "$ROUNDS" "${JSON:-}" "$0 $*" <<'PY'
import json, statistics, sys
import results
d, rounds = sys.argv[1], int(sys.argv[2])
def kv(r):
    rows = json.load(open(f"{d}/kvcast-{r}.json"))["results"]
    return {"prefill" if x["measurement"] == "prefill" else f"b{x['batch']}": x["tokens_per_s"]
            for x in rows}
def lc(r):
    x = json.load(open(f"{d}/llamacpp-{r}.json"))
    return {"prefill": x["prefill_tok_s"], "b1": x["decode_tok_s"],
            "b8": x["batched_decode"]["8"]["decode_tok_s"],
            "b32": x["batched_decode"]["32"]["decode_tok_s"]}, x
ks = [kv(r) for r in range(1, rounds + 1)]
ls = [lc(r)[0] for r in range(1, rounds + 1)]
info = lc(1)[1]
span = lambda v, f: f"{f(statistics.median(v))} ({f(min(v))}-{f(max(v))})"
num, ratio = (lambda v: f"{v:.0f}"), (lambda v: f"{v:.2f}x")
print(f"CPU: {info['cpu']}; flags: {', '.join(info['cpu_flags'])}; {info['version']}; "
      f"{rounds} rounds, median (range)\n")
print("| measurement (2 threads) | kvcast cpu (Q8) tokens/s | llama.cpp tokens/s | kvcast / llama.cpp |")
print("|---|---|---|---|")
names = {"prefill": "prefill 512 tokens", "b1": "decode batch 1", "b8": "decode batch 8",
         "b32": "decode batch 32"}
for key, name in names.items():
    k, l = [x[key] for x in ks], [x[key] for x in ls]
    print(f"| {name} | {span(k, num)} | {span(l, num)} | "
          f"{span([a / b for a, b in zip(k, l)], ratio)} |")
if sys.argv[3]:
    rows = [{"measurement": names[key], "engine": engine, "tokens_per_s": [x[key] for x in xs]}
            for key in names for engine, xs in (("kvcast", ks), ("llama.cpp", ls))]
    results.write(sys.argv[3], results.header("compare_cpu_engines", sys.argv[4].split()), rows,
                  rounds=rounds, threads=2, prompt_tokens=512,
                  llamacpp={"version": info["version"], "system_info": info["system_info"]})
    print(f"\nresult file: {sys.argv[3]}")
PY
