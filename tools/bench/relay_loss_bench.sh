#!/usr/bin/env bash
# A relay killed with SIGKILL under load, on loopback: the same shared-prefix
# workload (`kvcast bench`: concurrency 4, 256-token prefixes, 64 tokens
# out) against (1) a cluster with its relay, (2) the same cluster after
# `kill -9` of the relay, and (3) a cluster without a relay (--relay=false),
# in one run; (2) and (3) each run after one warm-up pass of the workload.
# Prints a markdown row per case and the e2e p50 ratio of (2) to (3) (issue
# 22's goal: at most 1.5x). Needs the binaries built:
#   bazel build //tools/cli:kvcast //tools/tiny_model:make_tiny_model \
#     //services/... //transport/moqt:kvcast-relay
# Usage: tools/bench/relay_loss_bench.sh [requests]
set -euo pipefail
cd "$(dirname "$0")/../.."
REQUESTS=${1:-20}
WORK=${TMPDIR:-/tmp}/kvcast-relay-loss-bench
MODEL=$WORK/model
rm -rf "$WORK"
mkdir -p "$WORK"
bazel-bin/tools/tiny_model/make_tiny_model --out "$MODEL" >/dev/null

bench() {  # $1: label, $2: scheduler port
  bazel-bin/tools/cli/kvcast bench --scheduler "127.0.0.1:$2" --requests "$REQUESTS" \
    --rate 0 --concurrency 4 --prefixes 4 --prefix_tokens 256 --suffix_tokens 16 \
    --max_tokens 64 --json "$WORK/$1.json" >"$WORK/$1.txt"
}
up() {  # $1: label, rest: cluster flags; sets PID, PORT
  PORT=$((51000 + RANDOM % 1000))
  bazel-bin/tools/cli/kvcast cluster up --model "$MODEL" --work_dir "$WORK/$1" \
    --prefill 2 --decode 2 --scheduler_port "$PORT" --http_port -1 "${@:2}" >"$WORK/$1.log" 2>&1 &
  PID=$!
  for _ in $(seq 1 120); do grep -q "^try:" "$WORK/$1.log" && return 0; sleep 0.5; done
  echo "cluster $1 did not start:" >&2
  cat "$WORK/$1.log" >&2
  exit 1
}

up relay
bench with_relay "$PORT"
RELAY_PID=$(awk '$1 == "relay" && $2 == "pid" {print $3}' "$WORK/relay.log")
[ -n "$RELAY_PID" ] || { echo "no relay pid in cluster up's output" >&2; exit 1; }
kill -9 "$RELAY_PID"
bench relay_killed "$PORT"
kill "$PID"
wait "$PID" || true
up norelay --relay=false
bench no_relay_warmup "$PORT"  # as the relay-killed run, measured on warm caches
bench no_relay "$PORT"
kill "$PID"
wait "$PID" || true

python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
cases = (("with_relay", "relay up"), ("relay_killed", "relay killed (SIGKILL)"),
         ("no_relay", "no relay (--relay=false)"))
r = {k: json.load(open(f"{w}/{k}.json")) for k, _ in cases}
print("| case | requests ok | TTFT p50 ms | e2e p50 ms | e2e p99 ms | tokens/s | cached share |")
print("|---|---|---|---|---|---|---|")
for k, name in cases:
    x = r[k]
    print(f"| {name} | {x['requests_ok']}/{x['requests_ok'] + x['requests_failed']} | "
          f"{x['ttft_ms']['p50']:.1f} | {x['e2e_ms']['p50']:.1f} | {x['e2e_ms']['p99']:.1f} | "
          f"{x['tokens_per_s']:.0f} | "
          f"{100 * x['cached_share']:.0f}% |")
ratio = r["relay_killed"]["e2e_ms"]["p50"] / r["no_relay"]["e2e_ms"]["p50"]
print(f"e2e p50, relay killed / no relay: {ratio:.2f}x (goal <= 1.5x)")
PY
