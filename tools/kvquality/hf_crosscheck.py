#!/usr/bin/env python3
"""Cross-checks one point of kv_quality with code no one here wrote.

HF transformers runs the same windows (kv_quality --windows_out) on the
same GGUF in float32, and the int8 track's product mode is redone with an
int8 codec written from docs/kvcache-wire-format.md alone (numpy): the
prefix's post-RoPE K and V, per token and KV head, scale = the smallest fp16
s with s * 127 >= amax, codes round(x / s) to nearest even. Prints HF's
exact perplexity and the int8 point (perplexity change, mean KL, top-1
agreement) beside kv_quality's (--json of a run with --backend cpu-f32
--tracks int8 --modes product on the same windows).

Usage: .venv-hf/bin/python tools/kvquality/hf_crosscheck.py GGUF WINDOWS.json RESULTS.json
"""
import copy
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from transformers.cache_utils import DynamicCache  # noqa: E402


def fp16_scale(amax, qmax):
    """The smallest fp16 s with s * qmax >= amax, per element of amax."""
    s = (amax / qmax).astype(np.float16)
    low = s.astype(np.float32) * qmax < amax
    s[low] = np.nextafter(s[low], np.float16(np.inf))
    return s.astype(np.float32)


def int8_round_trip(x):
    """x [..., head_dim] float32: each last-axis row coded as one int8 block."""
    x = x.astype(np.float32)
    s = fp16_scale(np.abs(x).max(-1, keepdims=True), np.float32(127))
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(s > 0, np.rint(x / s), 0)
    return np.clip(q, -127, 127).astype(np.float32) * s


def main():
    gguf, windows_path, results_path = sys.argv[1:4]
    torch.set_num_threads(2)
    model = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(os.path.abspath(gguf)), gguf_file=os.path.basename(gguf),
        torch_dtype=torch.float32, attn_implementation="eager", tie_word_embeddings=True,
        local_files_only=True).eval()
    w = json.load(open(windows_path))
    prefix, windows = w["prefix"], w["windows"]
    nll_exact = nll_track = kl_sum = agree = n = 0.0
    for i, ids in enumerate(windows):
        ids = torch.tensor([ids])
        with torch.no_grad():
            out = model(ids[:, :prefix], use_cache=True)
            cache = out.past_key_values
            if isinstance(cache, tuple):
                cache = DynamicCache.from_legacy_cache(cache)
            coded = copy.deepcopy(cache)
            for layer in range(len(coded.key_cache)):
                for t in (coded.key_cache, coded.value_cache):
                    t[layer] = torch.from_numpy(int8_round_trip(t[layer].numpy()))
            exact = model(ids[:, prefix:], past_key_values=cache).logits[0, :-1].double()
            track = model(ids[:, prefix:], past_key_values=coded).logits[0, :-1].double()
        le, lt = torch.log_softmax(exact, -1), torch.log_softmax(track, -1)
        targets = ids[0, prefix + 1:]
        rows = torch.arange(len(targets))
        nll_exact += float(-le[rows, targets].sum())
        nll_track += float(-lt[rows, targets].sum())
        kl_sum += float((le.exp() * (le - lt)).sum(-1).clamp(min=0).sum())
        agree += float((le.argmax(-1) == lt.argmax(-1)).sum())
        n += len(targets)
        print(f"window {i + 1}/{len(windows)}", file=sys.stderr, flush=True)
    ours = json.load(open(results_path))
    row = next(r for r in ours["results"] if r["track"] == "int8" and r["mode"] == "product")
    print("| | exact perplexity | int8 product: perplexity change | mean KL | top-1 agreement |")
    print("|---|---|---|---|---|")
    print(f"| HF transformers {__import__('transformers').__version__} + a numpy int8 codec "
          f"| {np.exp(nll_exact / n):.4f} | {100 * np.expm1((nll_track - nll_exact) / n):+.3f}% "
          f"| {kl_sum / n:.2e} | {100 * agree / n:.2f}% |")
    print(f"| kvcast ({ours['backend']}) | {row['ppl_exact']:.4f} | {100 * row['ppl_change']:+.3f}% "
          f"| {row['mean_kl']:.2e} | {100 * row['top1']:.2f}% |")


if __name__ == "__main__":
    main()
