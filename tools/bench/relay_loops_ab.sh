#!/usr/bin/env bash
# The relay with one loop against N loops (MoqtServer loop_threads), same
# run, alternating: kv_path_bench's live relay hop (Llama-3-8B-shaped fp16
# KV of 4,096 tokens, with direct as the reference) and a fan-out of a
# 1,024-token track to 16 subscribers, ROUNDS times each.
#
#   bazel build -c opt //tools/bench:kv_path_bench
#   [JSON=docs/results/relay_loops.json] tools/bench/relay_loops_ab.sh [N=2] [ROUNDS=3]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BENCH=$ROOT/bazel-bin/tools/bench/kv_path_bench
N=${1:-2} ROUNDS=${2:-3}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for r in $(seq "$ROUNDS"); do
  for loops in 1 "$N"; do
    "$BENCH" --tokens 4096 --tracks fp16 --rounds 1 --cases direct,relay \
      --relay_loop_threads "$loops" --json "$TMP/hop_r${r}_loops${loops}.json" | grep -E '^\| 4096 \| fp16 \| (direct|relay)'
    "$BENCH" --tokens 1024 --tracks fp16 --rounds 1 --cases fanout --fanout 16 \
      --relay_loop_threads "$loops" --json "$TMP/fanout_r${r}_loops${loops}.json" | grep -E '^\| 16 '
  done
done
if [ -n "${JSON:-}" ]; then
  python3 "$ROOT/tools/report/collect_results.py" kv_path_bench "$JSON" "$TMP" "$0 $*" \
    loop_threads="$N" rounds="$ROUNDS"
fi
