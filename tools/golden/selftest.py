#!/usr/bin/env python3
"""Checks the oracle install and hf_logits.py on tiny random checkpoints.

For each architecture and stored dtype: write a checkpoint, run hf_logits.py
on it, and compare with an independent computation in this process:
  * logits equal the in-memory model's (weights rounded to the stored dtype,
    computed in float32), so save -> load -> float32 loses nothing;
  * greedy_tokens equal a no-KV-cache argmax loop (full recompute per step),
    unless the margin reports a near-tie;
  * "llama3" rope scaling is in effect (rotary frequencies differ from
    unscaled ones).
Prints 'N passed, N failed' and exits non-zero on any failure.

  .venv-hf/bin/python tools/golden/selftest.py
"""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import hf_logits  # noqa: E402
import make_random_checkpoint  # noqa: E402

TOKENS = [1, 17, 300, 42, 5, 511, 9, 128]
GREEDY = 6


def greedy_no_cache(model, tokens, n):
    seq = list(tokens)
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([seq]), use_cache=False).logits
            seq.append(int(torch.argmax(logits[0, -1])))
    return seq[len(tokens):]


def check(arch, dtype, tmp):
    out_dir = os.path.join(tmp, f"{arch}-{dtype}")
    model = make_random_checkpoint.make(arch, dtype, out_dir, seed=3)
    # A fresh float32 model with the stored (rounded) weights. Not
    # model.to(float32): that would keep non-persistent buffers such as the
    # rotary inv_freq rounded to the stored dtype, which a load recomputes.
    _, model_cls, _ = make_random_checkpoint.ARCHS[arch]
    ref = model_cls(model.config).eval()
    ref.load_state_dict({k: v.to(torch.float32)
                         for k, v in model.state_dict().items()})
    ref.config._attn_implementation = "eager"
    out_json = os.path.join(tmp, f"{arch}-{dtype}.json")
    rc = hf_logits.main(["--model", out_dir, "--tokens",
                         ",".join(map(str, TOKENS)), "--out", out_json,
                         "--greedy", str(GREEDY)])
    assert rc == 0, rc
    with open(out_json) as f:
        got = json.load(f)
    assert got["tokens"] == TOKENS
    assert got["model"] == f"{arch}-{dtype}"
    logits = torch.tensor(got["logits"], dtype=torch.float32)
    assert logits.shape == (len(TOKENS), ref.config.vocab_size), logits.shape
    with torch.no_grad():
        want = ref(torch.tensor([TOKENS]), use_cache=False).logits[0]
    diff = float((logits - want).abs().max())
    assert diff <= 1e-5, f"logits differ from in-memory model by {diff}"
    assert float(logits.abs().max()) > 0.1, "logits suspiciously small"
    assert len(got["greedy_tokens"]) == GREEDY
    want_greedy = greedy_no_cache(ref, TOKENS, GREEDY)
    if got["greedy_min_margin"] > 1e-3:
        assert got["greedy_tokens"] == want_greedy, (
            got["greedy_tokens"], want_greedy)
    if arch == "llama3":
        rotary = ref.model.rotary_emb
        assert rotary.rope_type == "llama3", rotary.rope_type
        dim = ref.config.hidden_size // ref.config.num_attention_heads
        plain = 1.0 / (ref.config.rope_theta ** (
            torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        assert not torch.allclose(rotary.inv_freq, plain), "llama3 rope unused"
    return diff


def main():
    print(f"torch {torch.__version__}, transformers "
          f"{hf_logits.transformers.__version__}")
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ("llama", "llama3", "qwen2", "mistral"):
            for dtype in ("float32", "bfloat16", "float16"):
                try:
                    diff = check(arch, dtype, tmp)
                    print(f"ok   {arch:8s} {dtype:9s} max|diff|={diff:.2e}")
                    passed += 1
                except Exception as e:  # report every case, then fail
                    print(f"FAIL {arch:8s} {dtype:9s} {type(e).__name__}: {e}")
                    failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
