#!/usr/bin/env python3
"""UDP echo server and RTT probe (iputils-ping is not always installed).

  udp_rtt.py server ADDR PORT [IDLE_EXIT_S]
      echoes datagrams; exits after IDLE_EXIT_S (default 60) idle seconds.
  udp_rtt.py client ADDR PORT [COUNT] [INTERVAL_MS]
      waits (at most 10 s) until the server answers, then sends COUNT
      (default 400) numbered probes INTERVAL_MS (default 5) apart, collects
      replies until 1.5 s after the last one, and prints one JSON line:
      {"sent", "received", "loss", "min_ms", "median_ms", "p90_ms", "max_ms"}.
"""
import json
import select
import socket
import struct
import sys
import time

PROBE = struct.Struct("!4sIQ")  # magic, sequence, send time (ns)
MAGIC = b"RTT1"


def server(addr, port, idle_exit=60.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, port))
    last = time.monotonic()
    while time.monotonic() - last < idle_exit:
        r, _, _ = select.select([s], [], [], 1.0)
        if r:
            data, peer = s.recvfrom(2048)
            s.sendto(data, peer)
            last = time.monotonic()


def client(addr, port, count=400, interval_ms=5.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((addr, port))
    s.setblocking(False)
    # Warm-up: neighbour resolution and the server starting, both of which a
    # lossy link can delay by a second or more.
    deadline = time.monotonic() + 10.0
    while True:
        if time.monotonic() > deadline:
            print(json.dumps({"error": "no answer from the server within 10 s"}))
            return 1
        try:
            s.send(PROBE.pack(MAGIC, 0xFFFFFFFF, 0))
        except OSError:
            pass
        r, _, _ = select.select([s], [], [], 0.3)
        if r:
            try:
                s.recv(2048)
                break
            except OSError:
                pass
    while True:  # drain late warm-up replies
        try:
            s.recv(2048)
        except OSError:
            break

    rtts = {}
    start = time.monotonic()
    sent = 0
    end = None
    while True:
        now = time.monotonic()
        if sent < count and now >= start + sent * interval_ms / 1000.0:
            s.send(PROBE.pack(MAGIC, sent, time.monotonic_ns()))
            sent += 1
            if sent == count:
                end = time.monotonic() + 1.5
            continue
        if end is not None and now >= end:
            break
        next_send = start + sent * interval_ms / 1000.0 if sent < count else end
        r, _, _ = select.select([s], [], [], max(0.0, next_send - now))
        if not r:
            continue
        while True:
            try:
                data = s.recv(2048)
            except OSError:
                break
            received_ns = time.monotonic_ns()
            if len(data) != PROBE.size:
                continue
            magic, seq, sent_ns = PROBE.unpack(data)
            if magic == MAGIC and seq < count and seq not in rtts:
                rtts[seq] = (received_ns - sent_ns) / 1e6
    values = sorted(rtts.values())
    result = {"sent": count, "received": len(values),
              "loss": round(1.0 - len(values) / count, 4)}
    if values:
        result.update({
            "min_ms": round(values[0], 2),
            "median_ms": round(values[len(values) // 2], 2),
            "p90_ms": round(values[int(len(values) * 0.9)], 2),
            "max_ms": round(values[-1], 2),
        })
    print(json.dumps(result))
    return 0


def main(argv):
    if len(argv) >= 4 and argv[1] == "server":
        server(argv[2], int(argv[3]), float(argv[4]) if len(argv) > 4 else 60.0)
        return 0
    if len(argv) >= 4 and argv[1] == "client":
        return client(argv[2], int(argv[3]), int(argv[4]) if len(argv) > 4 else 400,
                      float(argv[5]) if len(argv) > 5 else 5.0)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
