#!/usr/bin/env python3
"""HF transformers on the same checkpoint and GPU as gpu_bench: prefill
tokens/s (one forward over a --prompt-token prompt) and decode tokens/s
(greedy generate of --new tokens per sequence at each --batches size, minus
the prefill), in bf16 with HF's default attention. Prints markdown rows that
docs/benchmarks.md puts beside gpu_bench's.

  python3 tools/bench/hf_generate_bench.py --model DIR [--prompts 2048,8192]
      [--batches 1,8,32,128] [--context 512] [--new 32]
"""

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import results  # noqa: E402  (tools/report: the result files' header)


def ints(text):
    return [int(x) for x in text.split(",") if x]


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--prompts", type=ints, default=[2048, 8192])
    p.add_argument("--batches", type=ints, default=[1, 8, 32, 128])
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--json", default="", help="also write the rows here as a result file")
    args = p.parse_args(argv)
    rows = []
    model = AutoModelForCausalLM.from_pretrained(
        args.model, torch_dtype=torch.bfloat16, local_files_only=True).cuda().eval()
    vocab = model.config.vocab_size
    print(f"HF transformers on {torch.cuda.get_device_name()}, bf16\n")
    print("| prompt | HF prefill tokens/s |\n|---|---|")
    with torch.no_grad():
        for n in args.prompts:
            ids = (torch.arange(n, device="cuda") * 104729 + 7) % vocab
            ids = ids.unsqueeze(0)
            model(ids)  # warm-up
            secs = timed(lambda: model(ids))
            print(f"| {n} | {n / secs:.0f} |")
            rows.append({"measurement": "prefill", "prompt_tokens": n, "tokens_per_s": n / secs})
        print("\n| batch | HF decode tokens/s |\n|---|---|")
        for b in args.batches:
            ids = ((torch.arange(args.context, device="cuda") * 7919 + 13) % vocab).repeat(b, 1)
            mask = torch.ones_like(ids)
            kw = dict(attention_mask=mask, do_sample=False, pad_token_id=0, eos_token_id=None)
            model.generate(ids, max_new_tokens=2, min_new_tokens=2, **kw)  # warm-up
            one = timed(lambda: model.generate(ids, max_new_tokens=1, min_new_tokens=1, **kw))
            full = timed(lambda: model.generate(ids, max_new_tokens=args.new,
                                                min_new_tokens=args.new, **kw))
            print(f"| {b} | {b * (args.new - 1) / (full - one):.0f} |")
            rows.append({"measurement": "decode", "batch": b, "context": args.context,
                         "tokens_per_s": b * (args.new - 1) / (full - one)})
    if args.json:
        results.write(args.json, results.header("hf_generate_bench"), rows,
                      device=torch.cuda.get_device_name(), transformers=transformers.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
