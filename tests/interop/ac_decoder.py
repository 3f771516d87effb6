"""Reference decoder for the `ac` and `ac-lo` KV-cache tracks, in numpy.

Implements "The ac tracks (arithmetic coding)" of
docs/kvcache-wire-format.md (wire format versions 1 and 2): the group header (per-unit
quantization steps, delta-channel bits and rANS frequency tables) in object
0, then one token section per object (per-unit step shifts, 16 interleaved
rANS lanes, a shared 16-bit word stream and varint escapes), zigzag
residuals, delta coding against the previous token's codes, and
value = float32(code) x step; in version 2 with transform 1, each unit's
values rotated back (the inverse randomized Hadamard transform, "Transform"),
and with transform 2 the K units' channels then divided by the header's
weights.

Written from that document alone, without reading kvcast's C++ codec, so
that agreement with it (tests/interop/ac_decoder_test.py) is evidence that
the document is complete and correct.

Every refusal the document asks of a decoder raises ValueError: a wrong
version or shape; T = 0, or a number of objects other than T (the objects
are ids 0 .. T-1, so this covers an object id >= T); a varint longer than 5
bytes or not below 2^32 (non-minimal ones are read); a table size outside
1..256 (raw) or 0..256 (delta), or frequencies not summing to 4096 (zeros
are allowed); a shift above 15; a lane state below 2^16; a word stream that
runs out; lane states that do not end at exactly 2^16; unread words; unused
or missing escape bytes; an escape varint above 2^26; a code q with
|q| > 2^24; a delta-coded value without a delta table.

    values = decode_group(objects, layers, heads, head_dim)
    # float32, shape (T, layers * 2 * heads * head_dim), payload order
"""

import struct

import numpy as np

VERSIONS = (1, 2)
TRANSFORM_NONE, TRANSFORM_HADAMARD, TRANSFORM_WEIGHTED = 0, 1, 2
# F[i] = 2^(i/16) as binary32, by bit pattern ("Transform").
_WEIGHT_FRACTIONS = np.array([
    0x3f800000, 0x3f85aac3, 0x3f8b95c2, 0x3f91c3d3, 0x3f9837f0, 0x3f9ef532, 0x3fa5fed7, 0x3fad583f,
    0x3fb504f3, 0x3fbd08a4, 0x3fc5672a, 0x3fce248c, 0x3fd744fd, 0x3fe0ccdf, 0x3feac0c7, 0x3ff5257d,
], dtype=np.uint32).view(np.float32)


def channel_weight(codes: np.ndarray) -> np.ndarray:
    """The binary32 weight of each code: F[w mod 16] x 2^(w div 16 - 8), exact."""
    codes = codes.astype(np.int32)
    return np.ldexp(_WEIGHT_FRACTIONS[codes % 16], codes // 16 - 8).astype(np.float32)
LANES = 16  # rANS lanes; value i runs on lane i mod 16
PROB_BITS = 12  # frequencies sum to 2^12 = 4096
PROB_SCALE = 1 << PROB_BITS
STATE_LOW = 1 << 16  # lane states live in [2^16, 2^32)
ESCAPE = 255  # the symbol whose z is 255 + the next escape varint
MAX_SHIFT = 15
MAX_ESCAPE = 1 << 26  # a larger escape varint is refused
MAX_CODE = 1 << 24  # |q| above this is refused (float32(q) stays exact)
# 2^-k for every allowed shift k, exact in binary32
POW2_NEG = np.exp2(-np.arange(MAX_SHIFT + 1)).astype(np.float32)


class _Reader:
    """Little-endian reads over one object's payload; refuses to overrun."""

    def __init__(self, data: bytes, what: str):
        self.data = data
        self.pos = 0
        self.what = what

    def fail(self, message: str):
        raise ValueError(f"{self.what}: {message} (at byte {self.pos} of {len(self.data)})")

    def take(self, n: int, field: str) -> bytes:
        if n > len(self.data) - self.pos:
            self.fail(f"truncated: {field} needs {n} bytes")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def u8(self, field: str) -> int:
        return self.take(1, field)[0]

    def u16(self, field: str) -> int:
        return struct.unpack("<H", self.take(2, field))[0]

    def varint(self, field: str) -> int:
        """Unsigned LEB128, at most 5 bytes, value below 2^32."""
        value = 0
        for i in range(5):
            byte = self.u8(field)
            value |= (byte & 0x7F) << (7 * i)
            if not byte & 0x80:
                if value >= 1 << 32:
                    self.fail(f"{field}: varint {value} is not below 2^32")
                return value
        self.fail(f"{field}: varint longer than 5 bytes")

    def remaining(self) -> int:
        return len(self.data) - self.pos


class _Table:
    """One rANS frequency table, as lookups indexed by slot and by symbol."""

    def __init__(self, freqs: list[int]):
        n = len(freqs)
        self.freq = np.zeros(256, dtype=np.int64)
        self.freq[:n] = freqs
        self.cum = np.zeros(256, dtype=np.int64)  # C_s = f_0 + ... + f_{s-1}
        self.cum[1:n] = np.cumsum(freqs)[:-1]
        # slot -> the s with C_s <= slot < C_s + f_s
        self.symbol = np.repeat(np.arange(n, dtype=np.uint8), freqs)


def _read_table(r: _Reader, field: str, allow_empty: bool) -> _Table | None:
    n = r.varint(f"{field} size")
    smallest = 0 if allow_empty else 1
    if not smallest <= n <= 256:
        r.fail(f"{field} has {n} frequencies, not {smallest}..256")
    if n == 0:
        return None
    freqs = [r.varint(f"{field} frequency {s}") for s in range(n)]
    if sum(freqs) != PROB_SCALE:
        r.fail(f"{field} frequencies sum to {sum(freqs)}, not {PROB_SCALE}")
    return _Table(freqs)


class _Header:
    """The group header: T, and per unit the step, delta channels and tables."""

    def __init__(self, r: _Reader, layers: int, heads: int, head_dim: int):
        version = r.u8("version")
        if version not in VERSIONS:
            r.fail(f"version {version}, this decoder reads versions {VERSIONS}")
        transform = r.u8("transform")  # version 1: reserved, ignored
        self.transform = TRANSFORM_NONE if version == 1 else transform
        if self.transform not in (TRANSFORM_NONE, TRANSFORM_HADAMARD, TRANSFORM_WEIGHTED):
            r.fail(f"transform {transform}, not 0 (none), 1 (Hadamard) or 2 (weighted K, Hadamard)")
        self.tokens = r.u16("T")
        if self.tokens == 0:
            r.fail("T is 0, not 1 .. 65535")
        shape = (r.u16("L"), r.u16("H"), r.u16("D"))
        if shape != (layers, heads, head_dim):
            r.fail(f"shape (L, H, D) = {shape}, the model's is {(layers, heads, head_dim)}")
        if self.transform != TRANSFORM_NONE and head_dim & (head_dim - 1):
            r.fail(f"a Hadamard transform of heads of {head_dim}, not a power of two")
        self.k_weights = None  # transform 2: (layers, heads, head_dim) binary32
        if self.transform == TRANSFORM_WEIGHTED:
            codes = np.frombuffer(r.take(layers * heads * head_dim, "K channel weights"), dtype=np.uint8)
            self.k_weights = channel_weight(codes).reshape(layers, heads, head_dim)
        units = 2 * layers * heads
        self.steps = np.zeros(units, dtype=np.float32)
        self.delta_channel = np.zeros((units, head_dim), dtype=bool)
        self.raw_tables: list[_Table] = []
        self.delta_tables: list[_Table | None] = []
        for u in range(units):
            self.steps[u] = np.frombuffer(r.take(4, f"unit {u} step"), dtype="<f4")[0]
            bits = np.frombuffer(r.take(head_dim // 8, f"unit {u} mode bits"), dtype=np.uint8)
            self.delta_channel[u] = np.unpackbits(bits, bitorder="little").astype(bool)
            self.raw_tables.append(_read_table(r, f"unit {u} raw table", allow_empty=False))
            self.delta_tables.append(_read_table(r, f"unit {u} delta table", allow_empty=True))


class _TableStack:
    """All units' tables stacked so that one numpy gather serves 16 lanes.

    Table index 2u is unit u's raw table, 2u + 1 its delta table (all-zero
    rows when the unit has none; a decoder never reaches them, see
    _Decoder.table_index).
    """

    def __init__(self, header: _Header):
        units = len(header.raw_tables)
        self.freq = np.zeros((2 * units, 256), dtype=np.int64)
        self.cum = np.zeros((2 * units, 256), dtype=np.int64)
        self.symbol = np.zeros((2 * units, PROB_SCALE), dtype=np.uint8)
        for u in range(units):
            for k, table in enumerate((header.raw_tables[u], header.delta_tables[u])):
                if table is not None:
                    self.freq[2 * u + k] = table.freq
                    self.cum[2 * u + k] = table.cum
                    self.symbol[2 * u + k] = table.symbol


def _decode_symbols(r: _Reader, table_index: np.ndarray, stacks: _TableStack) -> np.ndarray:
    """Steps 2 and 3 up to the escape: the rANS symbols of one token.

    Reads the lane states, W and the words from r. Value i runs on lane
    i mod 16 and a token has a multiple of 16 values, so block b of 16
    values puts value 16 b + j on lane j: numpy advances the 16 lanes at
    once, and the lanes that renormalize take the next words of the shared
    stream in lane order, which is symbol order.
    """
    states = np.frombuffer(r.take(4 * LANES, "lane states"), dtype="<u4").astype(np.int64)
    if (states < STATE_LOW).any():
        j = int(np.argmax(states < STATE_LOW))
        r.fail(f"lane {j}'s state {int(states[j])} is below 2^16")
    count = r.varint("W")
    words = np.frombuffer(r.take(2 * count, f"{count} words"), dtype="<u2").astype(np.int64)

    n = table_index.size
    symbols = np.empty(n, dtype=np.int64)
    next_word = 0
    for start in range(0, n, LANES):
        tables = table_index[start:start + LANES]
        slot = states & (PROB_SCALE - 1)
        s = stacks.symbol[tables, slot]
        states = stacks.freq[tables, s] * (states >> PROB_BITS) + slot - stacks.cum[tables, s]
        low = states < STATE_LOW
        wanted = int(np.count_nonzero(low))
        if wanted:
            if next_word + wanted > count:
                r.fail(f"word stream runs out at value {start} (W = {count})")
            states[low] = (states[low] << 16) | words[next_word:next_word + wanted]
            next_word += wanted
        symbols[start:start + LANES] = s
    if (states != STATE_LOW).any():
        r.fail(f"final lane states are not all 2^16: {states.tolist()}")
    if next_word != count:
        r.fail(f"{count - next_word} of {count} words left unread")
    return symbols


def _hadamard_signs(d: int) -> np.ndarray:
    """s_c = -1 when the lowest bit of splitmix64(c) is 1, else +1."""
    mask = (1 << 64) - 1
    signs = []
    for c in range(d):
        z = (c + 0x9E3779B97F4A7C15) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        signs.append(-1.0 if (z ^ (z >> 31)) & 1 else 1.0)
    return np.array(signs, dtype=np.float32)


def hadamard(values: np.ndarray, d: int) -> np.ndarray:
    """H y for every row of d values (float32 throughout).

    The butterflies h = 1, 2, 4, ..., d/2: within each block of 2h values,
    (y_j, y_{j+h}) becomes (y_j + y_{j+h}, y_j - y_{j+h}); every sum one
    float32 operation, as the document fixes them.
    """
    y = values.reshape(-1, d).astype(np.float32)
    h = 1
    with np.errstate(over="ignore", invalid="ignore"):
        while h < d:
            blocks = y.reshape(y.shape[0], d // (2 * h), 2, h)
            a, b = blocks[:, :, 0, :], blocks[:, :, 1, :]
            y = np.stack((a + b, a - b), axis=2).reshape(-1, d)
            h *= 2
    return y


def rotate(values: np.ndarray, d: int) -> np.ndarray:
    """The encoder's side (informative): y = H (D x) per row of d values."""
    return hadamard(values.reshape(-1, d).astype(np.float32) * _hadamard_signs(d), d)


def unrotate(values: np.ndarray, d: int) -> np.ndarray:
    """x = D (H y) / d for every row of d values (float32 throughout); also
    the rotated fixed-size tracks' (int4-rot, fp4-e2m1-rot) inverse."""
    y = hadamard(values, d)
    with np.errstate(over="ignore", invalid="ignore"):
        return (y * _hadamard_signs(d)) * np.float32(1.0 / d)


def decode_group(objects: list[bytes], layers: int, heads: int, head_dim: int) -> np.ndarray:
    """Decodes the objects 0 .. T-1 of one `ac` / `ac-lo` group.

    objects[t] is the payload of object id t; a list of another length than
    the header's T is refused. Returns float32 values of shape
    (T, layers * 2 * heads * head_dim), each row one token's payload order:
    per layer K then V, heads in order. Raises ValueError for any object the
    format says a decoder refuses.
    """
    if head_dim <= 0 or head_dim % 16:
        raise ValueError(f"head_dim {head_dim} is not a positive multiple of 16: no ac track")
    if not objects:
        raise ValueError("a group has at least one object")
    units = 2 * layers * heads
    n = units * head_dim

    first = _Reader(bytes(objects[0]), "object 0")
    header = _Header(first, layers, heads, head_dim)
    if header.tokens != len(objects):
        first.fail(f"header says T = {header.tokens}, the group has {len(objects)} objects")
    stacks = _TableStack(header)
    has_delta = np.array([t is not None for t in header.delta_tables])
    unit_of_value = np.repeat(np.arange(units), head_dim)
    delta_channel = header.delta_channel.reshape(n)

    out = np.empty((header.tokens, n), dtype=np.float32)
    prev_shifts = None  # token t - 1's shifts; None for token 0
    prev_codes = np.zeros(n, dtype=np.int64)
    for t, payload in enumerate(objects):
        r = first if t == 0 else _Reader(bytes(payload), f"object {t}")
        shifts = np.frombuffer(r.take(units, "shifts"), dtype=np.uint8).astype(np.int64)
        if (shifts > MAX_SHIFT).any():
            r.fail(f"shift {int(shifts.max())} is above {MAX_SHIFT}")
        # s_{t,u} = step_u x 2^-k, one binary32 product rounded to nearest
        # even (numpy keeps subnormals, so it is inexact only there).
        token_steps = header.steps * POW2_NEG[shifts]

        # Step 1: which values are delta-coded, hence which table each uses.
        if prev_shifts is None:
            delta = np.zeros(n, dtype=bool)
        else:
            continued = shifts == prev_shifts
            delta = continued[unit_of_value] & delta_channel
        missing = delta & ~has_delta[unit_of_value]
        if missing.any():
            u = int(unit_of_value[np.argmax(missing)])
            r.fail(f"unit {u} has delta-coded values but the group has no delta table for it")
        table_index = 2 * unit_of_value + delta

        # Steps 2-3: rANS symbols, then escapes in symbol order.
        z = _decode_symbols(r, table_index, stacks)
        escaped = np.flatnonzero(z == ESCAPE)
        escapes = []
        while r.remaining():
            if len(escapes) == escaped.size:
                r.fail(f"{r.remaining()} byte(s) left after the {escaped.size} escape varint(s)")
            escape = r.varint(f"escape {len(escapes)}")
            if escape > MAX_ESCAPE:
                r.fail(f"escape {len(escapes)} is {escape}, above 2^26")
            escapes.append(escape)
        if len(escapes) != escaped.size:
            r.fail(f"{escaped.size} escape symbols but {len(escapes)} escape varints")
        z[escaped] += np.array(escapes, dtype=np.int64)

        # Step 4: zigzag.  Step 5: add the previous token's code if delta-coded.
        residual = np.where(z % 2 == 0, z // 2, -((z + 1) // 2))
        codes = residual + np.where(delta, prev_codes, 0)
        beyond = np.abs(codes) > MAX_CODE
        if beyond.any():
            i = int(np.argmax(beyond))
            r.fail(f"value {i} has code {int(codes[i])}, |q| above 2^24")

        # Step 6: one binary32 product per value (IEEE: NaN for a NaN step,
        # inf on overflow or for an infinite step, so no numpy warnings).
        with np.errstate(over="ignore", invalid="ignore"):
            out[t] = codes.astype(np.float32) * token_steps[unit_of_value]
        prev_shifts, prev_codes = shifts, codes
    if header.transform != TRANSFORM_NONE:
        out = unrotate(out, head_dim).reshape(header.tokens, n)
    if header.k_weights is not None:  # K units: x_c / w_c, binary32 division
        view = out.reshape(header.tokens, layers, 2, heads, head_dim)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            view[:, :, 0] = view[:, :, 0] / header.k_weights[None]
        out = view.reshape(header.tokens, n)
    return out
