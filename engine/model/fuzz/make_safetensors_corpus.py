#!/usr/bin/env python3
"""Writes the safetensors fuzzer's seed corpus (small valid files) into
safetensors_corpus/ next to this script.

    python3 engine/model/fuzz/make_safetensors_corpus.py
"""
import json
import os
import struct

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "safetensors_corpus")
SIZES = {"F32": 4, "F16": 2, "BF16": 2}


def safetensors(tensors, metadata=None, pad=True):
    """tensors: [(name, dtype, shape)], data bytes made up deterministically."""
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for i, (name, dtype, shape) in enumerate(tensors):
        n = SIZES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        blobs.append(bytes((i * 37 + j * 11) & 0xFF for j in range(n)))
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


SEEDS = {
    "one_f32": safetensors([("w", "F32", [2, 3])], {"format": "pt"}),
    "every_dtype": safetensors([("a", "F32", [4]), ("b", "F16", [2, 2]), ("c", "BF16", [3, 1])]),
    "scalar_and_empty": safetensors([("s", "F32", []), ("z", "F16", [0, 5])], {"n": "1"}),
    "llama_names": safetensors([("model.embed_tokens.weight", "BF16", [8, 4]),
                                ("model.layers.0.self_attn.q_proj.weight", "BF16", [4, 4]),
                                ("lm_head.weight", "F16", [8, 4])], {"format": "pt"}),
    "unpadded": safetensors([("x", "F32", [1])], pad=False),
    "empty": safetensors([], {}),
}

if __name__ == "__main__":
    os.makedirs(HERE, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(HERE, name + ".safetensors"), "wb") as f:
            f.write(data)
    print(f"wrote {len(SEEDS)} seeds to {HERE}")
