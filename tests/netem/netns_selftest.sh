#!/usr/bin/env bash
# Self-test of tests/netem/netns.sh: a 2% loss, 20 ms (each way) link must
# show an RTT >= 40 ms and < 200 ms and a plausible loss rate, a tbf link
# must move TCP at the rate netem_set_rate gives it, and the
# namespaces must be gone afterwards, also when the test shell exits with an
# error or is killed with SIGTERM. Skips when namespaces are not permitted.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/netem/netns.sh
source "$HERE/netns.sh"

if ! netem_available; then
  source "${TEST_SRCDIR:-$HERE/../..}/${TEST_WORKSPACE:-kvcast}/tests/testing/junit_skip.sh"
  junit_skip netns_selftest "SKIPPED: network namespaces unavailable: $NETEM_UNAVAILABLE_REASON"
fi

fail() { echo "FAIL: $*" >&2; exit 1; }
ns_list() { timeout 20 ip netns list | awk '{print $1}' | sort; }
ours_left() { ns_list | grep -E "^$1-(a|b|m)\$" || true; }
PY=$(_netem_python)
[ -n "$PY" ] || fail "python3 not found"

before=$(ns_list)
prefix="kvnt$$"
port=9$((RANDOM % 900 + 100))

# ---- RTT and loss -------------------------------------------------------------
netem_setup "$prefix" 2 20
echo "backend: $NETEM_ACTIVE_BACKEND"
NETEM_RUN_TIMEOUT=60 netem_run_b "$PY" "$HERE/udp_rtt.py" server "$NETEM_ADDR_B" "$port" 30 &
server_pid=$!
result=$(NETEM_RUN_TIMEOUT=60 netem_run_a "$PY" "$HERE/udp_rtt.py" client "$NETEM_ADDR_B" "$port" 400 5)
echo "udp probe: $result"
if command -v ping >/dev/null 2>&1; then
  echo "ping: $(netem_run_a ping -n -q -c 50 -i 0.05 -W 2 "$NETEM_ADDR_B" 2>&1 | tail -2 | tr '\n' ' ')"
fi
"$PY" - "$result" <<'EOF' || fail "RTT/loss out of range"
import json, sys
r = json.loads(sys.argv[1])
if "error" in r:
    sys.exit("probe failed: " + r["error"])
ok = True
def check(cond, what):
    global ok
    print(("ok   " if cond else "FAIL ") + what)
    ok = ok and cond
check(r["min_ms"] >= 40.0, "min RTT %.2f ms >= 40 ms" % r["min_ms"])
check(r["median_ms"] < 200.0, "median RTT %.2f ms < 200 ms" % r["median_ms"])
# 2% each way: ~3.96% of round trips lost; 400 probes.
check(0.005 <= r["loss"] <= 0.15, "round-trip loss %.2f%% within 0.5..15%%" % (100 * r["loss"]))
sys.exit(0 if ok else 1)
EOF
kill "$server_pid" 2>/dev/null || true
wait "$server_pid" 2>/dev/null || true
netem_cleanup
[ -z "$(ours_left "$prefix")" ] || fail "namespaces left after netem_cleanup: $(ours_left "$prefix")"

# ---- tbf: the kernel shapes the rate, and netem_set_rate steps it -----------------
# 4 MB over TCP at 50 Mbit/s takes >= 0.64 s; at 400 Mbit/s well under that.
tcp_seconds() {  # MB: seconds to move MB megabytes from a to b over TCP
  NETEM_RUN_TIMEOUT=60 netem_run_b "$PY" -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); s.settimeout(30)
c, _ = s.accept(); c.settimeout(30)
while c.recv(1 << 16): pass' "$NETEM_ADDR_B" "$port" &
  local server=$!
  sleep 0.5
  NETEM_RUN_TIMEOUT=60 netem_run_a "$PY" -c '
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
buf = bytes(1 << 16); n = int(float(sys.argv[3]) * 1e6) // len(buf); t = time.monotonic()
for _ in range(n): c.sendall(buf)
c.shutdown(socket.SHUT_WR); c.recv(1)
print("%.3f" % (time.monotonic() - t))' "$NETEM_ADDR_B" "$port" "$1"
  wait "$server"
}
if NETEM_BACKEND=tbf netem_setup "${prefix}r" 0 0; then
  netem_set_rate 50
  slow=$(tcp_seconds 4)
  netem_set_rate 400
  fast=$(tcp_seconds 4)
  echo "tbf: 4 MB in $slow s at 50 Mbit/s, $fast s at 400 Mbit/s"
  awk -v s="$slow" 'BEGIN {exit !(s >= 0.6 && s < 3)}' || fail "50 Mbit/s link moved 4 MB in $slow s"
  awk -v s="$slow" -v f="$fast" 'BEGIN {exit !(f * 3 < s)}' || fail "stepping to 400 Mbit/s: $fast s"
  netem_set_rate 0
  netem_cleanup
  [ -z "$(ours_left "${prefix}r")" ] || fail "namespaces left: $(ours_left "${prefix}r")"
else
  echo "note: tbf backend unavailable here ($NETEM_UNAVAILABLE_REASON); not checked"
fi

# ---- the trap cleans up on error exit and on SIGTERM ------------------------------
rc=0
timeout 60 bash -c 'source "$1"; netem_setup "$2" 0 1 >/dev/null 2>&1 || exit 99
  ip netns list | grep -q "^$2-a" || exit 98; exit 3' _ "$HERE/netns.sh" "${prefix}x" || rc=$?
[ "$rc" = 3 ] || fail "child exit status $rc, expected 3 (setup failed if 98/99)"
[ -z "$(ours_left "${prefix}x")" ] || fail "namespaces left after an error exit: $(ours_left "${prefix}x")"

marker=$(mktemp -u "${TEST_TMPDIR:-/tmp}/netem-marker.XXXXXX")
timeout 60 bash -c 'source "$1"; netem_setup "$2" 0 1 >/dev/null 2>&1 || exit 99
  touch "$3"; { while :; do sleep 0.2; done; } 2>/dev/null' _ "$HERE/netns.sh" "${prefix}y" "$marker" &
child=$!
for _ in $(seq 1 200); do [ -e "$marker" ] && break; sleep 0.1; done
[ -e "$marker" ] || fail "child did not finish netem_setup"
kill -TERM "$child"
rc=0
{ wait "$child"; } 2>/dev/null || rc=$?
rm -f "$marker"
[ "$rc" = 143 ] || fail "child exit status $rc after SIGTERM, expected 143"
[ -z "$(ours_left "${prefix}y")" ] || fail "namespaces left after SIGTERM: $(ours_left "${prefix}y")"

after=$(ns_list)
if [ "$before" != "$after" ]; then
  echo "note: namespace list changed (another process?): before [$before] after [$after]"
fi
echo "PASS"
