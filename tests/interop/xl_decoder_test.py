#!/usr/bin/env python3
"""Checks the numpy xl decoder (xl_decoder.py) against kvcast's C++ one.

  xl_decoder_test.py --vectors DIR [--xml PATH]

DIR is written by `transport/kvcache/xl/xl_vectors --out DIR`: cases.json
lists {"name", "basis", "basis_id", "layers", "heads", "head_dim",
"group_layers", "tokens", "k_step", "v_step", "sink", "dir"}; DIR/<basis>
is a KVXLBAS1 basis file ("basis_id" the C++ id of it), DIR/<dir>/object_<t>.bin
the payload of object t of one group and DIR/<dir>/decoded.f32 the C++
decoder's output (tokens x values float32 LE).

Per basis:
  id        xl_decoder's FNV-1a 64 of the file equals the C++ id

Per case:
  decode    xl_decoder.decode_group matches decoded.f32 within the
            tolerance |numpy - C++| <= 1e-5 (1 + |C++|) (the document fixes
            the codes but not the order of the float32 sum); the sink token
            (flag bit 0) bit for bit; the header's shape and sink flag are
            the case's. The worst difference is printed as a fraction of
            the tolerance, and beside it the smallest change that any one
            code off by one (+1 or -1, in any token) makes, as a multiple of
            the tolerance: every such change must exceed it, so a decoder
            one code off fails the comparison
  refusals  decode_group (or parse_basis) raises ValueError, for the reason
            the check names (its message matches), when object k = 1 (0
            for a one-token group) loses its last byte or gains a trailing
            byte, when object 0's version byte changes, its flags gain bit 1,
            its basis id changes, s_K is 0 or s_V is NaN, when the group is
            decoded with another case's basis (another shape) or with its
            basis changed in its last byte (so another id), when the basis
            file has another magic or loses or gains a byte, for one object
            more than T and T one more than the objects, a lane state of
            0xffff and an extra word (W + 1) in a coded section, a table of
            257 frequencies, a used table whose first frequency is one more
            (sum 4097) or which the header leaves out (n = 0), an escape
            varint of 2^26 + 1 and one of 2^26 (|q| > 2^24)
  accepts   decode_group still gives the same values when every varint
            (table sizes and frequencies, W, escapes) is rewritten in 5
            bytes (non-minimal), and when a table gains a trailing
            frequency 0

The damaged and re-encoded objects are built by walking the byte layout of
the document here, not with xl_decoder (whose plan and codes serve only to
size the off-by-one change). Checks that need content a case lacks (a coded
token, an escape, a used table, a table under 256 symbols) are left out for
that case; each must run for some case, else that is a failure.

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
# The ac test's byte-layout helpers (varints, splices, a table's spans).
from ac_decoder_test import Table, read_varint, splice, varint  # noqa: E402
from harness import write_xml  # noqa: E402
from xl_decoder import Group, decode_group, parse_basis, reconstruct  # noqa: E402

SUITE = "xl_decoder"
LANES = 16
ESCAPE_LIMIT = 1 << 26
TABLES = 96
RTOL = 1e-5  # |numpy - C++| <= RTOL (1 + |C++|)


def tolerance(want: np.ndarray) -> np.ndarray:
    return RTOL * (1.0 + np.abs(want.astype(np.float64)))


def compare(got: np.ndarray, want: np.ndarray, sink: bool) -> tuple[str, float]:
    """('' or why not, worst |got - want| / tolerance) for a decoded group."""
    if got.dtype != np.float32 or got.shape != want.shape:
        return f"got {got.dtype} {got.shape}, want float32 {want.shape}", float("inf")
    if not np.isfinite(want).all() or not np.isfinite(got).all():
        return "non-finite values (the synthetic KV has none)", float("inf")
    ratio = np.abs(got.astype(np.float64) - want) / tolerance(want)
    worst = float(ratio.max())
    if sink and (got[0].view(np.uint32) != want[0].view(np.uint32)).any():
        i = int(np.argmax(got[0].view(np.uint32) != want[0].view(np.uint32)))
        return (f"sink token differs at value {i}: got {float(got[0, i])!r}, "
                f"want {float(want[0, i])!r} (fp16 values must match bit for bit)"), worst
    if worst > 1:
        t, i = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        return (f"{int((ratio > 1).sum())} of {ratio.size} values beyond the tolerance; worst at "
                f"token {t} value {i}: got {float(got[t, i])!r}, want {float(want[t, i])!r} "
                f"({worst:.3g} x the tolerance)"), worst
    return "", worst


def off_by_one_margin(objects: list[bytes], basis, want: np.ndarray, sink: bool) -> tuple[float, str]:
    """The smallest, over coded tokens t, coefficients j and d = +1 / -1, of
    max over values of |values with code (t, j) + d - want| / tolerance:
    above 1, every single code off by one fails the comparison."""
    group = Group(objects, basis)
    first = 1 if sink else 0
    if group.plan.total == 0 or first >= group.tokens:
        return float("inf"), "no coded coefficient"
    tol = tolerance(want[first:])
    smallest, where = float("inf"), ""
    for j in range(group.plan.total):
        for d in (1, -1):
            codes = group.codes.copy()
            codes[first:, j] += d
            moved = np.abs(reconstruct(group, basis, codes)[first:].astype(np.float64) - want[first:])
            per_token = (moved / tol).max(axis=1)
            t = int(np.argmin(per_token))
            if per_token[t] < smallest:
                smallest, where = float(per_token[t]), f"token {t + first} coefficient {j} {d:+d}"
    return smallest, where


# The byte layout of "The xl tracks", walked independently of xl_decoder.

HEADER_FIXED = 28  # version, flags, T, L H D G, basis id, s_K, s_V
ID_AT, STEPS_AT = 12, 20


class Header:
    """Object 0's group header: T, flags, shape and the 96 tables' spans."""

    def __init__(self, data: bytes):
        self.flags = data[1]
        self.tokens, layers, heads, head_dim, self.group = struct.unpack_from("<5H", data, 2)
        self.shape = (layers, heads, head_dim)
        self.tables = []
        pos = HEADER_FIXED
        for _ in range(TABLES):
            self.tables.append(Table(data, pos))
            pos = self.tables[-1].end
        self.end = pos


class Section:
    """A coded token section's fields: lane states, W, words and escape spans."""

    def __init__(self, data: bytes, start: int):
        self.states_at = start
        self.words, words_at = read_varint(data, start + 4 * LANES)
        self.w_span = (start + 4 * LANES, words_at)
        self.words_end = words_at + 2 * self.words
        pos = self.words_end
        self.escape_spans = []
        while pos < len(data):
            end = read_varint(data, pos)[1]
            self.escape_spans.append((pos, end))
            pos = end


def sections(objects: list[bytes], header: Header) -> list[Section | None]:
    """Each object's coded section; None for the sink token's fp16 values."""
    sink = bool(header.flags & 1)
    return [None if t == 0 and sink else Section(payload, header.end if t == 0 else 0)
            for t, payload in enumerate(objects)]


# Checks that need content some cases lack: each must run for some case.
CONTENT_CHECKS = (
    "a lane state of 0xffff",
    "an extra word (W + 1)",
    "a used table's frequencies summing to 4097",
    "a used table left out (n = 0)",
    "an escape varint of 2^26 + 1",
    "an escape of 2^26 (|q| > 2^24)",
    "a table with a trailing frequency 0",
)


def refusals(objects: list[bytes], basis_bytes: bytes, other_basis: bytes):
    """(check name, objects, basis bytes, message regex or None) that must be refused."""
    k = 1 if len(objects) > 1 else 0
    header = Header(objects[0])
    secs = sections(objects, header)

    def with_object(i, payload):
        return objects[:i] + [payload] + objects[i + 1:]

    def edit(i, start, end, new):
        return with_object(i, splice(objects[i], [(start, end, new)]))

    b = basis_bytes
    checks = [
        (f"object {k} truncated by one byte", with_object(k, objects[k][:-1]), b, None),
        (f"object {k} with a trailing byte", with_object(k, objects[k] + b"\x00"), b, None),
        ("object 0 with another version", edit(0, 0, 1, bytes([objects[0][0] ^ 0xFF])), b, "version"),
        ("flags with bit 1 set", edit(0, 1, 2, bytes([header.flags | 2])), b, "flags"),
        ("another basis id in the header",
         edit(0, ID_AT, ID_AT + 1, bytes([objects[0][ID_AT] ^ 0x01])), b, "basis id"),
        ("s_K = 0", edit(0, STEPS_AT, STEPS_AT + 4, struct.pack("<f", 0.0)), b, "s_K"),
        ("s_V = NaN", edit(0, STEPS_AT + 4, STEPS_AT + 8, struct.pack("<f", float("nan"))), b, "s_V"),
        ("another case's basis (another shape)", objects, other_basis, r"L, H, D, G"),
        ("the basis with its last byte changed (another id)", objects,
         b[:-1] + bytes([b[-1] ^ 0x01]), "basis id"),
        ("a basis file with another magic", objects, b"KVXLBAS2" + b[8:], "magic"),
        ("a basis file one byte short", objects, b[:-1], "size"),
        ("a basis file with a trailing byte", objects, b + b"\x00", "size"),
        ("one object more than T (object id T)", objects + objects[-1:], b, "T = "),
        ("T one more than the objects",
         edit(0, 2, 4, struct.pack("<H", header.tokens + 1)), b, "T = "),
        ("a table of 257 frequencies", edit(0, *header.tables[0].size_span, varint(257)),
         b, "257 frequencies"),
    ]

    coded = next((t for t, sec in enumerate(secs) if sec is not None), None)
    if coded is not None:
        sec = secs[coded]
        words_end = sec.words_end
        checks += [
            (f"{CONTENT_CHECKS[0]} (object {coded})",
             edit(coded, sec.states_at, sec.states_at + 4, struct.pack("<I", 0xFFFF)), b, r"below 2\^16"),
            (f"{CONTENT_CHECKS[1]} (object {coded})",
             with_object(coded, splice(objects[coded], [(*sec.w_span, varint(sec.words + 1)),
                                                        (words_end, words_end, b"\x00\x00")])),
             b, "left unread"),
        ]
        # A table present while some token is coded is used (the encoder
        # writes only the tables of the plan's classes: n = 0 is "unused").
        used = next((table for table in header.tables if table.size), None)
        if used is not None:
            checks += [
                (CONTENT_CHECKS[2], edit(0, *used.freq_spans[0], varint(used.freqs[0] + 1)),
                 b, "sum to 4097"),
                (CONTENT_CHECKS[3], edit(0, used.start, used.end, varint(0)), b, "no table"),
            ]

    escaped = next((t for t, sec in enumerate(secs) if sec is not None and sec.escape_spans), None)
    if escaped is not None:
        span = secs[escaped].escape_spans[0]
        checks += [
            (CONTENT_CHECKS[4], edit(escaped, *span, varint(ESCAPE_LIMIT + 1)), b, r"above 2\^26"),
            (CONTENT_CHECKS[5], edit(escaped, *span, varint(ESCAPE_LIMIT)), b, r"\|q\| above 2\^24"),
        ]
    return checks


def acceptances(objects: list[bytes]):
    """(check name, objects) that decode_group must decode as the originals."""
    header = Header(objects[0])
    secs = sections(objects, header)

    def padded(spans, data):
        return [(start, end, varint(read_varint(data, start)[0], width=5)) for start, end in spans]

    header_spans = [span for table in header.tables for span in [table.size_span] + table.freq_spans]
    padded_objects = []
    for t, (payload, sec) in enumerate(zip(objects, secs)):
        spans = [] if sec is None else [sec.w_span] + sec.escape_spans
        padded_objects.append(splice(payload, padded(spans, payload)
                                     + (padded(header_spans, payload) if t == 0 else [])))
    checks = [("every varint in 5 bytes (non-minimal)", padded_objects)]

    short = next((table for table in header.tables if 0 < table.size < 256), None)
    if short is not None:
        grown = splice(objects[0], [(*short.size_span, varint(short.size + 1)),
                                    (short.end, short.end, varint(0))])
        checks.append((CONTENT_CHECKS[6], [grown] + objects[1:]))
    return checks


def attempt(fn):
    """(error text, ValueError message): fn must raise ValueError."""
    try:
        fn()
        return "decoded without a ValueError", ""
    except ValueError as e:
        return "", str(e)
    except Exception:
        return traceback.format_exc(), ""


def run_case(vectors: str, case: dict, other_basis: bytes, results: list, summary: dict) -> bool:
    """Runs one case's checks, appends (name, seconds, error) to results."""
    tokens = case["tokens"]
    case_dir = os.path.join(vectors, case["dir"])
    objects = []
    for t in range(tokens):
        with open(os.path.join(case_dir, f"object_{t}.bin"), "rb") as f:
            objects.append(f.read())
    with open(os.path.join(vectors, case["basis"]), "rb") as f:
        basis_bytes = f.read()
    values = 2 * case["layers"] * case["heads"] * case["head_dim"]
    want = np.fromfile(os.path.join(case_dir, "decoded.f32"), dtype="<f4")
    sink = bool(case["sink"])

    name = case["name"]
    start = time.monotonic()
    worst, margin, where = float("nan"), float("nan"), ""
    try:
        if want.size != tokens * values:
            raise AssertionError(f"decoded.f32 has {want.size} values, want {tokens} x {values}")
        want = want.reshape(tokens, values)
        basis = parse_basis(basis_bytes)
        header = Header(objects[0])
        err = ""
        if header.shape + (header.group,) != (case["layers"], case["heads"], case["head_dim"],
                                              case["group_layers"]):
            err = f"header L, H, D, G {header.shape + (header.group,)} are not the case's"
        elif bool(header.flags & 1) != sink:
            err = f"header flags 0x{header.flags:02x}, the case's sink is {sink}"
        else:
            err, worst = compare(decode_group(objects, basis), want, sink)
        if not err:
            margin, where = off_by_one_margin(objects, basis, want, sink)
            if not margin > 1:
                err = (f"the tolerance does not tell a code off by one: {where} moves the values "
                       f"by only {margin:.3g} x the tolerance")
    except Exception:  # a refusal or a crash of a valid group is a failure too
        err = traceback.format_exc()
    secs = time.monotonic() - start
    results.append((name, secs, err))
    summary["worst"] = max(summary["worst"], worst) if worst == worst else summary["worst"]
    if margin == margin:
        summary["margin"] = min(summary["margin"], margin)
    per_token = sum(map(len, objects)) / tokens
    fp16 = 2 * values
    print(f"{'OK  ' if not err else 'FAIL'} {name:46} T={tokens:<3} {per_token:7.1f} B/token "
          f"vs fp16 {fp16} ({per_token / fp16:.3f}x)  {secs:.3f}s")
    print(f"       worst |numpy - C++| = {worst:.3g} x the tolerance; a code off by one moves "
          f"a value by >= {margin:.3g} x it ({where})")
    if err:
        print("     " + err.strip().replace("\n", "\n     "))

    ok = not err
    for check, bad_objects, bad_basis, expect in refusals(objects, basis_bytes, other_basis):
        start = time.monotonic()
        err, why = attempt(lambda: decode_group(bad_objects, parse_basis(bad_basis)))
        if not err and expect is not None and not re.search(expect, why):
            err = f"refused for another reason than /{expect}/: {why}"
        results.append((f"{name}: refuses {check}", time.monotonic() - start, err))
        print(f"{'OK  ' if not err else 'FAIL'}   refuses {check}: " + (why if not err else err.strip()))
        ok = ok and not err

    for check, good_objects in acceptances(objects):
        start = time.monotonic()
        try:
            got = decode_group(good_objects, parse_basis(basis_bytes))
            err = compare(got, want, sink)[0]
        except Exception:
            err = traceback.format_exc()
        results.append((f"{name}: accepts {check}", time.monotonic() - start, err))
        print(f"{'OK  ' if not err else 'FAIL'}   accepts {check}" + (": " + err.strip() if err else ""))
        ok = ok and not err
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vectors", required=True, help="directory written by xl_vectors --out")
    parser.add_argument("--xml", help="write a JUnit report here")
    args = parser.parse_args()

    with open(os.path.join(args.vectors, "cases.json")) as f:
        cases = json.load(f)
    results = []
    ok = bool(cases)
    if not cases:
        results.append(("cases.json", 0.0, "cases.json lists no cases"))

    bases = {}
    for case in cases:
        with open(os.path.join(args.vectors, case["basis"]), "rb") as f:
            bases[case["basis"]] = f.read()
        start = time.monotonic()
        try:
            got = parse_basis(bases[case["basis"]]).id
            want = int(case["basis_id"], 16)
            err = "" if got == want else f"FNV-1a 64 0x{got:016x}, the C++ id is 0x{want:016x}"
        except Exception:
            err = traceback.format_exc()
        check = f"basis {case['basis']}: id {case['basis_id']}"
        if not any(r[0] == check for r in results):
            results.append((check, time.monotonic() - start, err))
            print(f"{'OK  ' if not err else 'FAIL'} {check}" + (": " + err.strip() if err else ""))
            ok = ok and not err
    shapes = {name: struct.unpack_from("<4H", data, 8) for name, data in bases.items()}

    summary = {"worst": 0.0, "margin": float("inf")}
    for case in cases:
        # Another case's basis: the first of another shape (L, H, D, G).
        other = next((bases[n] for n in bases if shapes[n] != shapes[case["basis"]]), None)
        if other is None:
            results.append((f"{case['name']}: another basis", 0.0, "the vectors have one basis shape"))
            ok = False
            continue
        ok = run_case(args.vectors, case, other, results, summary) and ok
    for check in CONTENT_CHECKS:
        if not any(check in name for name, _, _ in results):
            results.append((f"coverage: {check}", 0.0, "no case has the content this check needs"))
            print(f"FAIL coverage: no case could run '{check}'")
            ok = False
    print(f"tolerance |numpy - C++| <= {RTOL:g} (1 + |C++|): worst difference {summary['worst']:.3g} "
          f"x the tolerance; the smallest change of a code off by one {summary['margin']:.3g} x it")
    if args.xml:
        write_xml(args.xml, SUITE, results)
    failures = sum(1 for r in results if r[2])
    print(f"{len(results) - failures} of {len(results)} checks passed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
