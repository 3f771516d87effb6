#!/usr/bin/env bash
# PD fusion crossover: the same requests against a local cluster that always
# disaggregates (--pd_fusion_tokens=0) and one that always runs a request on
# its decode worker alone (--pd_fusion_tokens=1000000), one after the other,
# on SmolLM2-135M-Instruct. Cold prompts of several lengths at concurrency 1
# (TTFT, e2e) and 4 (throughput), and a conversation-like case whose 1024
# leading tokens the decode worker already holds. Prints one markdown table
# with the fused / disaggregated ratios. Needs the SmolLM2 GGUF
# (tools/models/fetch_smollm2.sh); builds what it runs (-c opt).
# Usage: tools/bench/pd_fusion_bench.sh [lengths, default "32 128 512 1024"]
# JSON=FILE also gathers the runs' JSON files into one result file
# (tools/report/collect_results.py: date, CPU, command, commit).
set -euo pipefail
cd "$(dirname "$0")/../.."
LENGTHS=${1:-32 128 512 1024}
MODEL=${KVCAST_SMOLLM2:-build/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
WORK=${TMPDIR:-/tmp}/kvcast-pd-fusion-bench
[ -f "$MODEL" ] || { echo "no model at $MODEL (tools/models/fetch_smollm2.sh)" >&2; exit 1; }
bazel build -c opt --jobs="${KVCAST_JOBS:-2}" //tools/cli:kvcast //services/scheduler:kvcast-scheduler \
  //services/prefill:kvcast-prefill //services/decode:kvcast-decode //services/relay:kvcast-relay
rm -rf "$WORK"
mkdir -p "$WORK"

bench() {  # $1: label, $2: port, rest: kvcast bench flags
  local label=$1 port=$2
  shift 2
  bazel-bin/tools/cli/kvcast bench --scheduler "127.0.0.1:$port" --rate 0 --vocab 49152 \
    --json "$WORK/$label.json" "$@" >"$WORK/$label.txt"
}

run() {  # $1: mode (split | fused), $2: --pd_fusion_tokens
  local mode=$1 log=$WORK/$1.log port=$((52000 + RANDOM % 1000))
  echo "pd_fusion_bench: $mode cluster" >&2
  OMP_WAIT_POLICY=PASSIVE bazel-bin/tools/cli/kvcast cluster up --model "$MODEL" \
    --work_dir "$WORK/$mode" --scheduler_port "$port" \
    --scheduler_flags="--pd_fusion_tokens=$2" >"$log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 240); do grep -q "^scheduler:" "$log" && break; sleep 0.5; done
  grep -q "^scheduler:" "$log" || { cat "$log" >&2; exit 1; }
  for n in $LENGTHS; do
    echo "pd_fusion_bench: $mode, $n-token prompts" >&2
    bench "$mode-c1-$n" "$port" --requests 6 --concurrency 1 --prefixes 1 --prefix_tokens 0 \
      --suffix_tokens "$n" --max_tokens 16 --seed "$n"
    bench "$mode-c4-$n" "$port" --requests 16 --concurrency 4 --prefixes 1 --prefix_tokens 0 \
      --suffix_tokens "$n" --max_tokens 32 --seed $((n + 1))
  done
  echo "pd_fusion_bench: $mode, held 1024-token prefix" >&2
  bench "$mode-held" "$port" --requests 8 --concurrency 1 --prefixes 1 --prefix_tokens 1024 \
    --suffix_tokens 32 --max_tokens 16 --seed 7
  kill "$pid"
  wait "$pid" || true
}
run split 0
run fused 1000000

python3 - "$WORK" "$LENGTHS" <<'PY'
import json, sys
w, lengths = sys.argv[1], sys.argv[2].split()
def load(name):
    return json.load(open(f"{w}/{name}.json"))
print("| prompt | TTFT p50 split / fused ms | ratio | e2e p50 split / fused ms | ratio | tokens/s at 4 split / fused | ratio | token gap p99 at 4 split / fused ms |")
print("|---|---|---|---|---|---|---|---|")
rows = [(f"{n} cold", f"c1-{n}", f"c4-{n}") for n in lengths] + [("1024 held + 32", "held", None)]
for label, c1, c4 in rows:
    s, f = load(f"split-{c1}"), load(f"fused-{c1}")
    ts, tf = s["ttft_ms"]["p50"], f["ttft_ms"]["p50"]
    es, ef = s["e2e_ms"]["p50"], f["e2e_ms"]["p50"]
    line = f"| {label} | {ts:.0f} / {tf:.0f} | {ts / tf:.2f}x | {es:.0f} / {ef:.0f} | {es / ef:.2f}x |"
    if c4:
        s4, f4 = load(f"split-{c4}"), load(f"fused-{c4}")
        ps, pf = s4["tokens_per_s"], f4["tokens_per_s"]
        line += (f" {ps:.1f} / {pf:.1f} | {pf / ps:.2f}x |"
                 f" {s4['tbt_ms']['p99']:.0f} / {f4['tbt_ms']['p99']:.0f} |")
    else:
        line += " - | - | - |"
    for r in (s, f):
        if r["requests_failed"]:
            line += f" ({r['requests_failed']} failed)"
    print(line)
print("ratios > 1: fused is faster")
PY
[ -z "${JSON:-}" ] || python3 tools/report/collect_results.py pd_fusion_bench "$JSON" "$WORK" "$0 $*"
