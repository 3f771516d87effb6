#!/usr/bin/env python3
"""llama.cpp (through llama-cpp-python) as an independent oracle for a GGUF
model: its tokenizer's ids for a list of strings, and for a list of prompts
(token ids) the top-10 logits at the last prompt position plus 64 greedy
tokens. Runs on the CPU; install with tools/bench/setup_llamacpp.sh.

  .venv-llamacpp/bin/python tools/golden/llamacpp_oracle.py \\
      --model M.gguf [--strings S.json] [--prompts P.json] --out OUT.json
      [--greedy 64] [--threads 1] [--kv-type f32|f16] [--top 10]

--strings: {"strings": [...]} or a plain JSON list of strings. Each is
tokenized with add_bos=False, special=True (control tokens such as
<|im_start|> in the text become their ids); "ids_no_special" is added where
special=False gives other ids, "ids_add_bos" where add_bos=True does.

--prompts: a JSON list of {"name": ..., "token_ids": [...]} (or
{"prompts": [...]}). Each prompt is decoded in one batch (n_batch = n_ubatch
= 512, so prompts up to 512 tokens are one ubatch), then the greedy
continuation one token at a time: argmax of the raw logits (lowest id on a
tie), no temperature, penalty or other processor, and end-of-generation
tokens do not stop it. The KV cache is f32 by default (--kv-type f16 is
llama.cpp's own default); flash attention is off. Output is deterministic
for a given build, thread count and settings; every setting is recorded.
Exit status 2 on bad input.
"""

import argparse
import ctypes
import glob
import importlib.metadata
import json
import os
import sys

import numpy as np

import llama_cpp
from llama_cpp import Llama
from file_digest import sha256  # noqa: E402

GGML_TYPE = {"f32": 0, "f16": 1}


def fail(msg):
    print(f"llamacpp_oracle: {msg}", file=sys.stderr)
    sys.exit(2)


def load_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        fail(f"cannot read {path}: {e}")


def load_strings(path):
    data = load_json(path)
    if isinstance(data, dict):
        data = data.get("strings")
    if not isinstance(data, list) or not all(isinstance(s, str) for s in data):
        fail(f"{path}: want a JSON list of strings or {{\"strings\": [...]}}")
    return data


def load_prompts(path, n_vocab):
    data = load_json(path)
    if isinstance(data, dict):
        data = data.get("prompts")
    if not isinstance(data, list):
        fail(f"{path}: want a JSON list of {{\"name\", \"token_ids\"}}")
    names = set()
    for i, p in enumerate(data):
        if not isinstance(p, dict) or not isinstance(p.get("token_ids"), list):
            fail(f"{path}: prompt {i} has no token_ids list")
        ids = p["token_ids"]
        if not ids:
            fail(f"{path}: prompt {i} is empty")
        for t in ids:
            if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < n_vocab:
                fail(f"{path}: prompt {i}: token id {t!r} is not in [0, {n_vocab})")
        name = str(p.get("name", f"prompt{i}"))
        if name in names:
            fail(f"{path}: prompt name {name!r} repeats")
        names.add(name)
    return data


def versions():
    lib = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    ggml = sorted(glob.glob(os.path.join(lib, "libggml-base.so.*.*.*")))
    return {
        "llama_cpp_python": importlib.metadata.version("llama-cpp-python"),
        "ggml": ggml[-1].rsplit(".so.", 1)[1] if ggml else None,
        "system_info": llama_cpp.llama_print_system_info().decode().strip(),
    }


def tokenizer_info(llm):
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    md = llm.metadata
    return {
        "model": md.get("tokenizer.ggml.model"),
        "pre": md.get("tokenizer.ggml.pre"),
        "n_vocab": n_vocab,
        "bos_id": llm.token_bos(),
        "eos_id": llm.token_eos(),
        "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
        "eog_ids": [t for t in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, t)],
        "control_ids": [t for t in range(n_vocab) if llama_cpp.llama_vocab_is_control(vocab, t)],
    }


def tokenize_strings(llm, strings):
    out = []
    for text in strings:
        raw = text.encode("utf-8")
        ids = llm.tokenize(raw, add_bos=False, special=True)
        rec = {"text": text, "ids": ids}
        plain = llm.tokenize(raw, add_bos=False, special=False)
        if plain != ids:
            rec["ids_no_special"] = plain
        with_bos = llm.tokenize(raw, add_bos=True, special=True)
        if with_bos != ids:
            rec["ids_add_bos"] = with_bos
        out.append(rec)
    return out


def last_logits(llm, n_vocab):
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    if not ptr:
        raise RuntimeError("llama_get_logits_ith returned NULL")
    arr = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(n_vocab,))
    return arr.astype(np.float32, copy=True)


def top_k(logits, k):
    # Highest first; equal values by lower id (stable sort on the negation).
    order = np.argsort(-logits, kind="stable")[:k]
    return [int(i) for i in order], [float(logits[i]) for i in order]


def run_prompt(llm, n_vocab, ids, n_greedy, k):
    llm.reset()
    llm.eval(ids)
    logits = last_logits(llm, n_vocab)
    top_ids, top_vals = top_k(logits, k)
    greedy, margins = [], []
    for step in range(n_greedy):
        if step:
            logits = last_logits(llm, n_vocab)
        two_ids, two_vals = top_k(logits, 2)
        tok = two_ids[0]  # == np.argmax: the lowest id among equal maxima
        greedy.append(tok)
        margins.append(two_vals[0] - two_vals[1])
        if step + 1 < n_greedy:
            llm.eval([tok])
    rec = {
        "top_ids": top_ids,
        "top_logits": top_vals,
        "greedy_tokens": greedy,
    }
    if greedy:
        i = int(np.argmin(margins))
        rec["greedy_min_margin"] = float(margins[i])
        rec["greedy_min_margin_step"] = i
        rec["greedy_text"] = llm.detokenize(greedy, special=True).decode("utf-8", "replace")
    return rec


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="GGUF file")
    p.add_argument("--strings", help="JSON list of strings to tokenize")
    p.add_argument("--prompts", help="JSON list of {name, token_ids}")
    p.add_argument("--out", required=True)
    p.add_argument("--greedy", type=int, default=64, help="greedy tokens per prompt")
    p.add_argument("--top", type=int, default=10, help="top-k logits kept")
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads (1: on this 2-core machine 2 threads collapse when anything else runs)")
    p.add_argument("--kv-type", choices=sorted(GGML_TYPE), default="f32")
    p.add_argument("--n-ctx", type=int, default=0,
                   help="context size (default: longest prompt + greedy, rounded up to 256, at least 1024)")
    args = p.parse_args(argv)
    if not os.path.isfile(args.model):
        fail(f"no model file {args.model}")
    if not args.strings and not args.prompts:
        fail("give --strings and/or --prompts")
    if args.greedy < 0 or args.top < 1:
        fail("--greedy must be >= 0 and --top >= 1")

    vocab_llm = Llama(model_path=args.model, vocab_only=True, verbose=False)
    tok = tokenizer_info(vocab_llm)
    result = {
        "engine": "llama.cpp",
        **versions(),
        "model": os.path.basename(args.model),
        "model_sha256": sha256(args.model),
        "architecture": vocab_llm.metadata.get("general.architecture"),
        "file_type": vocab_llm.metadata.get("general.file_type"),
        "tokenizer": tok,
    }
    if args.strings:
        result["strings"] = tokenize_strings(vocab_llm, load_strings(args.strings))

    if args.prompts:
        prompts = load_prompts(args.prompts, tok["n_vocab"])
        need = max(len(q["token_ids"]) for q in prompts) + args.greedy
        n_ctx = args.n_ctx or max(1024, (need + 255) // 256 * 256)
        if need > n_ctx:
            fail(f"--n-ctx {n_ctx} < longest prompt + --greedy = {need}")
        settings = {
            "n_ctx": n_ctx, "n_batch": 512, "n_ubatch": 512,
            "n_threads": args.threads, "kv_type": args.kv_type,
            "flash_attn": False, "greedy": args.greedy, "top": args.top,
            "sampling": "argmax of raw logits, lowest id on ties; EOG does not stop",
            "prompt_eval": "whole prompt in one llama_decode per 512 tokens, then one token per step",
        }
        llm = Llama(
            model_path=args.model, n_ctx=n_ctx, n_batch=512, n_ubatch=512,
            n_threads=args.threads, n_threads_batch=args.threads,
            type_k=GGML_TYPE[args.kv_type], type_v=GGML_TYPE[args.kv_type],
            flash_attn=False, logits_all=False, seed=0, verbose=False,
        )
        n_vocab = llm.n_vocab()
        result["settings"] = settings
        result["prompts"] = []
        for q in prompts:
            rec = {"name": str(q.get("name", f"prompt{len(result['prompts'])}")),
                   "token_ids": q["token_ids"]}
            rec.update(run_prompt(llm, n_vocab, q["token_ids"], args.greedy, args.top))
            result["prompts"].append(rec)

    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
