# shellcheck shell=bash
# Lossy, delayed links between two network namespaces, for tests.
#
# Source this file from a bash test:
#
#   source tests/netem/netns.sh
#   netem_available || { source .../tests/testing/junit_skip.sh; junit_skip NAME "SKIPPED: $NETEM_UNAVAILABLE_REASON"; }
#   netem_setup "kvq$$" 2 20          # 2% loss, 20 ms each way: RTT 40 ms
#   netem_run_b my_server --listen "$NETEM_ADDR_B:4433" &
#   netem_run_a my_client --connect "$NETEM_ADDR_B:4433"
#
# netem_setup PREFIX LOSS_PCT DELAY_MS [X]
#   Creates namespaces PREFIX-a and PREFIX-b joined by a veth link with
#   10.77.X.1/24 (NETEM_ADDR_A, in PREFIX-a) and 10.77.X.2/24 (NETEM_ADDR_B,
#   in PREFIX-b); lo is up in both. Packets leaving either end are dropped
#   with probability LOSS_PCT % and delayed by DELAY_MS ms, so the RTT is
#   2 * DELAY_MS. X (1..254) defaults to a hash of PREFIX. Namespace names
#   are global: use a PREFIX unique to the test run (e.g. with $$). Installs
#   an EXIT trap (keeping an existing one) and INT/TERM traps that remove
#   everything; call it from the test's main shell, not from a subshell.
#   Sets NETEM_NS_A, NETEM_NS_B, NETEM_ADDR_A, NETEM_ADDR_B, NETEM_IF (the
#   link's interface name in both namespaces) and NETEM_ACTIVE_BACKEND.
# netem_run_a CMD... / netem_run_b CMD...
#   Runs CMD in PREFIX-a / PREFIX-b (ip netns exec), bounded by
#   NETEM_RUN_TIMEOUT seconds (default 600).
# netem_cleanup
#   Stops processes left in the namespaces and deletes them (the trap calls
#   it; calling it earlier is fine).
# netem_available
#   Returns 0 only if we are root or have CAP_NET_ADMIN, `ip netns add`
#   works and a backend (below) works; otherwise sets
#   NETEM_UNAVAILABLE_REASON and returns 1.
#
# netem_set_rate MBPS
#   tbf backend only: shapes both directions of the link to MBPS Mbit/s
#   with the kernel's token bucket (sch_tbf: a 50 ms queue, the burst one
#   millisecond's worth); 0 removes the shaping. Call it as often as the
#   test wants the bandwidth to step.
#
# Backends (NETEM_BACKEND=auto|tc|userspace|tbf, default auto):
#   tc         one veth pair with `tc qdisc add dev ... root netem loss L%
#              delay D ms` on both ends. Needs the kernel's sch_netem.
#   userspace  for kernels without sch_netem (CONFIG_NET_SCH_NETEM unset):
#              each side's veth goes to a hidden third namespace PREFIX-m,
#              where a python3 AF_PACKET forwarder drops L% of the frames in
#              each direction and sends the others on after D ms. The two
#              ends still share one Ethernet segment (MTU 1500; GSO and
#              checksum offload are passed through). Forwarding costs a few
#              tens of microseconds per frame: fine for tests, not for
#              throughput measurements. As with netem, a GSO packet (up to
#              64 KiB) is lost or delayed as a whole.
#   tbf        one veth pair and nothing else: no loss, no delay (LOSS_PCT
#              and DELAY_MS must be 0), rate set by netem_set_rate. The
#              kernel shapes at line rate, so this is the backend for
#              throughput measurements (the forwarder tops out far below
#              1 Gbit/s). Needs the kernel's sch_tbf. Never picked by auto.
#   auto       tc if sch_netem works, else userspace.
# NETEM_RATE_FILE (userspace only; set it with NETEM_BACKEND=userspace): a
#   file holding the link's rate in Mbit/s each way, which the forwarder
#   re-reads every 20 ms, so a test can step the bandwidth while it runs
#   (0: unlimited); a 50 ms queue per direction drops what does not fit.
# Both backends add permanent neighbour (ARP) entries for the two addresses,
# so no ARP exchange crosses the lossy link.
#
# The forwarder logs to $TMPDIR/netem-forwarder-PREFIX.log (frame counts
# at exit), deleted by netem_cleanup unless NETEM_KEEP_LOGS=1.
# Every wait is bounded with `timeout`. Needs iproute2 (ip, tc), coreutils
# and, for the userspace backend, python3.

if [ -n "${_NETEM_NETNS_SH_LOADED:-}" ]; then
  return 0
fi
_NETEM_NETNS_SH_LOADED=1

NETEM_NAMESPACES=()       # every namespace netem_setup created (cleanup order)
NETEM_FORWARDER_PIDS=()   # userspace forwarders
_NETEM_LOGS=()            # their logs (kept if NETEM_KEEP_LOGS=1)
_NETEM_TRAP_INSTALLED=""
NETEM_IF=nm0
NETEM_UNAVAILABLE_REASON=""

_netem_log() { echo "[netem] $*" >&2; }

# Bounded ip/tc.
_netem_ip() { timeout 20 ip "$@"; }
_netem_tc_in() { local ns=$1; shift; timeout 20 ip netns exec "$ns" tc "$@"; }

_netem_python() {
  if [ -n "${NETEM_PYTHON:-}" ]; then
    echo "$NETEM_PYTHON"
  elif [ -x /usr/bin/python3 ]; then
    echo /usr/bin/python3
  else
    command -v python3 || true
  fi
}

_netem_have_net_admin() {
  [ "$(id -u)" = 0 ] && return 0
  local cap
  cap=$(awk '/^CapEff:/ {print $2}' /proc/self/status 2>/dev/null) || return 1
  [ -n "$cap" ] && (( (16#$cap >> 12) & 1 ))  # CAP_NET_ADMIN = 12
}

# Which backends work here: sets _NETEM_TC_OK and _NETEM_USERSPACE_OK (0/1).
# Returns 1 if namespaces themselves do not work.
_netem_probe() {
  [ -n "${_NETEM_PROBED:-}" ] && return "$_NETEM_PROBED"
  _NETEM_TC_OK=0
  _NETEM_USERSPACE_OK=0
  _NETEM_TBF_OK=0
  local probe="netem-probe-$$-$RANDOM"
  if ! _netem_ip netns add "$probe" >/dev/null 2>&1; then
    NETEM_UNAVAILABLE_REASON="'ip netns add' failed (not permitted here?)"
    _NETEM_PROBED=1
    return 1
  fi
  if ! _netem_ip netns exec "$probe" ip link set lo up >/dev/null 2>&1; then
    NETEM_UNAVAILABLE_REASON="'ip netns exec' failed"
    _netem_ip netns del "$probe" >/dev/null 2>&1 || true
    _NETEM_PROBED=1
    return 1
  fi
  if _netem_tc_in "$probe" qdisc add dev lo root netem delay 1ms >/dev/null 2>&1; then
    _NETEM_TC_OK=1
  fi
  if _netem_tc_in "$probe" qdisc replace dev lo root tbf rate 1mbit burst 16kb latency 50ms \
    >/dev/null 2>&1; then
    _NETEM_TBF_OK=1
  fi
  local py
  py=$(_netem_python)
  if [ -n "$py" ] && timeout 20 ip netns exec "$probe" "$py" -c '
import socket
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.setsockopt(263, 15, 1)  # SOL_PACKET, PACKET_VNET_HDR
s.bind(("lo", 3))
' >/dev/null 2>&1; then
    _NETEM_USERSPACE_OK=1
  fi
  _netem_ip netns del "$probe" >/dev/null 2>&1 || true
  _NETEM_PROBED=0
  return 0
}

# The backend netem_setup will use, or empty.
_netem_pick_backend() {
  case "${NETEM_BACKEND:-auto}" in
    tc) [ "$_NETEM_TC_OK" = 1 ] && echo tc ;;
    userspace) [ "$_NETEM_USERSPACE_OK" = 1 ] && echo userspace ;;
    tbf) [ "$_NETEM_TBF_OK" = 1 ] && echo tbf ;;
    *)
      if [ "$_NETEM_TC_OK" = 1 ]; then
        echo tc
      elif [ "$_NETEM_USERSPACE_OK" = 1 ]; then
        echo userspace
      fi
      ;;
  esac
}

netem_available() {
  NETEM_UNAVAILABLE_REASON=""
  if ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; then
    NETEM_UNAVAILABLE_REASON="iproute2 (ip, tc) not installed"
    return 1
  fi
  if ! command -v timeout >/dev/null 2>&1; then
    NETEM_UNAVAILABLE_REASON="coreutils timeout not installed"
    return 1
  fi
  if ! _netem_have_net_admin; then
    NETEM_UNAVAILABLE_REASON="needs root or CAP_NET_ADMIN"
    return 1
  fi
  _netem_probe || return 1
  if [ -z "$(_netem_pick_backend)" ]; then
    local missing=()
    [ "$_NETEM_TC_OK" = 1 ] || missing+=("tc: the kernel has no sch_netem")
    [ "$_NETEM_USERSPACE_OK" = 1 ] || missing+=("userspace: python3 AF_PACKET unusable")
    [ "$_NETEM_TBF_OK" = 1 ] || missing+=("tbf: the kernel has no sch_tbf")
    NETEM_UNAVAILABLE_REASON="no usable backend for NETEM_BACKEND=${NETEM_BACKEND:-auto} ($(IFS=';'; echo "${missing[*]}"))"
    return 1
  fi
  return 0
}

# shellcheck disable=SC2120  # "$3" below is from `set --`, not an argument
_netem_install_trap() {
  [ -n "$_NETEM_TRAP_INSTALLED" ] && return 0
  _NETEM_TRAP_INSTALLED=1
  local previous=""
  local spec
  spec=$(trap -p EXIT)
  if [ -n "$spec" ]; then
    # spec is: trap -- 'COMMAND' EXIT
    eval "set -- $spec"
    previous=$3
  fi
  if [ -n "$previous" ]; then
    # shellcheck disable=SC2064
    trap "netem_cleanup; $previous" EXIT
  else
    trap netem_cleanup EXIT
  fi
  _netem_signal_traps
}

_netem_signal_traps() {
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# The forwarder of the userspace backend: argv = IF1 IF2 LOSS_PCT DELAY_MS
# READY_FILE PARENT_PID [RATE_FILE]. Frames received on one interface are
# dropped with probability LOSS_PCT/100 or sent out of the other after
# DELAY_MS. With RATE_FILE, each direction is also a link of the rate (in
# Mbit/s) the file holds, re-read every 20 ms (0 or unreadable: unlimited),
# with a 50 ms queue (frames beyond it are dropped, as a router would).
# PACKET_VNET_HDR keeps GSO and checksum-offload metadata with the frame.
_NETEM_FORWARDER_PY='
import collections, os, random, select, signal, socket, sys, time
if1, if2, loss, delay, ready, parent = sys.argv[1:7]
rate_file = sys.argv[7] if len(sys.argv) > 7 else ""
loss = float(loss) / 100.0
delay = float(delay) / 1000.0
parent = int(parent)
QUEUE_S = 0.05
rate_bps, rate_read_at = 0.0, 0.0
def link_rate(now):
    global rate_bps, rate_read_at
    if rate_file and now - rate_read_at > 0.02:
        rate_read_at = now
        try:
            with open(rate_file) as f:
                rate_bps = float(f.read().strip() or 0) * 1e6
        except (OSError, ValueError):
            rate_bps = 0.0
    return rate_bps
ETH_P_ALL, SOL_PACKET, PACKET_VNET_HDR, PACKET_OUTGOING = 3, 263, 15, 4
def open_socket(name):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    s.bind((name, ETH_P_ALL))
    s.setblocking(False)
    return s
stats = collections.Counter()
def on_term(*unused):
    sys.stderr.write("forwarder stats: %s\n" % dict(stats))
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
a, b = open_socket(if1), open_socket(if2)
peer = {a: b, b: a}
queue = {a: collections.deque(), b: collections.deque()}  # frames to send on key
link_free = {a: 0.0, b: 0.0}  # when the shaped link out of key is idle again
rng = random.Random()
with open(ready + ".tmp", "w") as f:
    f.write("%d\n" % os.getpid())
os.rename(ready + ".tmp", ready)
next_parent_check = time.monotonic() + 1.0
while True:
    now = time.monotonic()
    for out, q in queue.items():
        while q and q[0][0] <= now:
            frame = q.popleft()[1]
            try:
                out.send(frame)
                stats["sent"] += 1
            except OSError as e:  # like a full device queue: the frame is lost
                stats["send error %s" % e.errno] += 1
    if now >= next_parent_check:
        next_parent_check = now + 1.0
        try:
            os.kill(parent, 0)
        except ProcessLookupError:
            sys.exit(0)
    timeout = next_parent_check - now
    for q in queue.values():
        if q:
            timeout = min(timeout, q[0][0] - now)
    readable, _, _ = select.select([a, b], [], [], max(0.0, timeout))
    for s in readable:
        for _ in range(256):
            try:
                frame, addr = s.recvfrom(1 << 18)
            except BlockingIOError:
                break
            if addr[2] == PACKET_OUTGOING:
                continue
            stats["received"] += 1
            if loss > 0 and rng.random() < loss:
                stats["dropped"] += 1
                continue
            now = time.monotonic()
            out = peer[s]
            rate = link_rate(now)
            if rate > 0:
                start = max(now, link_free[out])
                if start - now > QUEUE_S:
                    stats["dropped by the shaped queue"] += 1
                    continue
                link_free[out] = start + len(frame) * 8 / rate
                queue[out].append((link_free[out] + delay, frame))
            else:
                queue[out].append((now + delay, frame))
'

netem_setup() {
  if [ $# -lt 3 ] || [ $# -gt 4 ]; then
    _netem_log "usage: netem_setup NAME_PREFIX LOSS_PCT DELAY_MS [X]"
    return 2
  fi
  local prefix=$1 loss=$2 delay=$3 x=${4:-}
  if ! [[ "$prefix" =~ ^[A-Za-z0-9_.-]{1,40}$ ]]; then
    _netem_log "bad NAME_PREFIX '$prefix' (letters, digits, _ . -; at most 40)"
    return 2
  fi
  if ! [[ "$loss" =~ ^[0-9]+(\.[0-9]+)?$ ]] || ! awk -v l="$loss" 'BEGIN {exit !(l <= 100)}'; then
    _netem_log "bad LOSS_PCT '$loss' (0..100)"
    return 2
  fi
  if ! [[ "$delay" =~ ^[0-9]+$ ]]; then
    _netem_log "bad DELAY_MS '$delay' (whole milliseconds)"
    return 2
  fi
  if [ -z "$x" ]; then
    x=$(( $(printf '%s' "$prefix" | cksum | cut -d' ' -f1) % 254 + 1 ))
  elif ! [[ "$x" =~ ^[0-9]+$ ]] || [ "$x" -lt 1 ] || [ "$x" -gt 254 ]; then
    _netem_log "bad X '$x' (1..254)"
    return 2
  fi
  if ! netem_available; then
    _netem_log "unavailable: $NETEM_UNAVAILABLE_REASON"
    return 1
  fi
  local backend
  backend=$(_netem_pick_backend)
  if [ "$backend" = tbf ] && { [ "$loss" != 0 ] || [ "$delay" != 0 ]; }; then
    _netem_log "the tbf backend has no loss or delay: LOSS_PCT and DELAY_MS must be 0"
    return 2
  fi
  local ns_a="$prefix-a" ns_b="$prefix-b" ns_m="$prefix-m"
  local existing
  existing=$(_netem_ip netns list | awk '{print $1}')
  local ns
  for ns in "$ns_a" "$ns_b" "$ns_m"; do
    if grep -qxF "$ns" <<<"$existing"; then
      _netem_log "namespace $ns already exists (prefix clash?); pick another prefix"
      return 1
    fi
  done
  _netem_install_trap

  NETEM_NS_A=$ns_a
  NETEM_NS_B=$ns_b
  NETEM_ADDR_A="10.77.$x.1"
  NETEM_ADDR_B="10.77.$x.2"
  NETEM_ACTIVE_BACKEND=$backend
  export NETEM_NS_A NETEM_NS_B NETEM_ADDR_A NETEM_ADDR_B NETEM_IF NETEM_ACTIVE_BACKEND

  local ifc=$NETEM_IF
  for ns in "$ns_a" "$ns_b"; do
    NETEM_NAMESPACES+=("$ns")
    _netem_ip netns add "$ns" || { _netem_log "ip netns add $ns failed"; return 1; }
    _netem_ip netns exec "$ns" ip link set lo up || return 1
  done
  if [ "$backend" != userspace ]; then
    _netem_ip link add "$ifc" netns "$ns_a" type veth peer name "$ifc" netns "$ns_b" || {
      _netem_log "creating the veth pair failed"
      return 1
    }
  else
    NETEM_NAMESPACES+=("$ns_m")
    _netem_ip netns add "$ns_m" || { _netem_log "ip netns add $ns_m failed"; return 1; }
    if ! _netem_ip link add "$ifc" netns "$ns_a" type veth peer name side-a netns "$ns_m" ||
       ! _netem_ip link add "$ifc" netns "$ns_b" type veth peer name side-b netns "$ns_m"; then
      _netem_log "creating the veth pairs failed"
      return 1
    fi
    local side
    for side in side-a side-b; do
      _netem_ip netns exec "$ns_m" sh -c \
        "echo 1 > /proc/sys/net/ipv6/conf/$side/disable_ipv6" 2>/dev/null || true
      _netem_ip netns exec "$ns_m" ip link set "$side" promisc on up || return 1
    done
    _netem_ip netns exec "$ns_m" ip link set lo up || return 1
  fi
  _netem_ip netns exec "$ns_a" ip addr add "$NETEM_ADDR_A/24" dev "$ifc" || return 1
  _netem_ip netns exec "$ns_b" ip addr add "$NETEM_ADDR_B/24" dev "$ifc" || return 1
  _netem_ip netns exec "$ns_a" ip link set "$ifc" up || return 1
  _netem_ip netns exec "$ns_b" ip link set "$ifc" up || return 1
  # Permanent neighbour entries: no ARP exchange over the lossy, delayed
  # link (a lost ARP packet would stall the first packets for a second, and
  # a burst sent while ARP is pending overflows the neighbour queue).
  local mac_a mac_b
  mac_a=$(_netem_ip netns exec "$ns_a" cat "/sys/class/net/$ifc/address") || return 1
  mac_b=$(_netem_ip netns exec "$ns_b" cat "/sys/class/net/$ifc/address") || return 1
  _netem_ip netns exec "$ns_a" ip neigh replace "$NETEM_ADDR_B" lladdr "$mac_b" dev "$ifc" \
    nud permanent || return 1
  _netem_ip netns exec "$ns_b" ip neigh replace "$NETEM_ADDR_A" lladdr "$mac_a" dev "$ifc" \
    nud permanent || return 1

  if [ "$backend" = tc ]; then
    local netem_args=(limit 100000 delay "${delay}ms")
    if [ "$loss" != 0 ]; then netem_args+=(loss "${loss}%"); fi
    for ns in "$ns_a" "$ns_b"; do
      _netem_tc_in "$ns" qdisc add dev "$ifc" root netem "${netem_args[@]}" || {
        _netem_log "tc qdisc add netem failed in $ns"
        return 1
      }
    done
  elif [ "$backend" = userspace ]; then
    local py ready log
    py=$(_netem_python)
    ready=$(mktemp -u "${TMPDIR:-/tmp}/netem-ready.XXXXXX")
    log="${TMPDIR:-/tmp}/netem-forwarder-$prefix.log"
    _NETEM_LOGS+=("$log")
    # Started from a subshell so that it is not a job of the test's shell (a
    # bare `wait` in the test must not wait for it); it reports its pid in
    # $ready and exits by itself when this shell is gone.
    (ip netns exec "$ns_m" "$py" -c "$_NETEM_FORWARDER_PY" side-a side-b "$loss" "$delay" \
      "$ready" "$$" ${NETEM_RATE_FILE:+"$NETEM_RATE_FILE"} </dev/null >"$log" 2>&1 &)
    local waited=0
    while [ ! -s "$ready" ]; do
      if [ "$waited" -ge 150 ]; then
        _netem_log "the userspace forwarder did not start within 15 s:"
        cat "$log" >&2 || true
        return 1
      fi
      sleep 0.1
      waited=$((waited + 1))
    done
    NETEM_FORWARDER_PIDS+=("$(cat "$ready")")
    rm -f "$ready"
  fi
  _netem_log "$ns_a ($NETEM_ADDR_A) <-> $ns_b ($NETEM_ADDR_B): loss ${loss}%, delay ${delay} ms each way, backend $backend"
  return 0
}

netem_set_rate() {
  local mbps=$1 ns
  if [ "${NETEM_ACTIVE_BACKEND:-}" != tbf ]; then
    _netem_log "netem_set_rate needs the tbf backend (NETEM_BACKEND=tbf)"
    return 2
  fi
  if ! [[ "$mbps" =~ ^[0-9]+$ ]]; then
    _netem_log "bad rate '$mbps' (whole Mbit/s)"
    return 2
  fi
  for ns in "$NETEM_NS_A" "$NETEM_NS_B"; do
    if [ "$mbps" = 0 ]; then
      _netem_tc_in "$ns" qdisc del dev "$NETEM_IF" root >/dev/null 2>&1 || true
    else
      # burst: 1 ms at the rate, at least 64 KiB (one GSO packet)
      local burst=$(( mbps * 125 > 65536 ? mbps * 125 : 65536 ))
      _netem_tc_in "$ns" qdisc replace dev "$NETEM_IF" root tbf rate "${mbps}mbit" \
        burst "$burst" latency 50ms || return 1
    fi
  done
}

netem_run_a() {
  [ -n "${NETEM_NS_A:-}" ] || { _netem_log "netem_setup first"; return 2; }
  timeout --kill-after=5 "${NETEM_RUN_TIMEOUT:-600}" ip netns exec "$NETEM_NS_A" "$@"
}

netem_run_b() {
  [ -n "${NETEM_NS_B:-}" ] || { _netem_log "netem_setup first"; return 2; }
  timeout --kill-after=5 "${NETEM_RUN_TIMEOUT:-600}" ip netns exec "$NETEM_NS_B" "$@"
}

# Waits (bounded) for a pid to exit; SIGKILL after `seconds`.
_netem_stop_pid() {
  local pid=$1 seconds=${2:-5} i=0
  kill -TERM "$pid" 2>/dev/null || return 0
  while kill -0 "$pid" 2>/dev/null && [ "$i" -lt $((seconds * 10)) ]; do
    sleep 0.1
    i=$((i + 1))
  done
  kill -KILL "$pid" 2>/dev/null || true
}

netem_cleanup() {
  local rc=$?
  local pid ns
  # A second SIGTERM (e.g. `timeout` signals the process and then its
  # group) must not cut the cleanup short.
  trap '' INT TERM
  for pid in "${NETEM_FORWARDER_PIDS[@]}"; do
    _netem_stop_pid "$pid" 5
  done
  NETEM_FORWARDER_PIDS=()
  if [ "${NETEM_KEEP_LOGS:-0}" != 1 ]; then
    rm -f "${_NETEM_LOGS[@]}"
  fi
  _NETEM_LOGS=()
  for ns in "${NETEM_NAMESPACES[@]}"; do
    # Processes the test left running inside its namespaces.
    for pid in $(timeout 10 ip netns pids "$ns" 2>/dev/null); do
      _netem_stop_pid "$pid" 3
    done
    timeout 20 ip netns del "$ns" 2>/dev/null || true
  done
  NETEM_NAMESPACES=()
  if [ -n "$_NETEM_TRAP_INSTALLED" ]; then
    _netem_signal_traps
  else
    trap - INT TERM
  fi
  return "$rc"
}
