#!/usr/bin/env bash
# Run the aiomoqt interop matrix against a MoQT relay (README.md, "Runner").
#
#   tests/interop/run_interop.sh --venv DIR [options]
#
#   --venv DIR          virtual env made by setup_aiomoqt.sh (required)
#   --relay-bin PATH    kvcast relay binary (default bazel-bin/services/relay/kvcast-relay),
#                       started as: PATH --listen 127.0.0.1:PORT --cert C --key K
#   --relay-cmd CMD     any other relay command; {port} {cert} {key} are substituted
#                       (e.g. aiomoqt's own relay, for a baseline)
#   --kvcast-moqt PATH  kvcast MoQT tool for parts b and c
#                       (default bazel-bin/transport/moqt/kvcast-moqt)
#   --kvpub PATH        kvcast KV publisher for part d
#                       (default bazel-bin/transport/kvcache/kvcast-kvpub)
#   --make-tiny-model PATH  model writer for part d
#                       (default bazel-bin/tools/tiny_model/make_tiny_model)
#   --peer aiomoqt      use the aiomoqt scripts on both ends of b and c (self-test)
#   --only a|b|c|d|e    run one part (repeatable)
#   --port N            UDP port (default: a free one)
#   --out DIR           keep logs here (default: a new mktemp dir)
# Part a: aiomoqt interop client cases (--draft 14) against the relay.
# Part b: aiomoqt publisher -> relay -> kvcast subscriber (subscribe, fetch).
# Part c: kvcast publisher -> relay -> aiomoqt subscriber (subscribe, fetch, join).
# Part d: KVCache over MoQT: kvcast-kvpub (a real model's KV) -> relay ->
#         aiomoqt_kv_subscriber.py (decodes every track per
#         docs/kvcache-wire-format.md, compares with the exact KV).
# Part e: MoQT authorization (kvcast relays only): a second relay with
#         --auth_key_file, and kvcast-kvpub's own MoQT port (the publisher a
#         prefill worker runs, with --auth_key_file): aiomoqt without a token,
#         with a token for another namespace or operation, and with a valid
#         token (from `kvcast-moqt token`).
# Exit 0 iff every run part passed. Results: OUT/results.txt.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
VENV="" RELAY_BIN="$ROOT/bazel-bin/services/relay/kvcast-relay" RELAY_CMD=""
KVMOQT="$ROOT/bazel-bin/transport/moqt/kvcast-moqt" PEER=kvcast PORT="" OUT="" ONLY=""
KVPUB="$ROOT/bazel-bin/transport/kvcache/kvcast-kvpub"
TINY_MODEL="$ROOT/bazel-bin/tools/tiny_model/make_tiny_model"

die() { echo "run_interop: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --venv) VENV=$2; shift 2 ;;
    --relay-bin) RELAY_BIN=$2; shift 2 ;;
    --relay-cmd) RELAY_CMD=$2; shift 2 ;;
    --kvcast-moqt) KVMOQT=$2; shift 2 ;;
    --kvpub) KVPUB=$2; shift 2 ;;
    --make-tiny-model) TINY_MODEL=$2; shift 2 ;;
    --peer) PEER=$2; shift 2 ;;
    --only) ONLY="$ONLY $2"; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
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
if { want d || want e; } && [[ ! -x "$KVPUB" || ! -x "$TINY_MODEL" ]]; then
  die "no $KVPUB or $TINY_MODEL (bazel build //transport/kvcache:kvcast-kvpub //tools/tiny_model:make_tiny_model, pass --kvpub/--make-tiny-model, or --only a|b|c)"
fi
if [[ -z "$RELAY_CMD" && ! -x "$RELAY_BIN" ]]; then
  die "no relay at $RELAY_BIN (bazel build //services/relay:kvcast-relay, or --relay-cmd)"
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
  "$RELAY_BIN" --listen "127.0.0.1:$PORT" --cert "$CERT" --key "$KEY" --insecure > "$OUT/relay.log" 2>&1 &
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

# ---- part d: KVCache over MoQT: kvcast-kvpub -> relay -> aiomoqt + numpy -----
# A 2-layer model with 2 KV heads of 64 (so the 4-bit tracks use two 32-value
# blocks per head), a 300-token prompt in 128-token groups (the last one
# partial). Both ends verify the relay's certificate.
if want d; then
  model="$OUT/d-model"
  if ! "$TINY_MODEL" --out "$model" --hidden_size 128 --num_heads 2 --num_kv_heads 2 \
       > "$OUT/d-model.log" 2>&1; then
    record d "kvpub -> aiomoqt KV" 1 "make_tiny_model failed: $(tail -1 "$OUT/d-model.log")"
  else
    "$KVPUB" --model "$model" --prompt_len 300 --relay "$RELAY" --ca "$CERT" \
      --dump "$OUT/d-kv.f32" --linger_s 60 > "$OUT/d.pub.json" 2> "$OUT/d.pub.err" &
    PUB_PID=$!; PIDS+=("$PUB_PID")
    # Its JSON line comes once the relay accepted the namespace.
    for _ in $(seq 150); do
      [[ -s "$OUT/d.pub.json" ]] && break
      kill -0 "$PUB_PID" 2>/dev/null || break
      sleep 0.1
    done
    if [[ ! -s "$OUT/d.pub.json" ]]; then
      record d "kvpub -> aiomoqt KV" 1 "kvcast-kvpub never announced: $(tail -1 "$OUT/d.pub.err")"
    else
      "$PY" "$HERE/aiomoqt_kv_subscriber.py" --relay "$RELAY" --ca-file "$CERT" \
        --info "$OUT/d.pub.json" --model-config "$model/config.json" --timeout 30 \
        > "$OUT/d.sub.json" 2> "$OUT/d.sub.err"
      rc=$?
      # One result per track: "rc<TAB>name<TAB>detail" lines from its JSON.
      (cd / && "$PY" - "$OUT/d.sub.json" "$rc" <<'EOF3'
import json, sys
try:
    d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
except Exception as e:  # noqa: BLE001
    d = {"error": f"no JSON summary ({type(e).__name__})", "tracks": []}
for t in d.get("tracks", []):
    name = ("aiomoqt " + ("sub " if t["via"] == "subscribe" else "fetch ") + t["track"])
    detail = (f"objects={t['objects']}/{t['expected']} markers={t['markers']} "
              f"bytes={t['token_bytes']} max_abs_err={t.get('max_abs_err', 0):.3g}")
    if "max_err_half_steps" in t:
        detail += f" max_err/half_step={t['max_err_half_steps']:.6f}"
    if "max_abs_err_unrotated" in t:
        detail += f" rotated back: max_abs_err={t['max_abs_err_unrotated']:.3g}"
    if not t["ok"]:
        detail += f" errors={t['errors']} {'; '.join(t['error_sample'][:2])}"
    print(f"{0 if t['ok'] else 1}\tkvpub -> {name}\t{detail}")
if sys.argv[2] != "0" or not d.get("tracks"):
    print(f"1\tkvpub -> aiomoqt KV (overall)\tresult={d.get('result')} error={d.get('error')}")
EOF3
      ) > "$OUT/d.records"
      while IFS=$'\t' read -r r name detail; do record d "$name" "$r" "$detail"; done < "$OUT/d.records"
    fi
    # SIGTERM must end kvcast-kvpub cleanly (exit 0) within 5 s.
    kill -TERM "$PUB_PID" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$PUB_PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$PUB_PID" 2>/dev/null; then
      kill -KILL "$PUB_PID" 2>/dev/null; wait "$PUB_PID" 2>/dev/null
      record d "kvpub exits on SIGTERM" 1 "still running 5 s after SIGTERM"
    else
      wait "$PUB_PID"; prc=$?
      record d "kvpub exits on SIGTERM" "$prc" "exit code $prc"
    fi
  fi
fi

# ---- part e: MoQT authorization ---------------------------------------------
# Refusals must be the draft's UNAUTHORIZED (0x1) from the server, seen by
# aiomoqt as a request error (exit 5 = refused); accepted requests must then
# deliver every byte.
refused_with() {  # refused_with RC JSON CODE -> 0 iff RC is "refused" and the error names CODE
  [[ $1 == 5 ]] && grep -q "code=$3 " "$2"
}
if want e && [[ -z "$RELAY_CMD" && -x "$KVMOQT" ]]; then
  AUTH_KEY="$OUT/moqt-auth.key"
  (cd / && "$PY" -c 'import secrets; print(secrets.token_hex(32))') > "$AUTH_KEY"
  PORT_E=$(cd / && "$PY" -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$RELAY_BIN" --listen "127.0.0.1:$PORT_E" --cert "$CERT" --key "$KEY" \
    --auth_key_file "$AUTH_KEY" > "$OUT/relay-auth.log" 2>&1 &
  PIDS+=("$!")
  RELAY_OPEN=$RELAY RELAY="127.0.0.1:$PORT_E"
  token() {  # token NS OPS [SEP]
    "$KVMOQT" token --auth_key_file "$AUTH_KEY" --ns "$1" --ops "$2" --ns_sep "${3:-/}" --ttl_s 120
  }
  ns="interop/e/$$" other="interop/e-other/$$"
  sleep 0.5
  # A publisher without a token is refused; with one it announces.
  (cd / && timeout 30 "$PY" "$HERE/aiomoqt_publisher.py" --relay "$RELAY" --namespace "$ns" \
     --track t --groups $G --objects-per-group $N --object-size $SIZE --seed 11 --timeout 10 \
     --prepublished) > "$OUT/e-pub-none.json" 2> "$OUT/e-pub-none.err"
  rc=$?; refused_with $rc "$OUT/e-pub-none.json" 1; record e "relay: publish, no token" $? "rc=$rc $(summ "$OUT/e-pub-none.json")"
  if aio_pub e-pub "$ns" --prepublished --replay --auth-token "$(token "$ns" publish)"; then
    record e "relay: publish, token" 0 "PUBLISH_NAMESPACE_OK"
    aio_sub e-sub-none "$ns" --retry-for 0; rc=$?
    refused_with $rc "$OUT/e-sub-none.sub.json" 1; record e "relay: subscribe, no token" $? "rc=$rc $(summ "$OUT/e-sub-none.sub.json")"
    aio_sub e-sub-other "$ns" --retry-for 0 --auth-token "$(token "$other" read)"; rc=$?
    refused_with $rc "$OUT/e-sub-other.sub.json" 1; record e "relay: subscribe, other ns token" $? "rc=$rc $(summ "$OUT/e-sub-other.sub.json")"
    aio_sub e-fetch-pubtok "$ns" --fetch --retry-for 0 --auth-token "$(token "$ns" publish)"; rc=$?
    refused_with $rc "$OUT/e-fetch-pubtok.sub.json" 1; record e "relay: fetch, publish-only token" $? "rc=$rc $(summ "$OUT/e-fetch-pubtok.sub.json")"
    aio_sub e-sub "$ns" --filter absolute-start --auth-token "$(token "$ns" read)"
    record e "relay: subscribe, token" $? "$(summ "$OUT/e-sub.sub.json")"
    aio_sub e-fetch "$ns" --fetch --auth-token "$(token "$ns" read)"
    record e "relay: fetch, token" $? "$(summ "$OUT/e-fetch.sub.json")"
  else
    record e "relay: publish, token" 1 "publisher never got PUBLISH_NAMESPACE_OK: $(tail -1 "$OUT/e-pub.pub.err")"
  fi
  stop_pub
  RELAY=$RELAY_OPEN

  # kvcast-kvpub's own MoQT port with --auth_key_file: a real model's KV.
  model="$OUT/e-model"
  PORT_K=$(cd / && "$PY" -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  if ! "$TINY_MODEL" --out "$model" --hidden_size 128 --num_heads 2 --num_kv_heads 2 \
       > "$OUT/e-model.log" 2>&1; then
    record e "kvpub port" 1 "make_tiny_model failed: $(tail -1 "$OUT/e-model.log")"
  else
    "$KVPUB" --model "$model" --prompt_len 200 --listen "127.0.0.1:$PORT_K" --cert "$CERT" \
      --key "$KEY" --auth_key_file "$AUTH_KEY" --dump "$OUT/e-kv.f32" --linger_s 60 \
      > "$OUT/e.pub.json" 2> "$OUT/e.pub.err" &
    PUB_PID=$!; PIDS+=("$PUB_PID")
    for _ in $(seq 150); do
      [[ -s "$OUT/e.pub.json" ]] && break
      kill -0 "$PUB_PID" 2>/dev/null || break
      sleep 0.1
    done
    if [[ ! -s "$OUT/e.pub.json" ]]; then
      record e "kvpub port" 1 "kvcast-kvpub did not start: $(tail -1 "$OUT/e.pub.err")"
    else
      # The prompt's namespace (root, model id, digest) as kvcast-moqt's --ns.
      kv_ns=$(cd / && "$PY" -c 'import json,sys; print(",".join(json.loads(open(sys.argv[1]).read())["namespace"]))' "$OUT/e.pub.json")
      kvsub() {  # kvsub TAG EXTRA... -> rc
        local tag=$1; shift
        (cd / && "$PY" "$HERE/aiomoqt_kv_subscriber.py" --relay "127.0.0.1:$PORT_K" \
           --ca-file "$CERT" --info "$OUT/e.pub.json" --model-config "$model/config.json" \
           --tracks fp16 --fetch-track int8 --timeout 20 "$@") > "$OUT/$tag.json" 2> "$OUT/$tag.err"
      }
      kvsub e-kv-none; rc=$?
      refused_with $rc "$OUT/e-kv-none.json" 1; record e "kvpub port: no token" $? "rc=$rc $(summ "$OUT/e-kv-none.json")"
      kvsub e-kv-other --auth-token "$(token "interop/e-other" read)"; rc=$?
      refused_with $rc "$OUT/e-kv-other.json" 1; record e "kvpub port: other ns token" $? "rc=$rc $(summ "$OUT/e-kv-other.json")"
      kvsub e-kv --auth-token "$(token "$kv_ns" read ,)"
      record e "kvpub port: token (fp16 sub, int8 fetch)" $? "$(summ "$OUT/e-kv.json")"
    fi
    kill -TERM "$PUB_PID" 2>/dev/null; wait "$PUB_PID" 2>/dev/null
  fi
fi

fails=$(grep -c '^FAIL' "$RESULTS")
echo "run_interop: $(grep -c '^PASS' "$RESULTS") passed, $fails failed, $(grep -c '^SKIP' "$RESULTS") skipped; details in $OUT"
[[ $fails == 0 ]]
