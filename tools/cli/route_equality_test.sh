#!/usr/bin/env bash
# One greedy answer on every route: a 303-token prompt on the tiny model
# gives the same tokens in process (`kvcast generate --model`, its default
# fp16 KV values), disaggregated (prefill worker, KV over MoQT through the
# relay, decode worker) and fused (the decode worker alone: PD fusion).
set -euo pipefail
RUNFILES="${TEST_SRCDIR:-$0.runfiles}/${TEST_WORKSPACE:-kvcast}"
KVCAST="$RUNFILES/tools/cli/kvcast"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$RUNFILES/tools/tiny_model/make_tiny_model" --out "$TMP/model" >/dev/null
PROMPT=$(seq 0 302 | awk '{printf "%s%d", (NR > 1 ? "," : ""), 10 + ($1 * 37) % 490}')
GEN=(generate --prompt_ids "$PROMPT" --max_tokens 24 --ignore_eos --ids)

local_ids=$("$KVCAST" "${GEN[@]}" --model "$TMP/model" 2>"$TMP/local.err")
[ "$(wc -w <<<"$local_ids")" -eq 24 ] || fail "in process: '$local_ids'"

CLUSTER_PID=
stop() { [ -n "$CLUSTER_PID" ] && kill "$CLUSTER_PID" 2>/dev/null && wait "$CLUSTER_PID" || true; }
trap stop EXIT
# $1: label, $2: --pd_fusion_tokens; prints the ids, the route to $TMP/$1.err
served() {
  "$KVCAST" cluster up --model "$TMP/model" --work_dir "$TMP/$1" --scheduler_port 0 \
    --http_port -1 --restart=false --scheduler_flags="--pd_fusion_tokens=$2" >"$TMP/$1.out" 2>&1 &
  CLUSTER_PID=$!
  local addr=""
  for _ in $(seq 1 120); do
    addr=$(sed -n 's/^scheduler: \([0-9.:]*\) .*/\1/p' "$TMP/$1.out")
    [ -n "$addr" ] && break
    kill -0 "$CLUSTER_PID" 2>/dev/null || fail "cluster $1 exited: $(cat "$TMP/$1.out")"
    sleep 0.5
  done
  [ -n "$addr" ] || fail "cluster $1 did not start: $(cat "$TMP/$1.out")"
  "$KVCAST" "${GEN[@]}" --scheduler "$addr" 2>"$TMP/$1.err"
  stop
  CLUSTER_PID=
}
disagg_ids=$(served disagg 0)
grep -q "prefill 127.0.0.1:[0-9]*/.* -> decode" "$TMP/disagg.err" ||
  fail "not disaggregated: $(cat "$TMP/disagg.err")"
fused_ids=$(served fused 100000)
grep -q "prefill  -> decode 127.0.0.1" "$TMP/fused.err" || fail "not fused: $(cat "$TMP/fused.err")"

[ "$disagg_ids" = "$local_ids" ] || fail "disaggregated '$disagg_ids' != in process '$local_ids'"
[ "$fused_ids" = "$local_ids" ] || fail "fused '$fused_ids' != in process '$local_ids'"
echo PASS
