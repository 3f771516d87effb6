#!/usr/bin/env python3
"""Independent check of kvcast's "KVCache over MoQT" wire format v1.

Written from docs/kvcache-wire-format.md alone (not from kvcast's code):
aiomoqt (draft-14, through a relay) receives the KV of a prompt that
kvcast-kvpub prefilled with a real model and published, and numpy decodes
every payload per the document and compares it with the exact KV that
kvcast-kvpub dumped (float32 LE, [token][layer][K then V][heads*head_dim]).

  aiomoqt_kv_subscriber.py --relay HOST:PORT --info kvpub.json \
      [--model-config MODEL/config.json] [--ca-file PEM]

--info is kvcast-kvpub's JSON line: {"namespace": [root, model_id, digest],
"tokens", "chunk_tokens", "layers", "kv_heads", "head_dim", "dump"}. The
3-element namespace tuple goes on the wire verbatim (its first element
contains '/').

For each track (fp16 bf16 fp8-e4m3 int8 fp4-e2m1 int4 fp4-e2m1-rot int4-rot ac
ac-lo): SUBSCRIBE with an
AbsoluteStart (0, 0) filter; then a standalone FETCH of groups 0..last of
--fetch-track (default int8), whose payloads must also equal the
subscription's. Checks:
  names     root "moq://kvcache.moq.arpa/v1/", model id and digest 32
            lowercase hex digits; with --model-config, layers / kv heads /
            head_dim agree with the model's config.json
  ids       groups 0..ceil(n/C)-1, objects 0..k-1 per group (k = C, the
            last group n mod C), nothing else; an END_OF_GROUP (0x3) status
            object with id k closes every group of a subscription (and of
            the FETCH when it carries markers); PUBLISH_DONE TRACK_ENDED
  size      every payload exactly 2 * layers * row bytes
  values    fp16: bit-exact numpy float16 (RNE) of the dump; bf16: bit-exact
            RNE bfloat16 computed on the uint32 bits; fp8-e4m3 / fp4-e2m1
            (decoded from the bit definitions) and int8 / int4 (two's
            complement, 4-bit low nibble first): per block, scale (fp16,
            first in the row) = amax / qmax rounded up to an fp16 (so
            scale >= amax / qmax and the next smaller fp16 is below it), a
            zero block has scale 0 and decodes to 0, every code is a nearest
            code of x / scale (|x - q*scale| <= scale/2 for the ints, half a
            code step for the floats), codes within +-qmax
            fp4-e2m1-rot / int4-rot: the same checks against each head's
            fp16 values rotated (y = H (D x), ac_decoder.rotate), and the
            decoded values rotated back (x = D (H y) / d) within the
            unrotated error bound (the largest scale of the head times
            half the widest code step) of the dump, plus its fp16 rounding
            ac / ac-lo: each group decodes (ac_decoder.py, the document's
            decoder, also written from the document alone) and every value
            is within half of its unit's coarsest step, amax / levels (the
            operating points' levels for K and V), of the dump, plus the
            fp16 rounding the publisher reads the KV through
  control   a negative control per track: one flipped bit in a copy of a
            payload must be reported (the checker can fail)
Per-track summary on stderr, one JSON line on stdout; exit 0 iff everything
passed (codes as interop_common: 1 verify failed, 3 timeout, 4 connect,
5 refused, 6 error).
"""
import argparse
import asyncio
import json
import os
import re
import sys
import time

sys.dont_write_bytecode = True   # keep tests/interop free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import ac_decoder  # noqa: E402
import interop_common as ic  # noqa: E402

ROOT = "moq://kvcache.moq.arpa/v1/"
TRACKS = ("fp16", "bf16", "fp8-e4m3", "int8", "fp4-e2m1", "int4", "fp4-e2m1-rot", "int4-rot",
          "ac", "ac-lo")
# ac track -> (levels of K units, levels of V units); the document's operating points.
AC_LEVELS = {"ac": (11.0, 6.0), "ac-lo": (6.0, 2.0)}  # both rotated (transform 1)
# track -> (bits per value, scaled, qmax); the document's table.
FORMATS = {"fp16": (16, False, None), "bf16": (16, False, None),
           "fp8-e4m3": (8, True, 448.0), "int8": (8, True, 127.0),
           "fp4-e2m1": (4, True, 6.0), "int4": (4, True, 7.0),
           "fp4-e2m1-rot": (4, True, 6.0), "int4-rot": (4, True, 7.0)}
ROTATED = "-rot"   # a track coding each head's values Hadamard-rotated
END_OF_GROUP = 0x3
TRACK_ENDED = 0x2
SLACK = 1e-6   # relative; numpy computes x / scale in float64, the encoder in float32


# ---- value formats, from their definitions -----------------------------------

def e4m3_table():
    """OCP FP8 E4M3FN: sign, 4 exponent bits (bias 7), 3 mantissa bits; no
    inf; S.1111.111 is NaN; exponent 0 is subnormal."""
    t = np.empty(256, np.float64)
    for c in range(256):
        s, e, m = c >> 7, (c >> 3) & 0xF, c & 0x7
        if e == 0xF and m == 0x7:
            v = np.nan
        elif e == 0:
            v = (m / 8.0) * 2.0 ** (1 - 7)
        else:
            v = (1.0 + m / 8.0) * 2.0 ** (e - 7)
        t[c] = -v if s else v
    return t


def e2m1_table():
    """OCP FP4 E2M1: sign, 2 exponent bits (bias 1), 1 mantissa bit."""
    t = np.empty(16, np.float64)
    for c in range(16):
        s, e, m = c >> 3, (c >> 1) & 0x3, c & 0x1
        v = (m / 2.0) * 2.0 ** (1 - 1) if e == 0 else (1.0 + m / 2.0) * 2.0 ** (e - 1)
        t[c] = -v if s else v
    return t


E4M3 = e4m3_table()
E2M1 = e2m1_table()
assert np.nanmax(E4M3) == 448.0 and np.count_nonzero(np.isnan(E4M3)) == 2
assert sorted(set(np.abs(E2M1))) == [0, 0.5, 1, 1.5, 2, 3, 4, 6]


def bf16_rne_bits(x):
    """float32 -> bfloat16 bits, round to nearest even, on the uint32 bits."""
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return r, np.isnan(x)


def fp16_below(h):
    """The next smaller float16 of each float16 in h."""
    return np.nextafter(h, np.float16(-np.inf))


def nearest_gap(t, table):
    """Distance from each t to the nearest finite value of `table`, whether
    t lies exactly halfway between two of them, and half their spacing."""
    grid = np.unique(table[np.isfinite(table)])
    i = np.clip(np.searchsorted(grid, t), 1, len(grid) - 1)
    lo, hi = np.abs(t - grid[i - 1]), np.abs(t - grid[i])
    return np.minimum(lo, hi), (lo == hi), (grid[i] - grid[i - 1]) / 2


# ---- the token layout ----------------------------------------------------------

class Layout:
    def __init__(self, layers, heads, head_dim):
        self.L, self.H, self.D = layers, heads, head_dim
        self.V = heads * head_dim            # values per row

    def block(self, track):
        bits, scaled, _ = FORMATS[track]
        if not scaled:
            return None
        if bits == 8:
            return self.D                    # per head
        return 32 if self.D % 32 == 0 else self.D

    def row_bytes(self, track):
        bits, scaled, _ = FORMATS[track]
        n = self.V * bits // 8
        return n + 2 * (self.V // self.block(track)) if scaled else n

    def token_bytes(self, track):
        return 2 * self.L * self.row_bytes(track)


# The document's own examples of bytes per token.
_L8B, _L70B = Layout(32, 8, 128), Layout(80, 8, 128)
assert [_L8B.token_bytes(t) for t in FORMATS] == [131072, 131072, 66560, 66560, 36864, 36864,
                                                  36864, 36864]
assert _L70B.token_bytes("int8") == 166400


class Errors:
    """Counts problems by kind and keeps the first few descriptions."""

    def __init__(self):
        self.counts, self.samples = {}, []

    def add(self, kind, n, describe):
        n = int(n)
        if n <= 0:
            return
        self.counts[kind] = self.counts.get(kind, 0) + n
        if len(self.samples) < 8:
            self.samples.append(f"{kind}: {n} x, first {describe()}")

    def __bool__(self):
        return bool(self.counts)


def where(mask, tokens, names):
    """'token t layer l K elem i' of the first True in mask (..., L, 2, V-like)."""
    idx = np.argwhere(mask)[0]
    parts = [f"token {tokens[idx[0]]}", f"layer {idx[1]}", "KV"[idx[2]]]
    parts += [f"{n} {int(i)}" for n, i in zip(names, idx[3:])]
    return " ".join(parts)


def rotated_values(track, lay, x):
    """What a track codes of x (..., V): x, or for a rotated track each
    head's fp16 values rotated, y = H (D x) (float32)."""
    if not track.endswith(ROTATED):
        return x
    half = x.astype(np.float16).astype(np.float32)
    return ac_decoder.rotate(half, lay.D).reshape(x.shape)


def verify_values(track, lay, payloads, x, tokens, err, stats):
    """payloads: (m, token_bytes) uint8; x: (m, L, 2, V) float32, the exact KV
    of the same tokens; tokens: their indices in the prompt (for messages)."""
    m = payloads.shape[0]
    bits, scaled, qmax = FORMATS[track]
    exact, x = x, rotated_values(track, lay, x)
    track = track.removesuffix(ROTATED)   # the rest as the unrotated track's
    rows = payloads.reshape(m, lay.L, 2, lay.row_bytes(track))
    if not scaled:
        got = np.ascontiguousarray(rows).view("<u2").astype(np.uint16)  # (m, L, 2, V)
        if track == "fp16":
            want = x.astype(np.float16).view(np.uint16)
            nan_ok = np.isnan(x) & np.isnan(got.view(np.float16))
        else:
            want, x_nan = bf16_rne_bits(x)
            got_nan = ((got & 0x7F80) == 0x7F80) & ((got & 0x7F) != 0)
            nan_ok = x_nan & got_nan
        bad = (got != want) & ~nan_ok
        err.add("value", bad.sum(), lambda: where(bad, tokens, ["elem"]) +
                f": got 0x{int(got[bad][0]):04x}, want 0x{int(want[bad][0]):04x}")
        stats["max_abs_err"] = max(stats.get("max_abs_err", 0.0), float(np.nanmax(np.abs(
            (got.view(np.float16).astype(np.float64) if track == "fp16" else
             (got.astype(np.uint32) << 16).view(np.float32).astype(np.float64))
            - x.astype(np.float64)))))
        return

    block = lay.block(track)
    nb = lay.V // block
    scale_bytes = np.ascontiguousarray(rows[..., :2 * nb])
    scale_bits = scale_bytes.view("<u2").astype(np.uint16)             # (m, L, 2, nb)
    s = scale_bits.view(np.float16).astype(np.float64)
    code_bytes = rows[..., 2 * nb:]
    if bits == 8:
        codes = code_bytes
    else:   # element 2i in the low nibble, 2i+1 in the high nibble
        codes = np.stack([code_bytes & 0xF, code_bytes >> 4], axis=-1).reshape(m, lay.L, 2, lay.V)
    if track == "int8":
        q = codes.view(np.int8).astype(np.float64)
    elif track == "int4":
        q = (((codes.astype(np.int16) + 8) & 0xF) - 8).astype(np.float64)
    elif track == "fp8-e4m3":
        q = E4M3[codes]
    else:
        q = E2M1[codes]
    q = q.reshape(m, lay.L, 2, nb, block)
    xb = x.astype(np.float64).reshape(m, lay.L, 2, nb, block)
    sb = s[..., None]
    amax = np.abs(xb).max(axis=-1)                                     # (m, L, 2, nb)
    names = ["block"]

    # Scales: amax / qmax rounded up to a float16, i.e. the smallest float16
    # with scale * qmax >= amax (products exact in float64); zero blocks
    # have scale 0.
    zero = amax == 0
    small = ~zero & ~(s * qmax >= amax)
    err.add("scale < amax/qmax", small.sum(), lambda: where(small, tokens, names) +
            f": scale {float(s[small][0])!r}, amax {float(amax[small][0])!r}")
    prev = fp16_below(scale_bits.view(np.float16)).astype(np.float64)
    bad = ~zero & ~small & (prev > 0) & (prev * qmax >= amax)
    err.add("scale not rounded up to the *next* fp16", bad.sum(),
            lambda: where(bad, tokens, names) +
            f": scale {float(s[bad][0])!r}, amax {float(amax[bad][0])!r}")
    bad = zero & (scale_bits != 0)
    err.add("zero block with nonzero scale", bad.sum(), lambda: where(bad, tokens, names))
    stats["zero_blocks"] = stats.get("zero_blocks", 0) + int(zero.sum())

    # Codes: finite, within +-qmax, and a nearest code of x / scale.
    bad = ~np.isfinite(q) | (np.abs(q) > qmax)   # also int8 -128, int4 -8
    err.add("code out of range", bad.sum(), lambda: where(bad, tokens, names + ["elem"]))
    live = ~zero[..., None] & np.ones_like(q, dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(live, xb / sb, 0.0)
    if track in ("int8", "int4"):
        gap = np.abs(t - np.rint(t))           # distance to the nearest integer
        halfway = np.abs(t - np.floor(t)) == 0.5
        half_step = 0.5
    else:
        gap, halfway, half_step = nearest_gap(t, E4M3 if track == "fp8-e4m3" else E2M1)
    off = np.abs(t - np.where(np.isfinite(q), q, 0.0))
    bad = live & (off > gap + SLACK * np.maximum(1.0, np.abs(t)))
    err.add("not a nearest code", bad.sum(), lambda: where(bad, tokens, names + ["elem"]) +
            f": x/scale {float(t[bad][0])!r}, code value {float(q[bad][0])!r}")
    # Exact ties (x / scale exact in float64) go to the even code.
    tie = live & halfway
    if track in ("int8", "int4"):
        odd = np.mod(q, 2) != 0
    else:
        odd = (codes.reshape(q.shape) & 1) != 0   # mantissa LSB
    bad = tie & odd
    err.add("tie not rounded to even", bad.sum(), lambda: where(bad, tokens, names + ["elem"]))
    stats["exact_ties"] = stats.get("exact_ties", 0) + int(tie.sum())
    with np.errstate(invalid="ignore"):
        dec = np.where(np.isfinite(q), q, np.nan) * sb
    bad = zero[..., None] & ~(dec == 0)
    err.add("zero block decodes to nonzero", bad.sum(),
            lambda: where(bad, tokens, names + ["elem"]))
    dec = np.where(live, dec, 0.0)
    e = np.abs(dec - xb)
    if track in ("int8", "int4"):
        bad = live & (e > sb / 2 * (1 + SLACK))
        err.add("|err| > scale/2", bad.sum(), lambda: where(bad, tokens, names + ["elem"]))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(live & (sb > 0), e / sb, 0.0)
    stats["max_abs_err"] = max(stats.get("max_abs_err", 0.0), float(e.max()))
    stats["max_err_over_scale"] = max(stats.get("max_err_over_scale", 0.0), float(rel.max()))
    # |x/scale - code| in half code steps: <= 1 is correct rounding.
    steps = np.where(live, off / half_step, 0.0)
    stats["max_err_half_steps"] = max(stats.get("max_err_half_steps", 0.0), float(steps.max()))
    if x is not exact:
        verify_unrotated(lay, dec, sb, half_step, exact, tokens, err, stats)


def verify_unrotated(lay, dec, sb, half_step, exact, tokens, err, stats):
    """A rotated track's decoded values y, rotated back (x = D (H y) / d),
    against the exact KV: a head's rotation keeps the error's norm, so no
    value is further off than the head's largest scale times half the
    widest code step, plus the fp16 rounding the encoder read x through."""
    m = dec.shape[0]
    got = ac_decoder.unrotate(dec.reshape(m, lay.L, 2, lay.V).astype(np.float32), lay.D)
    got = got.reshape(m, lay.L, 2, lay.H, lay.D).astype(np.float64)
    want = exact.reshape(m, lay.L, 2, lay.H, lay.D).astype(np.float64)
    rounding = np.abs(exact.astype(np.float16).astype(np.float64) -
                      exact.astype(np.float64)).reshape(want.shape)
    widest = np.max(half_step) if np.ndim(half_step) else half_step
    head_scale = sb.reshape(m, lay.L, 2, lay.H, -1).max(axis=-1, keepdims=True)
    bound = head_scale * widest * (1 + 1e-5) + rounding + 1e-6 * np.abs(want).max()
    e = np.abs(got - want)
    bad = e > bound
    err.add("rotated back: |err| > the head's bound", bad.sum(),
            lambda: where(bad.reshape(m, lay.L, 2, -1), tokens, ["elem"]) +
            f": {float(e[bad][0])!r} > {float(bound[bad][0])!r}")
    stats["max_abs_err_unrotated"] = max(stats.get("max_abs_err_unrotated", 0.0),
                                         float(e.max()))


def flip_one_bit(track, lay, payload, x_token):
    """A copy of one token's payload with the sign bit of the largest value of
    layer 0's K row flipped (a large change in every format)."""
    bits, scaled, _ = FORMATS[track]
    i = int(np.argmax(np.abs(x_token[0, 0])))
    base = 2 * (lay.V // lay.block(track)) if scaled else 0
    p = payload.copy()
    if bits == 16:
        p[base + 2 * i + 1] ^= 0x80
    elif bits == 8:
        p[base + i] ^= 0x80
    else:
        p[base + i // 2] ^= 0x08 if i % 2 == 0 else 0x80
    return p


def verify_ac(track, lay, t, ids, chunk, x, err, stats):
    """Decodes every complete group of ac track `track` and bounds its error."""
    k_levels, v_levels = AC_LEVELS[track]
    levels = np.array([k_levels, v_levels]).reshape(1, 1, 2, 1, 1)
    worst = 0.0
    for g, k in ids.items():
        objs = [t.objects.get((g, o)) for o in range(k)]
        if any(o is None for o in objs):
            continue   # reported as missing objects
        try:
            got = ac_decoder.decode_group(objs, lay.L, lay.H, lay.D)
        except ValueError as e:
            err.add("ac group does not decode", 1, lambda: f"group {g}: {e}")
            continue
        want = x[g * chunk:g * chunk + k].reshape(k, lay.L, 2, lay.H, lay.D).astype(np.float64)
        got = got.reshape(k, lay.L, 2, lay.H, lay.D).astype(np.float64)
        # The steps are the rotated values' (the inverse rotation averages
        # their errors, so no value's error exceeds half a step).
        coded = ac_decoder.rotate(want.astype(np.float32), lay.D).reshape(want.shape)
        amax = np.abs(coded.astype(np.float64)).max(axis=(0, 4), keepdims=True)
        half_step = amax / levels / 2
        bound = half_step * (1 + 1e-3) + amax * 1e-5 + np.abs(want) * 2.0 ** -11 + 1e-30
        e = np.abs(got - want)
        over = int((e > bound).sum())
        err.add("ac value farther than half a step", over,
                lambda: f"group {g}: max |err| / bound {float((e / bound).max()):.3f}")
        worst = max(worst, float((e / np.maximum(half_step, 1e-30)).max()))
        stats["max_abs_err"] = max(stats.get("max_abs_err", 0.0), float(e.max()))
    stats["max_err_half_steps"] = worst


def ac_control(track, lay, t, ids, chunk, x):
    """The ac check on group 0 with the top bit of lane 0's state flipped in
    object 1 (after its shift bytes): it must be reported."""
    copy = type("Copy", (), {})()
    copy.objects = dict(t.objects)
    p = bytearray(copy.objects[(0, 1)])
    p[lay.L * 2 * lay.H + 3] ^= 0x80
    copy.objects[(0, 1)] = bytes(p)
    ctl = Errors()
    verify_ac(track, lay, copy, {0: ids[0]}, chunk, x, ctl, {})
    return bool(ctl)


# ---- receiving -----------------------------------------------------------------

class Track:
    """Objects of one track (one subscription or one fetch)."""

    def __init__(self, name, via):
        self.name, self.via = name, via
        self.objects = {}          # (g, o) -> payload bytes
        self.markers = {}          # g -> END_OF_GROUP object id (the first seen)
        self.other_status = []     # (g, o, status)
        self.conflicts = []        # (g, o) received twice with different bytes
        self.duplicates = 0
        self.priorities, self.subgroups = set(), set()   # as seen on the objects
        self.publish_done = None
        self.changed = None        # asyncio.Event, set on the loop

    def add(self, g, o, status, payload, priority=None, subgroup=None):
        if priority is not None:
            self.priorities.add(int(priority))
        if subgroup is not None:
            self.subgroups.add(int(subgroup))
        if status not in (None, 0):
            if int(status) != END_OF_GROUP:
                self.other_status.append((g, o, int(status)))
            elif self.markers.setdefault(g, o) != o:
                self.other_status.append((g, o, int(status)))   # a second, elsewhere
        elif (g, o) in self.objects:
            if self.objects[(g, o)] != payload:
                self.conflicts.append((g, o))
            self.duplicates += 1
        else:
            self.objects[(g, o)] = payload
        self.changed.set()

    def on_object(self, msg, size=0, recv_us=0, group_id=None, subgroup_id=None):
        g = getattr(msg, "group_id", None)
        self.add(group_id if g is None else g, msg.object_id, getattr(msg, "status", None),
                 bytes(msg.payload or b""), getattr(msg, "publisher_priority", None),
                 subgroup_id)

    def on_fetch_object(self, msg, size=0, recv_us=0, request_id=None):
        self.add(msg.group_id, msg.object_id, getattr(msg, "status", None),
                 bytes(msg.payload or b""), getattr(msg, "publisher_priority", None),
                 getattr(msg, "subgroup_id", None))

    def on_done(self, msg):
        self.publish_done = {"status_code": int(msg.status_code),
                             "stream_count": int(msg.stream_count),
                             "reason": str(getattr(msg, "reason", "") or "")}
        self.changed.set()


def expected_ids(n, chunk):
    groups = -(-n // chunk)
    return {g: min(chunk, n - g * chunk) for g in range(groups)}


async def receive(args, info, state):
    from aiomoqt.types import FilterType, MOQTRequestError
    loop = asyncio.get_running_loop()
    deadline = state["t0"] + args.timeout
    ns = tuple(f.encode() for f in info["namespace"])
    ids = expected_ids(info["tokens"], info["chunk_tokens"])
    want_objects = sum(ids.values())
    changed = asyncio.Event()
    subs = {name: Track(name, "subscribe") for name in args.tracks}
    for t in subs.values():
        t.changed = changed
    state["phase"] = "connect"
    async with ic.make_client(args).connect() as session:
        await session.client_session_init(timeout=max(1, int(args.connect_timeout)))
        state["phase"] = "subscribe"
        # One at a time: aiomoqt drops a reply that arrives before its
        # request is awaited.
        for name, t in list(subs.items()):
            msg = session.subscribe(namespace=ns, track_name=name.encode(),
                                    filter_type=FilterType.ABSOLUTE_START,
                                    start_group=0, start_object=0,
                                    parameters=ic.auth_params(args),
                                    on_object=t.on_object, on_done=t.on_done)
            try:
                await session._await_response(msg.request_id,
                                              timeout=max(0.5, deadline - loop.time()))
            except MOQTRequestError as e:
                state["refused"][name] = f"SUBSCRIBE_ERROR code={e.error_code} {e.reason}"
                subs.pop(name)

        def subs_done():
            return all(len(t.objects) >= want_objects and t.publish_done is not None
                       for t in subs.values()) or session._close_err is not None
        await ic.wait_until(subs_done, changed, deadline)
        # Markers and objects may trail PUBLISH_DONE briefly.
        await ic.wait_until(lambda: all(len(t.markers) >= len(ids) for t in subs.values()),
                       changed, min(deadline, loop.time() + 1.0))

        fetched = None
        if args.fetch_track and session._close_err is None:
            state["phase"] = "fetch"
            fetched = Track(args.fetch_track, "fetch")
            fetched.changed = changed
            msg = session.fetch(namespace=ns, track_name=args.fetch_track.encode(),
                                start_group=0, start_object=0,
                                end_group=len(ids) - 1, end_object=0,
                                parameters=ic.auth_params(args),
                                on_object=fetched.on_fetch_object)
            try:
                ok = await session._await_response(
                    msg.request_id, timeout=max(0.5, deadline - loop.time()))
                state["fetch_ok"] = {"end_of_track": int(ok.end_of_track),
                                     "end_location": [ok.largest_group_id, ok.largest_object_id]}
                state["fetch_fin"] = bool(await session.await_fetch_done(
                    msg.request_id, timeout=max(0.1, deadline - loop.time())))
                await ic.wait_until(lambda: len(fetched.objects) >= want_objects, changed,
                               min(deadline, loop.time() + 0.5))
            except MOQTRequestError as e:
                state["refused"]["fetch " + args.fetch_track] = (
                    f"FETCH_ERROR code={e.error_code} {e.reason}")
                fetched = None
        if session._close_err is not None:
            state["session_error"] = str(session._close_err)
        session.close()
    state["phase"] = "verify"
    return subs, fetched


# ---- checking ------------------------------------------------------------------

def check_track(t, info, lay, x, sub_copy=None):
    """Verifies one received track; returns its summary dict."""
    err, stats = Errors(), {}
    n, chunk = info["tokens"], info["chunk_tokens"]
    ids = expected_ids(n, chunk)
    is_ac = t.name in AC_LEVELS
    size = None if is_ac else lay.token_bytes(t.name)
    # ids
    unexpected = [k for k in t.objects if k[0] not in ids or not 0 <= k[1] < ids[k[0]]]
    err.add("unexpected object", len(unexpected), lambda: f"{sorted(unexpected)[0]}")
    missing = [(g, o) for g, k in ids.items() for o in range(k) if (g, o) not in t.objects]
    err.add("missing object", len(missing), lambda: f"{missing[0]}")
    err.add("conflicting duplicate", len(t.conflicts), lambda: f"{t.conflicts[0]}")
    err.add("unexpected status object", len(t.other_status), lambda: f"{t.other_status[0]}")
    wrong = [(g, o) for g, o in t.markers.items() if g not in ids or o != ids[g]]
    err.add("END_OF_GROUP at the wrong id", len(wrong),
            lambda: f"group {wrong[0][0]} id {wrong[0][1]} (want {ids.get(wrong[0][0])})")
    no_marker = [g for g in ids if g not in t.markers]
    if t.via == "subscribe" or t.markers:   # a FETCH may leave markers out
        err.add("group without END_OF_GROUP", len(no_marker), lambda: f"group {no_marker[0]}")
    other = sorted(t.priorities - {128})
    err.add("publisher priority not 128", len(other), lambda: f"{other}")
    other_sg = sorted(t.subgroups - {0})
    err.add("subgroup not 0", len(other_sg), lambda: f"{other_sg}")
    if t.via == "subscribe":
        pd = t.publish_done
        if pd is None:
            err.add("no PUBLISH_DONE", 1, lambda: "")
        elif pd["status_code"] != TRACK_ENDED:
            err.add("PUBLISH_DONE not TRACK_ENDED", 1, lambda: f"{pd}")
    # sizes (an ac token's payload has no fixed size)
    wrong_size = sorted(k for k, p in t.objects.items() if size is not None and len(p) != size)
    err.add("payload size", len(wrong_size),
            lambda: f"{wrong_size[0]}: {len(t.objects[wrong_size[0]])} bytes, want {size}")
    if sub_copy is not None:
        differ = sorted(k for k, p in t.objects.items() if k in sub_copy.objects
                        and sub_copy.objects[k] != p)
        err.add("fetched payload != subscribed payload", len(differ), lambda: f"{differ[0]}")
    # values, for every token present with the right size
    toks = sorted(g * chunk + o for (g, o), p in t.objects.items()
                  if len(p) == size and g in ids and 0 <= o < ids[g])
    if is_ac:
        verify_ac(t.name, lay, t, ids, chunk, x, err, stats)
        stats["control_caught"] = (0, 1) in t.objects and ac_control(t.name, lay, t, ids, chunk, x)
        if not stats["control_caught"]:
            err.add("negative control not caught", 1, lambda: "flipped bit passed the check")
        size = round(sum(len(p) for p in t.objects.values()) / max(1, len(t.objects)))
    elif toks:
        payloads = np.frombuffer(b"".join(t.objects[(i // chunk, i % chunk)] for i in toks),
                                 np.uint8).reshape(len(toks), size)
        verify_values(t.name, lay, payloads, x[toks], toks, err, stats)
        # Negative control: the same check must catch one flipped bit.
        ctl_err = Errors()
        bad = flip_one_bit(t.name, lay, payloads[0], rotated_values(t.name, lay, x[toks[0]]))
        verify_values(t.name, lay, bad[None, :], x[toks[:1]], toks[:1], ctl_err, {})
        stats["control_caught"] = bool(ctl_err)
        if not ctl_err:
            err.add("negative control not caught", 1, lambda: "flipped bit passed the check")
    return {"track": t.name, "via": t.via, "ok": not err, "objects": len(t.objects),
            "priorities": sorted(t.priorities), "subgroups": sorted(t.subgroups),
            "expected": sum(ids.values()), "groups": len({g for g, _ in t.objects}),
            "markers": len(t.markers), "token_bytes": size, "duplicates": t.duplicates,
            "publish_done": t.publish_done, "errors": err.counts, "error_sample": err.samples,
            **{k: (round(v, 9) if isinstance(v, float) else v) for k, v in stats.items()}}


def load_info(args):
    with open(args.info) as f:
        lines = [ln for ln in f.read().splitlines() if ln.strip()]
    if not lines:
        raise ValueError(f"{args.info} is empty")
    info = json.loads(lines[-1])
    ns = info.get("namespace")
    problems = []
    if not (isinstance(ns, list) and len(ns) == 3):
        problems.append(f"namespace {ns!r} is not a 3-tuple")
    else:
        if ns[0] != ROOT:
            problems.append(f"namespace root {ns[0]!r} != {ROOT!r}")
        for what, v in (("model id", ns[1]), ("prompt digest", ns[2])):
            if not re.fullmatch(r"[0-9a-f]{32}", v):
                problems.append(f"{what} {v!r} is not 32 lowercase hex digits")
    for k in ("tokens", "chunk_tokens", "layers", "kv_heads", "head_dim"):
        if not isinstance(info.get(k), int) or info[k] <= 0:
            problems.append(f"{k} {info.get(k)!r} is not a positive integer")
    if not problems and info["chunk_tokens"] % 16:
        problems.append(f"chunk_tokens {info['chunk_tokens']} is not a multiple of 16")
    if args.model_config and not problems:
        with open(args.model_config) as f:
            cfg = json.load(f)
        want = {"layers": cfg["num_hidden_layers"],
                "kv_heads": cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
                "head_dim": cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]}
        problems += [f"{k} {info[k]} != {v} in {args.model_config}"
                     for k, v in want.items() if info[k] != v]
    return info, problems


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--relay", required=True, type=ic.parse_relay, metavar="HOST:PORT")
    ap.add_argument("--info", required=True, metavar="FILE",
                    help="kvcast-kvpub's JSON line (namespace, shape, dump path)")
    ap.add_argument("--dump", metavar="FILE", help="exact KV (default: the info's dump)")
    ap.add_argument("--model-config", metavar="JSON",
                    help="the model's config.json: cross-check layers / kv heads / head_dim")
    ap.add_argument("--tracks", default=",".join(TRACKS),
                    help="comma-separated tracks to SUBSCRIBE (default all ten)")
    ap.add_argument("--fetch-track", default="int8",
                    help="track to FETCH groups 0..last of ('' = none)")
    ap.add_argument("--draft", type=int, default=14)
    ap.add_argument("--ca-file", metavar="PEM", help="verify the relay (default: no verification)")
    ap.add_argument("--auth-token", metavar="HEX", type=bytes.fromhex,
                    help="AUTHORIZATION TOKEN value sent with each SUBSCRIBE and the FETCH")
    ap.add_argument("--timeout", type=float, default=30.0, metavar="SEC")
    ap.add_argument("--connect-timeout", type=float, default=10.0, metavar="SEC")
    ap.add_argument("--debug", action="store_true")
    args = ap.parse_args()
    args.tracks = [t for t in args.tracks.split(",") if t]
    for t in args.tracks + ([args.fetch_track] if args.fetch_track else []):
        if t not in FORMATS and t not in AC_LEVELS:
            ap.error(f"unknown track {t!r} (known: {', '.join(TRACKS)})")
    return args


def main():
    args = parse_args()
    ic.setup_logging(args.debug)
    summary = {"role": "kv-subscriber", "impl": "aiomoqt", "result": None, "error": None}
    state = {"exit": ic.EXIT_ERROR, "phase": "start", "refused": {}}
    try:
        info, problems = load_info(args)
    except (OSError, ValueError, KeyError) as e:
        summary.update(result="error", error=f"--info: {type(e).__name__}: {e}")
        ic.emit_summary(summary)
        sys.exit(ic.EXIT_ERROR)
    summary["namespace"] = info.get("namespace")
    lay = Layout(info["layers"], info["kv_heads"], info["head_dim"])
    dump = args.dump or info.get("dump")
    x = None
    if dump:
        raw = np.fromfile(dump, "<f4")
        want = info["tokens"] * lay.L * 2 * lay.V
        if raw.size != want:
            problems.append(f"dump {dump} has {raw.size} floats, want {want}")
        else:
            x = raw.reshape(info["tokens"], lay.L, 2, lay.V)
            if not np.isfinite(x).all():
                problems.append("the dump holds non-finite values")
    else:
        problems.append("no dump to compare with")
    if problems:
        summary.update(result="verify_failed", error="; ".join(problems))
        ic.emit_summary(summary)
        sys.exit(ic.EXIT_VERIFY_FAILED)

    result = {}

    async def amain():
        loop = asyncio.get_running_loop()
        state["t0"] = loop.time()

        async def go():
            result["subs"], result["fetched"] = await receive(args, info, state)
        why = await ic.supervise(go(), state, args.connect_timeout, args.timeout + 5)
        if why != "done":
            state["error"] = f"{why} in phase {state['phase']}"
            state["exit"] = ic.EXIT_CONNECT if why == "connect_timeout" else ic.EXIT_TIMEOUT

    t0 = time.monotonic()
    try:
        asyncio.run(amain())
    except Exception as e:  # noqa: BLE001
        state["error"] = f"{state['phase']}: {type(e).__name__}: {e}"
        state["exit"] = ic.EXIT_CONNECT if state["phase"] == "connect" else ic.EXIT_ERROR
    summary["receive_s"] = round(time.monotonic() - t0, 3)

    tracks = []
    subs, fetched = result.get("subs", {}), result.get("fetched")
    for name in args.tracks:
        if name in subs:
            tracks.append(check_track(subs[name], info, lay, x))
    if fetched is not None:
        tracks.append(check_track(fetched, info, lay, x, sub_copy=subs.get(fetched.name)))
    for s in tracks:
        ic.log(f"{s['via']:9} {s['track']:8} {'ok' if s['ok'] else 'FAILED':6} "
               f"objects {s['objects']}/{s['expected']} groups {s['groups']} "
               f"markers {s['markers']} token_bytes {s['token_bytes']} "
               f"max_abs_err {s.get('max_abs_err', 0):.3g}"
               + (f" max_err/scale {s['max_err_over_scale']:.3f} max_err/half_step "
                  f"{s['max_err_half_steps']:.6f}" if "max_err_over_scale" in s else "")
               + f" control {'caught' if s.get('control_caught') else 'MISSED'}"
               + ("" if s["ok"] else f" errors {s['errors']} {s['error_sample'][:3]}"))
    summary.update({"tokens": info["tokens"], "chunk_tokens": info["chunk_tokens"],
                    "layers": lay.L, "kv_heads": lay.H, "head_dim": lay.D, "tracks": tracks,
                    "refused": state["refused"], "fetch_ok": state.get("fetch_ok"),
                    "fetch_fin": state.get("fetch_fin"),
                    "session_error": state.get("session_error"),
                    "elapsed_s": round(time.monotonic() - t0, 3)})
    failed = [s["via"] + " " + s["track"] for s in tracks if not s["ok"]]
    if state.get("error") is None:
        problems = [f"failed: {', '.join(failed)}"] if failed else []
        problems += [f"{k}: {v}" for k, v in state["refused"].items()]
        if len(tracks) < len(args.tracks) + bool(args.fetch_track) and not state["refused"]:
            problems.append(f"only {len(tracks)} tracks received ({state.get('session_error')})")
        if not problems:
            state["exit"] = ic.EXIT_OK
        else:
            only_refused = state["refused"] and len(problems) == len(state["refused"])
            state["exit"] = ic.EXIT_REFUSED if only_refused else ic.EXIT_VERIFY_FAILED
            state["error"] = "; ".join(problems)
    summary["result"] = ic.RESULT_NAMES[state["exit"]]
    summary["exit_code"] = state["exit"]
    summary["error"] = state.get("error")
    ic.emit_summary(summary)
    sys.exit(state["exit"])


if __name__ == "__main__":
    main()
