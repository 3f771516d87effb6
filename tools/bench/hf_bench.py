#!/usr/bin/env python3
"""HF transformers CPU throughput on a GGUF model (dequantized to float32 by
transformers, as tools/golden uses it), the peer of engine_bench and
llamacpp_bench.py: prefill tokens/s of a --prompt-len prompt in one forward,
then decode tokens/s at batch 1 over --gen greedy steps with the KV cache
(model.generate, no EOS stop); and, with --batch N, aggregate decode tokens/s
of N sequences. Median of --runs runs after one warm-up. One JSON line.

  .venv-hf/bin/python tools/bench/hf_bench.py --model M.gguf [--threads 2]
      [--prompt-len 512] [--gen 32] [--batch 8] [--runs 3]

The prompt ids are the same formula as engine_bench's ((i * 7919 + 13) % vocab).
Needs the oracle venv (tools/golden/install_oracle.sh); never touches the network.
"""
import argparse
import json
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import results  # noqa: E402  (tools/report: the result files' header)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    d, name = os.path.split(os.path.abspath(a.model))
    model = AutoModelForCausalLM.from_pretrained(
        d, gguf_file=name, torch_dtype=torch.float32, tie_word_embeddings=True,
        local_files_only=True)
    model.eval()
    vocab = model.config.vocab_size
    ids = torch.tensor([[(i * 7919 + 13) % vocab for i in range(a.prompt_len)]])

    def prefill():
        t = time.perf_counter()
        with torch.no_grad():
            model(ids)
        return a.prompt_len / (time.perf_counter() - t)

    def decode(batch):
        x = ids.repeat(batch, 1)
        mask = torch.ones_like(x)
        with torch.no_grad():
            t = time.perf_counter()
            model.generate(x, attention_mask=mask, max_new_tokens=1, min_new_tokens=1,
                           do_sample=False, eos_token_id=None, pad_token_id=0)
            first = time.perf_counter() - t
            t = time.perf_counter()
            model.generate(x, attention_mask=mask, max_new_tokens=a.gen + 1,
                           min_new_tokens=a.gen + 1, do_sample=False, eos_token_id=None,
                           pad_token_id=0)
            # The prefill and first token are timed alone and taken out.
            return batch * a.gen / (time.perf_counter() - t - first)

    prefill(), decode(1)  # warm-up
    out = {"engine": "hf-transformers", "transformers": transformers.__version__,
           "torch": torch.__version__, "threads": a.threads, "prompt_len": a.prompt_len,
           "gen": a.gen,
           "prefill_tok_s": statistics.median(prefill() for _ in range(a.runs)),
           "decode_tok_s": statistics.median(decode(1) for _ in range(a.runs))}
    if a.batch > 1:
        out[f"decode_batch{a.batch}_tok_s"] = statistics.median(
            decode(a.batch) for _ in range(a.runs))
    out.update(results.header("hf_bench"))  # date, CPU, command, commit
    print(json.dumps(out))


if __name__ == "__main__":
    main()
