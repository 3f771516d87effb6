#!/usr/bin/env bash
# kvcast vs llama.cpp by prompt length, on one GGUF file, 2 threads each, by
# the same method: for each prompt length of LENGTHS (default
# 512,2048,4096,8192), ROUNDS rounds (default 5), each running kvcast's
# engine_bench (default backend: Q8 weights, fp16 KV) and llama.cpp's
# llamacpp_bench.py twice (flash attention off, then on; f16 KV), the order
# of the three rotating round to round; every process warms up with an
# untimed run of the same prompt before it measures. Measured: prefill
# tokens/s of the prompt, then DECODE_TOKENS (default 32) decode steps at
# batch 1 at that context. Prints per length the median and range of each
# number and of kvcast / llama.cpp against each llama.cpp setting, and the CPU;
# JSON=FILE also writes every round's numbers as a result file (tools/report).
#
#   tools/bench/compare_long_prompts.sh [GGUF] [ROUNDS]
#   LENGTHS=4096 tools/bench/compare_long_prompts.sh
#   RESULTS=DIR LENGTHS=... tools/bench/compare_long_prompts.sh   (summarize DIR again)
#   JSON=docs/results/llamacpp_by_length.json tools/bench/compare_long_prompts.sh
#   KVCAST_CPU_ISA=avx2 LLAMACPP_VENV=.venv-llamacpp-avx2 tools/bench/compare_long_prompts.sh
#     (both engines' AVX2 code on a CPU that has AVX-512: kvcast capped by
#     KVCAST_CPU_ISA, llama.cpp built by setup_llamacpp.sh with
#     LLAMACPP_NATIVE=0 and AVX-512 off, see docs/benchmarks.md)
#
# The model's position limit bounds the longest prompt: SmolLM2 holds 8192
# positions, so its "8K" is 8000 tokens + the decode steps.
# Sets up what is missing as compare_cpu_engines.sh does. Run it on a quiet
# machine (2 threads on 2 cores: anything else running ruins the numbers).
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:-$(tools/models/fetch_smollm2.sh build/models/smollm2)}
ROUNDS=${2:-5}
LENGTHS=${LENGTHS:-512,2048,4096,8192}
DECODE_TOKENS=${DECODE_TOKENS:-32}
log() { printf '\033[1m[compare]\033[0m %s\n' "$*" >&2; }
IFS=, read -r -a lens <<<"$LENGTHS"
if [ -n "${RESULTS:-}" ]; then
  out=$RESULTS
else
LLAMACPP_VENV=${LLAMACPP_VENV:-.venv-llamacpp}
[ -x "$LLAMACPP_VENV/bin/python" ] || bash tools/bench/setup_llamacpp.sh "$LLAMACPP_VENV" >&2
bazel build -c opt --jobs=2 //tools/bench:engine_bench >&2
out=$(mktemp -d)
log "results in $out; KVCAST_CPU_ISA=${KVCAST_CPU_ISA:-(no cap)}; llama.cpp from $LLAMACPP_VENV; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "${KVCAST_CPU_ISA:-}" >"$out/kvcast_isa"
kvcast() {  # LEN ROUND
  OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 bazel-bin/tools/bench/engine_bench --model "$model" \
    --backend cpu --prompt_len "$1" --batches 1 --decode_steps "$DECODE_TOKENS" \
    --json "$out/kvcast-$1-$2.json" >"$out/kvcast-$1-$2.md"
}
llamacpp() {  # LEN ROUND fa|nofa
  "$LLAMACPP_VENV/bin/python" tools/bench/llamacpp_bench.py --model "$model" --threads 2 \
    --prompt-len "$1" --gen "$DECODE_TOKENS" --runs 1 --warmup 1 \
    --n-ctx $(($1 + DECODE_TOKENS + 8)) $([ "$3" = fa ] && echo --flash-attn) \
    >"$out/llamacpp-$3-$1-$2.json" 2>/dev/null
}
for len in "${lens[@]}"; do
  for r in $(seq 1 "$ROUNDS"); do
    case $((r % 3)) in
      1) kvcast "$len" "$r"; llamacpp "$len" "$r" nofa; llamacpp "$len" "$r" fa ;;
      2) llamacpp "$len" "$r" nofa; llamacpp "$len" "$r" fa; kvcast "$len" "$r" ;;
      0) llamacpp "$len" "$r" fa; kvcast "$len" "$r"; llamacpp "$len" "$r" nofa ;;
    esac
    log "$len tokens: round $r of $ROUNDS done"
  done
done
log "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
fi
PYTHONPATH=tools/report python3 - "$out" "$ROUNDS" "$LENGTHS" "${JSON:-}" "$0 $*" <<'PY'
import json, os, statistics, sys
import results
d, rounds, lengths = sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3].split(",")]
def kv(n, r):
    rows = json.load(open(f"{d}/kvcast-{n}-{r}.json"))["results"]
    return {"prefill" if x["measurement"] == "prefill" else "b1": x["tokens_per_s"] for x in rows}
def lc(n, r, fa):
    x = json.load(open(f"{d}/llamacpp-{fa}-{n}-{r}.json"))
    return {"prefill": x["prefill_tok_s"], "b1": x["decode_tok_s"]}, x
info = lc(lengths[0], 1, "nofa")[1]
span = lambda v, f: f"{f(statistics.median(v))} ({f(min(v))}-{f(max(v))})"
num, ratio = (lambda v: f"{v:.0f}"), (lambda v: f"{v:.2f}x")
isa = open(f"{d}/kvcast_isa").read().strip() if os.path.exists(f"{d}/kvcast_isa") else ""
print(f"CPU: {info['cpu']} ({', '.join(info['cpu_flags'])}); {info['version']}, built with: "
      f"{info['system_info']}; kvcast KVCAST_CPU_ISA={isa or '(no cap)'}; {rounds} rounds, "
      f"median (range)\n")
print("| prompt | measurement (2 threads) | kvcast cpu tokens/s | llama.cpp tokens/s, FA off | "
      "FA on | kvcast / llama.cpp FA off | kvcast / llama.cpp FA on |")
print("|---|---|---|---|---|---|---|")
for n in lengths:
    ks = [kv(n, r) for r in range(1, rounds + 1)]
    lo = [lc(n, r, "nofa")[0] for r in range(1, rounds + 1)]
    lf = [lc(n, r, "fa")[0] for r in range(1, rounds + 1)]
    for key, name in (("prefill", "prefill"), ("b1", "decode batch 1")):
        k, a, b = [x[key] for x in ks], [x[key] for x in lo], [x[key] for x in lf]
        print(f"| {n} | {name} | {span(k, num)} | {span(a, num)} | {span(b, num)} | "
              f"{span([x / y for x, y in zip(k, a)], ratio)} | "
              f"{span([x / y for x, y in zip(k, b)], ratio)} |")
if sys.argv[4]:
    rows = []
    for n in lengths:
        for engine, get in (("kvcast", lambda r: kv(n, r)),
                            ("llama.cpp", lambda r: lc(n, r, "nofa")[0]),
                            ("llama.cpp FA", lambda r: lc(n, r, "fa")[0])):
            per_round = [get(r) for r in range(1, rounds + 1)]
            for key, name in (("prefill", "prefill"), ("b1", "decode batch 1")):
                rows.append({"prompt_tokens": n, "engine": engine, "measurement": name,
                             "tokens_per_s": [x[key] for x in per_round]})
    results.write(sys.argv[4], results.header("compare_long_prompts", sys.argv[5].split()), rows,
                  rounds=rounds, threads=2, kvcast_isa=isa or "(no cap)",
                  llamacpp={"version": info["version"], "system_info": info["system_info"]})
    print(f"\nresult file: {sys.argv[4]}")
PY
