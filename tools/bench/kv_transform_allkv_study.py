#!/usr/bin/env python3
"""Grouped PCA vs the ac coder in ALL-KV mode (issue 42, item 2 follow-up)

kv_transform_study.py and kv_group_transform_study.py measured in product
mode: only the 512-token prefix's KV through the quantizer, the 256
teacher-forced continuation tokens on exact KV of their own. Here every
position's KV goes through it, as the papers measure: the prefix's as there
(prefilled exact, then coded), and each continuation token's K and V are
replaced in the cache by their coded version right after that token's own
forward step (the token attends to its own exact KV in its step, as a decode
step that publishes its KV afterwards; every later token reads the coded
version, and its own KV is computed from what it read, so errors compound).
The continuation runs one token at a time on an HF DynamicCache, all points
of a window in one batch (one row each, the same teacher-forced ids); after
each step the new position's pre-RoPE K (captured at k_proj) and V of every
layer are coded, K re-rotated at its position, and written over the row.
A cross-layer transform cannot do better than publish-after-the-step: a
token's layer-l KV can be coded only once the layers of its group exist.

Everything else is the two studies', imported: capture, calibration on
lee.cor (position 0 left out), the component weights and steps
s_i = DELTA (w_i / G)^(-1/2), water-filling, the class size accounting, the
block-diagonal GroupBasis over G consecutive layers (full, not truncated),
the sink as fp16 for PCA points, the coder baseline (ac 11/6 and ac-lo 6/2
as shipped for this model: rotated, the model's K levels and K channel
weights, K post-RoPE), the exact reference (a one-pass continuation on the
exact prefix), perplexity change with a 95% paired bootstrap CI over
windows and mean KL per position. DELTA_V = kv_ratio DELTA_K, kv_ratio the
group study's (its K:V probe; read from its result file).

Continuation coding, per token:
  coder: kts.channel_code's quantizer on the one token alone: per unit
      (layer, kind, KV head), rotated, step = the unit's largest |x| in
      that token / levels (a one-token group: no shift, no sink refinement,
      no delta modes). Bits: the codes gathered into the continuation's
      128-token groups, one table per unit and group (kts.table_bits, the
      format's varint tables), escapes, and 16 bits per unit and token for
      the token's step (where the format has its shift byte); no group
      header.
  pca-G: kts.pca_code's quantizer on the token's coefficients (sink=False:
      the continuation has no sink). Bits: pca_code's class accounting on
      the continuation's coefficients, 128-token groups.
Both add the 66 bytes a token of rANS lane states, as the studies do.
Bits per value: all-KV = (prefix + continuation bits) / (767 tokens x 2 x
5,760 values); product = the prefix's alone / (512 x 2 x 5,760), the
studies' number. Product mode (the same coded prefix, the continuation's
KV exact) comes nearly free and is reported beside.

Usage: .venv-hf/bin/python tools/bench/kv_transform_allkv_study.py GGUF [--windows 10]
          [--deltas '3=0.3,0.6,1.2;10=0.4,0.8,1.6'] [--cache PREFIX] [--json FILE] [--threads N] [--check]
--check: asserts the per-token quantizers and RoPE against the studies' and
a few exact steps against the one-pass continuation, then exits.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kv_transform_study as kts  # noqa: E402  (sets the offline env, imports torch)
import kv_group_transform_study as kgs  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers.cache_utils import DynamicCache  # noqa: E402

results, log = kts.results, kts.log
PREFIX, CONT, GROUP, TOKEN_BYTES = kts.PREFIX, kts.CONT, kts.GROUP, kts.TOKEN_BYTES
RATIO_FILE = "docs/results/kv_group_transform_study.json"
captured = {}  # (kind, layer) -> the whole batch's k_proj / v_proj output of the last step


def rope_at(k, pos):
    """(1, N) pre-RoPE K at position pos -> post-RoPE (kts.rope's formula)."""
    L, H, D = kts.L, kts.H, kts.D
    ang = pos * kts.inv_freq
    cos, sin = torch.cat([ang.cos()] * 2), torch.cat([ang.sin()] * 2)
    x = k.view(L * H, D)
    return (x * cos + torch.cat((-x[:, D // 2:], x[:, :D // 2]), -1) * sin).reshape(1, kts.N)


def coder_token(x, levels, weight=None):
    """kts.channel_code's rotated quantizer on one token alone (a unit's step:
    its largest |x| / levels); returns (x' as (1, N), codes (L * H, D))."""
    L, H, D = kts.L, kts.H, kts.D
    w = torch.ones(L, H, D) if weight is None else weight
    y = (x.view(L, H, D) * w * kts.signs) @ kts.hadamard
    step = y.abs().amax(-1, keepdim=True).clamp_min(1e-30) / levels.view(L, H, 1)
    q = torch.round(y / step)
    return ((q * step) @ kts.hadamard * kts.signs / D / w).reshape(1, kts.N), q.view(L * H, D)


def coder_cont_bits(codes):
    """Bits of a continuation's per-token coder codes (a list of (L * H, D))."""
    q = np.stack([c.numpy() for c in codes], 1).astype(np.int64)  # units, tokens, D
    uid = np.arange(q.shape[0])[:, None, None]
    bits = 16.0 * q.shape[0] * q.shape[1]  # a step per unit and token
    for g in range(0, q.shape[1], GROUP):
        sym, esc = kts.symbols(q[:, g:g + GROUP])
        bits += kts.table_bits(sym, uid, q.shape[0]) + 8 * esc
    return bits


steps_cache = {}


def pca_recon(C, b, delta):
    """kts.pca_code's reconstruction (sink=False) of coefficients C."""
    if (id(b), delta) not in steps_cache:
        s = delta * (b.w / b.G) ** -0.5
        steps_cache[id(b), delta] = torch.from_numpy(np.where(b.lam >= s ** 2 / 12, s, np.inf)).float()
    st = steps_cache[id(b), delta]
    return b.decode(torch.round(C / st) * st.nan_to_num(posinf=0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("--windows", type=int, default=10)
    ap.add_argument("--deltas", default="3=0.3,0.6,1.2;10=0.4,0.8,1.6",
                    help="G=DELTA_K,...;G=... (full block-diagonal bases)")
    ap.add_argument("--kv-ratio", type=float, help=f"DELTA_V / DELTA_K (default: {RATIO_FILE}'s)")
    ap.add_argument("--calib", default="build/corpus/lee.cor")
    ap.add_argument("--eval", default="build/corpus/lee_background.cor")
    ap.add_argument("--tuning", default="docs/results/smollm2_ac_tuning.txt")
    ap.add_argument("--json")
    ap.add_argument("--cache")
    ap.add_argument("--threads", type=int, help="torch threads (kts.load sets 2)")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    deltas = {int(g): [float(d) for d in ds.split(",")] for g, ds in
              (part.split("=") for part in args.deltas.split(";"))}
    ratio = args.kv_ratio or json.load(open(RATIO_FILE))["kv_ratio"]
    kts.load(args.gguf, args.tuning)
    if args.threads:
        torch.set_num_threads(args.threads)
    L, H, D, N = kts.L, kts.H, kts.D, kts.N
    for i, layer in enumerate(kts.model.model.layers):  # the whole batch (kts keeps row 0)
        for proj in ("k_proj", "v_proj"):
            getattr(layer.self_attn, proj).register_forward_hook(
                lambda mod, inp, out, key=(proj[0], i): captured.__setitem__(key, out.detach()))
    calib_tokens, starts, Xk, Xv, qcov = kts.calibration(args.calib, args.cache)
    Wk, Wv = kts.weights(qcov)
    bases = {}
    for kind, X, Wm in (("K", Xk, Wk), ("V", Xv, Wv)):
        cov = None
        for G in deltas:
            b = bases[G, kind] = kgs.GroupBasis(X, G, Wm, cov)
            cov, b.cov = b.cov, None
        log(f"{kind}: bases for G in {list(deltas)} fitted ({len(X)} calibration tokens)")
    del Xk, Xv, cov

    points = [{"quantizer": "coder", "levels": lv} for lv in ((11, 6), (6, 2))]
    for G, ds in deltas.items():
        for d in ds:
            kept = [int(kgs.keep_mask(bases[G, kd], d * (ratio if kd == "V" else 1)).sum()) for kd in "KV"]
            points.append({"quantizer": f"pca-G{G}", "G": G, "delta_k": d, "delta_v": d * ratio, "kept": kept})
    B = len(points)

    def code_token(p, k, v, pos):
        """A continuation token's (post-RoPE K', V', codes) under point p."""
        if p["quantizer"] == "coder":
            lk, lv = p["levels"]
            kq, kc = coder_token(rope_at(k, pos), lk * kts.k_scale[:, None].expand(L, H), kts.k_weight)
            vq, vc = coder_token(v, torch.full((L, H), float(lv)))
            return kq, vq, (kc, vc)
        out, codes = [], []
        for kd, x, d in (("K", k, p["delta_k"]), ("V", v, p["delta_v"])):
            C = bases[p["G"], kd].coeffs(x)
            out.append(pca_recon(C, bases[p["G"], kd], d))
            codes.append(C)
        return rope_at(out[0], pos), out[1], tuple(codes)

    def cont_bits(p, codes):
        if p["quantizer"] == "coder":
            return sum(coder_cont_bits([c[j] for c in codes]) for j in (0, 1))
        return sum(kts.pca_code(torch.cat([c[j] for c in codes]), bases[p["G"], kd], d, True,
                                sink=False, recon=False)[1]["class"]
                   for j, (kd, d) in enumerate((("K", p["delta_k"]), ("V", p["delta_v"]))))

    def allkv(ids, exact, prefix_kv, coded=True, steps=CONT - 1):
        """Teacher-forced continuation, one token a step, every point a row;
        returns per row (NLL, summed KL, continuation bits)."""
        cache = DynamicCache()
        for l in range(L):
            cache.update(torch.stack([kq.view(PREFIX, L, H, D)[:, l].transpose(0, 1) for kq, _ in prefix_kv]),
                         torch.stack([vq.view(PREFIX, L, H, D)[:, l].transpose(0, 1) for _, vq in prefix_kv]), l)
        nll, kl = torch.zeros(len(prefix_kv), dtype=torch.float64), torch.zeros(len(prefix_kv), dtype=torch.float64)
        codes = [[] for _ in prefix_kv]
        for t in range(steps):
            pos = PREFIX + t
            with torch.no_grad():
                logits = kts.model(torch.full((len(prefix_kv), 1), ids[pos]), past_key_values=cache).logits[:, -1]
            lt = torch.log_softmax(logits.double(), -1)
            nll -= lt[:, ids[pos + 1]]
            kl += (exact[t].exp() * (exact[t] - lt)).sum(-1).clamp(min=0)
            if not coded:
                continue
            k = torch.stack([captured["k", l][:, 0] for l in range(L)], 1).reshape(-1, N)  # pre-RoPE
            v = torch.stack([captured["v", l][:, 0] for l in range(L)], 1).reshape(-1, N)
            kn, vn = torch.empty(len(prefix_kv), N), torch.empty(len(prefix_kv), N)
            for r, p in enumerate(points):
                kn[r], vn[r], c = code_token(p, k[r:r + 1], v[r:r + 1], pos)
                codes[r].append(c)
            for l in range(L):
                cache.key_cache[l][:, :, pos] = kn.view(-1, L, H, D)[:, l]
                cache.value_cache[l][:, :, pos] = vn.view(-1, L, H, D)[:, l]
        bits = [cont_bits(p, c) if coded else 0.0 for p, c in zip(points, codes)]
        return nll.tolist(), kl.tolist(), bits

    def prefix_point(p, kpre, kpost, v, C):
        """The prefix's post-RoPE K', V' and bits under point p (the studies' code)."""
        if p["quantizer"] == "coder":
            return kts.channel_point(kpre, kpost, v, *p["levels"], "coder")
        out, bits = {}, 0.0
        for kd, x, d in (("K", kpre, p["delta_k"]), ("V", v, p["delta_v"])):
            xq, kb, _ = kts.pca_code(C[p["G"], kd], bases[p["G"], kd], d, True, sink=False)
            out[kd] = torch.cat([x[:1].half().float(), xq])  # the sink in fp16
            bits += kb["class"] + 16 * N
        return kts.rope(out["K"]), out["V"], bits

    eval_tokens = kts.tokens_of(args.eval)
    W = args.windows
    windows = kts.spread(eval_tokens, PREFIX + CONT, W)

    if args.check:
        ids = windows[0]
        kpre, v = kts.prefill(ids[:PREFIX])[:2]
        kpost = kts.rope(kpre)
        assert torch.allclose(rope_at(kpre[300:301], 300), kpost[300:301], atol=1e-5), "rope_at"
        for lv, w in ((6.0, None), (11.0, kts.k_weight)):
            lev = torch.full((L, H), lv) * (kts.k_scale[:, None] if w is not None else 1)
            ref = kts.channel_code(kpost[7:8], lev / 64, True, w)[0]  # a one-token group, sink +6 undone
            got = coder_token(kpost[7:8], lev, w)[0]
            print(f"coder_token vs channel_code (levels {lv}): max |diff| {float((ref - got).abs().max()):.2e}")
            assert torch.allclose(ref, got, atol=1e-4 * float(ref.abs().max()))
        for G in deltas:
            b = bases[G, "V"]
            C = b.coeffs(v[1:40])
            ref = kts.pca_code(C, b, deltas[G][0] * ratio, True, sink=False)[0]
            got = pca_recon(C, b, deltas[G][0] * ratio)
            print(f"pca_recon vs pca_code (G {G}): max |diff| {float((ref - got).abs().max()):.2e}")
            assert torch.allclose(ref, got, atol=1e-5)
        exact = kts.continuation(ids, kpost, v)
        t0 = time.time()
        nll, kl, _ = allkv(ids, exact, [(kpost, v)] * 2, coded=False, steps=16)
        print(f"16 exact steps, 2 rows: KL {kl}, NLL {nll} vs one pass "
              f"{float(-exact[torch.arange(16), ids[PREFIX + 1:PREFIX + 17]].sum()):.6f} "
              f"({(time.time() - t0) / 16:.3f} s a step)")
        assert max(kl) < 1e-6
        return

    log(f"{B} points ({', '.join(p['quantizer'] + ' ' + str(p.get('levels', p.get('delta_k'))) for p in points)}), "
        f"DELTA_V = {ratio:.4g} DELTA_K; evaluation: {args.eval}, {len(eval_tokens)} tokens, {W} windows of "
        f"{PREFIX} + {CONT}")
    for p in points:
        p.update({m: {"nll": [], "kl": 0.0, "n": 0} for m in ("allkv", "product")}, bits_prefix=0.0, bits_cont=0.0)
    nll_exact = []
    for w, ids in enumerate(windows):
        kpre, v = kts.prefill(ids[:PREFIX])[:2]
        kpost = kts.rope(kpre)
        exact = kts.continuation(ids, kpost, v)
        nll_exact.append(float(-exact[torch.arange(CONT - 1), ids[PREFIX + 1:]].sum()))
        C = {(G, kd): bases[G, kd].coeffs((kpre if kd == "K" else v)[1:]) for G in deltas for kd in "KV"}
        prefix_kv = []
        for p in points:
            kq, vq, bits = prefix_point(p, kpre, kpost, v, C)
            prefix_kv.append((kq, vq))
            nll, kl, n = kts.window_metrics(ids, exact, kq, vq)
            p["product"]["nll"].append(nll)
            p["product"]["kl"] += kl
            p["product"]["n"] += n
            p["bits_prefix"] += bits + 8 * TOKEN_BYTES * PREFIX
        log(f"window {w + 1}/{W}: product mode done")
        nll, kl, bits = allkv(ids, exact, prefix_kv)
        for p, a, b, c in zip(points, nll, kl, bits):
            p["allkv"]["nll"].append(a)
            p["allkv"]["kl"] += b
            p["allkv"]["n"] += CONT - 1
            p["bits_cont"] += c + 8 * TOKEN_BYTES * (CONT - 1)
        log(f"window {w + 1}/{W}: all-KV done")

    boot = np.random.default_rng(0).integers(0, W, (2000, W))
    e = np.array(nll_exact)
    rows = []
    print("\n| quantizer | point | kept K/V | bits/value all-KV | bits/value product | all-KV ppl change [95% CI] "
          "| all-KV mean KL | product ppl change [95% CI] | product mean KL |")
    print("|---|---|---|---|---|---|---|---|---|")
    for p in points:
        row = {"quantizer": p["quantizer"],
               "bits_per_value": (p["bits_prefix"] + p["bits_cont"]) / (W * (PREFIX + CONT - 1) * 2 * N),
               "bits_per_value_product": p["bits_prefix"] / (W * PREFIX * 2 * N),
               "bits_per_value_continuation": p["bits_cont"] / (W * (CONT - 1) * 2 * N)}
        cells = []
        for m, name in (("allkv", "all_kv"), ("product", "product")):
            t, n = np.array(p[m]["nll"]), p[m]["n"]
            ci = np.percentile(np.expm1((t[boot].sum(1) - e[boot].sum(1)) / n), [2.5, 97.5])
            row.update({f"{name}_ppl_change": float(np.expm1((t.sum() - e.sum()) / n)),
                        f"{name}_ppl_change_ci95": [float(c) for c in ci], f"{name}_mean_kl": p[m]["kl"] / n,
                        f"{name}_positions": n})
            cells.append(f"{100 * row[name + '_ppl_change']:+.2f}% [{100 * ci[0]:+.2f}, {100 * ci[1]:+.2f}] | "
                         f"{row[name + '_mean_kl']:.2e}")
        if p["quantizer"] == "coder":
            row.update(k_levels=p["levels"][0], v_levels=p["levels"][1])
            label, kept = f"{p['levels'][0]}/{p['levels'][1]}", "-"
        else:
            row.update({a: p[a] for a in ("G", "delta_k", "delta_v", "kept")})
            label, kept = f"DELTA_K {p['delta_k']:.3g}", "/".join(map(str, p["kept"]))
        rows.append(row)
        print(f"| {p['quantizer']} | {label} | {kept} | {row['bits_per_value']:.3f} | "
              f"{row['bits_per_value_product']:.3f} | {cells[0]} | {cells[1]} |")

    def bits_at(name, metric, target, key):
        """A quantizer's bits at a quality (interpolated in log quality, as the studies)."""
        pts = sorted((r[metric], r[key]) for r in rows if r["quantizer"] == name)
        if len(pts) < 2 or not pts[0][0] <= target <= pts[-1][0]:
            return None
        m = np.log(np.maximum([q for q, _ in pts], 1e-6))
        return float(np.interp(np.log(max(target, 1e-6)), m, [b for _, b in pts]))

    coder = {("ac" if r["k_levels"] == 11 else "ac-lo"): r for r in rows if r["quantizer"] == "coder"}
    targets = [(f"all-KV ppl change of {c}", "all_kv_ppl_change", r["all_kv_ppl_change"], "bits_per_value", c)
               for c, r in coder.items()] + \
              [(f"all-KV KL of {c}", "all_kv_mean_kl", r["all_kv_mean_kl"], "bits_per_value", c)
               for c, r in coder.items()] + \
              [("all-KV ppl change +1.5% (ac's goal)", "all_kv_ppl_change", 0.015, "bits_per_value", None),
               ("all-KV ppl change +8% (ac-lo's goal)", "all_kv_ppl_change", 0.08, "bits_per_value", None)] + \
              [(f"product KL of {c}", "product_mean_kl", r["product_mean_kl"], "bits_per_value_product", c)
               for c, r in coder.items()]
    equal = []
    print("\nbits/value at equal quality (interpolated in log quality; '-' outside the measured range; "
          "all-KV targets in all-KV bits, product targets in product bits):")
    print("| quantizer | " + " | ".join(f"{t[0]} ({100 * t[2]:+.2f}%)" if "ppl" in t[1] else f"{t[0]} ({t[2]:.2e})"
                                       for t in targets) + " |")
    print("|---|" + "---|" * len(targets))
    print("| coder | " + " | ".join("-" if c is None else f"{coder[c][key]:.3f}" for _, _, _, key, c in targets) + " |")
    for name in dict.fromkeys(r["quantizer"] for r in rows if r["quantizer"] != "coder"):
        got = [bits_at(name, m, q, key) for _, m, q, key, _ in targets]
        equal.append({"quantizer": name, "G": int(name[5:]), "at": [
            {"target": label, "metric": m, "value": q, "bits_per_value": g,
             "coder_bits_per_value": None if c is None else coder[c][key]}
            for (label, m, q, key, c), g in zip(targets, got)]})
        print(f"| {name} | " + " | ".join("-" if g is None else f"{g:.3f}" for g in got) + " |")
    log("done")
    if args.json:
        results.write(args.json, results.header("kv_transform_allkv_study"), rows, equal_quality=equal,
                      kv_ratio=ratio, kv_ratio_from=None if args.kv_ratio else RATIO_FILE,
                      deltas={str(g): d for g, d in deltas.items()},
                      calibration={"text": args.calib, "tokens": len(calib_tokens), "windows": len(starts)},
                      evaluation={"text": args.eval, "tokens": len(eval_tokens), "windows": W, "prefix": PREFIX,
                                  "continuation": CONT, "modes": ["all-kv", "product"],
                                  "all_kv": "prefix prefilled exact then coded; each continuation token's KV "
                                            "coded after its own step (it attends to its exact KV), later "
                                            "tokens read the coded KV; teacher-forced, one token a step"},
                      continuation_coding={
                          "coder": "per token: a unit's step = its largest |x| in the token / levels (no shift, "
                                   "no delta); bits: a table per unit per 128-token group, escapes, 16 bits "
                                   "per unit and token for the step",
                          "pca": "per token: pca_code's quantizer (no sink); bits: pca_code's class accounting "
                                 "over the continuation's 128-token groups"},
                      sink="fp16 (PCA); the coder's sink shift (coder)", token_bytes=TOKEN_BYTES,
                      wall_s=round(time.time() - kts.T0))
        print(f"result file: {args.json}")


if __name__ == "__main__":
    main()
