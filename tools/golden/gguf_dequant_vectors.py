#!/usr/bin/env python3
"""Test vectors for kvcast's GGML dequantization, from PyPI's `gguf` package.

Writes tests/data/gguf_dequant_vectors.json: for each block type, a few
seeded random blocks (raw bytes, hex) and the float32 values that
gguf.quants.dequantize gives for them (as uint32 bit patterns, so the C++
test compares bit for bit). Random bytes are valid blocks of every type
except for their half-float scales, which are set to finite values of
realistic size.

    python3 -m venv /tmp/gg && /tmp/gg/bin/pip install gguf==0.19.0 numpy
    /tmp/gg/bin/python tools/golden/gguf_dequant_vectors.py --out tests/data/gguf_dequant_vectors.json
"""
import argparse
import json

import gguf
import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T

# Byte offsets of the half-float scales inside one block of each type.
HALF_OFFSETS = {
    T.Q8_0: [0], T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2],
    T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208], T.F16: None, T.BF16: None,
}
BLOCKS = 3


def random_blocks(rng, qtype):
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=BLOCKS * block_bytes, dtype=np.uint8)
    if qtype == T.F16:
        raw = rng.normal(0, 1, BLOCKS * block_bytes // 2).astype(np.float16).view(np.uint8)
    elif qtype == T.BF16:
        f = rng.normal(0, 1, BLOCKS * block_bytes // 2).astype(np.float32)
        raw = (f.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    else:
        for b in range(BLOCKS):
            for off in HALF_OFFSETS[qtype]:
                scale = np.float16(rng.uniform(-0.05, 0.05))
                raw[b * block_bytes + off: b * block_bytes + off + 2] = \
                    np.frombuffer(scale.tobytes(), np.uint8)
    return raw, BLOCKS * block_elems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rng = np.random.default_rng(20261124)
    out = {"generator": "tools/golden/gguf_dequant_vectors.py",
           "gguf": gguf.__version__ if hasattr(gguf, "__version__") else "0.19.0",
           "numpy": np.__version__, "types": []}
    for qtype in HALF_OFFSETS:
        raw, count = random_blocks(rng, qtype)
        values = gguf.quants.dequantize(raw, qtype).astype(np.float32).reshape(-1)
        assert values.size == count
        out["types"].append({"type": qtype.name, "id": int(qtype), "count": count,
                             "bytes": raw.tobytes().hex(),
                             "float_bits": values.view(np.uint32).tolist()})
    with open(args.out, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
