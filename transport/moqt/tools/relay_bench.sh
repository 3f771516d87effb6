#!/usr/bin/env bash
# Relay throughput on loopback, one run: a 64 MiB track (32 groups x 64
# objects x 32 KiB) from a kvcast-moqt publisher through kvcast-relay to
#   1. a live subscriber (objects cross publisher -> relay -> subscriber),
#   2. a second subscriber after the track ended (served from the cache),
#   3. a FETCH of the whole track (served from the cache),
# each verifying every byte. Prints one line per case, the ratios, and the
# relay's peak RSS. RELAY_BIN (another kvcast-relay, for an A/B run) and
# RELAY_FLAGS (extra relay flags) are optional. JSON=FILE also writes the
# numbers as a result file (tools/report/results.py: date, CPU, command,
# commit).
#   bazel build //services/relay:kvcast-relay //transport/moqt:kvcast-moqt //tools/devcert:kvcast-devcert
#   transport/moqt/tools/relay_bench.sh [GROUPS OBJECTS SIZE]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
BIN=$ROOT/bazel-bin
G=${1:-32} N=${2:-64} S=${3:-32768}
TMP=$(mktemp -d)
PORT=$((20000 + RANDOM % 20000))
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT
"$BIN/tools/devcert/kvcast-devcert" --out "$TMP/certs" >/dev/null
"${RELAY_BIN:-$BIN/services/relay/kvcast-relay}" --listen "127.0.0.1:$PORT" --cert "$TMP/certs/server.pem" \
  --key "$TMP/certs/server-key.pem" --auth_key_file "$TMP/certs/moqt-auth.key" --cache_mb 512 ${RELAY_FLAGS:-} \
  > "$TMP/relay.log" 2>&1 &
RPID=$!
sleep 0.3
C=(--relay "127.0.0.1:$PORT" --ca "$TMP/certs/ca.pem" --server_name localhost
   --auth_key_file "$TMP/certs/moqt-auth.key"
   --groups "$G" --objects "$N" --size "$S" --seed 3 --timeout_s 120)
"$BIN/transport/moqt/kvcast-moqt" publish "${C[@]}" --linger_ms 60000 > /dev/null 2>&1 &
sleep 0.3
rate() { sed -n 's/.*"mbit_per_s":\([0-9.]*\).*/\1/p'; }
live=$("$BIN/transport/moqt/kvcast-moqt" subscribe "${C[@]}" | rate)
cached=$("$BIN/transport/moqt/kvcast-moqt" subscribe "${C[@]}" | rate)
fetch=$("$BIN/transport/moqt/kvcast-moqt" fetch "${C[@]}" | rate)
echo "relay peak RSS: $(awk '/VmHWM/{printf "%.0f MiB", $2/1024}' /proc/$RPID/status)"
echo "track: $G groups x $N objects x $S bytes = $((G * N * S / 1048576)) MiB"
echo "live subscribe through the relay : $live Mbit/s"
echo "subscribe served from cache      : $cached Mbit/s ($(awk "BEGIN{printf \"%.2f\", $cached/$live}")x live)"
echo "fetch served from cache          : $fetch Mbit/s ($(awk "BEGIN{printf \"%.2f\", $fetch/$live}")x live)"
if [ -n "${JSON:-}" ]; then
  rss_kib=$(awk '/VmHWM/{print $2}' /proc/$RPID/status)
  printf '{"groups": %s, "objects": %s, "size": %s, "live_mbit_per_s": %s, "cached_mbit_per_s": %s, "fetch_mbit_per_s": %s, "relay_peak_rss_kib": %s}\n' \
    "$G" "$N" "$S" "$live" "$cached" "$fetch" "$rss_kib" > "$TMP/run.json"
  python3 "$ROOT/tools/report/collect_results.py" relay_bench "$JSON" "$TMP" "$0 $*"
fi
