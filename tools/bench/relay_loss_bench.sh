#!/usr/bin/env bash
# A relay killed with SIGKILL in the middle of a load, on loopback, against
# the same cluster without a relay, ROUNDS times in one run, the two cases
# alternating which goes first. Each case: a fresh `kvcast cluster up` (2
# prefill + 2 decode workers, the tiny model), one warm-up pass of the
# workload, then the measured pass (`kvcast bench`: REQUESTS requests,
# concurrency 4, 4 shared 256-token prefixes, 64 tokens out); in the relay
# case the relay is killed KILL_AFTER_S seconds into the measured pass (the
# script checks the load is still running then). Prints each round's e2e
# p50 for both cases and their ratio, then the median and range over the
# rounds (issue 22's goal: relay killed / no relay at most 1.5x). Needs the
# binaries built:
#   bazel build //tools/cli:kvcast //tools/tiny_model:make_tiny_model \
#     //services/... //services/relay:kvcast-relay
# Usage: tools/bench/relay_loss_bench.sh [rounds] [requests]
# JSON=FILE also gathers the runs' JSON files into one result file
# (tools/report/collect_results.py: date, CPU, command, commit).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-5}
REQUESTS=${2:-400}
KILL_AFTER_S=${KILL_AFTER_S:-0.5}
WORK=${TMPDIR:-/tmp}/kvcast-relay-loss-bench
MODEL=$WORK/model
rm -rf "$WORK"
mkdir -p "$WORK"
bazel-bin/tools/tiny_model/make_tiny_model --out "$MODEL" >/dev/null

bench() {  # $1: output label, $2: scheduler port
  bazel-bin/tools/cli/kvcast bench --scheduler "127.0.0.1:$2" --requests "$REQUESTS" \
    --rate 0 --concurrency 4 --prefixes 4 --prefix_tokens 256 --suffix_tokens 16 \
    --max_tokens 64 --json "$WORK/$1.json" >"$WORK/$1.txt"
}
up() {  # $1: label, rest: cluster flags; sets PID, PORT
  PORT=$((51000 + RANDOM % 1000))
  bazel-bin/tools/cli/kvcast cluster up --model "$MODEL" --work_dir "$WORK/$1" \
    --prefill 2 --decode 2 --scheduler_port "$PORT" --http_port -1 --restart=false \
    "${@:2}" >"$WORK/$1.log" 2>&1 &
  PID=$!
  for _ in $(seq 1 120); do grep -q "^try:" "$WORK/$1.log" && return 0; sleep 0.5; done
  echo "cluster $1 did not start:" >&2
  cat "$WORK/$1.log" >&2
  exit 1
}
down() { kill "$PID"; wait "$PID" || true; }

killed() {  # $1: round
  up "killed-$1"
  bench "killed-$1-warmup" "$PORT"
  local relay_pid
  relay_pid=$(awk '$1 == "relay" && $2 == "pid" {print $3}' "$WORK/killed-$1.log")
  [ -n "$relay_pid" ] || { echo "no relay pid in cluster up's output" >&2; exit 1; }
  bench "killed-$1" "$PORT" &
  local load=$!
  sleep "$KILL_AFTER_S"
  kill -0 "$load" 2>/dev/null || { echo "round $1: the load ended before the kill" >&2; exit 1; }
  kill -9 "$relay_pid"
  wait "$load"
  down
}
norelay() {  # $1: round
  up "norelay-$1" --relay=false
  bench "norelay-$1-warmup" "$PORT"
  bench "norelay-$1" "$PORT"
  down
}

for round in $(seq 1 "$ROUNDS"); do
  if ((round % 2)); then killed "$round"; norelay "$round"; else norelay "$round"; killed "$round"; fi
  echo "round $round done" >&2
done

python3 - "$WORK" "$ROUNDS" <<'PY'
import json, statistics, sys
w, rounds = sys.argv[1], int(sys.argv[2])
load = lambda name: json.load(open(f"{w}/{name}.json"))
print("| round | relay killed mid-load: ok, e2e p50 ms | no relay: ok, e2e p50 ms | ratio |")
print("|---|---|---|---|")
k50, n50, ratios = [], [], []
for r in range(1, rounds + 1):
    k, n = load(f"killed-{r}"), load(f"norelay-{r}")
    k50.append(k["e2e_ms"]["p50"]); n50.append(n["e2e_ms"]["p50"]); ratios.append(k50[-1] / n50[-1])
    ok = lambda x: f"{x['requests_ok']}/{x['requests_ok'] + x['requests_failed']}"
    print(f"| {r} | {ok(k)}, {k50[-1]:.1f} | {ok(n)}, {n50[-1]:.1f} | {ratios[-1]:.2f}x |")
span = lambda v, f: f"median {f(statistics.median(v))}, range {f(min(v))}-{f(max(v))}"
ms, x = (lambda v: f"{v:.1f} ms"), (lambda v: f"{v:.2f}x")
print(f"relay killed: e2e p50 {span(k50, ms)}; no relay: {span(n50, ms)}")
print(f"ratio relay killed / no relay: {span(ratios, x)} (goal <= 1.5x)")
PY
[ -z "${JSON:-}" ] || python3 tools/report/collect_results.py relay_loss_bench "$JSON" "$WORK" "$0 $*"
