#!/usr/bin/env python3
"""Packs one hf_logits.py result into a committed golden file.

Reads the JSON that hf_logits.py wrote (--hf), the TinyModelOptions that
produced the checkpoint (--options, a JSON object whose keys are the field
names of kvcast::TinyModelOptions) and the checkpoint directory (--model, for
file hashes), and writes --out:

  {"format": "kvcast-golden-logits-v1",
   "variant": NAME,
   "tiny_model_options": {...every TinyModelOptions field...},
   "checkpoint_sha256": {file name: sha256, ...},   # provenance only
   "oracle": {"transformers": ..., "torch": ..., "python": ...,
              "numpy": ..., "dtype": "float32", "attn_implementation": "eager",
              "architecture": ...},
   "vocab_size": V,
   "tokens": [prompt ids],
   "logits": [[V floats, 6 significant digits] per prompt position],
   "greedy_tokens": [N ids], "greedy_min_margin": float,
   "greedy_margins": [top1 - top2 logit gap at each greedy step]}

Rounding the float32 logits to 6 significant digits changes them by at most
5e-6 relative (< 1e-4 absolute for |logit| < 20), far inside the test's
tolerance, and keeps each file near 200 KB.
Used by make_golden.sh; run it with the oracle's interpreter (.venv-hf).
"""

import argparse
import json
import os
import platform
import sys

import numpy
from file_digest import sha256  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variant", required=True)
    p.add_argument("--hf", required=True, help="hf_logits.py output")
    p.add_argument("--options", required=True, help="TinyModelOptions as JSON")
    p.add_argument("--model", required=True, help="checkpoint directory")
    p.add_argument("--out", required=True)
    args = p.parse_args()

    with open(args.hf) as f:
        hf = json.load(f)
    options = json.loads(args.options)
    logits = hf["logits"]
    vocab = options["vocab_size"]
    if len(logits) != len(hf["tokens"]) or any(len(r) != vocab for r in logits):
        sys.exit(f"{args.hf}: logits shape does not match tokens x {vocab}")
    if "greedy_tokens" not in hf:
        sys.exit(f"{args.hf}: no greedy_tokens (run hf_logits.py with --greedy)")

    def g6(x):
        return float(f"{x:.6g}")

    files = sorted(n for n in os.listdir(args.model)
                   if n.endswith(".safetensors") or n.endswith(".json"))
    golden = {
        "format": "kvcast-golden-logits-v1",
        "variant": args.variant,
        "tiny_model_options": options,
        "checkpoint_sha256": {n: sha256(os.path.join(args.model, n)) for n in files},
        "oracle": {
            "tool": "tools/golden/hf_logits.py",
            "transformers": hf["transformers"],
            "torch": hf["torch"],
            "numpy": numpy.__version__,
            "python": platform.python_version(),
            "dtype": hf["dtype"],
            "attn_implementation": "eager",
            "architecture": hf["architecture"],
        },
        "vocab_size": vocab,
        "tokens": hf["tokens"],
        "logits": [[g6(x) for x in row] for row in logits],
        "greedy_tokens": hf["greedy_tokens"],
        "greedy_min_margin": hf["greedy_min_margin"],
        "greedy_margins": [g6(m) for m in hf["greedy_margins"]],
    }
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        # One logits row per line: small diffs when the data is regenerated.
        f.write("{\n")
        keys = list(golden)
        for i, k in enumerate(keys):
            sep = "," if i + 1 < len(keys) else ""
            if k == "logits":
                f.write(' "logits": [\n')
                rows = golden[k]
                for j, row in enumerate(rows):
                    f.write("  " + json.dumps(row, separators=(",", ":"))
                            + ("," if j + 1 < len(rows) else "") + "\n")
                f.write(" ]" + sep + "\n")
            else:
                f.write(f" {json.dumps(k)}: {json.dumps(golden[k])}{sep}\n")
        f.write("}\n")
    with open(tmp) as f:
        json.load(f)  # well-formed
    os.replace(tmp, args.out)
    print(f"wrote {args.out}: {len(logits)} x {vocab} logits, "
          f"{len(golden['greedy_tokens'])} greedy tokens, "
          f"min margin {golden['greedy_min_margin']:.4g}", file=sys.stderr)


if __name__ == "__main__":
    main()
