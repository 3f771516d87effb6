#!/usr/bin/env python3
"""Checks the numpy ac decoder (ac_decoder.py) against kvcast's C++ one.

  ac_decoder_test.py --vectors DIR [--xml PATH]

DIR is written by `transport/kvcache/ac/ac_vectors --out DIR`: cases.json
lists {"name", "track", "layers", "heads", "head_dim", "tokens", "dir"};
DIR/<dir>/object_<t>.bin is the payload of object t of one group and
DIR/<dir>/decoded.f32 the C++ decoder's output (tokens x values float32 LE).

Per case:
  decode    ac_decoder.decode_group reproduces decoded.f32 bit-exactly
            (uint32 patterns equal; where the C++ value is NaN the numpy
            value is NaN, any payload)
  refusals  decode_group raises ValueError, for the reason the check names
            (its message matches), when object k = 1 (0 for a one-token
            group) loses its last byte or gains a trailing byte, when
            object 0's version byte changes, when the receiving model's
            shape differs from the header's, and per rule of the document
            that says "a decoder refuses": one object more than T, T one
            more than the objects, a shift of 16 or a lane state of 0xffff
            in object k, unit 0's raw table with 0 or 257 frequencies or
            with f_0 + 1 (sum 4097), its delta table with 257, an escape
            varint of 2^26 + 1, one of 2^26 (|q| > 2^24), and a unit's
            delta table dropped while its delta channels are used
  accepts   decode_group still reproduces decoded.f32 when every varint
            (table sizes and frequencies, W, escapes) is rewritten in 5
            bytes (non-minimal), and when a raw table gains a trailing
            frequency 0

The damaged and re-encoded objects are built by walking the byte layout of
the document here, not with ac_decoder. Checks that need content a case
lacks (an escape, a used delta table, a raw table under 256 symbols) are
left out for that case; each must run for some case, else that is a failure.

Prints one line per case and exits non-zero on any failure; --xml writes a
JUnit report (one <testcase> per case and per check).
"""

import argparse
import json
import os
import re
import struct
import sys
import time
import traceback

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(_HERE, "..", "e2e_python"))  # harness.py: the JUnit writer
from ac_decoder import decode_group  # noqa: E402
from harness import write_xml  # noqa: E402

SUITE = "ac_decoder"
LANES = 16
ESCAPE_LIMIT = 1 << 26


def compare(got: np.ndarray, want: np.ndarray) -> str:
    """'' when got equals want bit for bit (NaN matching any NaN), else why not."""
    if got.dtype != np.float32 or got.shape != want.shape:
        return f"got {got.dtype} {got.shape}, want float32 {want.shape}"
    want_nan = np.isnan(want)
    bad = (np.isnan(got) != want_nan) | (~want_nan & (got.view(np.uint32) != want.view(np.uint32)))
    if not bad.any():
        return ""
    t, i = np.argwhere(bad)[0]
    return (f"{int(bad.sum())} of {bad.size} values differ; first at token {t} value {i}: "
            f"got {float(got[t, i])!r} (0x{got.view(np.uint32)[t, i]:08x}), "
            f"want {float(want[t, i])!r} (0x{want.view(np.uint32)[t, i]:08x})")


# The byte layout of "The ac tracks", walked independently of ac_decoder.


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """(value, end) of the LEB128 varint at pos."""
    value = 0
    for i in range(5):
        byte = data[pos + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value, pos + i + 1
    raise AssertionError(f"vector has a varint longer than 5 bytes at byte {pos}")


def varint(value: int, width: int = 1) -> bytes:
    """LEB128 of value in at least width bytes (non-minimal when wider)."""
    groups = []
    while value or len(groups) < width:
        groups.append(value & 0x7F)
        value >>= 7
    return bytes(g | 0x80 for g in groups[:-1]) + bytes(groups[-1:])


def splice(data: bytes, edits) -> bytes:
    """data with each (start, end, replacement) applied; spans do not overlap."""
    for start, end, new in sorted(edits, reverse=True):
        data = data[:start] + new + data[end:]
    return data


class Table:
    """A frequency table's varint spans: size and each frequency."""

    def __init__(self, data: bytes, pos: int):
        self.start = pos
        self.size, pos = read_varint(data, pos)
        self.size_span = (self.start, pos)
        self.freqs, self.freq_spans = [], []
        for _ in range(self.size):
            f, end = read_varint(data, pos)
            self.freqs.append(f)
            self.freq_spans.append((pos, end))
            pos = end
        self.end = pos


class Header:
    """Object 0's group header: T, the shape, per unit its mode bits and tables."""

    def __init__(self, data: bytes):
        self.tokens, layers, heads, head_dim = struct.unpack_from("<4H", data, 2)
        self.units = 2 * layers * heads
        self.delta_bits, self.raw, self.delta = [], [], []
        pos = 10
        if data[0] == 2 and data[1] == 2:  # transform 2: the K channel weights
            pos += layers * heads * head_dim
        for _ in range(self.units):
            pos += 4  # step_u
            self.delta_bits.append(data[pos:pos + head_dim // 8])
            self.raw.append(Table(data, pos + head_dim // 8))
            self.delta.append(Table(data, self.raw[-1].end))
            pos = self.delta[-1].end
        self.end = pos


class Section:
    """A token section's fields: shifts, lane states, W and escape spans."""

    def __init__(self, data: bytes, start: int, units: int):
        self.shifts_at = start
        self.shifts = data[start:start + units]
        self.states_at = start + units
        self.words, words_at = read_varint(data, self.states_at + 4 * LANES)
        self.w_span = (self.states_at + 4 * LANES, words_at)
        pos = words_at + 2 * self.words
        self.escape_spans = []
        while pos < len(data):
            end = read_varint(data, pos)[1]
            self.escape_spans.append((pos, end))
            pos = end


def sections(objects: list[bytes], header: Header) -> list[Section]:
    return [Section(payload, header.end if t == 0 else 0, header.units)
            for t, payload in enumerate(objects)]


# Checks that need content some cases lack: each must run for some case.
CONTENT_CHECKS = (
    "an escape varint of 2^26 + 1",
    "an escape of 2^26 (|q| > 2^24)",
    "a used delta table dropped",
    "a raw table with a trailing frequency 0",
)


def refusals(objects: list[bytes], shape: tuple[int, int, int]):
    """(check name, objects, shape, message regex or None) that decode_group must refuse."""
    layers, heads, head_dim = shape
    k = 1 if len(objects) > 1 else 0
    header = Header(objects[0])
    secs = sections(objects, header)
    sec = secs[k]

    def with_object(i, payload):
        return objects[:i] + [payload] + objects[i + 1:]

    def edit(i, start, end, new):
        return with_object(i, splice(objects[i], [(start, end, new)]))

    raw, delta = header.raw[0], header.delta[0]
    checks = [
        (f"object {k} truncated by one byte", with_object(k, objects[k][:-1]), shape, None),
        (f"object {k} with a trailing byte", with_object(k, objects[k] + b"\x00"), shape, None),
        ("object 0 with another version", edit(0, 0, 1, bytes([objects[0][0] ^ 0xFF])),
         shape, "version"),
        ("another model shape", objects, (layers + 1, heads, head_dim), "shape"),
        ("one object more than T (object id T)", objects + objects[-1:], shape, "T = "),
        ("T one more than the objects",
         edit(0, 2, 4, struct.pack("<H", header.tokens + 1)), shape, "T = "),
        (f"a shift of 16 in object {k}", edit(k, sec.shifts_at, sec.shifts_at + 1, b"\x10"),
         shape, "shift 16"),
        (f"a lane state of 0xffff in object {k}",
         edit(k, sec.states_at, sec.states_at + 4, struct.pack("<I", 0xFFFF)),
         shape, r"below 2\^16"),
        ("a raw table of 0 frequencies", edit(0, *raw.size_span, varint(0)),
         shape, "raw table has 0 frequencies"),
        ("a raw table of 257 frequencies", edit(0, *raw.size_span, varint(257)),
         shape, "raw table has 257 frequencies"),
        ("a delta table of 257 frequencies", edit(0, *delta.size_span, varint(257)),
         shape, "delta table has 257 frequencies"),
        ("raw frequencies summing to 4097", edit(0, *raw.freq_spans[0], varint(raw.freqs[0] + 1)),
         shape, "sum to 4097"),
    ]

    escaped = next((t for t, section in enumerate(secs) if section.escape_spans), None)
    if escaped is not None:
        span = secs[escaped].escape_spans[0]
        checks += [
            (CONTENT_CHECKS[0], edit(escaped, *span, varint(ESCAPE_LIMIT + 1)),
             shape, r"above 2\^26"),
            (CONTENT_CHECKS[1], edit(escaped, *span, varint(ESCAPE_LIMIT)),
             shape, r"\|q\| above 2\^24"),
        ]

    # A unit whose delta table some token uses: continued (same shift as the
    # token before) with a delta channel.
    used = next((u for u in range(header.units)
                 if header.delta[u].size and any(header.delta_bits[u])
                 and any(secs[t].shifts[u] == secs[t - 1].shifts[u] for t in range(1, len(secs)))),
                None)
    if used is not None:
        table = header.delta[used]
        checks.append((CONTENT_CHECKS[2], edit(0, table.start, table.end, varint(0)),
                       shape, "no delta table"))
    return checks


def acceptances(objects: list[bytes]):
    """(check name, objects) that decode_group must decode as the originals."""
    header = Header(objects[0])
    secs = sections(objects, header)

    def padded(spans, data):
        return [(start, end, varint(read_varint(data, start)[0], width=5)) for start, end in spans]

    tables = header.raw + header.delta
    header_spans = [span for table in tables for span in [table.size_span] + table.freq_spans]
    padded_objects = [
        splice(payload, padded([sec.w_span] + sec.escape_spans, payload)
               + (padded(header_spans, payload) if t == 0 else []))
        for t, (payload, sec) in enumerate(zip(objects, secs))
    ]
    checks = [("every varint in 5 bytes (non-minimal)", padded_objects)]

    short = next((table for table in header.raw if table.size < 256), None)
    if short is not None:
        grown = splice(objects[0], [(*short.size_span, varint(short.size + 1)),
                                    (short.end, short.end, varint(0))])
        checks.append((CONTENT_CHECKS[3], [grown] + objects[1:]))
    return checks


def run_case(vectors: str, case: dict, results: list) -> bool:
    """Runs one case's checks, appends (name, seconds, error) to results."""
    shape = (case["layers"], case["heads"], case["head_dim"])
    tokens = case["tokens"]
    case_dir = os.path.join(vectors, case["dir"])
    objects = []
    for t in range(tokens):
        with open(os.path.join(case_dir, f"object_{t}.bin"), "rb") as f:
            objects.append(f.read())
    values = 2 * shape[0] * shape[1] * shape[2]
    want = np.fromfile(os.path.join(case_dir, "decoded.f32"), dtype="<f4")

    name = case["name"]
    start = time.monotonic()
    try:
        if want.size != tokens * values:
            raise AssertionError(f"decoded.f32 has {want.size} values, want {tokens} x {values}")
        err = compare(decode_group(objects, *shape), want.reshape(tokens, values))
    except Exception:  # a refusal or a crash of a valid group is a failure too
        err = traceback.format_exc()
    secs = time.monotonic() - start
    results.append((name, secs, err))
    per_token = sum(map(len, objects)) / tokens
    fp16 = 2 * values
    print(f"{'OK  ' if not err else 'FAIL'} {name:34} {case['track']:6} T={tokens:<4} "
          f"{per_token:8.1f} B/token vs fp16 {fp16} ({per_token / fp16:.3f}x)  {secs:.3f}s")
    if err:
        print("     " + err.strip().replace("\n", "\n     "))

    ok = not err
    for check, bad_objects, bad_shape, expect in refusals(objects, shape):
        start = time.monotonic()
        why = ""
        try:
            decode_group(bad_objects, *bad_shape)
            err = "decoded without a ValueError"
        except ValueError as e:
            why = str(e)
            err = "" if expect is None or re.search(expect, why) else (
                f"refused for another reason than /{expect}/: {why}")
        except Exception:
            err = traceback.format_exc()
        results.append((f"{name}: refuses {check}", time.monotonic() - start, err))
        print(f"{'OK  ' if not err else 'FAIL'}   refuses {check}: " + (why if not err else err.strip()))
        ok = ok and not err

    for check, good_objects in acceptances(objects):
        start = time.monotonic()
        try:
            err = compare(decode_group(good_objects, *shape), want.reshape(tokens, values))
        except Exception:
            err = traceback.format_exc()
        results.append((f"{name}: accepts {check}", time.monotonic() - start, err))
        print(f"{'OK  ' if not err else 'FAIL'}   accepts {check}" + (": " + err.strip() if err else ""))
        ok = ok and not err
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vectors", required=True, help="directory written by ac_vectors --out")
    parser.add_argument("--xml", help="write a JUnit report here")
    args = parser.parse_args()

    with open(os.path.join(args.vectors, "cases.json")) as f:
        cases = json.load(f)
    results = []
    ok = bool(cases)
    if not cases:
        results.append(("cases.json", 0.0, "cases.json lists no cases"))
    for case in cases:
        ok = run_case(args.vectors, case, results) and ok
    for check in CONTENT_CHECKS:
        if not any(name.endswith(check) for name, _, _ in results):
            results.append((f"coverage: {check}", 0.0, "no case has the content this check needs"))
            print(f"FAIL coverage: no case could run '{check}'")
            ok = False
    if args.xml:
        write_xml(args.xml, SUITE, results)
    failures = sum(1 for r in results if r[2])
    print(f"{len(results) - failures} of {len(results)} checks passed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
