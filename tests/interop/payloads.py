#!/usr/bin/env python3
"""Deterministic object payloads shared by the kvcast interop tests.

The C++ side implements the identical function (see README.md,
"Payload function"); the test vectors printed by `python3 payloads.py`
are the contract between the two.

Definition (all strings ASCII, integers in decimal without sign, leading
zeros or separators; seed, group and object are unsigned 64-bit):

    block(i) = SHA-256( f"kvcast-interop:{seed}:{group}:{object}:{i}" )
    payload(seed, group, object, size) = (block(0) || block(1) || ...)[0:size]

i.e. the concatenation of 32-byte SHA-256 digests for i = 0, 1, 2, ...,
truncated to `size` bytes (size 0 gives the empty payload). Example: the
first block of (seed=7, group=0, object=0) is
SHA-256(b"kvcast-interop:7:0:0:0").
"""
import hashlib
import sys

PREFIX = "kvcast-interop"


def payload(seed: int, group: int, obj: int, size: int) -> bytes:
    """The payload of object `obj` of group `group` for this seed."""
    if min(seed, group, obj, size) < 0:
        raise ValueError("seed, group, object and size must be >= 0")
    out = bytearray()
    base = f"{PREFIX}:{seed}:{group}:{obj}:".encode("ascii")
    i = 0
    while len(out) < size:
        out += hashlib.sha256(base + str(i).encode("ascii")).digest()
        i += 1
    return bytes(out[:size])


# (seed, group, object, size) -> shown as hex of the payload, and SHA-256
# of the payload for the longer ones.
VECTORS = [
    (0, 0, 0, 0),
    (0, 0, 0, 1),
    (7, 0, 0, 32),
    (7, 0, 1, 40),
    (7, 3, 2, 64),
    (42, 1, 5, 100),
    (12345678901234567890, 99, 12, 33),
    (1, 2, 3, 160 * 1024),
]


def vectors():
    for seed, group, obj, size in VECTORS:
        p = payload(seed, group, obj, size)
        yield {
            "seed": seed, "group": group, "object": obj, "size": size,
            "hex": p.hex() if size <= 100 else None,
            "sha256_of_payload": hashlib.sha256(p).hexdigest(),
        }


def main(argv):
    import json
    if len(argv) == 5:
        seed, group, obj, size = (int(a) for a in argv[1:])
        sys.stdout.write(payload(seed, group, obj, size).hex() + "\n")
        return 0
    if len(argv) != 1:
        print("usage: payloads.py [SEED GROUP OBJECT SIZE]", file=sys.stderr)
        return 2
    for v in vectors():
        print(json.dumps(v))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
