#!/usr/bin/env python3
"""Writes the GGUF fuzzer's seed corpus (small valid files) next to this script.

    python3 engine/model/fuzz/make_corpus.py
"""
import os
import struct

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def s(text):
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, payload):
    return s(key) + struct.pack("<I", vtype) + payload


def gguf(version, metadata, tensors, alignment=32):
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(metadata))
    out += b"".join(metadata)
    offset, blobs = 0, []
    for name, ggml_type, dims, data in tensors:
        out += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ggml_type, offset)
        blobs.append(data)
        offset += -(-len(data) // alignment) * alignment
    out += b"\0" * (-len(out) % alignment)
    for data in blobs:
        out += data + b"\0" * (-len(data) % alignment)
    return out


every_type = [
    kv("general.architecture", 8, s("llama")),
    kv("u8", 0, struct.pack("<B", 7)), kv("i8", 1, struct.pack("<b", -7)),
    kv("u16", 2, struct.pack("<H", 700)), kv("i16", 3, struct.pack("<h", -700)),
    kv("u32", 4, struct.pack("<I", 70000)), kv("i32", 5, struct.pack("<i", -70000)),
    kv("f32", 6, struct.pack("<f", 0.5)), kv("bool", 7, b"\x01"),
    kv("u64", 10, struct.pack("<Q", 1 << 40)), kv("i64", 11, struct.pack("<q", -(1 << 40))),
    kv("f64", 12, struct.pack("<d", 0.25)),
    kv("strings", 9, struct.pack("<IQ", 8, 2) + s("a") + s("bc")),
    kv("ints", 9, struct.pack("<IQ", 5, 3) + struct.pack("<iii", 1, 2, 3)),
    kv("nested", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 0, 2) + b"\x01\x02"),
]
half_one = struct.pack("<e", 0.01)
tensors = [
    ("f32.weight", 0, [4, 2], struct.pack("<8f", *range(8))),
    ("f16.weight", 1, [4], struct.pack("<4e", 1, 2, 3, 4)),
    ("q8_0.weight", 8, [32], half_one + bytes(range(32))),
    ("q4_1.weight", 3, [32], half_one + half_one + bytes(range(16))),
    ("q5_0.weight", 6, [32], half_one + b"\xff\x00\xff\x00" + bytes(range(16))),
    ("q4_k.weight", 12, [256], half_one + half_one + bytes(range(140))),
    ("q6_k.weight", 14, [256], bytes(range(208)) + half_one),
]
os.makedirs(HERE, exist_ok=True)
files = {
    "every_type_v3.gguf": gguf(3, every_type, tensors),
    "every_type_v2.gguf": gguf(2, every_type, tensors[:2]),
    "aligned_64.gguf": gguf(3, [kv("general.alignment", 4, struct.pack("<I", 64))], tensors[2:4], 64),
    "empty.gguf": gguf(3, [], []),
}
for name, data in files.items():
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)
