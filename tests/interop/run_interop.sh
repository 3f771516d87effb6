#!/usr/bin/env bash
# Run the aiomoqt interop matrix against a MoQT relay (README.md, "Runner").
#
#   tests/interop/run_interop.sh --venv DIR [options]
#
#   --venv DIR          virtual env made by setup_aiomoqt.sh (required)
#   --relay-bin PATH    kvcast relay binary (default bazel-bin/transport/moqt/kvcast-relay),
#                       started as: PATH --listen 127.0.0.1:PORT --cert C --key K
#   --relay-cmd CMD     any other relay command; {port} {cert} {key} are substituted
#                       (e.g. aiomoqt's own relay, for a baseline)
#   --kvcast-moqt PATH  kvcast MoQT tool for parts b and c
#                       (default bazel-bin/transport/moqt/kvcast-moqt)
#   --peer aiomoqt      use the aiomoqt scripts on both ends of b and c (self-test)
#   --only a|b|c        run one part (repeatable)
#   --port N            UDP port (default: a free one)
#   --out DIR           keep logs here (default: a new mktemp dir)
# Part a: aiomoqt interop client cases (--draft 14) against the relay.
# Part b: aiomoqt publisher -> relay -> kvcast subscriber (subscribe, fetch).
# Part c: kvcast publisher -> relay -> aiomoqt subscriber (subscribe, fetch, join).
# Exit 0 iff every run part passed. Results: OUT/results.txt.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
VENV="" RELAY_BIN="$ROOT/bazel-bin/transport/moqt/kvcast-relay" RELAY_CMD=""
KVMOQT="$ROOT/bazel-bin/transport/moqt/kvcast-moqt" PEER=kvcast PORT="" OUT="" ONLY=""

die() { echo "run_interop: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --venv) VENV=$2; shift 2 ;;
    --relay-bin) RELAY_BIN=$2; shift 2 ;;
    --relay-cmd) RELAY_CMD=$2; shift 2 ;;
    --kvcast-moqt) KVMOQT=$2; shift 2 ;;
    --peer) PEER=$2; shift 2 ;;
    --only) ONLY="$ONLY $2"; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) die "unknown argument $1" ;;
  esac
done
[[ -n "$VENV" && -x "$VENV/bin/python" ]] || die "--venv DIR (made by setup_aiomoqt.sh) is required"
PY="$VENV/bin/python"
want() { [[ -z "$ONLY" || " $ONLY " == *" $1 "* ]]; }
[[ "$PEER" == kvcast || "$PEER" == aiomoqt ]] || die "--peer kvcast|aiomoqt"
if [[ "$PEER" == kvcast ]] && { want b || want c; } && [[ ! -x "$KVMOQT" ]]; then
  die "no kvcast tool at $KVMOQT (build it, pass --kvcast-moqt, or --only a)"
fi
if [[ -z "$RELAY_CMD" && ! -x "$RELAY_BIN" ]]; then
  die "no relay at $RELAY_BIN (bazel build //transport/moqt:kvcast-relay, or --relay-cmd)"
fi
OUT=${OUT:-$(mktemp -d /tmp/kvcast-interop.XXXXXX)}
mkdir -p "$OUT"
RESULTS="$OUT/results.txt"; : > "$RESULTS"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT

# ---- certificate and relay --------------------------------------------------
CERT="$OUT/relay.pem" KEY="$OUT/relay-key.pem"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$KEY" -out "$CERT" -days 7 -subj /CN=localhost \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" >/dev/null 2>&1 \
  || die "openssl could not make a certificate"
[[ -n "$PORT" ]] || PORT=$(cd / && "$PY" -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
if [[ -n "$RELAY_CMD" ]]; then
  cmd=${RELAY_CMD//\{port\}/$PORT}; cmd=${cmd//\{cert\}/$CERT}; cmd=${cmd//\{key\}/$KEY}
  (cd / && exec bash -c "exec $cmd") > "$OUT/relay.log" 2>&1 &
else
  "$RELAY_BIN" --listen "127.0.0.1:$PORT" --cert "$CERT" --key "$KEY" > "$OUT/relay.log" 2>&1 &
fi
RELAY_PID=$!; PIDS+=("$RELAY_PID")
RELAY="127.0.0.1:$PORT"
echo "run_interop: relay pid $RELAY_PID on $RELAY, logs in $OUT"

# Wait until the relay answers SETUP (up to 15 s).
ready=0
for _ in $(seq 30); do
  kill -0 "$RELAY_PID" 2>/dev/null || { cat "$OUT/relay.log" >&2; die "relay exited"; }
  if (cd / && "$PY" -m aiomoqt.tools.moq_interop_client -r "moqt://$RELAY" --draft 14 \
        --tls-disable-verify -t setup-only >/dev/null 2>&1); then ready=1; break; fi
  sleep 0.5
done
[[ $ready == 1 ]] || die "relay never completed CLIENT_SETUP/SERVER_SETUP"

record() {  # record PART NAME RC DETAIL
  local status=FAIL; [[ $3 == 0 ]] && status=PASS
  [[ $3 == skip ]] && status=SKIP
  printf '%-4s %-4s %-34s %s\n' "$status" "$1" "$2" "$4" | tee -a "$RESULTS"
}

# ---- part a: aiomoqt interop client cases -----------------------------------
A_CASES="setup-only announce-only publish-namespace-done subscribe-error announce-subscribe subscribe-before-announce data-subgroup-basic namespace-discovery publish-track-only publish-track-subscribe fetch join rendezvous-timeout subscribe-namespace-lifecycle"
if want a; then
  for c in $A_CASES; do
    tap="$OUT/a-$c.tap"
    (cd / && timeout 60 "$PY" -m aiomoqt.tools.moq_interop_client -r "moqt://$RELAY" \
       --draft 14 --tls-disable-verify -t "$c") > "$tap" 2> "$OUT/a-$c.err"
    rc=$?
    line=$(grep -E '^(not )?ok ' "$tap" | head -1)
    msg=$(grep -m1 '  message:' "$tap" | sed 's/^  message: //')
    if [[ "$line" == *"# SKIP"* ]]; then record a "$c" skip "${line#*# SKIP }"
    else record a "$c" "$rc" "$msg"; fi
  done
fi

# ---- helpers for parts b and c ----------------------------------------------
G=4 N=8 SIZE=4096
wait_file() { for _ in $(seq 100); do [[ -f "$1" ]] && return 0; sleep 0.1; done; return 1; }
aio_pub() {  # aio_pub TAG NS EXTRA...  (background; sets PUB_PID)
  local tag=$1 ns=$2; shift 2
  rm -f "$OUT/$tag.ready"
  "$PY" "$HERE/aiomoqt_publisher.py" --relay "$RELAY" --namespace "$ns" --track t \
    --groups $G --objects-per-group $N --object-size $SIZE --seed 11 --timeout 40 \
    --ready-file "$OUT/$tag.ready" "$@" > "$OUT/$tag.pub.json" 2> "$OUT/$tag.pub.err" &
  PUB_PID=$!; PIDS+=("$PUB_PID")
  wait_file "$OUT/$tag.ready"
}
aio_sub() {  # aio_sub TAG NS EXTRA...  -> rc
  local tag=$1 ns=$2; shift 2
  "$PY" "$HERE/aiomoqt_subscriber.py" --relay "$RELAY" --namespace "$ns" --track t \
    --groups $G --objects-per-group $N --object-size $SIZE --seed 11 --timeout 30 \
    --retry-for 10 "$@" > "$OUT/$tag.sub.json" 2> "$OUT/$tag.sub.err"
}
# The kvcast tool's CLI (transport/moqt/tools/moqt_tool.cc); adjust here if it changes.
kv_sub() {  # kv_sub TAG NS subscribe|fetch -> rc
  "$KVMOQT" "$3" --relay "$RELAY" --ns "$2" --track t --groups $G --objects $N \
    --size $SIZE --seed 11 --insecure --timeout_s 30 > "$OUT/$1.sub.json" 2> "$OUT/$1.sub.err"
}
kv_pub() {  # kv_pub TAG NS now|subscriber  (background; sets PUB_PID)
  "$KVMOQT" publish --relay "$RELAY" --ns "$2" --track t --groups $G --objects $N \
    --size $SIZE --seed 11 --insecure --timeout_s 40 --start "$3" --linger_ms 20000 \
    > "$OUT/$1.pub.json" 2> "$OUT/$1.pub.err" &
  PUB_PID=$!; PIDS+=("$PUB_PID")
  sleep 1   # no ready signal: the aiomoqt subscriber retries (--retry-for)
}
stop_pub() { kill -TERM "$PUB_PID" 2>/dev/null; wait "$PUB_PID" 2>/dev/null; }
summ() {  # the interesting fields of a JSON summary line
  (cd / && "$PY" - "$1" <<'EOF2'
import json, sys
try:
    d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
except Exception as e:  # noqa: BLE001
    print(f"no JSON summary ({type(e).__name__})"); sys.exit()
keys = ("result", "ok", "received_ok", "objects", "expected", "mismatched", "bad",
        "missing", "via", "error")
print(" ".join(f"{k}={d[k]}" for k in keys if k in d and d[k] not in (None, "")))
EOF2
  )
}

# ---- part b: aiomoqt publisher -> relay -> kvcast subscriber -----------------
if want b; then
  for mode in subscribe fetch; do
    ns="interop/b-$mode/$$"
    extra=(); [[ $mode == fetch ]] && extra=(--prepublished)
    if aio_pub "b-$mode" "$ns" "${extra[@]}"; then
      if [[ $PEER == kvcast ]]; then kv_sub "b-$mode" "$ns" "$mode"; rc=$?
      else
        sx=(); [[ $mode == fetch ]] && sx=(--fetch)
        aio_sub "b-$mode" "$ns" "${sx[@]}"; rc=$?
      fi
      record b "aiomoqt-pub -> $PEER-$mode" $rc "$(summ "$OUT/b-$mode.sub.json")"
    else
      record b "aiomoqt-pub -> $PEER-$mode" 1 "publisher never got PUBLISH_NAMESPACE_OK"
    fi
    stop_pub
  done
fi

# ---- part c: kvcast publisher -> relay -> aiomoqt subscriber -----------------
if want c; then
  for mode in subscribe fetch join; do
    ns="interop/c-$mode/$$"
    start=subscriber; [[ $mode != subscribe ]] && start=now
    if [[ $PEER == kvcast ]]; then kv_pub "c-$mode" "$ns" $start
    else
      px=(); [[ $mode != subscribe ]] && px=(--prepublished)
      aio_pub "c-$mode" "$ns" "${px[@]}"
    fi
    sx=(); [[ $mode == fetch ]] && sx=(--fetch); [[ $mode == join ]] && sx=(--join)
    aio_sub "c-$mode" "$ns" "${sx[@]}"; rc=$?
    record c "$PEER-pub -> aiomoqt-$mode" $rc "$(summ "$OUT/c-$mode.sub.json")"
    stop_pub
  done
fi

fails=$(grep -c '^FAIL' "$RESULTS")
echo "run_interop: $(grep -c '^PASS' "$RESULTS") passed, $fails failed, $(grep -c '^SKIP' "$RESULTS") skipped; details in $OUT"
[[ $fails == 0 ]]
