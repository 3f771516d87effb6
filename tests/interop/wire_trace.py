#!/usr/bin/env python3
"""Run an aiomoqt tool or script with every MoQT byte it sends and
receives over raw QUIC dumped in hex (stream and datagram payloads, after
QUIC decryption). Debugging aid for the kvcast relay: it shows exactly what
aiomoqt puts on the wire and what it got back.

    wire_trace.py [--out FILE] -m aiomoqt.tools.moq_interop_client -r ... -t setup-only
    wire_trace.py [--out FILE] tests/interop/aiomoqt_publisher.py --relay ...

Output lines (to FILE, default stderr):
    TX sid=0 ctl CLIENT_SETUP(0x20) len=54 : 20 00 36 ...
    RX sid=3 data len=12 fin=1 : 10 00 ...
    TX dgram len=20 : ...
Bidirectional streams (the draft-14 control stream) are split into whole
control messages (Type (i), Length (16), Payload) and named; unidirectional
streams (subgroup / fetch data) and datagrams are dumped as received chunks.

Relies on aiomoqt 0.13.3 / aiopquic 0.6.1 internals (QuicConnection.
send_stream_data / send_datagram_frame, MOQTSessionQuic._quic_event); the
client and server sides of one process are traced alike.
"""
import os
import runpy
import sys
import threading

_OUT = sys.stderr
_LOCK = threading.Lock()
_MAX_HEX = int(os.environ.get("WIRE_TRACE_MAX_HEX", "256"))

CONTROL_NAMES = {
    0x20: "CLIENT_SETUP", 0x21: "SERVER_SETUP", 0x10: "GOAWAY",
    0x15: "MAX_REQUEST_ID", 0x1A: "REQUESTS_BLOCKED", 0x03: "SUBSCRIBE",
    0x04: "SUBSCRIBE_OK", 0x05: "SUBSCRIBE_ERROR", 0x02: "SUBSCRIBE_UPDATE",
    0x0A: "UNSUBSCRIBE", 0x0B: "PUBLISH_DONE", 0x1D: "PUBLISH",
    0x1E: "PUBLISH_OK", 0x1F: "PUBLISH_ERROR", 0x16: "FETCH",
    0x18: "FETCH_OK", 0x19: "FETCH_ERROR", 0x17: "FETCH_CANCEL",
    0x0D: "TRACK_STATUS", 0x0E: "TRACK_STATUS_OK", 0x0F: "TRACK_STATUS_ERROR",
    0x06: "PUBLISH_NAMESPACE", 0x07: "PUBLISH_NAMESPACE_OK",
    0x08: "PUBLISH_NAMESPACE_ERROR", 0x09: "PUBLISH_NAMESPACE_DONE",
    0x0C: "PUBLISH_NAMESPACE_CANCEL", 0x11: "SUBSCRIBE_NAMESPACE",
    0x12: "SUBSCRIBE_NAMESPACE_OK", 0x13: "SUBSCRIBE_NAMESPACE_ERROR",
    0x14: "UNSUBSCRIBE_NAMESPACE",
}


def _hex(b: bytes) -> str:
    s = b[:_MAX_HEX].hex(" ")
    return s + (f" ...(+{len(b) - _MAX_HEX})" if len(b) > _MAX_HEX else "")


def _varint(b: bytes, pos: int):
    if pos >= len(b):
        return None, pos
    n = 1 << (b[pos] >> 6)
    if pos + n > len(b):
        return None, pos
    v = b[pos] & 0x3F
    for i in range(1, n):
        v = (v << 8) | b[pos + i]
    return v, pos + n


def _emit(line: str) -> None:
    with _LOCK:
        print(line, file=_OUT, flush=True)


_bidi_bufs = {}


def _trace_stream(direction: str, conn_id: int, sid: int, data: bytes,
                  fin: bool) -> None:
    tag = f"{direction} c{conn_id:x} sid={sid}"
    if sid & 0x2:  # unidirectional
        _emit(f"{tag} data len={len(data)} fin={int(fin)} : {_hex(data)}")
        return
    key = (direction, conn_id, sid)
    buf = _bidi_bufs.get(key, b"") + bytes(data)
    while True:
        mtype, p = _varint(buf, 0)
        if mtype is None or p + 2 > len(buf):
            break
        mlen = (buf[p] << 8) | buf[p + 1]
        end = p + 2 + mlen
        if end > len(buf):
            break
        name = CONTROL_NAMES.get(mtype, "?")
        _emit(f"{tag} ctl {name}(0x{mtype:x}) len={mlen} : {_hex(buf[:end])}")
        buf = buf[end:]
    _bidi_bufs[key] = buf
    if fin:
        _emit(f"{tag} ctl FIN (leftover {len(buf)} bytes)")


def install() -> None:
    from aiopquic.quic import connection as qc
    from aiopquic.quic.events import StreamDataReceived, DatagramFrameReceived
    from aiomoqt import protocol as proto

    orig_send = qc.QuicConnection.send_stream_data

    def send_stream_data(self, stream_id, data, end_stream=False):
        _trace_stream("TX", id(self) & 0xFFFF, stream_id, bytes(data or b""),
                      end_stream)
        return orig_send(self, stream_id, data, end_stream)

    qc.QuicConnection.send_stream_data = send_stream_data

    orig_dgram = qc.QuicConnection.send_datagram_frame

    def send_datagram_frame(self, data):
        _emit(f"TX c{id(self) & 0xFFFF:x} dgram len={len(data)} : "
              f"{_hex(bytes(data))}")
        return orig_dgram(self, data)

    qc.QuicConnection.send_datagram_frame = send_datagram_frame

    orig_event = proto.MOQTSessionQuic._quic_event

    def _quic_event(self, event):
        cid = id(getattr(self, "_quic", self)) & 0xFFFF
        if isinstance(event, StreamDataReceived):
            _trace_stream("RX", cid, event.stream_id,
                          bytes(event.data or b""), event.end_stream)
        elif isinstance(event, DatagramFrameReceived):
            _emit(f"RX c{cid:x} dgram len={len(event.data)} : "
                  f"{_hex(bytes(event.data))}")
        else:
            _emit(f"EV c{cid:x} {type(event).__name__} "
                  f"{ {k: v for k, v in vars(event).items() if k != 'data'} }")
        return orig_event(self, event)

    proto.MOQTSessionQuic._quic_event = _quic_event


def main() -> None:
    global _OUT
    argv = sys.argv[1:]
    if argv[:1] == ["--out"] and len(argv) >= 2:
        _OUT = open(argv[1], "w", buffering=1)
        argv = argv[2:]
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        sys.exit(2)
    install()
    if argv[0] == "-m" and len(argv) >= 2:
        sys.argv = [argv[1]] + argv[2:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
