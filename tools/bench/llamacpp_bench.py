#!/usr/bin/env python3
"""llama.cpp (through llama-cpp-python) CPU throughput on a GGUF model, as a
peer for engine_bench: prefill tokens/s on a --prompt-len prompt decoded in
one llama_decode (n_batch = n_ubatch = 512), then decode tokens/s at batch 1
over --gen greedy tokens that follow that prompt (argmax of the logits in
numpy, one llama_decode per token), and with --batches the aggregate decode
tokens/s of N sequences stepped together (one context, the prompt's KV
computed once and copied to each), one llama_decode of N tokens per step. Median of --runs runs after --warmup
untimed ones. Prints one JSON line. Install with
tools/bench/setup_llamacpp.sh.

  .venv-llamacpp/bin/python tools/bench/llamacpp_bench.py --model M.gguf \\
      [--threads 2] [--prompt-len 512] [--gen 128] [--runs 3] [--warmup 1]
      [--n-ctx 1024] [--kv-type f16|f32] [--flash-attn] [--batches 8,32]

The prompt is a fixed English paragraph repeated and cut to exactly
--prompt-len tokens (no BOS: this model's GGUF has add_bos_token=false), so
every run and every machine sees the same ids. The 1-minute load average
before and after is printed too: on a 2-core machine, anything else running
makes 2-thread numbers collapse (ggml's threads wait for each other).
"""

import argparse
import ctypes
import glob
import importlib.metadata
import json
import os
import statistics
import sys
import time

import numpy as np

import llama_cpp
from llama_cpp import Llama
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import results  # noqa: E402  (tools/report: the result files' header)

GGML_TYPE = {"f32": 0, "f16": 1}

TEXT = (
    "The history of computing is a story of people who wanted to calculate "
    "faster than they could by hand. Early machines used gears and levers; "
    "later ones used relays, vacuum tubes, transistors and finally integrated "
    "circuits with billions of parts. Each step made computers smaller, "
    "cheaper and more reliable, and each step opened new uses that nobody had "
    "planned for, from weather forecasts and bank accounts to music, maps and "
    "conversations with machines that answer in plain language. "
)


def cpu_info():
    model, flags = None, set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                key = key.strip()
                if key == "model name" and model is None:
                    model = val.strip()
                elif key == "flags" and not flags:
                    flags = set(val.split())
    except OSError:
        pass
    want = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8")
    return model, [f for f in want if f in flags]


def load1():
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def make_prompt(llm, n):
    ids = llm.tokenize(TEXT.encode(), add_bos=False, special=False)
    reps = n // len(ids) + 2  # joined copies tokenize to a little less than the sum
    ids = llm.tokenize((TEXT * reps).encode(), add_bos=False, special=False)
    if len(ids) < n:
        sys.exit(f"llamacpp_bench: prompt text gives only {len(ids)} tokens")
    return ids[:n]


def argmax_last(llm, n_vocab):
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    arr = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(n_vocab,))
    return int(np.argmax(arr))


def one_run(llm, prompt, gen, n_vocab):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    t1 = time.perf_counter()
    tok = argmax_last(llm, n_vocab)
    t2 = time.perf_counter()
    for _ in range(gen):
        llm.eval([tok])
        tok = argmax_last(llm, n_vocab)
    t3 = time.perf_counter()
    return len(prompt) / (t1 - t0), gen / (t3 - t2)


def batched_decode(llm, prompt, batch, gen, args):
    """Aggregate decode tokens/s of `batch` sequences stepped together, one
    llama_decode of `batch` tokens per step (llama.cpp's own batching: one
    context with n_seq_max = batch and a unified KV cache), each sequence
    starting from the prompt's KV (computed once, copied); greedy (argmax)
    per sequence. Returns (tokens/s, the first sequence's tokens); exits if the sequences' last tokens differ (they
    share the prompt, so one that lost its copied KV would show)."""
    params = llama_cpp.llama_context_default_params()
    per_seq = len(prompt) + gen + 1
    params.n_ctx = batch * per_seq
    params.n_batch = params.n_ubatch = max(args.n_batch, batch)
    params.n_seq_max = batch
    params.kv_unified = True
    params.n_threads = params.n_threads_batch = args.threads
    params.type_k = params.type_v = GGML_TYPE[args.kv_type]
    params.flash_attn_type = 1 if args.flash_attn else 0
    ctx = llama_cpp.llama_init_from_model(llm.model, params)
    if not ctx:
        sys.exit("llamacpp_bench: llama_init_from_model failed")
    n_vocab = llm.n_vocab()
    b = llama_cpp.llama_batch_init(params.n_batch, 0, batch)

    def logits_argmax(i):
        ptr = llama_cpp.llama_get_logits_ith(ctx, i)
        arr = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)),
                                    shape=(n_vocab,))
        return int(np.argmax(arr))

    def decode(entries):  # [(token, pos, seq, want_logits)]
        b.n_tokens = len(entries)
        for i, (tok, pos, seq, out) in enumerate(entries):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = tok, pos, 1, int(out)
            b.seq_id[i][0] = seq
        if llama_cpp.llama_decode(ctx, b) != 0:
            sys.exit("llamacpp_bench: llama_decode failed")

    try:
        # The prompt's KV once, in sequence 0, copied to the others (one
        # unified KV cache).
        for start in range(0, len(prompt), params.n_batch):
            chunk = prompt[start:start + params.n_batch]
            decode([(t, start + i, 0, start + i == len(prompt) - 1) for i, t in enumerate(chunk)])
        toks = [logits_argmax(len(chunk) - 1)] * batch
        mem = llama_cpp.llama_get_memory(ctx)
        for seq in range(1, batch):
            llama_cpp.llama_memory_seq_cp(mem, 0, seq, -1, -1)
        first = [toks[0]]
        t0 = time.perf_counter()
        for step in range(gen):
            decode([(toks[s], len(prompt) + step, s, True) for s in range(batch)])
            toks = [logits_argmax(s) for s in range(batch)]
            first.append(toks[0])
        secs = time.perf_counter() - t0
    finally:
        llama_cpp.llama_batch_free(b)
        llama_cpp.llama_free(ctx)
    if len(set(toks)) != 1:  # one prompt, greedy: every sequence the same tokens
        sys.exit(f"llamacpp_bench: batched sequences disagree: {toks}")
    return batch * gen / secs, first


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="GGUF file")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt-len", type=int, default=512)
    p.add_argument("--gen", type=int, default=128)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--n-ctx", type=int, default=1024)
    p.add_argument("--n-batch", type=int, default=512)
    p.add_argument("--kv-type", choices=sorted(GGML_TYPE), default="f16",
                   help="KV cache type (f16 is llama.cpp's default)")
    p.add_argument("--flash-attn", action="store_true")
    p.add_argument("--batches", default="",
                   help="also aggregate decode tokens/s of this many sequences decoded "
                        "together, comma-separated (e.g. 8,32)")
    args = p.parse_args(argv)
    if not os.path.isfile(args.model):
        sys.exit(f"llamacpp_bench: no model file {args.model}")
    if args.prompt_len + args.gen + 1 > args.n_ctx:
        sys.exit("llamacpp_bench: --prompt-len + --gen must fit in --n-ctx")
    if args.runs < 1 or args.prompt_len < 1 or args.gen < 1:
        sys.exit("llamacpp_bench: --runs, --prompt-len and --gen must be >= 1")

    llm = Llama(
        model_path=args.model, n_ctx=args.n_ctx, n_batch=args.n_batch,
        n_ubatch=args.n_batch, n_threads=args.threads,
        n_threads_batch=args.threads, type_k=GGML_TYPE[args.kv_type],
        type_v=GGML_TYPE[args.kv_type], flash_attn=args.flash_attn,
        logits_all=False, seed=0, verbose=False,
    )
    n_vocab = llm.n_vocab()
    prompt = make_prompt(llm, args.prompt_len)

    load_before = load1()
    for _ in range(args.warmup):
        one_run(llm, prompt, args.gen, n_vocab)
    runs = [one_run(llm, prompt, args.gen, n_vocab) for _ in range(args.runs)]
    batched = {}
    for bsz in [int(x) for x in args.batches.split(",") if x]:
        batched_decode(llm, prompt, bsz, min(args.gen, 8), args)  # warm-up
        rates = [batched_decode(llm, prompt, bsz, args.gen, args)[0] for _ in range(args.runs)]
        batched[str(bsz)] = {"decode_tok_s": round(statistics.median(rates), 1),
                             "runs": [round(r, 1) for r in rates]}
    load_after = load1()

    lib = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    ggml = sorted(glob.glob(os.path.join(lib, "libggml-base.so.*.*.*")))
    cpu, flags = cpu_info()
    out = {
        "engine": "llama.cpp",
        "version": "llama-cpp-python " + importlib.metadata.version("llama-cpp-python")
                   + (" / ggml " + ggml[-1].rsplit(".so.", 1)[1] if ggml else ""),
        "model": os.path.basename(args.model),
        "threads": args.threads,
        "prefill_tok_s": round(statistics.median(r[0] for r in runs), 1),
        "decode_tok_s": round(statistics.median(r[1] for r in runs), 1),
        "prefill_runs": [round(r[0], 1) for r in runs],
        "decode_runs": [round(r[1], 1) for r in runs],
        "batched_decode": batched,
        "prompt_len": args.prompt_len,
        "gen": args.gen,
        "n_ctx": args.n_ctx,
        "n_batch": args.n_batch,
        "kv_type": args.kv_type,
        "flash_attn": args.flash_attn,
        "runs": args.runs,
        "warmup": args.warmup,
        "cpu": cpu,
        "cpu_flags": flags,
        "system_info": llama_cpp.llama_print_system_info().decode().strip(),
        "load1_before": load_before,
        "load1_after": load_after,
    }
    out.update(results.header("llamacpp_bench"))  # date, CPU, command, commit
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
