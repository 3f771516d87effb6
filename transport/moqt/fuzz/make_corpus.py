#!/usr/bin/env python3
"""Writes the seed corpus for codec_fuzzer into corpus/ next to this script.

Every seed is a valid draft-14 message, stream or datagram, written from the
wire formats in draft-ietf-moq-transport-14 (independently of the codec
under test), prefixed with the fuzzer's mode byte and split seed (see
codec_fuzzer.cc). build_and_run.sh reports seeds the codec rejects.

    python3 transport/moqt/fuzz/make_corpus.py
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def varint(v):
    if v < 1 << 6:
        return bytes([v])
    if v < 1 << 14:
        return (v | 0x4000).to_bytes(2, "big")
    if v < 1 << 30:
        return (v | 0x80000000).to_bytes(4, "big")
    assert v < 1 << 62
    return (v | 0xC000000000000000).to_bytes(8, "big")


def blob(b):  # x (b): length-prefixed bytes; also Reason Phrase
    if isinstance(b, str):
        b = b.encode()
    return varint(len(b)) + b


def tup(*elems):  # Track Namespace (tuple)
    return varint(len(elems)) + b"".join(blob(e) for e in elems)


def kvp(t, v):  # Key-Value-Pair: even type -> varint, odd -> length + bytes
    if t % 2 == 0:
        return varint(t) + varint(v)
    return varint(t) + blob(v)


def params(*pairs):
    return varint(len(pairs)) + b"".join(kvp(t, v) for t, v in pairs)


def loc(g, o):
    return varint(g) + varint(o)


def u8(v):
    return bytes([v])


def msg(t, payload):  # Type (i), Length (16), payload
    assert len(payload) < 65536
    return varint(t) + len(payload).to_bytes(2, "big") + payload


VERSION = 0xFF00000E
NS = ("kvcast", "prefill-0")
NAME = b"kv/layer0"
FULL = tup(*NS) + blob(NAME)

# (name, type, payload)
CONTROL = [
    ("client_setup", 0x20, varint(1) + varint(VERSION) + params((0x01, "/moq"), (0x02, 100))),
    ("server_setup", 0x21, varint(VERSION) + params((0x02, 100), (0x07, "kvcast"))),
    ("goaway", 0x10, blob("moqt://relay.example/next")),
    ("max_request_id", 0x15, varint(42)),
    ("requests_blocked", 0x1A, varint(42)),
    ("subscribe_abs_start", 0x03,
     varint(2) + FULL + u8(0x80) + u8(1) + u8(1) + varint(0x3) + loc(5, 0) + params((0x02, 1000))),
    ("subscribe_abs_range", 0x03,
     varint(4) + FULL + u8(0x10) + u8(2) + u8(0) + varint(0x4) + loc(5, 1) + varint(9) + params()),
    ("subscribe_largest", 0x03,
     varint(6) + FULL + u8(0x80) + u8(0) + u8(1) + varint(0x2) + params((0x21, b"\x00\x01"))),
    ("subscribe_ok_content", 0x04,
     varint(2) + varint(7) + varint(0) + u8(1) + u8(1) + loc(10, 3) + params((0x04, 5000))),
    ("subscribe_ok_empty", 0x04, varint(2) + varint(7) + varint(30000) + u8(2) + u8(0) + params()),
    ("subscribe_error", 0x05, varint(2) + varint(0x4) + blob("no such track")),
    ("subscribe_update", 0x02,
     varint(8) + varint(2) + loc(5, 0) + varint(0) + u8(0x40) + u8(1) + params((0x02, 250))),
    ("unsubscribe", 0x0A, varint(2)),
    ("publish_done", 0x0B, varint(2) + varint(0x2) + varint(3) + blob("track ended")),
    ("publish", 0x1D,
     varint(10) + FULL + varint(9) + u8(1) + u8(1) + loc(1, 1) + u8(1) + params()),
    ("publish_no_content", 0x1D,
     varint(12) + FULL + varint(11) + u8(2) + u8(0) + u8(0) + params((0x02, 100))),
    ("publish_ok", 0x1E, varint(10) + u8(1) + u8(0x80) + u8(1) + varint(0x1) + params()),
    ("publish_ok_range", 0x1E,
     varint(10) + u8(1) + u8(0x80) + u8(2) + varint(0x4) + loc(2, 0) + varint(4) + params()),
    ("publish_error", 0x1F, varint(10) + varint(0x1) + blob("denied")),
    ("fetch_standalone", 0x16,
     varint(14) + u8(0x80) + u8(0) + varint(1) + FULL + loc(0, 0) + loc(4, 0) + params()),
    ("fetch_relative_joining", 0x16,
     varint(16) + u8(0x80) + u8(1) + varint(2) + varint(2) + varint(1) + params()),
    ("fetch_absolute_joining", 0x16,
     varint(18) + u8(0x80) + u8(2) + varint(3) + varint(2) + varint(3) + params()),
    ("fetch_ok", 0x18, varint(14) + u8(1) + u8(0) + loc(4, 7) + params()),
    ("fetch_error", 0x19, varint(14) + varint(0x6) + blob("no objects")),
    ("fetch_cancel", 0x17, varint(14)),
    ("track_status", 0x0D,
     varint(20) + FULL + u8(0x80) + u8(0) + u8(1) + varint(0x2) + params()),
    ("track_status_ok", 0x0E,
     varint(20) + varint(0) + varint(0) + u8(1) + u8(1) + loc(3, 2) + params()),
    ("track_status_error", 0x0F, varint(20) + varint(0x4) + blob("")),
    ("publish_namespace", 0x06, varint(22) + tup("kvcast") + params()),
    ("publish_namespace_ok", 0x07, varint(22)),
    ("publish_namespace_error", 0x08, varint(22) + varint(0x1) + blob("unauthorized")),
    ("publish_namespace_done", 0x09, tup("kvcast")),
    ("publish_namespace_cancel", 0x0C, tup("kvcast", "a") + varint(0x0) + blob("bye")),
    ("subscribe_namespace", 0x11, varint(24) + tup("kvcast") + params()),
    ("subscribe_namespace_ok", 0x12, varint(24)),
    ("subscribe_namespace_error", 0x13, varint(24) + varint(0x3) + blob("not supported")),
    ("unsubscribe_namespace", 0x14, tup("kvcast")),
    # AUTHORIZATION TOKEN (0x03): USE_VALUE, token type 0, a kvt1-like value.
    ("subscribe_auth_token", 0x03,
     varint(26) + FULL + u8(0x80) + u8(0) + u8(1) + varint(0x2)
     + params((0x03, b"\x03\x00kvt1" + bytes(45)))),
]

# Type list of codec_fuzzer.cc's framed mode (the index is the selector).
FRAMED_TYPES = [0x20, 0x21, 0x10, 0x15, 0x1A, 0x03, 0x04, 0x05, 0x02, 0x0A, 0x0B, 0x1D, 0x1E,
                0x1F, 0x16, 0x18, 0x19, 0x17, 0x0D, 0x0E, 0x0F, 0x06, 0x07, 0x08, 0x09, 0x0C,
                0x11, 0x12, 0x13, 0x14]


def subgroup_stream(stype, alias, group, subgroup, prio, objects, ext_present):
    out = varint(stype) + varint(alias) + varint(group)
    if subgroup is not None:
        out += varint(subgroup)
    out += u8(prio)
    for delta, ext, payload, status in objects:
        out += varint(delta)
        if ext_present:
            out += blob(ext)
        out += varint(len(payload))
        if not payload:
            out += varint(status)
        out += payload
    return out


EXT = kvp(0x3C, 7) + kvp(0x3D, b"xy")  # unknown even + odd extension headers

DATA = [
    ("subgroup_0x14_explicit", subgroup_stream(
        0x14, 2, 5, 0, 0x80, [(0, b"", b"abcd", 0), (0, b"", b"", 0x3)], False)),
    ("subgroup_0x10_zero", subgroup_stream(
        0x10, 1, 0, None, 0, [(0, b"", b"x" * 40, 0), (2, b"", b"", 0x0)], False)),
    ("subgroup_0x11_zero_ext", subgroup_stream(
        0x11, 1, 0, None, 0, [(0, EXT, b"xyz", 0), (1, b"", b"hi", 0)], True)),
    ("subgroup_0x1a_first_object", subgroup_stream(
        0x1A, 3, 1, None, 1, [(5, b"", b"a", 0), (0, b"", b"b", 0)], False)),
    ("subgroup_0x1d_explicit_ext_eog", subgroup_stream(
        0x1D, 4, 9, 2, 0xFF, [(0, b"", b"p" * 100, 0), (0, EXT, b"", 0x4)], True)),
    ("fetch", varint(0x05) + varint(14)
     + varint(0) + varint(0) + varint(0) + u8(0x80) + varint(0) + varint(3) + b"kv!"
     + varint(0) + varint(0) + varint(1) + u8(0x80) + blob(EXT) + varint(2) + b"ok"
     + varint(1) + varint(1) + varint(0) + u8(0x80) + varint(0) + varint(0) + varint(0x4)),
]

DATAGRAMS = [
    ("dgram_0x00", varint(0x00) + varint(2) + varint(5) + varint(1) + u8(0x80) + b"hello"),
    ("dgram_0x01_ext", varint(0x01) + varint(2) + varint(5) + varint(2) + u8(0x80) + blob(EXT)
     + b"payload"),
    ("dgram_0x02_eog", varint(0x02) + varint(2) + varint(5) + varint(3) + u8(0x80) + b"last"),
    ("dgram_0x04_no_object_id", varint(0x04) + varint(2) + varint(6) + u8(0x10) + b"zero"),
    ("dgram_0x07_eog_ext_no_id", varint(0x07) + varint(2) + varint(7) + u8(0x10) + blob(EXT)
     + b"z"),
    ("dgram_0x20_status", varint(0x20) + varint(2) + varint(5) + varint(4) + u8(0x80)
     + varint(0x1)),
    ("dgram_0x21_status_ext", varint(0x21) + varint(2) + varint(5) + varint(4) + u8(0x80)
     + blob(EXT) + varint(0x3)),
]


def main():
    out_dir = os.path.join(HERE, "corpus")
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):
        os.remove(os.path.join(out_dir, f))
    files = {}
    # Mode 0: control stream, one message per seed, split seeds 0 and 7.
    for i, (name, t, payload) in enumerate(CONTROL):
        files["ctrl_" + name] = bytes([0x00, 0x00 if i % 2 else 0x07]) + msg(t, payload)
    # A whole session's worth of messages in one stream, one byte per call.
    session = b"".join(msg(t, p) for _, t, p in CONTROL)
    files["ctrl_all_messages_bytewise"] = bytes([0x00, 0x01]) + session
    # Mode 3: framed records [selector][length][payload] (payload < 255).
    for name, t, payload in CONTROL:
        if len(payload) < 255:
            files["framed_" + name] = bytes([0x03, 0x00, FRAMED_TYPES.index(t), len(payload)]) \
                + payload
    # Mode 1: data streams with FIN (flag bit 0 -> byte 0 = 0x01 | 1 << 2).
    for name, stream in DATA:
        files["data_" + name] = bytes([0x05, 0x09]) + stream
    # Mode 2: datagrams.
    for name, dgram in DATAGRAMS:
        files[name] = bytes([0x02]) + dgram
    for name, content in sorted(files.items()):
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(content)
    print("wrote %d seeds to %s" % (len(files), out_dir))


if __name__ == "__main__":
    sys.exit(main())
