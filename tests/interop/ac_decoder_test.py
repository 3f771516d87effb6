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
  refusals  decode_group raises ValueError when object 1 (object 0 for a
            one-token group) loses its last byte or gains a trailing byte,
            when object 0's version byte changes, and when the receiving
            model's shape differs from the header's

Prints one line per case and exits non-zero on any failure; --xml writes a
JUnit report (one <testcase> per case and per refusal check).
"""

import argparse
import json
import os
import sys
import time
import traceback
import xml.sax.saxutils

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ac_decoder import decode_group  # noqa: E402

SUITE = "ac_decoder"


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


def refusals(objects: list[bytes], shape: tuple[int, int, int]):
    """(check name, objects, shape) that decode_group must refuse."""
    layers, heads, head_dim = shape
    k = 1 if len(objects) > 1 else 0

    def with_object(i, payload):
        return objects[:i] + [payload] + objects[i + 1:]

    bad_version = bytes([objects[0][0] ^ 0xFF]) + objects[0][1:]
    return [
        (f"object {k} truncated by one byte", with_object(k, objects[k][:-1]), shape),
        (f"object {k} with a trailing byte", with_object(k, objects[k] + b"\x00"), shape),
        ("object 0 with another version", with_object(0, bad_version), shape),
        ("another model shape", objects, (layers + 1, heads, head_dim)),
    ]


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
    for check, bad_objects, bad_shape in refusals(objects, shape):
        start = time.monotonic()
        try:
            decode_group(bad_objects, *bad_shape)
            err = "decoded without a ValueError"
        except ValueError as e:
            err, why = "", str(e)
        except Exception:
            err = traceback.format_exc()
        results.append((f"{name}: refuses {check}", time.monotonic() - start, err))
        print(f"{'OK  ' if not err else 'FAIL'}   refuses {check}: " + (why if not err else err.strip()))
        ok = ok and not err
    return ok


def write_xml(path, suite, results):
    """The JUnit shape of tests/e2e_python/harness.py's write_xml."""
    def attr(s):
        return xml.sax.saxutils.escape(s, {'"': "&quot;"})

    entries = []
    for name, secs, err in results:
        entry = f'<testcase classname="{suite}" name="{attr(name)}" time="{secs:.3f}">'
        if err:
            last = err.strip().splitlines()[-1][:300]
            entry += f'<failure message="{attr(last)}">{xml.sax.saxutils.escape(err)}</failure>'
        entries.append(entry + "</testcase>")
    failures = sum(1 for r in results if r[2])
    with open(path, "w") as f:
        f.write('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites>'
                f'<testsuite name="{suite}" tests="{len(results)}" '
                f'failures="{failures}" skipped="0">\n'
                + "\n".join(entries) + "\n</testsuite></testsuites>\n")


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
    if args.xml:
        write_xml(args.xml, SUITE, results)
    failures = sum(1 for r in results if r[2])
    print(f"{len(results) - failures} of {len(results)} checks passed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
