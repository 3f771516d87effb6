#!/usr/bin/env python3
"""Does a transform fitted across heads and layers pay for the ac tracks? (issue 42, item 2)

A study on SmolLM2-135M-Instruct's KV with HF transformers (the oracle venv,
.venv-hf), not kvcast code. KVTC-style: per token, the pre-RoPE K of all
layers and KV heads concatenated (L x H x D = 5,760 values), and V likewise,
minus a mean, in a PCA basis fitted once on CALIBRATION text (lee.cor: 18
windows of 512 tokens, stride 256, each window's position 0, the attention
sink, left out). Scopes: global (5,760-dim), layer (a layer's 3 heads,
192-dim), head (64-dim, the transform already tried), oracle (global, fitted
on the evaluation prefixes: what more calibration text could give at most).
Bases and means are model metadata, not counted.

Product mode on EVALUATION windows (lee_background.cor, 512-token prefix +
256 teacher-forced tokens, spread evenly as kv_quality does): the prefix's
KV through a quantizer, the continuation's own KV exact.
  channel, channel-pre, coder: the ac encoder (docs/kvcache-wire-format.md,
      "Encoding"): per unit (layer, K/V, KV head) and 128-token group, step =
      the unit's largest |x| / levels, 2^k finer for a token 2^k smaller, the
      sink 2^6 finer, delta channels; K post-RoPE (channel-pre: pre-RoPE);
      coder adds the Hadamard rotation, the model's per-layer K levels and K
      channel weights (docs/results/smollm2_ac_tuning.txt): ac-lo's form.
      Size: each unit's raw and delta tables' entropy per group, escapes, the
      header (step, mode bits, tables as the format's varints), a shift byte
      per unit and token.
  pca-SCOPE[-w]: codes round(c_i / s_i) of c = B^T (x - mean), s_i = DELTA
      (w_i / G)^(-1/2) with -w, else DELTA; a component whose calibration
      variance is below s_i^2 / 12 is dropped (reverse water-filling); the
      sink at s_i / 64, nothing dropped, as Elias-gamma codes. w_i: K, the
      calibration queries' energy along the component, E[(R q . u)^2] (q
      pre-RoPE, the KV head's 3 query heads, R RoPE's rotation averaged over
      distances 1..767); V, ||W_o u||^2 over the columns reading the head; G
      their geometric mean over heads. DELTA_V = r DELTA_K, r from probes on
      2 calibration windows (K alone, V alone at 2.5 bits/value) equalizing
      KL per kept component; DELTA_K by bisection for a rate on calibration
      KV. Size accountings: class (headline, reachable): one table per class
      of components (calibration std / step in quarter-octaves) per group, in
      the coder's table format, 6 header bytes per kind and group; comp: a
      table per component per group, counted; static: a table per component
      from the calibration codes (model metadata), nothing per group; bound:
      a table per component per window, free (unreachable).
Sizes in bits per value of the fp16 cache (K and V; the rANS lane states, 66
bytes a token, counted for all). Quality: the continuation's perplexity
change (95% paired bootstrap over windows) and mean KL per position against
exact KV; then the bits each quantizer needs at equal quality (interpolated
in log quality).

Usage: .venv-hf/bin/python tools/bench/kv_transform_study.py GGUF [--windows 12]
          [--json FILE] [--cache PREFIX (keeps the captured KV)] [--quick]

Importable: load() the model, then the capture, coders, accounting and
metrics below serve other studies (tools/bench/kv_group_transform_study.py).
"""
import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from transformers.cache_utils import DynamicCache  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import results  # noqa: E402  (tools/report/results.py)

GROUP, PREFIX, CONT, TOKEN_BYTES = 128, 512, 256, 66
T0 = time.time()


def log(msg):
    print(f"[{time.time() - T0:5.0f}s] {msg}", flush=True)


def load(gguf, tuning):
    """Loads the model (2 threads) and the ac coder's tuning; sets the globals
    the functions below use: model, tokenizer, L, Hq, H, D, N, captured
    (q/k/v projections of the last run), inv_freq, hadamard, signs, k_scale,
    k_weight."""
    global model, tokenizer, L, Hq, H, D, N, captured, inv_freq, hadamard, signs, k_scale, k_weight
    torch.set_num_threads(2)
    where, name = os.path.dirname(os.path.abspath(gguf)), os.path.basename(gguf)
    model = AutoModelForCausalLM.from_pretrained(
        where, gguf_file=name, torch_dtype=torch.float32, attn_implementation="eager",
        tie_word_embeddings=True, local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=name, local_files_only=True)
    cfg = model.config
    L, Hq, H = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads
    D = cfg.hidden_size // Hq
    N = L * H * D  # values per token and kind
    captured = {}
    for i, layer in enumerate(model.model.layers):
        for proj in ("q_proj", "k_proj", "v_proj"):
            getattr(layer.self_attn, proj).register_forward_hook(
                lambda mod, inp, out, key=(proj[0], i): captured.__setitem__(key, out[0].detach()))
    inv_freq = model.model.rotary_emb.inv_freq.float()
    hadamard = torch.tensor([[1.0]])
    while hadamard.shape[0] < D:
        hadamard = torch.cat([torch.cat([hadamard, hadamard], 1), torch.cat([hadamard, -hadamard], 1)], 0)
    signs = torch.tensor([splitmix_sign(c) for c in range(D)])
    k_scale, k_weight = torch.ones(L), torch.ones(L, H, D)
    for line in open(tuning):
        f = line.split()
        if f and f[0] == "k":
            w = torch.tensor([float(x) for x in f[3:]])  # as the header's codes carry them
            k_weight[int(f[1]), int(f[2])] = torch.pow(2.0, torch.round(16 * torch.log2(w)) / 16)
        elif f and f[0][0].isdigit():
            k_scale[int(f[0])] = float(f[1])


def tokens_of(path):
    """The file's tokens (read as Latin-1 if not UTF-8, as kv_quality does)."""
    raw = open(path, "rb").read()
    try:
        return tokenizer(raw.decode("utf-8"))["input_ids"]
    except UnicodeDecodeError:
        return tokenizer(raw.decode("latin-1"))["input_ids"]


def spread(tokens, length, count):
    """`count` windows of `length` tokens, evenly spread, the first at 0."""
    step = (len(tokens) - length) // max(count - 1, 1)
    assert step >= length or count == 1, "text too short for that many windows"
    return [tokens[i * step:i * step + length] for i in range(count)]


def prefill(ids):
    """Runs ids; returns (pre-RoPE K, V) as (T, N) float32 and the queries
    (L, Hq, T, D), pre-RoPE."""
    with torch.no_grad():
        model(torch.tensor([ids]), use_cache=True)
    k = torch.stack([captured["k", l] for l in range(L)], 1)  # T, L, H*D
    v = torch.stack([captured["v", l] for l in range(L)], 1)
    q = torch.stack([captured["q", l].view(len(ids), Hq, D).transpose(0, 1) for l in range(L)])
    return k.reshape(len(ids), N), v.reshape(len(ids), N), q


def rope(k):
    """(T, N) pre-RoPE K at positions 0..T-1 -> post-RoPE (HF's rotate-half)."""
    ang = torch.arange(k.shape[0], dtype=torch.float32)[:, None] * inv_freq[None]
    cos, sin = torch.cat([ang.cos()] * 2, 1)[:, None], torch.cat([ang.sin()] * 2, 1)[:, None]
    x = k.view(k.shape[0], L * H, D)
    rot = torch.cat((-x[..., D // 2:], x[..., :D // 2]), -1)
    return (x * cos + rot * sin).reshape(k.shape)


def continuation(ids, k_post, v):
    """Log-probabilities of the continuation (CONT - 1 positions) on a prefix
    cache of post-RoPE K and V given as (PREFIX, N)."""
    cache = DynamicCache()
    for l in range(L):
        cache.update(k_post.view(PREFIX, L, H, D)[:, l].transpose(0, 1)[None].contiguous(),
                     v.view(PREFIX, L, H, D)[:, l].transpose(0, 1)[None].contiguous(), l)
    with torch.no_grad():
        logits = model(torch.tensor([ids[PREFIX:]]), past_key_values=cache).logits[0, :-1]
    return torch.log_softmax(logits.double(), -1)


# ---------------------------------------------------------------- size accounting
def varint_bytes(v):
    return 1 + (v >= 128) + (v >= 16384) + (v >= 1 << 21)


def symbols(q):
    """Codes -> (zigzag symbols capped at 255 = escape, escape varint bytes)."""
    z = np.where(q >= 0, 2 * q, -2 * q - 1).astype(np.int64)
    return np.minimum(z, 255), float(varint_bytes(np.maximum(z - 255, 0))[z >= 255].sum())


def table_bits(sym, tid, ntab, tables=True):
    """Bits of symbols coded with one table per id: entropy + (tables) each
    used table in the format's varints (n, then n frequencies scaled to 4096)."""
    counts = np.bincount((tid * 256 + sym).ravel(), minlength=ntab * 256).reshape(ntab, 256)
    tot = counts.sum(1, keepdims=True)
    p = counts / np.maximum(tot, 1)
    bits = float(-(counts * np.log2(np.where(counts > 0, p, 1))).sum())
    if tables:
        used = tot[:, 0] > 0
        n = 256 - np.argmax(counts[:, ::-1] > 0, 1)
        f = np.where(counts > 0, np.maximum(1, np.rint(p * 4096)), 0)
        fbytes = np.where(np.arange(256)[None] < n[:, None], varint_bytes(f), 0).sum(1)
        bits += 8 * float((varint_bytes(n) + fbytes)[used].sum())
    return bits


# ---------------------------------------------------------------- the ac encoder (channel basis)
def splitmix_sign(c, m=(1 << 64) - 1):
    z = (c + 0x9e3779b97f4a7c15) & m
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & m
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & m
    return -1.0 if (z ^ (z >> 31)) & 1 else 1.0


def channel_code(x, levels, rot=False, weight=None):
    """The ac encoder on one kind's (T, N) values; returns (x', bits)."""
    T = x.shape[0]
    x = x.view(T, L, H, D).permute(1, 2, 0, 3)  # L, H, T, D
    w = torch.ones(L, H, 1, D) if weight is None else weight[:, :, None]
    y = (x * w * signs) @ hadamard if rot else x
    out, bits = torch.empty_like(y), 8.0 * T * L * H  # a shift byte per unit and token
    unit_id = np.arange(L * H).reshape(L, H, 1, 1)
    for g in range(0, T, GROUP):
        b = y[:, :, g:g + GROUP]
        amax = b.abs().amax((2, 3), keepdim=True).clamp_min(1e-30)
        shift = torch.floor(torch.log2(amax / b.abs().amax(3, keepdim=True).clamp_min(1e-30)))
        shift = shift.clamp(0, 15)
        if g == 0:
            shift[:, :, 0] = (shift[:, :, 0] + 6).clamp(max=15)  # the sink
        step = amax / levels.view(L, H, 1, 1) * torch.pow(2.0, -shift)
        q = torch.round(b / step)
        out[:, :, g:g + GROUP] = q * step
        # Delta channels: a continued token (same shift as the one before)
        # codes q_t - q_{t-1} where that sums smaller over the group.
        q = q.numpy().astype(np.int64)
        cont = np.zeros(q.shape[:3] + (1,), bool)
        cont[:, :, 1:] = (shift[:, :, 1:] == shift[:, :, :-1]).numpy()
        dq = np.concatenate([q[:, :, :1], np.diff(q, axis=2)], 2)
        use = cont & ((np.abs(dq) * cont).sum(2, keepdims=True) < (np.abs(q) * cont).sum(2, keepdims=True))
        sym, esc = symbols(np.where(use, dq, q))
        bits += table_bits(sym, 2 * unit_id + use, 2 * L * H) + 8 * esc
        bits += 8 * L * H * (4 + D / 8)  # step and mode bits per unit
    x = (out @ hadamard) * signs / D / w if rot else out
    return x.permute(2, 0, 1, 3).reshape(T, N), bits


def channel_point(kpre, kpost, v, kl, vl, variant):
    """Post-RoPE K', V' and bits of one channel-basis point."""
    lk, lv = torch.full((L, H), float(kl)), torch.full((L, H), float(vl))
    if variant == "coder":
        kq, kb = channel_code(kpost, lk * k_scale[:, None], True, k_weight)
    else:
        kq, kb = channel_code(kpre if variant == "channel-pre" else kpost, lk)
    vq, vb = channel_code(v, lv, variant == "coder")
    return rope(kq) if variant == "channel-pre" else kq, vq, kb + vb


# ---------------------------------------------------------------- calibration: means, bases, weights
class Basis:
    """Mean, basis U (N x N; block-diagonal below the global scope), the
    calibration variances lam and the components' weights w, per kind."""

    def __init__(self, X, block, W=None, cov=None):
        self.mean = X.mean(0)
        if cov is None:
            Xc = X - self.mean
            cov = (Xc.T @ Xc).double().numpy() / len(X)
        U, self.lam = np.zeros((N, N), np.float32), np.zeros(N)
        for s in range(0, N, block):
            self.lam[s:s + block], U[s:s + block, s:s + block] = np.linalg.eigh(cov[s:s + block, s:s + block])
        self.lam = np.maximum(self.lam, 0)
        self.U, self.cov, self.chan_var = torch.from_numpy(U), cov, np.diag(cov).copy()
        if W is not None:
            Ur = self.U.view(L * H, D, N)
            self.w = (torch.einsum("bde,bei->bdi", W, Ur) * Ur).sum((0, 1)).double().numpy()
            self.G = float(np.exp(np.log(torch.einsum("bdd->b", W).double().numpy() / D).mean()))

    def coeffs(self, X):
        return (X - self.mean) @ self.U

    def decode(self, chat):
        return chat @ self.U.T + self.mean


def calibration(path, cache=None):
    """Calibration KV: (tokens, window starts, pre-RoPE K and V as (tokens, N)
    with each window's position 0 left out, the KV heads' query covariance
    (L, H, D, D), pre-RoPE); kept at cache + ".calib.pt" if cache."""
    calib_tokens = tokens_of(path)
    starts = range(0, len(calib_tokens) - PREFIX + 1, PREFIX // 2)
    log(f"calibration: {path}, {len(calib_tokens)} tokens, {len(starts)} windows of {PREFIX} "
        f"(stride {PREFIX // 2}), position 0 left out")
    if cache and os.path.exists(cache + ".calib.pt"):
        Xk, Xv, qcov = torch.load(cache + ".calib.pt")
    else:
        Xk, Xv, qcov = [], [], torch.zeros(L, H, D, D)
        for s in starts:
            k, v, q = prefill(calib_tokens[s:s + PREFIX])
            Xk.append(k[1:])
            Xv.append(v[1:])
            qq = q[:, :, 1:].reshape(L, H, -1, D)  # a KV head's 3 query heads' tokens
            qcov += qq.transpose(-1, -2) @ qq
        Xk, Xv = torch.cat(Xk), torch.cat(Xv)
        qcov = qcov.double() / len(Xk)
        if cache:
            torch.save((Xk, Xv, qcov), cache + ".calib.pt")
    return calib_tokens, starts, Xk, Xv, qcov


def weights(qcov):
    """The components' weight matrices per KV head, (L * H, D, D): K, Wk; V, Wv."""
    # K weights: the query covariance seen through RoPE at distances 1..767 (an
    # error e in pre-RoPE K moves the score by q . R(-delta) e = (R(delta) q) . e).
    deltas = torch.arange(1, PREFIX + CONT, dtype=torch.float64)
    ang = deltas[:, None] * inv_freq.double()[None]
    R = torch.zeros(len(deltas), D, D, dtype=torch.float64)
    i = torch.arange(D // 2)
    R[:, i, i] = R[:, i + D // 2, i + D // 2] = ang.cos()
    R[:, i, i + D // 2], R[:, i + D // 2, i] = -ang.sin(), ang.sin()
    Wk = sum(torch.einsum("rab,lhbc,rdc->lhad", R[r:r + 32], qcov, R[r:r + 32])
             for r in range(0, len(deltas), 32)).reshape(L * H, D, D).float() / len(deltas)
    Wo = torch.stack([l.self_attn.o_proj.weight.detach().view(-1, H, Hq // H, D) for l in model.model.layers])
    Wv = torch.einsum("lohgi,lohgj->lhij", Wo, Wo).reshape(L * H, D, D)
    return Wk, Wv


static_tables = {}


def pca_code(C, b, delta, weighted, cal=None, sink=True, recon=True):
    """Codes coefficients C (T, N) of basis b; returns (x', bits by accounting, kept)."""
    s = delta * ((b.w / b.G) ** -0.5 if weighted else np.ones(N))
    keep = b.lam >= s ** 2 / 12
    st = torch.from_numpy(np.where(keep, s, np.inf)).float()
    q = torch.round(C / st)
    chat = q * st.nan_to_num(posinf=0)
    if sink:
        q[0] = torch.round(C[0] / (st.new_tensor(s) / 64))
        chat[0] = q[0] * st.new_tensor(s) / 64
    x = b.decode(chat) if recon else None
    sym, esc = symbols(q[int(sink):, torch.from_numpy(keep)].numpy().astype(np.int64))
    nk, kt = int(keep.sum()), torch.from_numpy(keep)
    cls = np.clip(np.floor(4 * np.log2(np.sqrt(b.lam[keep]) / s[keep])).astype(np.int64) + 8, 0, 47)
    bits = dict.fromkeys(("class", "comp", "static", "bound"), 8.0 * esc)
    bits["bound"] += table_bits(sym, np.broadcast_to(np.arange(nk), sym.shape), nk, False)
    first = GROUP - int(sink)  # token rows per group (group 0 lacks the sink)
    for g0 in [0] + list(range(first, len(sym), GROUP)):
        blk = sym[g0:g0 + (first if g0 == 0 else GROUP)]
        bits["class"] += table_bits(blk, np.broadcast_to(cls, blk.shape), 48) + 48
        bits["comp"] += table_bits(blk, np.broadcast_to(np.arange(nk), blk.shape), nk) + 48
    if cal is not None:  # tables from calibration codes (model metadata)
        if (id(b), delta, weighted) not in static_tables:
            csym, _ = symbols(torch.round(cal[:, kt] / st[kt]).numpy().astype(np.int64))
            counts = np.bincount((np.arange(nk) * 256 + csym).ravel(), minlength=nk * 256).reshape(nk, 256)
            static_tables[id(b), delta, weighted] = np.log2((counts + 0.1) / (counts.sum(1, keepdims=True) + 25.6))
        bits["static"] += float(-static_tables[id(b), delta, weighted][np.arange(nk)[None], sym].sum())
    else:
        del bits["static"]
    if sink:  # Elias-gamma codes of the sink's zigzag codes
        z = np.abs(2 * q[0].double().numpy() + 0.5) - 0.5
        bits = {a: n + float((2 * np.floor(np.log2(z + 1)) + 1).sum()) for a, n in bits.items()}
    return x, bits, nk

def delta_for(target, rate):
    """Bisection (in log DELTA) for the DELTA whose rate(DELTA) is target."""
    lo, hi = 1e-3, 10.0
    for _ in range(12):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if rate(mid) > target else (lo, mid)
    return (lo * hi) ** 0.5


def window_metrics(ids, logp_exact, kq, vq):
    """(NLL of the continuation, summed KL vs exact, positions) on K', V'."""
    lt = continuation(ids, kq, vq)
    kl = (logp_exact.exp() * (logp_exact - lt)).sum(-1).clamp(min=0)
    return float(-lt[torch.arange(CONT - 1), ids[PREFIX + 1:]].sum()), float(kl.sum()), CONT - 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("--windows", type=int, default=12)
    ap.add_argument("--calib", default="build/corpus/lee.cor")
    ap.add_argument("--eval", default="build/corpus/lee_background.cor")
    ap.add_argument("--tuning", default="docs/results/smollm2_ac_tuning.txt")
    ap.add_argument("--json")
    ap.add_argument("--cache")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    load(args.gguf, args.tuning)
    calib_tokens, starts, Xk, Xv, qcov = calibration(args.calib, args.cache)
    Wk, Wv = weights(qcov)
    log(f"{len(Xk)} calibration tokens; fitting bases (eigh of {N} x {N})")
    bases = {}
    for kind, X, Wm in (("K", Xk, Wk), ("V", Xv, Wv)):
        g = Basis(X, N, Wm)
        bases["global", kind] = g
        bases["layer", kind] = Basis(X, H * D, Wm, g.cov)
        bases["head", kind] = Basis(X, D, Wm, g.cov)
        g.cov = None
        log(f"{kind}: bases fitted")
    cal_coeffs = {key: b.coeffs(Xk if key[1] == "K" else Xv) for key, b in bases.items()}
    del Xk, Xv

    def pca_point(C, scope, delta_k, ratio, weighted):
        """Post-RoPE K', V' and bits (by accounting) of one PCA point; C: the
        window's coefficients per (scope, kind)."""
        out, bits = {}, {}
        for kind, delta in (("K", delta_k), ("V", delta_k * ratio)):
            out[kind], kb, _ = pca_code(C[scope, kind], bases[scope, kind], delta, weighted,
                                        cal_coeffs.get((scope, kind)))
            bits = {a: bits.get(a, 0.0) + kb[a] for a in kb}
        return rope(out["K"]), out["V"], bits

    def calib_rate(scope, delta_k, ratio, weighted, kinds="KV"):
        """Bits per value (class accounting) on a calibration subset, sinks excluded."""
        rows = torch.cat([torch.arange(j * (PREFIX - 1), (j + 1) * (PREFIX - 1)) for j in (0, 8)])
        bits = sum(pca_code(cal_coeffs[scope, k][rows], bases[scope, k], delta_k * (ratio if k == "V" else 1),
                            weighted, sink=False, recon=False)[1]["class"] for k in kinds)
        return bits / (len(rows) * N * len(kinds)) + 8 * TOKEN_BYTES / (2 * N)

    # K:V exchange rate: K alone and V alone coded on calibration windows.
    probe_windows = spread(calib_tokens, PREFIX + CONT, 2)
    ratios = {}
    for weighted in (False, True):
        dk = delta_for(2.5, lambda d: calib_rate("global", d, 1, weighted, "K"))
        dv = delta_for(2.5, lambda d: calib_rate("global", d, 1, weighted, "V"))
        kls, kept = {"K": 0.0, "V": 0.0}, {}
        for ids in probe_windows:
            k, v, _ = prefill(ids[:PREFIX])
            exact = continuation(ids, rope(k), v)
            for kind, d in (("K", dk), ("V", dv)):
                b = bases["global", kind]
                xq, _, kept[kind] = pca_code(b.coeffs(k if kind == "K" else v), b, d, weighted)
                kq, vq = (rope(xq), v) if kind == "K" else (rope(k), xq)
                kls[kind] += window_metrics(ids, exact, kq, vq)[1]
        ratios[weighted] = float(np.sqrt(kls["K"] / kept["K"] / (kls["V"] / kept["V"])) * dv / dk)
        log(f"K:V probe ({'weighted' if weighted else 'unweighted'}): at 2.5 bits/value each, DELTA K "
            f"{dk:.3g} KL {kls['K'] / 2 / (CONT - 1):.2e} ({kept['K']} components), DELTA V {dv:.3g} "
            f"KL {kls['V'] / 2 / (CONT - 1):.2e} ({kept['V']}): DELTA_V = {ratios[weighted]:.3g} DELTA_K")

    # The evaluation windows' prefixes (and the oracle bases fitted on them).
    eval_tokens = tokens_of(args.eval)
    W = 2 if args.quick else args.windows
    windows = spread(eval_tokens, PREFIX + CONT, W)
    log(f"evaluation: {args.eval}, {len(eval_tokens)} tokens, {W} windows of {PREFIX} + {CONT}")
    if args.cache and os.path.exists(args.cache + f".eval{W}.pt"):
        prefixes = torch.load(args.cache + f".eval{W}.pt")
    else:
        prefixes = [prefill(ids[:PREFIX])[:2] for ids in windows]
        if args.cache:
            torch.save(prefixes, args.cache + f".eval{W}.pt")
    for j, kind in enumerate("KV"):
        bases["oracle", kind] = Basis(torch.cat([p[j][1:] for p in prefixes]), N, Wk if j == 0 else Wv)
        bases["oracle", kind].cov = None
    log("oracle bases fitted on the evaluation prefixes")

    # Energy capture: components holding 90/99/99.9% of the calibration variance,
    # and the share of the evaluation prefixes' variance those components hold.
    energy = []
    for kind in "KV":
        j = "KV".index(kind)
        Xe = torch.cat([p[j][1:] for p in prefixes])
        for scope in ("channel", "head", "layer", "global"):
            b = bases.get((scope, kind))
            if b is None:  # the channel basis: the calibration per-channel variances
                g = bases["global", kind]
                lam, ev = g.chan_var, ((Xe - g.mean) ** 2).mean(0).double().numpy()
            else:
                lam, ev = b.lam, (b.coeffs(Xe) ** 2).mean(0).double().numpy()
            order = np.argsort(lam)[::-1]
            counts = [int(np.searchsorted(np.cumsum(lam[order]) / lam.sum(), f) + 1) for f in (0.9, 0.99, 0.999)]
            eval_share = [float(ev[order[:n]].sum() / ev.sum()) for n in counts]
            energy.append({"kind": kind, "scope": scope, "components_90_99_999": counts,
                           "eval_share_at_those": eval_share})
            log(f"energy {kind} {scope:7s}: 90/99/99.9% of calibration variance in {counts} of {N} "
                f"components; those hold {', '.join(f'{100 * e:.2f}%' for e in eval_share)} of the evaluation's")

    # ---------------------------------------------------------------- the points
    points = [("channel", (6, 2), None), ("channel-pre", (6, 2), None)] + \
        [("coder", lv, None) for lv in ((11, 6), (8, 4), (6, 2), (5, 1.8))]
    # Rate targets (bits per value on calibration KV) per scheme, chosen so each
    # sweep spans the coder's perplexity range (+0.3% .. +2.5%).
    pca_sets = (("global", False, (1.3, 2.0)), ("global", True, (1.0, 1.3, 1.7, 2.2)),
                ("layer", True, (1.6, 2.4)), ("head", True, (2.2, 3.2)), ("oracle", True, (1.3,)))
    if args.quick:
        points, pca_sets = [points[0], points[4]], (("global", True, (1.0, 1.7)), ("head", True, (2.8,)))
    for scope, weighted, targets in pca_sets:
        rscope = "global" if scope == "oracle" else scope  # the oracle at global-w's DELTAs
        for t in targets:
            d = delta_for(t, lambda d: calib_rate(rscope, d, ratios[weighted], weighted))
            points.append(("pca-" + scope + ("-w" if weighted else ""), (scope, d, weighted), t))
        log(f"pca-{scope}{'-w' if weighted else ''}: DELTA_K for {targets} bits/value on calibration: "
            + ", ".join(f"{p[1][1]:.3g}" for p in points[-len(targets):]))

    stats = [{"nll": [], "kl": 0.0, "n": 0, "bits": {}} for _ in points]
    nll_exact = []
    for w, (ids, (kpre, v)) in enumerate(zip(windows, prefixes)):
        kpost = rope(kpre)
        exact = continuation(ids, kpost, v)
        nll_exact.append(float(-exact[torch.arange(CONT - 1), ids[PREFIX + 1:]].sum()))
        C = {key: b.coeffs(kpre if key[1] == "K" else v) for key, b in bases.items()
             if any(p[2] is not None and p[1][0] == key[0] for p in points)}
        for p, st in zip(points, stats):
            if p[2] is None:
                kq, vq, bits = channel_point(kpre, kpost, v, *p[1], p[0])
                bits = {"coder": bits}
            else:
                scope, d, weighted = p[1]
                kq, vq, bits = pca_point(C, scope, d, ratios[weighted], weighted)
            nll, kl, n = window_metrics(ids, exact, kq, vq)
            st["nll"].append(nll)
            st["kl"], st["n"] = st["kl"] + kl, st["n"] + n
            for a, b in bits.items():
                st["bits"][a] = st["bits"].get(a, 0.0) + b + 8 * TOKEN_BYTES * PREFIX
        log(f"window {w + 1}/{W}")

    rng = np.random.default_rng(0)
    boot = rng.integers(0, W, (2000, W))
    e = np.array(nll_exact)
    rows = []
    print("\n| quantizer | point | bits/value | x vs fp16 | ppl change [95% CI] | mean KL "
          "| bits: comp tables | static tables | window bound |")
    print("|---|---|---|---|---|---|---|---|---|")
    for p, st in zip(points, stats):
        t, n = np.array(st["nll"]), st["n"]
        bpv = {a: b / (W * PREFIX * 2 * N) for a, b in st["bits"].items()}
        head = bpv["coder" if p[2] is None else "class"]
        ci = np.percentile(np.expm1((t[boot].sum(1) - e[boot].sum(1)) / n), [2.5, 97.5])
        row = {"quantizer": p[0], "bits_per_value": head, "x_vs_fp16": 16 / head,
               "bits_by_accounting": bpv, "ppl_change": float(np.expm1((t.sum() - e.sum()) / n)),
               "ppl_change_ci95": [float(c) for c in ci], "mean_kl": st["kl"] / n, "positions": n}
        if p[2] is None:
            row.update(k_levels=p[1][0], v_levels=p[1][1])
            label = f"{p[1][0]:g}/{p[1][1]:g}"
        else:
            row.update(delta_k=p[1][1], delta_v=p[1][1] * ratios[p[1][2]], calib_target_bits=p[2])
            label = f"{p[2]:g} b/v target"
        rows.append(row)
        extra = " | ".join(f"{bpv[a]:.3f}" if a in bpv else "-" for a in ("comp", "static", "bound"))
        print(f"| {p[0]} | {label} | {head:.3f} | {16 / head:.2f}x | {100 * row['ppl_change']:+.2f}% "
              f"[{100 * ci[0]:+.2f}, {100 * ci[1]:+.2f}] | {row['mean_kl']:.2e} | {extra} |")

    def bits_at(name, metric, target, accounting):
        """Bits per value a quantizer needs at a quality (interpolated in log quality)."""
        pts = sorted((r[metric], r["bits_by_accounting"].get(accounting, r["bits_per_value"]))
                     for r in rows if r["quantizer"] == name)
        if len(pts) < 2 or not pts[0][0] <= target <= pts[-1][0]:
            return None
        m = np.log(np.maximum([q for q, _ in pts], 1e-6))
        return float(np.interp(np.log(max(target, 1e-6)), m, [b for _, b in pts]))

    coder_kl = {f"{r['k_levels']:g}/{r['v_levels']:g}": r["mean_kl"] for r in rows
                if r["quantizer"] == "coder" and (r["k_levels"], r["v_levels"]) in ((11, 6), (6, 2))}
    quality = [("ppl_change", 0.005), ("ppl_change", 0.02)] + [("mean_kl", v) for v in coder_kl.values()]
    equal = []
    print("\nbits/value at equal quality (interpolated; '-' outside the measured range):")
    print("| quantizer | accounting | " + " | ".join(
        f"ppl {100 * q:+.1f}%" if m == "ppl_change" else f"KL {q:.2e}" for m, q in quality) + " |")
    print("|---|---|" + "---|" * len(quality))
    for name in dict.fromkeys(r["quantizer"] for r in rows):
        for acc in (("coder",) if not name.startswith("pca") else ("class", "static", "bound")):
            got = [bits_at(name, m, q, acc) for m, q in quality]
            equal.append({"quantizer": name, "accounting": acc, "targets": [[m, q] for m, q in quality],
                          "bits_per_value": got})
            print(f"| {name} | {acc} | " + " | ".join("-" if g is None else f"{g:.3f}" for g in got) + " |")
    log("done")

    if args.json:
        results.write(args.json, results.header("kv_transform_study"), rows, energy=energy,
                      equal_quality=equal, kv_ratio_weighted=ratios[True], kv_ratio_unweighted=ratios[False],
                      calibration={"text": args.calib, "tokens": len(calib_tokens), "windows": len(starts),
                                   "stride": PREFIX // 2, "fit_tokens": int(len(cal_coeffs["global", "K"]))},
                      evaluation={"text": args.eval, "tokens": len(eval_tokens), "windows": W,
                                  "prefix": PREFIX, "continuation": CONT, "mode": "product"},
                      group=GROUP, token_bytes=TOKEN_BYTES, wall_s=round(time.time() - T0))
        print(f"result file: {args.json}")


if __name__ == "__main__":
    main()
