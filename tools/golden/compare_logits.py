#!/usr/bin/env python3
"""Compares kvcast's logits and greedy tokens with the HF oracle's.

Both files have hf_logits.py's layout ("tokens", "logits", "greedy_tokens").
Passes when every logit is within --tol (absolute, after comparing on the
same prompt) and the greedy tokens are identical for --steps tokens (default:
all HF generated). Prints the worst logit error, where the tokens first
differ, and HF's top1-top2 margin there (a near-tie explains a flip).

  python3 tools/golden/compare_logits.py --hf HF.json --kvcast OURS.json --tol 0.05
"""

import argparse
import json
import sys

import numpy as np


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hf", required=True)
    p.add_argument("--kvcast", required=True)
    p.add_argument("--tol", type=float, required=True, help="max |logit difference|")
    p.add_argument("--steps", type=int, default=0, help="greedy tokens that must match")
    args = p.parse_args(argv)
    with open(args.hf) as f:
        hf = json.load(f)
    with open(args.kvcast) as f:
        ours = json.load(f)
    if hf["tokens"] != ours["tokens"]:
        print("FAIL: the two files are for different prompts")
        return 1
    if len(hf["logits"]) != len(ours["logits"]):
        print(f"FAIL: {len(hf['logits'])} positions of logits vs {len(ours['logits'])}")
        return 1
    worst, where = 0.0, None
    for pos, (a, b) in enumerate(zip(hf["logits"], ours["logits"])):
        if len(a) != len(b):
            print(f"FAIL: position {pos}: vocab {len(a)} vs {len(b)}")
            return 1
        d = np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))
        i = int(np.argmax(d))
        if d[i] > worst or not np.isfinite(d[i]):
            worst, where = float(d[i]), (pos, i, a[i], b[i])
    ok = worst <= args.tol
    print(f"logits: worst |diff| {worst:.3g} (tolerance {args.tol}) at position/token "
          f"{where[:2] if where else '-'}: hf {where[2] if where else '-'} kvcast "
          f"{where[3] if where else '-'}")
    want = hf.get("greedy_tokens", [])
    got = ours.get("greedy_tokens", [])
    steps = args.steps or len(want)
    if steps:
        same = 0
        while same < min(steps, len(want), len(got)) and want[same] == got[same]:
            same += 1
        margins = hf.get("greedy_margins") or []
        if same < steps:
            margin = margins[same] if same < len(margins) else None
            print(f"greedy: first {same} of {steps} tokens identical; step {same}: hf "
                  f"{want[same] if same < len(want) else '-'} kvcast "
                  f"{got[same] if same < len(got) else '-'} (hf top1-top2 margin {margin})")
            ok = False
        else:
            print(f"greedy: {steps} of {steps} tokens identical "
                  f"(smallest hf margin {min(margins[:steps]) if margins else '-'})")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
