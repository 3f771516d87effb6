#!/usr/bin/env bash
# Adaptive bitrate across a link whose bandwidth steps (issue 18). Two
# network namespaces joined by the userspace forwarder of tests/netem
# (NETEM_RATE_FILE shapes each direction) or by a veth shaped with tbf; in
# one, kvcast-kvpub prefills a prompt on a random model with Llama-like
# heads (8 layers, 8 KV heads x 128: 32 KiB of fp16 KV per token) and
# serves its tracks on its MoQT port; in the other, kv_abr_bench lands the
# prompt's KV over QUIC + TLS with a MoQT authorization token: in fp16, in
# int8, and by adaptive bitrate (ladder fp16,ac,ac-lo, a time budget), one
# group at a time and with the next group requested while one lands (the
# decode workers' default). For each run the link starts at HIGH Mbit/s,
# drops to LOW 1 s after the tool's first request and comes back 1 s
# later. Prints a markdown row per run (seconds, bytes, tracks per group,
# tracks landed in each phase of the link, largest error against the exact
# KV per track) and keeps the JSON in $WORK. Needs root (ip netns) and the
# binaries built:
#   bazel build -c opt //tools/bench:kv_abr_bench //transport/kvcache:kvcast-kvpub \
#     //tools/tiny_model:make_tiny_model //transport/moqt:kvcast-moqt
# Usage: tools/bench/kv_abr_bench.sh [PROMPT_TOKENS [HIGH_MBPS [LOW_MBPS [BUDGET_MS]]]]
# Environment:
#   LAYERS       default 8; 32 is Llama-3-8B's 128 KiB of fp16 per token
#   BUDGETS      more ABR budgets in ms, each run after BUDGET_MS's against
#                the same prefill
#   BENCH_FLAGS  more kv_abr_bench flags for every run, e.g.
#                --ac_decode_thread=false
#   REPEAT       runs of each row (labels .1, .2, ...); default 1
#   SHAPER       userspace (default: the forwarder, 1 ms each way, good to a
#                few hundred Mbit/s) or tbf (the kernel's token bucket on a
#                plain veth, no added delay: for 1 Gbit/s)
# JSON=FILE also gathers the runs' JSON files into one result file
# (tools/report/collect_results.py: date, CPU, command, commit).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
TOKENS=${1:-2048}
HIGH=${2:-200}
LOW=${3:-20}
BUDGET_MS=${4:-2500}
LAYERS=${LAYERS:-8}
SHAPER=${SHAPER:-userspace}
WORK=${TMPDIR:-/tmp}/kvcast-kv-abr-bench
rm -rf "$WORK"
mkdir -p "$WORK"
source tests/netem/netns.sh
case "$SHAPER" in
  userspace)
    export NETEM_BACKEND=userspace NETEM_RATE_FILE=$WORK/rate
    set_rate() { echo "$1" > "$NETEM_RATE_FILE"; }
    set_rate 0
    netem_setup "kvabr$$" 0 1
    ;;
  tbf)
    export NETEM_BACKEND=tbf
    netem_setup "kvabr$$" 0 0
    set_rate() { netem_set_rate "$1"; }
    ;;
  *) echo "SHAPER must be userspace or tbf" >&2; exit 2 ;;
esac

bazel-bin/tools/tiny_model/make_tiny_model --out "$WORK/model" --hidden_size 1024 \
  --intermediate_size 2048 --num_layers "$LAYERS" --num_heads 8 --num_kv_heads 8 \
  --max_position_embeddings 4096 --vocab_size 1024 >/dev/null
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$WORK/key.pem" -out "$WORK/cert.pem" -days 7 -subj /CN=kvpub \
  -addext "subjectAltName=IP:$NETEM_ADDR_A" >/dev/null 2>&1
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$WORK/auth.key"
echo >> "$WORK/auth.key"

netem_run_a "$ROOT/bazel-bin/transport/kvcache/kvcast-kvpub" --model "$WORK/model" \
  --prompt_len "$TOKENS" --listen "0.0.0.0:4500" --cert "$WORK/cert.pem" --key "$WORK/key.pem" \
  --auth_key_file "$WORK/auth.key" --dump "$WORK/exact.f32" --linger_s 600 \
  >"$WORK/kvpub.json" 2>"$WORK/kvpub.err" &
PUB=$!
# Prefill takes a while (32 layers x 4K tokens: minutes on 2 cores): wait
# while kvcast-kvpub lives, at most 20 minutes, saying so every 30 s.
for i in $(seq 1 6000); do
  [ -s "$WORK/kvpub.json" ] && break
  kill -0 "$PUB" 2>/dev/null || break
  (( i % 150 == 0 )) && echo "kvcast-kvpub: prefilling $TOKENS tokens ($((i / 5)) s)" >&2
  sleep 0.2
done
[ -s "$WORK/kvpub.json" ] || { echo "kvcast-kvpub did not start:" >&2; cat "$WORK/kvpub.err" >&2; exit 1; }
# Write the exact-KV dump out now (1 GiB for 32 layers x 4K tokens), so
# that its writeback does not land in the first measured run.
sync
# A read token for exactly the prompt's namespace (its root holds '/').
NS=$(python3 - "$WORK/kvpub.json" <<'PY'
import json, sys
ns = json.loads([l for l in open(sys.argv[1]) if l.strip()][-1])["namespace"]
print("|".join(ns), end="")
PY
)
TOKEN=$(bazel-bin/transport/moqt/kvcast-moqt token --auth_key_file "$WORK/auth.key" \
  --ns "$NS" --ops read --ns_sep '|' --ttl_s 3600)

# The link runs at HIGH; once the tool says it is about to send its first
# request (its --ready_file, polled every 5 ms for at most 60 s), LOW from
# 1 s, HIGH again from 2 s.
step_link() {
  rm -f "$WORK/ready"
  set_rate "$HIGH"
  (for _ in $(seq 1 12000); do [ -e "$WORK/ready" ] && break; sleep 0.005; done
   sleep 1; set_rate "$LOW"; sleep 1; set_rate "$HIGH") &
  STEPPER=$!
}
run() {  # $1: label, rest: kv_abr_bench flags
  step_link
  netem_run_b "$ROOT/bazel-bin/tools/bench/kv_abr_bench" --connect "$NETEM_ADDR_A:4500" \
    --info "$WORK/kvpub.json" --insecure --auth_token "$TOKEN" --dump "$WORK/exact.f32" \
    --ready_file "$WORK/ready" "${@:2}" ${BENCH_FLAGS:-} >"$WORK/$1.json" 2>"$WORK/$1.err" \
    || { cat "$WORK/$1.err" >&2; exit 1; }
  wait "$STEPPER" 2>/dev/null || true
  set_rate 0
  sleep 0.5
}
LABELS=""
for rep in $(seq 1 "${REPEAT:-1}"); do
  r=$([ "${REPEAT:-1}" = 1 ] || echo ".$rep")
  run "fp16$r" --track fp16
  run "int8$r" --track int8
  LABELS="$LABELS fp16$r int8$r"
  for budget in "$BUDGET_MS" ${BUDGETS:-}; do
    run "abr-$budget$r" --abr --budget_ms "$budget" --initial_mbps "$HIGH"
    run "abr-depth2-$budget$r" --abr --depth 2 --budget_ms "$budget" --initial_mbps "$HIGH"
    LABELS="$LABELS abr-$budget$r abr-depth2-$budget$r"
  done
done
kill "$PUB" 2>/dev/null || true

python3 - "$WORK" "$TOKENS" "$HIGH" "$LOW" "$LAYERS" "$SHAPER" $LABELS <<'PY'
import collections, json, sys
work, tokens, high, low, layers, shaper = sys.argv[1:7]
print(f"{tokens}-token prompt, {layers} layers: {4 * int(layers)} KiB/token in fp16; {shaper} link {high} Mbit/s, {low} from 1 s, "
      f"{high} from 2 s; abr-BUDGET_MS: one group at a time, abr-depth2-BUDGET_MS: the next group in flight")
print("| run | seconds | MB moved | groups landed | tracks per group | landed in 0-1 s / 1-2 s (low) / after 2 s | max abs err per track |")
print("|---|---|---|---|---|---|---|")
for label in sys.argv[7:]:
    d = json.loads(open(f"{work}/{label}.json").read().strip().splitlines()[-1])
    tracks = [g["track"] for g in d.get("per_group", [])]
    runs, prev = [], None
    for t in tracks:
        if runs and runs[-1][0] == t:
            runs[-1][1] += 1
        else:
            runs.append([t, 1])
    seq = ", ".join(f"{t} x{n}" for t, n in runs) if label.startswith("abr") else label + " (one request)"
    err = ", ".join(f"{k} {v:.3g}" for k, v in d.get("max_abs_err", {}).items())
    phases = []
    for lo, hi in ((0, 1), (1, 2), (2, 1e9)):
        count = collections.Counter(g["track"] for g in d.get("per_group", []) if lo <= g["at"] < hi)
        phases.append(" ".join(f"{t} x{n}" for t, n in count.items()) or "-")
    phase = " / ".join(phases) if label.startswith("abr") else "-"
    print(f"| {label} | {d['seconds']:.2f} | {d['bytes'] / 1e6:.1f} | {d['groups_landed']}/{d['groups']} | {seq} | {phase} | {err} |")
PY
[ -z "${JSON:-}" ] || python3 tools/report/collect_results.py kv_abr_bench "$JSON" "$WORK" "$0 $*" \
  high_mbps="$HIGH" low_mbps="$LOW" low_from_s=1 low_until_s=2 budget_ms="$BUDGET_MS" \
  layers="$LAYERS" shaper="$SHAPER"
