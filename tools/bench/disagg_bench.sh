#!/usr/bin/env bash
# Disaggregated serving on loopback, prefix reuse on against off in one run:
# the same shared-prefix workload (`kvcast bench`) against two local
# clusters, one with prefix caching and reuse, one without. Prints a
# markdown row per cluster and the TTFT ratio. Needs the binaries built:
#   bazel build //tools/cli:kvcast //tools/tiny_model:make_tiny_model \
#     //services/... //services/relay:kvcast-relay
# Usage: tools/bench/disagg_bench.sh [requests] [prefix_tokens]
# JSON=FILE also gathers the runs' JSON files into one result file
# (tools/report/collect_results.py: date, CPU, command, commit).
set -euo pipefail
cd "$(dirname "$0")/../.."
REQUESTS=${1:-24}
PREFIX=${2:-1024}
WORK=${TMPDIR:-/tmp}/kvcast-disagg-bench
MODEL=$WORK/model
mkdir -p "$WORK"
# ~30M parameters: prefill of 1K tokens takes a noticeable time on a CPU.
[ -f "$MODEL/config.json" ] || bazel-bin/tools/tiny_model/make_tiny_model --out "$MODEL" \
  --vocab_size 2048 --hidden_size 512 --intermediate_size 1408 --num_layers 8 \
  --num_heads 8 --num_kv_heads 4 >/dev/null

run() {  # $1: label, rest: cluster flags
  local label=$1 log=$WORK/$1.log port=$((51000 + RANDOM % 1000))
  shift
  bazel-bin/tools/cli/kvcast cluster up --model "$MODEL" --work_dir "$WORK/$label" \
    --scheduler_port "$port" --kv_cache_mb 512 "$@" >"$log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 120); do grep -q "^scheduler:" "$log" && break; sleep 0.5; done
  bazel-bin/tools/cli/kvcast bench --scheduler "127.0.0.1:$port" --requests "$REQUESTS" \
    --rate 0 --concurrency 2 --prefixes 4 --prefix_tokens "$PREFIX" --suffix_tokens 32 \
    --max_tokens 16 --vocab 2048 --json "$WORK/$label.json" >"$WORK/$label.txt"
  kill "$pid"
  wait "$pid" || true
}
run reuse
run noreuse --scheduler_flags=--prefix_reuse=false --prefill_flags=--prefix_caching=false \
  --decode_flags=--prefix_caching=false
python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
r = {k: json.load(open(f"{w}/{k}.json")) for k in ("reuse", "noreuse")}
print("| prefix reuse | TTFT p50 ms | TTFT p90 ms | e2e p50 ms | cached share | KV bytes/request | KV landing ms (overlaps prefill) | exposed handoff / TTFT |")
print("|---|---|---|---|---|---|---|---|")
for k, name in (("reuse", "on"), ("noreuse", "off")):
    x = r[k]
    print(f"| {name} | {x['ttft_ms']['p50']:.1f} | {x['ttft_ms']['p90']:.1f} | {x['e2e_ms']['p50']:.1f} | "
          f"{100*x['cached_share']:.0f}% | {x['mean_transfer_bytes']:.0f} | {x['mean_transfer_ms']:.1f} | "
          f"{100*x['handoff_share_of_ttft']:.0f}% |")
print(f"TTFT p50 ratio off/on: {r['noreuse']['ttft_ms']['p50'] / r['reuse']['ttft_ms']['p50']:.2f}x")
PY
[ -z "${JSON:-}" ] || python3 tools/report/collect_results.py disagg_bench "$JSON" "$WORK" "$0 $*"
