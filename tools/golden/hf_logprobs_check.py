#!/usr/bin/env python3
"""Checks the logprobs kvcast returned (openai_logprobs.py's JSON) against HF
transformers on the same GGUF (dequantized, float32): HF decodes greedily
from the same prompt ids, and at every step where both picked the same
token the chosen token's logprob and the top-k tokens and logprobs are
compared. Prints the worst differences; exits 1 past --tol.

  .venv-hf/bin/python tools/golden/hf_logprobs_check.py \
      --gguf build/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --kvcast kvcast_logprobs.json
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_gguf_golden import load_model, load_tokenizer, read_gguf_metadata  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gguf", required=True)
    p.add_argument("--kvcast", required=True)
    p.add_argument("--tol", type=float, default=1e-2)
    a = p.parse_args()
    kv = json.load(open(a.kvcast))
    # As hf_gguf_golden.py loads it: the output projection tied where the
    # file has none, the model's own pre-tokenizer.
    meta = read_gguf_metadata(a.gguf)
    tok, _, _ = load_tokenizer(a.gguf, meta)
    model = load_model(a.gguf, meta)
    ids = list(kv["prompt_ids"])
    worst_lp = worst_top = 0.0
    agreed = top_sets = 0
    k = len(kv["content"][0]["top"]) if kv["content"] else 0
    with torch.no_grad():
        for step, got in enumerate(kv["content"]):
            logits = model(torch.tensor([ids])).logits[0, -1].double()
            lp = torch.log_softmax(logits, -1)
            hf_id = int(torch.argmax(lp))
            raw = tok.decode([hf_id], clean_up_tokenization_spaces=False).encode()
            if list(raw) != got["bytes"]:
                print(f"step {step}: HF picks {raw!r}, kvcast {bytes(got['bytes'])!r}: stop comparing")
                break
            agreed += 1
            worst_lp = max(worst_lp, abs(float(lp[hf_id]) - got["logprob"]))
            top = torch.topk(lp, k)
            hf_top = [(list(tok.decode([int(i)], clean_up_tokenization_spaces=False).encode()), float(v))
                      for v, i in zip(top.values, top.indices)]
            if [b for b, _ in hf_top] == [t["bytes"] for t in got["top"]]:
                top_sets += 1
            for (b, v), t in zip(hf_top, got["top"]):
                if b == t["bytes"]:
                    worst_top = max(worst_top, abs(v - t["logprob"]))
            ids.append(hf_id)
    print(f"{agreed} of {len(kv['content'])} steps with the same greedy token; "
          f"chosen-token logprob worst |diff| {worst_lp:.2e}; top-{k} lists identical at "
          f"{top_sets} of {agreed} steps, worst |diff| {worst_top:.2e}")
    ok = agreed == len(kv["content"]) and worst_lp <= a.tol and worst_top <= a.tol
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
