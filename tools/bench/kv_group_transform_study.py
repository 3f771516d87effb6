#!/usr/bin/env python3
"""How much of the cross-layer PCA gain does a basis over a GROUP of layers keep? (issue 42, item 2 follow-up)

kv_transform_study.py found on SmolLM2-135M-Instruct that a PCA basis over
all 30 layers x 3 KV heads (5,760 dims per kind) halves ac-lo's bytes at its
quality, but keeps ~4,500 components per kind: 100-130 MB of basis and
2 x 5,760 x 4,500 multiply-adds per token and kind. This study fits bases
over G consecutive layers (all 3 heads of each: G x 192 dims per kind, a
block-diagonal PCA of the same calibration covariance), G in 1 (the layer
scope) .. 30 (the global one), and truncated bases: only the top
f x (G x 192) components of each group kept (ranked by weighted calibration
variance lam_i w_i, the order reverse water-filling drops them in), whatever
the water-filling would keep.

Everything else is kv_transform_study.py's, imported: the capture (pre-RoPE
K and V, lee.cor calibration windows, position 0 left out), the component
weights w_i and steps s_i = DELTA (w_i / G)^(-1/2), the water-filling, the
K:V step ratio (its weighted probe on the global basis), the "class" size
accounting (one table per class of components per 128-token group, in the
coder's table format), product-mode evaluation on lee_background.cor
windows (512-token prefix + 256 teacher-forced tokens; perplexity change
with a 95% paired bootstrap CI, mean KL per position vs exact KV), and the
coder baseline (ac 11/6 and ac-lo 6/2 as shipped for this model). One
change: the sink (position 0) goes as fp16 (16 bits a value) for every PCA
point instead of Elias-gamma codes in all N components, so that a truncated
basis really needs only its kept components.

Rate points: fixed DELTA_K per G (no bisection), three, spaced to bracket
the coder's KL at ac-lo and at ac (from kv_transform_study's measured KL
vs DELTA: the layer scope's KL rises faster with DELTA than the global's).
Costs per kept components n (per kind, at that point, G x 192 dims per
group): metadata = fp16 basis columns + fp16 mean = 2 (G 192 n + 5760)
bytes a kind; multiply-adds per token and kind = G 192 n to encode, the
same to decode. A truncated point whose kept set equals the plain one's is
not re-run. Then, per configuration, bits/value, kept components, metadata
and MACs at the coder's two KLs (interpolated in log KL, as the first study).

Usage: .venv-hf/bin/python tools/bench/kv_group_transform_study.py GGUF [--windows 10]
          [--groups 1,2,3,5,6,10,15,30] [--trunc-groups 5,10,30] [--fracs 0.25,0.5,0.75]
          [--grid 0,0.5,1] [--cache PREFIX (keeps captured KV)] [--json FILE]
          [--merge FILE (adds this run's PCA rows to a result file's)] [--quick]
--grid: DELTA_K = 0.2^(1 - t) hi^t for each t (hi = 0.95 .. 1.9 from G = 1 to
30); --merge: the same windows and coder are expected (checked), the
equal-quality table is recomputed over all rows.
"""
import argparse
import copy
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kv_transform_study as kts  # noqa: E402  (sets the offline env, imports torch)
import numpy as np  # noqa: E402
import torch  # noqa: E402

results, log = kts.results, kts.log
PREFIX, CONT, TOKEN_BYTES = kts.PREFIX, kts.CONT, kts.TOKEN_BYTES


class GroupBasis(kts.Basis):
    """A block-diagonal basis, one PCA per group of G layers (G x H x D dims),
    applied block by block; decode skips components without codes."""

    def __init__(self, X, G, W, cov):
        self.B = G * kts.H * kts.D
        super().__init__(X, self.B, W, cov)

    def coeffs(self, X):
        return torch.cat([(X[:, s:s + self.B] - self.mean[s:s + self.B]) @ self.U[s:s + self.B, s:s + self.B]
                          for s in range(0, kts.N, self.B)], 1)

    def decode(self, chat):
        out = self.mean.repeat(len(chat), 1)
        for s in range(0, kts.N, self.B):
            cols = s + torch.nonzero(chat[:, s:s + self.B].abs().sum(0)).flatten()
            out[:, s:s + self.B] += chat[:, cols] @ self.U[s:s + self.B, cols].T
        return out


def truncated(b, frac):
    """b with only the top frac of each group's components by lam_i w_i (the
    rest given zero variance, so the water-filling drops them)."""
    t, k = copy.copy(b), int(round(frac * b.B))
    t.lam = np.zeros_like(b.lam)
    for s in range(0, kts.N, b.B):
        top = s + np.argsort(-(b.lam * b.w)[s:s + b.B])[:k]
        t.lam[top] = b.lam[top]
    return t


def keep_mask(b, delta):
    return b.lam >= (delta * (b.w / b.G) ** -0.5) ** 2 / 12


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("--windows", type=int, default=10)
    ap.add_argument("--groups", default="1,2,3,5,6,10,15,30")
    ap.add_argument("--trunc-groups", default="5,10,30")
    ap.add_argument("--fracs", default="0.25,0.5,0.75")
    ap.add_argument("--calib", default="build/corpus/lee.cor")
    ap.add_argument("--eval", default="build/corpus/lee_background.cor")
    ap.add_argument("--tuning", default="docs/results/smollm2_ac_tuning.txt")
    ap.add_argument("--grid", default="0,0.5,1")
    ap.add_argument("--json")
    ap.add_argument("--merge")
    ap.add_argument("--cache")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    groups = [int(g) for g in args.groups.split(",")]
    tgroups, fracs = [int(g) for g in args.trunc_groups.split(",")], [float(f) for f in args.fracs.split(",")]
    if args.quick:
        groups, tgroups, fracs, args.windows = [1, 30], [30], [0.25], 2
    kts.load(args.gguf, args.tuning)
    N, L = kts.N, kts.L
    calib_tokens, starts, Xk, Xv, qcov = kts.calibration(args.calib, args.cache)
    Wk, Wv = kts.weights(qcov)
    bases, glob = {}, {}  # (G, frac or None, kind) -> basis; kind -> the global basis
    for kind, X, Wm in (("K", Xk, Wk), ("V", Xv, Wv)):
        g = glob[kind] = GroupBasis(X, L, Wm, None)
        for G in groups:
            b = bases[G, None, kind] = g if G == L else GroupBasis(X, G, Wm, g.cov)
            b.cov = None
            for f in fracs if G in tgroups else ():
                bases[G, f, kind] = truncated(b, f)
        g.cov = None
        log(f"{kind}: bases for G in {groups} fitted ({len(X)} calibration tokens)")

    # The K:V step ratio: kv_transform_study's weighted probe on the global basis.
    gk, gv = glob["K"], glob["V"]
    rows = torch.cat([torch.arange(j * (PREFIX - 1), (j + 1) * (PREFIX - 1)) for j in (0, 8)])
    cal = {"K": gk.coeffs(Xk[rows]), "V": gv.coeffs(Xv[rows])}
    del Xk, Xv

    def calib_rate(kind, d):
        b = gk if kind == "K" else gv
        bits = kts.pca_code(cal[kind], b, d, True, sink=False, recon=False)[1]["class"]
        return bits / (len(rows) * N) + 8 * TOKEN_BYTES / (2 * N)
    dk, dv = kts.delta_for(2.5, lambda d: calib_rate("K", d)), kts.delta_for(2.5, lambda d: calib_rate("V", d))
    kls, kept = {"K": 0.0, "V": 0.0}, {}
    for ids in kts.spread(calib_tokens, PREFIX + CONT, 2):
        k, v, _ = kts.prefill(ids[:PREFIX])
        exact = kts.continuation(ids, kts.rope(k), v)
        for kind, d, b, x in (("K", dk, gk, k), ("V", dv, gv, v)):
            xq, _, kept[kind] = kts.pca_code(b.coeffs(x), b, d, True)
            kq, vq = (kts.rope(xq), v) if kind == "K" else (kts.rope(k), xq)
            kls[kind] += kts.window_metrics(ids, exact, kq, vq)[1]
    ratio = float(np.sqrt(kls["K"] / kept["K"] / (kls["V"] / kept["V"])) * dv / dk)
    log(f"K:V probe: DELTA K {dk:.3g}, DELTA V {dv:.3g} at 2.5 bits/value: DELTA_V = {ratio:.3g} DELTA_K")

    # Points: the coder (ac 11/6, ac-lo 6/2), then three DELTA_K per configuration.
    points = [{"quantizer": "coder", "levels": lv, "alias": None} for lv in ((11, 6), (6, 2))]
    for G in groups:
        hi = 0.95 * 2 ** (np.log(G) / np.log(L))  # 0.95 at G = 1 .. 1.9 at G = 30
        for d in (0.2 ** (1 - t) * hi ** t for t in map(float, args.grid.split(","))):
            plain = None
            for f in [None] + [f for f in fracs if G in tgroups]:
                masks = [keep_mask(bases[G, f, kd], d * (ratio if kd == "V" else 1)) for kd in "KV"]
                p = {"quantizer": f"pca-G{G}" + (f"-top{round(100 * f)}" if f else ""), "G": G, "frac": f,
                     "delta_k": d, "delta_v": d * ratio, "kept": [int(m.sum()) for m in masks]}
                same = plain is not None and all((m == pm).all() for m, pm in zip(masks, plain["masks"]))
                p["alias"] = plain if same else None
                if f is None:
                    plain = dict(p, masks=masks)
                    points.append(plain)
                else:
                    points.append(p)
    W = args.windows
    log(f"{len(points)} points ({sum(p.get('alias') is not None for p in points)} truncated ones equal their "
        f"plain point), {W} windows")

    eval_tokens = kts.tokens_of(args.eval)
    windows = kts.spread(eval_tokens, PREFIX + CONT, W)
    for p in points:
        p.update(nll=[], kl=0.0, n=0, bits={})
    nll_exact = []
    for w, ids in enumerate(windows):
        kpre, v = kts.prefill(ids[:PREFIX])[:2]
        kpost = kts.rope(kpre)
        exact = kts.continuation(ids, kpost, v)
        nll_exact.append(float(-exact[torch.arange(CONT - 1), ids[PREFIX + 1:]].sum()))
        C = {(G, kd): bases[G, None, kd].coeffs((kpre if kd == "K" else v)[1:]) for G in groups for kd in "KV"}
        for p in points:
            if p.get("alias") is not None:
                continue
            if p["quantizer"] == "coder":
                kq, vq, bits = kts.channel_point(kpre, kpost, v, *p["levels"], "coder")
                bits = {"coder": bits}
            else:
                out, bits = {}, {}
                for kd, x, d in (("K", kpre, p["delta_k"]), ("V", v, p["delta_v"])):
                    xq, kb, _ = kts.pca_code(C[p["G"], kd], bases[p["G"], p["frac"], kd], d, True, sink=False)
                    out[kd] = torch.cat([x[:1].half().float(), xq])  # the sink in fp16
                    bits = {a: bits.get(a, 0.0) + kb[a] + 16 * N for a in kb}
                kq, vq = kts.rope(out["K"]), out["V"]
            nll, kl, n = kts.window_metrics(ids, exact, kq, vq)
            p["nll"].append(nll)
            p["kl"], p["n"] = p["kl"] + kl, p["n"] + n
            for a, b in bits.items():
                p["bits"][a] = p["bits"].get(a, 0.0) + b + 8 * TOKEN_BYTES * PREFIX
        log(f"window {w + 1}/{W}")

    boot = np.random.default_rng(0).integers(0, W, (2000, W))
    e = np.array(nll_exact)
    rows = []
    print("\n| quantizer | DELTA_K | bits/value | x vs fp16 | ppl change [95% CI] | mean KL | kept K/V "
          "| metadata MB | MACs/token/kind |")
    print("|---|---|---|---|---|---|---|---|---|")
    for p in points:
        src = p["alias"] or p
        t, n = np.array(src["nll"]), src["n"]
        bpv = {a: b / (W * PREFIX * 2 * N) for a, b in src["bits"].items()}
        head = bpv["coder" if p["quantizer"] == "coder" else "class"]
        ci = np.percentile(np.expm1((t[boot].sum(1) - e[boot].sum(1)) / n), [2.5, 97.5])
        row = {"quantizer": p["quantizer"], "bits_per_value": head, "x_vs_fp16": 16 / head,
               "bits_by_accounting": bpv, "ppl_change": float(np.expm1((t.sum() - e.sum()) / n)),
               "ppl_change_ci95": [float(c) for c in ci], "mean_kl": src["kl"] / n, "positions": n}
        if p["quantizer"] == "coder":
            row.update(k_levels=p["levels"][0], v_levels=p["levels"][1])
            label, cost = f"{p['levels'][0]}/{p['levels'][1]}", "- | -"
        else:
            B = p["G"] * kts.H * kts.D
            row.update({a: p[a] for a in ("G", "frac", "delta_k", "delta_v", "kept")}, group_dims=B,
                       same_as_untruncated=p["alias"] is not None,
                       metadata_mb=2 * (B * sum(p["kept"]) + 2 * N) / 1e6,
                       macs_per_token_kind=[B * k for k in p["kept"]])
            label = f"{p['delta_k']:.3g}"
            cost = f"{row['metadata_mb']:.1f} | {B * sum(p['kept']) / 2e6:.2f}M"
            label += " (=plain)" if p["alias"] is not None else ""
        rows.append(row)
        kept = "-" if "kept" not in p else "/".join(map(str, p["kept"]))
        print(f"| {p['quantizer']} | {label} | {head:.3f} | {16 / head:.2f}x | {100 * row['ppl_change']:+.2f}% "
              f"[{100 * ci[0]:+.2f}, {100 * ci[1]:+.2f}] | {row['mean_kl']:.2e} | {kept} | {cost} |")

    merged = None
    if args.merge:  # the earlier run's rows (its coder rows must equal this run's)
        merged = json.load(open(args.merge))
        key = [(r["bits_per_value"], r["mean_kl"], r["ppl_change"]) for r in rows if r["quantizer"] == "coder"]
        old = [(r["bits_per_value"], r["mean_kl"], r["ppl_change"]) for r in merged["results"]
               if r["quantizer"] == "coder"]
        assert merged["evaluation"]["windows"] == W and np.allclose(key, old, rtol=1e-9), "other windows/coder"
        rows = merged["results"] + [r for r in rows if r["quantizer"] != "coder"]
        rows.sort(key=lambda r: (r["quantizer"] != "coder", r.get("G", 0), r.get("frac") or 0,
                                 r.get("delta_k", 0)))
    targets = {f"ac-lo {r['k_levels']}/{r['v_levels']}" if r["k_levels"] == 6 else
               f"ac {r['k_levels']}/{r['v_levels']}": r for r in rows if r["quantizer"] == "coder"}
    equal = []
    print("\nat the coder's KL (interpolated in log KL; '-' outside the measured range):")
    print("| quantizer | " + " | ".join(f"{t} (KL {r['mean_kl']:.2e}): bits/value, metadata MB, MACs/token/kind"
                                     for t, r in targets.items()) + " |")
    print("|---|" + "---|" * len(targets))
    for name in dict.fromkeys(r["quantizer"] for r in rows if r["quantizer"] != "coder"):
        pts = sorted((r for r in rows if r["quantizer"] == name), key=lambda r: r["mean_kl"])
        m = np.log([r["mean_kl"] for r in pts])
        entry, cells = {"quantizer": name, "G": pts[0]["G"], "frac": pts[0]["frac"]}, []
        for t, c in targets.items():
            x = np.log(c["mean_kl"])
            if not m[0] <= x <= m[-1]:
                entry[t], cell = None, "-"
            else:
                at = {a: float(np.interp(x, m, [f(r) for r in pts])) for a, f in (
                    ("bits_per_value", lambda r: r["bits_per_value"]), ("metadata_mb", lambda r: r["metadata_mb"]),
                    ("macs_per_token_kind", lambda r: sum(r["macs_per_token_kind"]) / 2),
                    ("ppl_change", lambda r: r["ppl_change"]))}
                at["coder_bits_per_value"] = c["bits_per_value"]
                entry[t] = at
                cell = f"{at['bits_per_value']:.3f}, {at['metadata_mb']:.1f}, {at['macs_per_token_kind'] / 1e6:.2f}M"
            cells.append(cell)
        equal.append(entry)
        print(f"| {name} | " + " | ".join(cells) + " |")
    for t, r in targets.items():
        print(f"coder {t}: {r['bits_per_value']:.3f} bits/value at KL {r['mean_kl']:.2e}")
    log("done")
    if args.json:
        results.write(args.json, results.header("kv_group_transform_study"), rows, equal_quality=equal,
                      kv_ratio=ratio, groups=groups, truncated_groups=tgroups, fracs=fracs,
                      calibration={"text": args.calib, "tokens": len(calib_tokens), "windows": len(starts)},
                      evaluation={"text": args.eval, "tokens": len(eval_tokens), "windows": W,
                                  "prefix": PREFIX, "continuation": CONT, "mode": "product"},
                      sink="fp16", token_bytes=TOKEN_BYTES, wall_s=round(time.time() - kts.T0),
                      merged_from=merged and {a: merged[a] for a in ("command", "commit", "date", "wall_s",
                                                                     "groups", "truncated_groups", "fracs")})
        print(f"result file: {args.json}")


if __name__ == "__main__":
    main()
