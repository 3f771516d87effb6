"""Reference decoder for the xl KV codec (a transform across layers), in numpy.

Implements "The xl tracks (a transform across layers)" of
docs/kvcache-wire-format.md: the model's KV basis file (KVXLBAS1: per group
of G layers and kind, K then V, the means, the variances and the fp16
components; its id the FNV-1a 64 of the whole file), the plan that follows
from the basis and the header's two steps (per block the kept prefix of
components, each one's class), the group header in object 0 (version,
flags, T, L H D G, basis id, s_K s_V, 96 rANS tables, one per kind and
class), and per token either the sink's fp16 values or the ac tracks' rANS
framing of the token's coefficient codes (16 lanes, coefficient j on lane
j mod 16, one shared word stream, varint escapes, zigzag); the values are
mean + sum over coded components of (float32(q) x s) u_i per block.

Written from that document alone, without reading kvcast's C++ codec, so
that agreement with it (tests/interop/xl_decoder_test.py) is evidence that
the document is complete and correct. The generic pieces the xl section
takes from the ac tracks (varints, frequency tables, the reader that
refuses to overrun) come from ac_decoder.py, itself written from the doc.

Every refusal raises ValueError. Named by the document: a basis file with
another magic or size; a header of another version, L H D G or basis id;
flags with a bit other than bit 0 set; a step that is not positive and
finite; a table of more than 256 frequencies or whose frequencies do not
sum to 4096; a lane state below 2^16; a word stream that runs out; lane
states that do not end at 2^16; words or bytes left over (a sink section
of another size, missing or unused escape bytes); a coefficient whose
table the header leaves out; |q| > 2^24 (and, as the ac tracks allow, an
escape varint above 2^26); a varint longer than 5 bytes or not below 2^32.
Taken from the ac tracks ("notation as for the ac tracks"): a number of
objects other than the header's T. Not named by the xl section but refused
here since the plan needs them: a basis with a zero field or G > L, and
variances that are not descending (or NaN).

    basis = load_basis(path)            # or parse_basis(bytes)
    values = decode_group(objects, basis)
    # float32, shape (T, L * 2 * H * D), payload order, K before RoPE
"""

import math
import struct

import numpy as np

from ac_decoder import _read_table, _Reader  # the ac tracks' varints and tables

MAGIC = b"KVXLBAS1"
VERSION = 1
FLAG_SINK = 0x01
CLASSES = 48
KINDS = 2  # K, then V
LANES = 16
PROB_BITS = 12
PROB_SCALE = 1 << PROB_BITS
STATE_LOW = 1 << 16
ESCAPE = 255
MAX_ESCAPE = 1 << 26
MAX_CODE = 1 << 24
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
HEADER_FIXED = 1 + 1 + 2 + 4 * 2 + 8 + 4 + 4  # up to the tables


def fnv1a64(data: bytes) -> int:
    """FNV-1a 64: per byte, h = (h xor byte) x prime mod 2^64."""
    h = FNV_OFFSET
    mask = (1 << 64) - 1
    for byte in data:
        h = ((h ^ byte) * FNV_PRIME) & mask
    return h


class Block:
    """One (group, kind) of a basis: its layers and dim = n_g H D values."""

    def __init__(self, group: int, kind: int, first_layer: int, layers: int, dim: int,
                 mean: np.ndarray, variance: np.ndarray, components: np.ndarray):
        self.group, self.kind = group, kind
        self.first_layer, self.layers, self.dim = first_layer, layers, dim
        self.mean = mean  # float32, dim
        self.variance = variance  # float32, dim, descending
        self.components = components  # float32 (fp16 widened), dim x dim, row i = component i


class Basis:
    """A parsed KVXLBAS1 file and its id."""

    def __init__(self, data: bytes):
        data = bytes(data)
        if len(data) < 16 or data[:8] != MAGIC:
            raise ValueError(f"basis: magic {data[:8]!r}, not {MAGIC!r}")
        self.layers, self.heads, self.head_dim, self.group_layers = struct.unpack_from("<4H", data, 8)
        fields = (self.layers, self.heads, self.head_dim, self.group_layers)
        if 0 in fields:
            raise ValueError(f"basis: L, H, D, G = {fields}, a zero field")
        if self.group_layers > self.layers:
            raise ValueError(f"basis: G = {self.group_layers} is above L = {self.layers}")
        self.groups = -(-self.layers // self.group_layers)
        row = self.heads * self.head_dim
        dims = [min((g + 1) * self.group_layers, self.layers) * row - g * self.group_layers * row
                for g in range(self.groups)]
        size = 16 + sum(KINDS * (8 * dim + 2 * dim * dim) for dim in dims)
        if len(data) != size:
            raise ValueError(f"basis: size {len(data)} bytes, L, H, D, G = {fields} make {size}")
        self.id = fnv1a64(data)
        self.blocks: list[Block] = []  # file order: group, then K before V
        pos = 16
        for g, dim in enumerate(dims):
            first = g * self.group_layers
            for kind in range(KINDS):
                mean = np.frombuffer(data, "<f4", dim, pos).astype(np.float32)
                variance = np.frombuffer(data, "<f4", dim, pos + 4 * dim).astype(np.float32)
                pos += 8 * dim
                comps = np.frombuffer(data, "<f2", dim * dim, pos).astype(np.float32).reshape(dim, dim)
                pos += 2 * dim * dim
                # "descending": not larger than the one before; NaN fails too.
                if not (variance[1:] <= variance[:-1]).all() or np.isnan(variance).any():
                    raise ValueError(f"basis: block (group {g}, kind {kind})'s variances are not descending")
                self.blocks.append(Block(g, kind, first, dim // row, dim, mean, variance, comps))

    @property
    def token_floats(self) -> int:
        return self.layers * 2 * self.heads * self.head_dim


def parse_basis(data: bytes) -> Basis:
    return Basis(data)


def load_basis(path: str) -> Basis:
    with open(path, "rb") as f:
        return Basis(f.read())


def coded_count(variance: np.ndarray, step: float) -> int:
    """k: the block's first k components have variance_i >= s^2 / 12 (binary64)."""
    s = float(np.float32(step))
    threshold = s * s / 12.0
    k = 0
    while k < variance.size and float(variance[k]) >= threshold:
        k += 1
    return k


def component_class(variance: float, step: float) -> int:
    """clamp(floor(4 log2(sqrt(variance) / s)) + 8, 0, 47), in binary64.

    Only coded components have a class, so variance >= s^2 / 12 > 0; an
    infinite one (x = inf) is class 47.
    """
    x = 4.0 * math.log2(math.sqrt(float(variance)) / float(np.float32(step)))
    if x >= CLASSES - 8:
        return CLASSES - 1
    return min(max(math.floor(x) + 8, 0), CLASSES - 1)


class Plan:
    """Per block its coded prefix and classes; per coefficient its table."""

    def __init__(self, basis: Basis, k_step: float, v_step: float):
        steps = (np.float32(k_step), np.float32(v_step))
        self.kept: list[int] = []
        self.classes: list[list[int]] = []
        self.offsets: list[int] = []  # each block's first coefficient
        tables = []
        total = 0
        for block in basis.blocks:
            k = coded_count(block.variance, steps[block.kind])
            classes = [component_class(block.variance[i], steps[block.kind]) for i in range(k)]
            self.kept.append(k)
            self.classes.append(classes)
            self.offsets.append(total)
            tables += [block.kind * CLASSES + c for c in classes]
            total += k
        self.total = total
        self.table_index = np.array(tables, dtype=np.int64)  # kind x 48 + class per coefficient


class _TableStack:
    """The 96 tables stacked (index kind x 48 + class) so one gather serves 16 lanes."""

    def __init__(self, tables):
        self.present = np.array([t is not None for t in tables])
        self.freq = np.zeros((len(tables), 256), dtype=np.int64)
        self.cum = np.zeros((len(tables), 256), dtype=np.int64)
        self.symbol = np.zeros((len(tables), PROB_SCALE), dtype=np.int64)
        for i, table in enumerate(tables):
            if table is not None:
                self.freq[i], self.cum[i], self.symbol[i] = table.freq, table.cum, table.symbol


class Group:
    """One group parsed: header fields, plan, the sink's values and the codes."""

    def __init__(self, objects: list[bytes], basis: Basis):
        if not objects:
            raise ValueError("a group has at least one object")
        first = _Reader(bytes(objects[0]), "object 0")
        version = first.u8("version")
        if version != VERSION:
            first.fail(f"version {version}, this decoder reads version {VERSION}")
        flags = first.u8("flags")
        if flags & ~FLAG_SINK:
            first.fail(f"flags 0x{flags:02x}: bits other than bit 0 set")
        self.sink = bool(flags & FLAG_SINK)
        self.tokens = first.u16("T")
        shape = tuple(first.u16(f) for f in "LHDG")
        want = (basis.layers, basis.heads, basis.head_dim, basis.group_layers)
        if shape != want:
            first.fail(f"L, H, D, G = {shape}, the basis' are {want}")
        basis_id = struct.unpack("<Q", first.take(8, "basis id"))[0]
        if basis_id != basis.id:
            first.fail(f"basis id 0x{basis_id:016x}, the basis' is 0x{basis.id:016x}")
        self.k_step, self.v_step = np.frombuffer(first.take(8, "s_K, s_V"), "<f4")
        for name, s in (("s_K", self.k_step), ("s_V", self.v_step)):
            if not (np.isfinite(s) and s > 0):
                first.fail(f"step {name} = {float(s)!r} is not positive and finite")
        tables = []
        for kind in "KV":
            for c in range(CLASSES):
                tables.append(_read_table(first, f"table ({kind}, class {c})", allow_empty=True))
        if self.tokens != len(objects):
            first.fail(f"header says T = {self.tokens}, the group has {len(objects)} objects")
        self.plan = Plan(basis, self.k_step, self.v_step)
        stack = _TableStack(tables)
        # A coded token's coefficients each need their table; a sink-only
        # group decodes no coefficient, so its header may leave them all out.
        missing = ~stack.present[self.plan.table_index]

        self.sink_values = None  # float32 token_floats, token 0's fp16 values widened
        self.codes = np.zeros((self.tokens, self.plan.total), dtype=np.int64)
        for t, payload in enumerate(objects):
            r = first if t == 0 else _Reader(bytes(payload), f"object {t}")
            if t == 0 and self.sink:
                n = basis.token_floats
                self.sink_values = np.frombuffer(r.take(2 * n, "sink values"), "<f2").astype(np.float32)
                if r.remaining():
                    r.fail(f"{r.remaining()} byte(s) left after the sink's fp16 values")
            else:
                if missing.any():
                    j = int(np.argmax(missing))
                    i = int(self.plan.table_index[j])
                    r.fail(f"coefficient {j} has no table: the header leaves out table "
                           f"({'KV'[i // CLASSES]}, class {i % CLASSES})")
                self.codes[t] = _decode_codes(r, self.plan.table_index, stack)


def _decode_codes(r: _Reader, table_index: np.ndarray, stack: _TableStack) -> np.ndarray:
    """One token section in the ac tracks' rANS framing: the coefficient codes.

    Coefficient j runs on lane j mod 16; chunks of 16 coefficients start on
    lane 0, so within a chunk lane order is coefficient order, the order in
    which renormalizing lanes take words from the shared stream.
    """
    states = np.frombuffer(r.take(4 * LANES, "lane states"), "<u4").astype(np.int64)
    if (states < STATE_LOW).any():
        j = int(np.argmax(states < STATE_LOW))
        r.fail(f"lane {j}'s state {int(states[j])} is below 2^16")
    count = r.varint("W")
    words = np.frombuffer(r.take(2 * count, f"{count} words"), "<u2").astype(np.int64)
    n = table_index.size
    z = np.empty(n, dtype=np.int64)
    used = 0
    for start in range(0, n, LANES):
        tables = table_index[start:start + LANES]
        m = tables.size
        x = states[:m]
        slot = x & (PROB_SCALE - 1)
        s = stack.symbol[tables, slot]
        x = stack.freq[tables, s] * (x >> PROB_BITS) + slot - stack.cum[tables, s]
        low = x < STATE_LOW
        wanted = int(np.count_nonzero(low))
        if wanted:
            if used + wanted > count:
                r.fail(f"word stream runs out at coefficient {start} (W = {count})")
            x[low] = (x[low] << 16) | words[used:used + wanted]
            used += wanted
        states[:m] = x
        z[start:start + m] = s
    if (states != STATE_LOW).any():
        r.fail(f"final lane states are not all 2^16: {states.tolist()}")
    if used != count:
        r.fail(f"{count - used} of {count} words left unread")

    escaped = np.flatnonzero(z == ESCAPE)
    escapes = []
    while r.remaining():
        if len(escapes) == escaped.size:
            r.fail(f"{r.remaining()} byte(s) left after the {escaped.size} escape varint(s)")
        e = r.varint(f"escape {len(escapes)}")
        if e > MAX_ESCAPE:
            r.fail(f"escape {len(escapes)} is {e}, above 2^26")
        escapes.append(e)
    if len(escapes) != escaped.size:
        r.fail(f"{escaped.size} escape symbols but {len(escapes)} escape varints")
    z[escaped] += np.array(escapes, dtype=np.int64)
    q = np.where(z % 2 == 0, z // 2, -((z + 1) // 2))  # zigzag
    beyond = np.abs(q) > MAX_CODE
    if beyond.any():
        j = int(np.argmax(beyond))
        r.fail(f"coefficient {j} has code {int(q[j])}, |q| above 2^24")
    return q


def reconstruct(group: Group, basis: Basis, codes: np.ndarray | None = None) -> np.ndarray:
    """The values of a parsed group (or of `codes` in its place), (T, L 2 H D) float32.

    Per block: mean + sum over the coded components of (float32(q) x s) u_i,
    the products binary32, the sum a float32 matrix product; the block's
    vector is its layers' rows of its kind, layer by layer. The sink token
    (if any) is its fp16 values.
    """
    codes = group.codes if codes is None else codes
    row = basis.heads * basis.head_dim
    out = np.empty((group.tokens, basis.layers, 2, row), dtype=np.float32)
    steps = (np.float32(group.k_step), np.float32(group.v_step))
    for b, block in enumerate(basis.blocks):
        k, at = group.plan.kept[b], group.plan.offsets[b]
        coef = codes[:, at:at + k].astype(np.float32) * steps[block.kind]  # binary32 products
        vec = block.mean[None, :] + coef @ block.components[:k]
        out[:, block.first_layer:block.first_layer + block.layers, block.kind] = (
            vec.reshape(group.tokens, block.layers, row))
    out = out.reshape(group.tokens, basis.token_floats)
    if group.sink_values is not None:
        out[0] = group.sink_values
    return out


def decode_group(objects: list[bytes], basis: Basis) -> np.ndarray:
    """Decodes the objects 0 .. T-1 of one xl group against `basis`.

    Returns float32 values of shape (T, L * 2 * H * D), each row one token's
    payload order (per layer K then V, heads in order), K before RoPE.
    Raises ValueError for anything the format says a decoder refuses.
    """
    group = Group(objects, basis)
    return reconstruct(group, basis)
