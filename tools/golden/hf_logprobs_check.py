#!/usr/bin/env python3
"""Checks the logprobs kvcast returned (openai_logprobs.py's JSON) against HF
transformers on the same GGUF (dequantized, float32): HF decodes greedily
from the same prompt ids, and at every step where both picked the same
token the chosen token's logprob and the top-k tokens and logprobs are
compared. Prints the worst differences; exits 1 past --tol.

  .venv-hf/bin/python tools/golden/hf_logprobs_check.py \
      --gguf build/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --kvcast kvcast_logprobs.json

A file with "echo" (openai_logprobs.py --echo) is a prompt's own
log-probabilities: HF runs the prompt once and every position is compared.
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
    if "echo" in kv:
        return check_echo(a, kv, tok, model, ids)
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


def check_echo(a, kv, tok, model, ids):
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)
    worst = worst_top = 0.0
    same_top = 0
    hf_sum = kv_sum = 0.0
    for pos, got in enumerate(kv["echo"]):  # token pos + 1, after positions 0..pos
        hf = float(lp[pos, ids[pos + 1]])
        hf_sum += hf
        kv_sum += got["logprob"]
        worst = max(worst, abs(hf - got["logprob"]))
        k = len(got["top"])
        top = torch.topk(lp[pos], k)
        hf_top = [list(tok.decode([int(i)], clean_up_tokenization_spaces=False).encode()) for i in top.indices]
        same_top += hf_top == [t["bytes"] for t in got["top"]]
        for v, b, t in zip(top.values, hf_top, got["top"]):
            if b == t["bytes"]:
                worst_top = max(worst_top, abs(float(v) - t["logprob"]))
    n = len(kv["echo"])
    print(f"{n} prompt positions: logprob worst |diff| {worst:.2e}; top lists identical at {same_top}; "
          f"top logprobs worst |diff| {worst_top:.2e}; summed {kv_sum:.3f} (HF {hf_sum:.3f})")
    ok = worst <= a.tol and worst_top <= a.tol
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
