#!/usr/bin/env python3
"""Compares kvcast's logits and greedy tokens with the HF oracle's.

Every file has hf_logits.py's layout ("tokens", "logits" or "logits_file" +
"vocab", "greedy_tokens"). Two modes:

Exact (no --hf_rounded): passes when every logit is within --tol of HF's and
the greedy tokens are identical for --steps tokens (default: all HF
generated). For engines computing in float32 (the CPU backends).

Against the rounding floor (--hf_rounded): for engines that feed 16-bit
GEMMs (the CUDA backend rounds every Linear's input to bf16). --hf is HF in
float32, teacher-forced (hf_logits.py --teacher_forced: the prompt and HF's
64 greedy tokens), --hf_rounded the same model and tokens with every Linear
input rounded to bf16 (--linear_input_dtype bfloat16), --kvcast kvcast's
logits over the same tokens, --kvcast_greedy its own greedy tokens from the
prompt. The floor F is the worst |logit difference| between HF rounded and
HF float32: what bf16 GEMM inputs alone cost. Passes when
  - kvcast's worst |logit difference| from HF float32 is at most
    max(2 F, --tol);
  - every teacher-forced position where kvcast's top-1 is not HF's token is
    a near-tie: HF's top1-top2 margin there is at most 2 F;
  - kvcast's greedy tokens equal HF's up to the first near-tie (margin at
    most 2 F), where they may part.
Prints every measure for kvcast and, beside it, HF rounded's own.

  python3 tools/golden/compare_logits.py --hf HF.json --kvcast OURS.json --tol 0.05
  python3 tools/golden/compare_logits.py --hf HF32.json --hf_rounded HFBF16.json \\
      --kvcast OURS_TF.json --kvcast_greedy OURS_GREEDY.json --tol 0.05
"""

import argparse
import json
import sys

import numpy as np


def load(path):
    with open(path) as f:
        d = json.load(f)
    if "logits_file" in d:
        d["logits"] = np.fromfile(d["logits_file"], dtype="<f4").reshape(-1, d["vocab"])
    else:
        d["logits"] = np.asarray(d["logits"], dtype=np.float32)
    return d


def worst(a, b):
    """(max |a - b|, (position, token, a, b)); NaN anywhere counts as inf."""
    d = np.abs(a.astype(np.float64) - b.astype(np.float64))
    d[~np.isfinite(d)] = np.inf
    pos, tok = np.unravel_index(int(np.argmax(d)), d.shape)
    return float(d[pos, tok]), (int(pos), int(tok), float(a[pos, tok]), float(b[pos, tok]))


def margins(logits):
    top2 = np.sort(logits, axis=1)[:, -2:]
    return top2[:, 1] - top2[:, 0]


def first_divergence(want, got, steps):
    n = 0
    while n < min(steps, len(want), len(got)) and want[n] == got[n]:
        n += 1
    return n


def exact(args, hf, ours):
    err, where = worst(hf["logits"], ours["logits"])
    ok = err <= args.tol
    print(f"logits: worst |diff| {err:.3g} (tolerance {args.tol}) at position/token "
          f"{where[:2]}: hf {where[2]} kvcast {where[3]}")
    want, got = hf.get("greedy_tokens", []), ours.get("greedy_tokens", [])
    steps = args.steps or len(want)
    if steps:
        same = first_divergence(want, got, steps)
        m = hf.get("greedy_margins") or []
        if same < steps:
            print(f"greedy: first {same} of {steps} tokens identical; step {same}: hf "
                  f"{want[same] if same < len(want) else '-'} kvcast "
                  f"{got[same] if same < len(got) else '-'} "
                  f"(hf top1-top2 margin {m[same] if same < len(m) else None})")
            ok = False
        else:
            print(f"greedy: {steps} of {steps} tokens identical "
                  f"(smallest hf margin {min(m[:steps]) if m else '-'})")
    return ok


def against_floor(args, hf, rounded, ours, ours_greedy):
    for name, d in (("--hf_rounded", rounded), ("--kvcast", ours)):
        if d["tokens"] != hf["tokens"]:
            print(f"FAIL: {name} is over other tokens than --hf")
            return False
    floor, fw = worst(hf["logits"], rounded["logits"])
    err, where = worst(hf["logits"], ours["logits"])
    same_numerics, _ = worst(rounded["logits"], ours["logits"])
    bound = max(2 * floor, args.tol)
    near = 2 * floor  # a margin this small is a tie that bf16 rounding may break
    ok = err <= bound
    print(f"logits vs HF float32: kvcast worst |diff| {err:.3g} at {where[:2]} "
          f"(bound {bound:.3g}); HF with bf16 Linear inputs {floor:.3g} (the floor F) at "
          f"{fw[:2]}; kvcast vs HF bf16-input {same_numerics:.3g}")

    start = hf.get("prompt_len", len(hf["tokens"]))
    targets = np.asarray(hf["tokens"][start:])
    if len(targets):
        rows = slice(start - 1, len(hf["tokens"]) - 1)
        m = margins(hf["logits"][rows])
        for name, d in (("kvcast", ours), ("HF bf16-input", rounded)):
            top1 = np.argmax(d["logits"][rows], axis=1)
            miss = np.nonzero(top1 != targets)[0]
            far = [int(i) for i in miss if m[i] > near]
            print(f"teacher-forced top-1: {name} {len(targets) - len(miss)} of {len(targets)} "
                  f"agree with HF float32; disagreements at HF margins "
                  f"{[round(float(m[i]), 4) for i in miss]}"
                  + (f": {len(far)} beyond 2 F" if far else ""))
            if name == "kvcast" and far:
                ok = False

    want = hf.get("greedy_tokens", [])
    hf_m = hf.get("greedy_margins") or []
    for name, d in (("kvcast", ours_greedy), ("HF bf16-input", rounded)):
        got = (d or {}).get("greedy_tokens", [])
        if not want or not got:
            continue
        n = first_divergence(want, got, len(want))
        if n == len(want):
            print(f"greedy: {name} {n} of {len(want)} tokens identical to HF float32")
            continue
        m = hf_m[n] if n < len(hf_m) else float("inf")
        tie = m <= near
        print(f"greedy: {name} first {n} of {len(want)} tokens identical to HF float32; "
              f"step {n}: HF margin {m:.4g} ({'a near-tie, within 2 F' if tie else 'beyond 2 F'})")
        if name == "kvcast" and not tie:
            ok = False
    return ok


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hf", required=True)
    p.add_argument("--kvcast", required=True)
    p.add_argument("--hf_rounded", default="", help="HF with bf16 Linear inputs, same tokens")
    p.add_argument("--kvcast_greedy", default="", help="kvcast's greedy tokens from the prompt")
    p.add_argument("--tol", type=float, required=True, help="max |logit difference|")
    p.add_argument("--steps", type=int, default=0, help="greedy tokens that must match")
    args = p.parse_args(argv)
    hf, ours = load(args.hf), load(args.kvcast)
    if hf["logits"].shape != ours["logits"].shape:
        print(f"FAIL: logits of shape {hf['logits'].shape} vs {ours['logits'].shape}")
        return 1
    if args.hf_rounded:
        greedy = None
        if args.kvcast_greedy:
            with open(args.kvcast_greedy) as f:
                greedy = json.load(f)
        ok = against_floor(args, hf, load(args.hf_rounded), ours, greedy)
    else:
        if hf["tokens"] != ours["tokens"]:
            print("FAIL: the two files are for different prompts")
            return 1
        ok = exact(args, hf, ours)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
