"""Checks kvcast's KV wire codecs against independent implementations.

numpy's float16 and ml_dtypes' bfloat16, float8_e4m3fn and float4_e2m1fn
(PyPI) convert single values; the scaled rows (block scales rounded up to
fp16, then int8/int4/fp8/fp4 codes) are recomputed here in numpy from the
wire-format rules and compared byte for byte with kv_codec_tool's output,
and the decodes value for value.

Usage: kv_codec_oracle_test.py KV_CODEC_TOOL XML_OUT
Writes one JUnit <testcase> per comparison to XML_OUT and exits 1 if any
failed.
"""
import os
import subprocess
import sys
import tempfile
import time
import xml.sax.saxutils

import ml_dtypes
import numpy as np

TOOL = sys.argv[1]
WORK = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
RNG = np.random.default_rng(20240607)
F32_MAX = np.finfo(np.float32).max
np.seterr(over="ignore", invalid="ignore")  # the stress values overflow on purpose
QMAX = {"int8": 127, "int4": 7, "fp8_e4m3": 448, "fp4_e2m1": 6}


def run(*args):
    subprocess.run([TOOL, *map(str, args)], check=True)


def tool_codes(fmt, x):
    src, dst = os.path.join(WORK, "in.f32"), os.path.join(WORK, "out.bin")
    x.astype("<f4").tofile(src)
    run("to_codes", fmt, src, dst)
    return np.fromfile(dst, dtype="<u2" if fmt in ("fp16", "bf16") else np.uint8)


def tool_values(fmt, codes):
    src, dst = os.path.join(WORK, "in.bin"), os.path.join(WORK, "out.f32")
    codes.tofile(src)
    run("from_codes", fmt, src, dst)
    return np.fromfile(dst, dtype="<f4")


def tool_rows(kernels, mode, fmt, heads, dim, block, data):
    src, dst = os.path.join(WORK, "rows.in"), os.path.join(WORK, "rows.out")
    data.tofile(src)
    run(*kernels, mode, fmt, heads, dim, block, src, dst)
    return np.fromfile(dst, dtype=np.uint8 if mode == "encode" else "<f4")


def stress_values(n):
    """Random values at every scale, plus ties, subnormals and extremes."""
    parts = [
        RNG.standard_normal(n).astype(np.float32),
        (RNG.standard_normal(n) * 2.0 ** RNG.integers(-30, 30, n)).astype(np.float32),
        RNG.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32),
        RNG.integers(0, 2**23, n, dtype=np.uint32).view(np.float32),  # float subnormals
    ]
    h = RNG.integers(0, 0x7BFF, n, dtype=np.uint16)  # fp16 midpoints
    lo, hi = h.view(np.float16).astype(np.float32), (h + 1).view(np.float16).astype(np.float32)
    parts.append((lo + hi) / 2 * RNG.choice(np.float32([-1, 1]), n))
    parts.append((RNG.integers(0, 2**16, n, dtype=np.uint32) << 16 | 0x8000).view(np.float32))
    for dtype, count in ((ml_dtypes.float8_e4m3fn, 256), (ml_dtypes.float4_e2m1fn, 16)):
        every = np.arange(count, dtype=np.uint8).view(dtype).astype(np.float32)
        grid = np.unique(every[np.isfinite(every)])  # negatives too
        mids = (grid[:-1] + grid[1:]) / 2
        parts.append(mids)
        parts.append(np.nextafter(mids, np.float32(np.inf)))
        parts.append(np.nextafter(mids, np.float32(-np.inf)))
    specials = [0.0, -0.0, 1.0, 65504, 65519, 65520, 65536, 448, 464, 465, 480, 6, 7, 1e30,
                F32_MAX, 2.0**-24, 2.0**-25, 1.5 * 2.0**-25, 2.0**-14, 2.0**-9, 2.0**-10,
                2.0**-126, np.inf, np.nan]
    s = np.array(specials, dtype=np.float32)
    parts.append(np.concatenate([s, -s]))
    return np.concatenate(parts).astype(np.float32)


def same_bits_or_nan(got, want, what):
    """Both NaN or identical bits, else a message naming the first misses."""
    got_nan, want_nan = np.isnan(got), np.isnan(want)
    bad = (got_nan != want_nan) | (~want_nan & (got.view(np.uint32) != want.view(np.uint32)))
    return report(bad, got, want, what)


def report(bad, got, want, what, inputs=None):
    if not bad.any():
        return None
    idx = np.flatnonzero(bad)[:5]
    lines = [f"{what}: {bad.sum()} of {bad.size} differ"]
    for i in idx:
        extra = f" input={inputs[i]!r}" if inputs is not None else ""
        lines.append(f"  [{i}] got={got[i]!r} want={want[i]!r}{extra}")
    return "\n".join(lines)


# ---- unscaled values ------------------------------------------------------

def check_fp16():
    x = stress_values(20000)
    want = x.astype(np.float16).view(np.uint16)
    got = tool_codes("fp16", x)
    nan = np.isnan(x)
    err = report((got != want) & ~nan, got, want, "fp16 encode", x)
    err = err or report(nan & ((got & 0x7FFF) <= 0x7C00), got, want, "fp16 NaN stays NaN", x)
    codes = np.arange(2**16, dtype=np.uint16)
    err = err or same_bits_or_nan(tool_values("fp16", codes),
                                  codes.view(np.float16).astype(np.float32), "fp16 decode")
    return err


def check_bf16():
    x = stress_values(20000)
    want = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    got = tool_codes("bf16", x)
    nan = np.isnan(x)
    err = report((got != want) & ~nan, got, want, "bf16 encode", x)
    err = err or report(nan & ((got & 0x7FFF) <= 0x7F80), got, want, "bf16 NaN stays NaN", x)
    codes = np.arange(2**16, dtype=np.uint16)
    err = err or same_bits_or_nan(tool_values("bf16", codes),
                                  codes.view(ml_dtypes.bfloat16).astype(np.float32), "bf16 decode")
    return err


def fp8_reference(v):
    """OCP E4M3FN with kvcast's rules: saturate finite values, NaN -> 0x7f."""
    with np.errstate(invalid="ignore"):
        codes = np.clip(v, -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8).copy()
    codes[np.isinf(v)] = np.where(v[np.isinf(v)] > 0, 0x7F, 0xFF)
    codes[np.isnan(v)] = 0x7F
    return codes


def fp4_reference(v):
    """OCP E2M1 (ml_dtypes saturates), with kvcast's NaN -> 0."""
    with np.errstate(invalid="ignore"):
        codes = v.astype(ml_dtypes.float4_e2m1fn).view(np.uint8).copy()
    codes[np.isnan(v)] = 0
    return codes


def check_fp8():
    x = stress_values(20000)
    got, want = tool_codes("fp8_e4m3", x), fp8_reference(x)
    err = report(got != want, got, want, "fp8_e4m3 encode", x)
    codes = np.arange(256, dtype=np.uint8)
    return err or same_bits_or_nan(tool_values("fp8_e4m3", codes),
                                   codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32),
                                   "fp8_e4m3 decode")


def check_fp4():
    x = stress_values(20000)
    got, want = tool_codes("fp4_e2m1", x), fp4_reference(x)
    err = report(got != want, got, want, "fp4_e2m1 encode", x)
    codes = np.arange(16, dtype=np.uint8)
    return err or same_bits_or_nan(tool_values("fp4_e2m1", codes),
                                   codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32),
                                   "fp4_e2m1 decode")


# ---- rows ------------------------------------------------------------------

def round_up_to_fp16(q):
    """Smallest fp16 >= q (float64 q >= 0), saturated at 65504."""
    h = q.astype(np.float16)
    below = h.astype(np.float64) < q
    h[below] = np.nextafter(h[below], np.float16(np.inf))
    return np.minimum(h, np.float16(65504))


def reference_row_encode(fmt, x, block):
    """The wire bytes of rows x [rows, n] (float32), recomputed from the rules."""
    rows, n = x.shape
    xb = x.reshape(rows, n // block, block)
    qmax = QMAX[fmt]
    with np.errstate(invalid="ignore", over="ignore"):
        amax = np.abs(xb.astype(np.float64)).max(axis=2)
        scale = round_up_to_fp16(amax / qmax)
        scale[np.isinf(amax)] = np.inf
        scale[np.isnan(xb).any(axis=2)] = np.nan  # wins over inf
        usable = np.isfinite(scale) & (scale > 0)
        s32 = np.where(usable, scale.astype(np.float32), np.float32(1))[..., None]
        v = xb / s32
        if fmt in ("int8", "int4"):
            codes = np.rint(np.clip(v, -qmax, qmax)).astype(np.int8).view(np.uint8)
        elif fmt == "fp8_e4m3":
            codes = fp8_reference(v)
        else:
            codes = fp4_reference(v)
    codes = np.where(usable[..., None], codes, 0).reshape(rows, n).astype(np.uint8)
    scale_bytes = scale.astype("<f2")
    scale_bytes[np.isnan(scale)] = np.float16(np.nan)  # canonical 0x7e00
    scale_bytes = scale_bytes.view(np.uint8).reshape(rows, -1)
    if fmt in ("int4", "fp4_e2m1"):
        codes = (codes[:, 0::2] & 15) | (codes[:, 1::2] << 4)
    return np.concatenate([scale_bytes, codes], axis=1)


def reference_row_decode(fmt, wire, n, block):
    rows = wire.shape[0]
    nb = n // block
    scale = wire[:, : 2 * nb].copy().view("<f2").astype(np.float32)
    raw = wire[:, 2 * nb:]
    if fmt in ("int4", "fp4_e2m1"):
        raw = np.stack([raw & 15, raw >> 4], axis=2).reshape(rows, n)
    if fmt == "int8":
        q = raw.view(np.int8).astype(np.float32)
    elif fmt == "int4":
        q = ((raw.astype(np.int8) << 4) >> 4).astype(np.float32)
    elif fmt == "fp8_e4m3":
        q = raw.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    else:
        q = raw.view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    s = np.repeat(scale, block, axis=1)
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(s), q * s, np.float32(np.nan)).astype(np.float32)


def stress_rows(fmt, rows, n, block):
    """Gaussian rows at many scales, exact ties, huge, tiny and non-finite blocks."""
    x = (RNG.standard_normal((rows, n)) * 2.0 ** RNG.integers(-20, 12, (rows, 1))).astype(np.float32)
    xb = x.reshape(rows, n // block, block)
    qmax = QMAX[fmt]
    # A third of the rows: exact ties under exact fp16 scales.
    tie_rows = slice(0, rows // 3)
    shape = (rows // 3, n // block, block)
    scale = RNG.integers(1, 0x7000, (rows // 3, n // block, 1), dtype=np.uint16)
    scale = scale.view(np.float16).astype(np.float32)
    if fmt in ("int8", "int4"):
        ties = RNG.integers(-qmax, qmax, shape) + 0.5
    else:
        dtype = ml_dtypes.float8_e4m3fn if fmt == "fp8_e4m3" else ml_dtypes.float4_e2m1fn
        grid = np.arange(0x7F if fmt == "fp8_e4m3" else 8, dtype=np.uint8).view(dtype)
        grid = grid.astype(np.float32)
        mids = (grid[:-1] + grid[1:]) / 2
        ties = RNG.choice(mids, shape) * RNG.choice([-1, 1], shape)
    xb[tie_rows] = (ties * scale).astype(np.float32)
    xb[tie_rows, :, 0] = qmax * scale[..., 0] * RNG.choice([-1, 1], (rows // 3, n // block))
    # Special blocks in the last rows.
    xb[-1, 0, 1] = np.nan
    xb[-1, 1 % (n // block), 0] = np.inf
    xb[-2, 0, :] = 0
    xb[-2, -1, :] = RNG.standard_normal(block) * 1e-30
    xb[-3, 0, 0] = F32_MAX
    xb[-3, -1, -1] = -3e7
    noise = RNG.integers(0, 2**32, (n // block, block), dtype=np.uint64).astype(np.uint32)
    xb[-4, :, :] = noise.view(np.float32)
    return xb.reshape(rows, n)


def check_rows(fmt, heads, dim, block, rows=60):
    """Both kernel sets: the CPU's fastest, and the portable ones (--scalar)."""
    def run_check():
        return check_rows_with([], fmt, heads, dim, block, rows) or check_rows_with(
            ["--scalar"], fmt, heads, dim, block, rows)
    return run_check


def check_rows_with(kernels, fmt, heads, dim, block, rows):
    what = f"{fmt} rows {heads}x{dim}/{block}{' ' if kernels else ''}{' '.join(kernels)}"
    n = heads * dim
    if fmt in QMAX:
        x = stress_rows(fmt, rows, n, block)
    else:
        x = RNG.permutation(stress_values(rows * n // 4))[: rows * n].reshape(rows, n)
    got = tool_rows(kernels, "encode", fmt, heads, dim, block, x).reshape(rows, -1)
    if fmt == "fp16":
        want = x.astype("<f2").view(np.uint8).reshape(rows, -1)
    elif fmt == "bf16":
        want = x.astype(ml_dtypes.bfloat16).view(np.uint8).reshape(rows, -1)
    else:
        want = reference_row_encode(fmt, x, block)
    if fmt in ("fp16", "bf16"):  # NaN payloads may differ: compare NaN-ness there
        nan = np.repeat(np.isnan(x), 2, axis=1)
        bad = (got != want) & ~nan
    else:
        bad = got != want
    if fmt in ("fp16", "bf16"):
        limit = 0x7C00 if fmt == "fp16" else 0x7F80
        if ((got.view("<u2").reshape(rows, n) & 0x7FFF) <= limit)[np.isnan(x)].any():
            return f"{what}: a NaN was not encoded as NaN"
    if bad.any():
        r, c = np.argwhere(bad)[0]
        return (f"{what}: {bad.sum()} bytes differ; first at row {r} "
                f"byte {c}: got {got[r, c]:#x} want {want[r, c]:#x}")
    back = tool_rows(kernels, "decode", fmt, heads, dim, block, got).reshape(rows, n)
    if fmt == "fp16":
        ref = got.view("<f2").astype(np.float32)
    elif fmt == "bf16":
        ref = got.copy().view(ml_dtypes.bfloat16).astype(np.float32)
    else:
        ref = reference_row_decode(fmt, got, n, block)
    return same_bits_or_nan(back.ravel(), ref.ravel(), f"{what}: decode")


def main():
    xml_out = sys.argv[2]
    cases = [
        ("fp16_values", check_fp16),
        ("bf16_values", check_bf16),
        ("fp8_e4m3_values", check_fp8),
        ("fp4_e2m1_values", check_fp4),
        ("fp16_rows", check_rows("fp16", 8, 128, 0)),
        ("bf16_rows", check_rows("bf16", 8, 128, 0)),
        ("fp8_e4m3_rows_block128", check_rows("fp8_e4m3", 8, 128, 128)),
        ("fp8_e4m3_rows_block16", check_rows("fp8_e4m3", 4, 64, 16)),
        ("int8_rows_block128", check_rows("int8", 8, 128, 128)),
        ("int8_rows_block32", check_rows("int8", 2, 96, 32)),
        ("fp4_e2m1_rows_block32", check_rows("fp4_e2m1", 8, 128, 32)),
        ("fp4_e2m1_rows_block16", check_rows("fp4_e2m1", 2, 64, 16)),
        ("int4_rows_block32", check_rows("int4", 8, 128, 32)),
        ("int4_rows_block128", check_rows("int4", 4, 128, 128)),
    ]
    body, failures = [], 0
    for name, fn in cases:
        start = time.time()
        try:
            err = fn()
        except Exception as e:  # a crash of the tool or of the check is a failure
            err = f"{type(e).__name__}: {e}"
        took = time.time() - start
        print(f"{'FAIL' if err else 'ok  '} {name} ({took:.2f}s)")
        entry = f'  <testcase classname="kv_codec_oracle" name="{name}" time="{took:.3f}">'
        if err:
            failures += 1
            print(err)
            entry += f'<failure message="{xml.sax.saxutils.escape(err.splitlines()[0], {chr(34): "&quot;"})}">'
            entry += xml.sax.saxutils.escape(err) + "</failure>"
        body.append(entry + "</testcase>")
    with open(xml_out, "w") as f:
        f.write('<?xml version="1.0" encoding="UTF-8"?>\n')
        f.write(f'<testsuites><testsuite name="kv_codec_oracle" tests="{len(cases)}" '
                f'failures="{failures}">\n')
        f.write("\n".join(body) + "\n</testsuite></testsuites>\n")
    print(f"numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}: "
          f"{len(cases) - failures} of {len(cases)} comparisons match")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
