#!/usr/bin/env bash
# A multi-megabyte MoQT track crosses a lossy, delayed link complete and
# byte-exact: kvcast-relay and a kvcast-moqt publisher in one network
# namespace, a kvcast-moqt subscriber in the other, 2% loss and 20 ms each
# way (RTT 40 ms) on the veth link between them. Bounded: every process has
# a timeout, and the test fails if the subscriber misses its deadline.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
R=${TEST_SRCDIR:-$HERE/../..}/${TEST_WORKSPACE:-kvcast}
source "$R/tests/netem/netns.sh"
if ! netem_available; then
  source "$R/tests/testing/junit_skip.sh"
  junit_skip moqt_lossy "SKIPPED: $NETEM_UNAVAILABLE_REASON"
fi
TMP=${TEST_TMPDIR:-$(mktemp -d)}
GROUPS_N=8 OBJECTS=32 SIZE=16384 SEED=11   # 8 * 32 * 16 KiB = 4 MiB
LOSS=${KVCAST_NETEM_LOSS:-2} DELAY=${KVCAST_NETEM_DELAY_MS:-20}
netem_setup "kvmoq$$" "$LOSS" "$DELAY"
"$R/tools/devcert/kvcast-devcert" --out "$TMP/certs" --names "$NETEM_ADDR_B" >/dev/null
PORT=4433
NETEM_RUN_TIMEOUT=150 netem_run_b "$R/services/relay/kvcast-relay" \
  --listen "$NETEM_ADDR_B:$PORT" --cert "$TMP/certs/server.pem" \
  --key "$TMP/certs/server-key.pem" --insecure > "$TMP/relay.log" 2>&1 &
sleep 0.5
common=(--relay "$NETEM_ADDR_B:$PORT" --ca "$TMP/certs/ca.pem" --ns kvcast/netem --track t
        --groups $GROUPS_N --objects $OBJECTS --size $SIZE --seed $SEED --timeout_s 120)
NETEM_RUN_TIMEOUT=150 netem_run_b "$R/transport/moqt/kvcast-moqt" publish "${common[@]}" \
  --start subscriber --linger_ms 60000 > "$TMP/pub.json" 2> "$TMP/pub.log" &
sleep 0.5
start=$(date +%s.%N)
NETEM_RUN_TIMEOUT=150 netem_run_a "$R/transport/moqt/kvcast-moqt" subscribe "${common[@]}" \
  > "$TMP/sub.json" 2> "$TMP/sub.log"
rc=$?
end=$(date +%s.%N)
echo "subscriber (exit $rc): $(cat "$TMP/sub.json")"
echo "link: ${LOSS}% loss, ${DELAY} ms each way; $(awk "BEGIN{print $end-$start}") s wall"
if [[ $rc -ne 0 ]]; then
  echo "--- relay log"; tail -20 "$TMP/relay.log"
  echo "--- publisher log"; tail -20 "$TMP/pub.log"; cat "$TMP/pub.json"
  echo "--- subscriber log"; tail -20 "$TMP/sub.log"
  echo "FAIL: the track did not arrive complete and byte-exact"
  exit 1
fi
grep -q '"ok":true' "$TMP/sub.json" && grep -q "\"objects\":$((GROUPS_N * OBJECTS))," "$TMP/sub.json" \
  || { echo "FAIL: summary does not show every object verified"; exit 1; }
echo "PASS"
