#!/usr/bin/env bash
# A decode worker frozen (SIGSTOP) under load, on loopback: `kvcast bench`
# (concurrency 4, 256-token shared prefixes, 64 tokens out) against a 2
# prefill + 2 decode cluster, once undisturbed and once with decode-0
# stopped for FREEZE_S seconds (then SIGCONT) while it runs. Prints a
# markdown row per run: with stall detection (--decode_stall_s, default 2 s)
# no request waits out the freeze. Needs the binaries built:
#   bazel build //tools/cli:kvcast //tools/tiny_model:make_tiny_model \
#     //services/... //services/relay:kvcast-relay
# Usage: tools/bench/decode_freeze_bench.sh [requests] [freeze_s]
# JSON=FILE also gathers the runs' JSON files into one result file
# (tools/report/collect_results.py: date, CPU, command, commit).
set -euo pipefail
cd "$(dirname "$0")/../.."
REQUESTS=${1:-1500}
FREEZE_S=${2:-10}
WORK=${TMPDIR:-/tmp}/kvcast-decode-freeze-bench
MODEL=$WORK/model
rm -rf "$WORK"
mkdir -p "$WORK"
bazel-bin/tools/tiny_model/make_tiny_model --out "$MODEL" >/dev/null
PORT=$((52000 + RANDOM % 1000))
bazel-bin/tools/cli/kvcast cluster up --model "$MODEL" --work_dir "$WORK/cluster" \
  --prefill 2 --decode 2 --scheduler_port "$PORT" --http_port -1 >"$WORK/cluster.log" 2>&1 &
PID=$!
trap 'kill -CONT "${VICTIM:-0}" 2>/dev/null; kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do grep -q "^try:" "$WORK/cluster.log" && break; sleep 0.5; done
bench() {
  bazel-bin/tools/cli/kvcast bench --scheduler "127.0.0.1:$PORT" --requests "$REQUESTS" \
    --rate 0 --concurrency 4 --prefixes 4 --prefix_tokens 256 --suffix_tokens 16 \
    --max_tokens 64 --deadline_s 120 --json "$WORK/$1.json" >"$WORK/$1.txt"
}
bench undisturbed
VICTIM=$(awk '$1 == "decode-0" && $2 == "pid" {print $3}' "$WORK/cluster.log")
bench frozen &
BENCH=$!
sleep 1
kill -STOP "$VICTIM"
sleep "$FREEZE_S"
kill -CONT "$VICTIM"
wait "$BENCH"
python3 - "$WORK" "$FREEZE_S" <<'PY'
import json, sys
w, freeze = sys.argv[1], sys.argv[2]
print("| run | requests ok | e2e p50 ms | e2e p99 ms | tokens/s |")
print("|---|---|---|---|---|")
for k, name in (("undisturbed", "undisturbed"), ("frozen", f"decode-0 stopped {freeze} s")):
    x = json.load(open(f"{w}/{k}.json"))
    print(f"| {name} | {x['requests_ok']}/{x['requests_ok'] + x['requests_failed']} | "
          f"{x['e2e_ms']['p50']:.1f} | {x['e2e_ms']['p99']:.1f} | {x['tokens_per_s']:.0f} |")
PY
grep -c "stalled" "$WORK/cluster/logs/scheduler.log" | sed 's/^/decode streams resumed after a stall: /'
[ -z "${JSON:-}" ] || python3 tools/report/collect_results.py decode_freeze_bench "$JSON" "$WORK" "$0 $*"
