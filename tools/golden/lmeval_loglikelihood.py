#!/usr/bin/env python3
"""Checks lm-evaluation-harness's `local-completions` model (lm_eval's
LocalCompletionsAPI) against a running kvcast server: lm_eval's own
`loglikelihood` over (context, continuation) pairs, compared with HF
transformers on the same GGUF (dequantized, float32).

lm_eval and the HF oracle live in different virtual environments, so the
script has three modes that hand files to each other:

  # 1. (HF venv) save the GGUF's tokenizer (with the model's own
  #    pre-tokenizer, as hf_gguf_golden.py loads it) as an HF tokenizer dir
  .venv-hf/bin/python tools/golden/lmeval_loglikelihood.py tokenizer \
      --gguf build/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --tokenizer_dir /tmp/lme_tok

  # 2. (lm_eval venv, server running) lm_eval's loglikelihood over ~20 pairs
  #    built from a text file; writes the pairs, the token ids lm_eval sent
  #    and its (logprob, is_greedy) answers
  .venv-lmeval/bin/python tools/golden/lmeval_loglikelihood.py lmeval \
      --base_url http://127.0.0.1:18000/v1/completions --tokenizer_dir /tmp/lme_tok \
      --text build/corpus/lee_background.cor --out /tmp/lme_kvcast.json

  # 3. (HF venv) the same log-likelihoods and is_greedy flags with
  #    transformers directly; prints a per-pair table and the summary
  .venv-hf/bin/python tools/golden/lmeval_loglikelihood.py hf \
      --gguf build/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --results /tmp/lme_kvcast.json

The pairs: consecutive sentences of one line (document) of the text file,
contexts of a few hundred tokens ("long"), contexts under 16 tokens
("short"), and contexts that hold a sentence twice followed by its start so
that the continuation (the rest of it) is likely greedy ("copy"). The HF
mode scores exactly the token ids lm_eval sent (and reports whether its own
tokenization of the strings, split as lm_eval splits them, agrees). Exit
status 1 when the worst |diff| of a summed log-likelihood exceeds --tol or
an is_greedy flag differs. The default --tol (5e-2) fits --backend cpu-f32
(seen: worst 9.4e-3 over up to 38 continuation tokens); --backend cpu
(int8 activations) was seen at worst 0.70, mean 0.25, so pass --tol 1 there.
--batch_size > 1 sends lists of token-id prompts in one request and
--num_concurrent > 1 takes lm_eval's asyncio path.
"""
import argparse
import json
import os
import re
import sys

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def sentences(line):
    return [s for s in re.split(r"(?<=[.!?])\s+", line.strip()) if s]


def make_pairs(text_path, count_tokens, n_long, n_short, n_copy):
    """(kind, context, continuation) triples, deterministic for a given file."""
    docs = [sentences(l) for l in open(text_path, encoding="utf-8") if l.strip()]
    docs = [d for d in docs if len(d) >= 6]
    if not docs:
        sys.exit(f"{text_path}: no line with 6 or more sentences")
    pairs = []
    step = max(1, len(docs) // max(1, n_long))

    def order(start):  # every step-th document from start, then all the others
        first = list(range(start, len(docs), step))
        seen = set(first)
        return first + [i for i in range(len(docs)) if i not in seen]

    # Long: sentences of a document up to 200..500 tokens, then the next one.
    for i in order(0):
        if len([p for p in pairs if p[0] == "long"]) >= n_long:
            break
        d = docs[i]
        for end in range(1, len(d)):
            ctx = " ".join(d[:end])
            n = count_tokens(ctx)
            if n > 500:
                break
            if n >= 200 and count_tokens(d[end]) <= 64:
                pairs.append(("long", ctx, " " + d[end]))
                break
    # Short: the first words of a sentence (under 16 tokens), then the rest
    # of that sentence (at most 12 words).
    for i in order(1):
        d = docs[i]
        if len([p for p in pairs if p[0] == "short"]) >= n_short:
            break
        for s in d:
            w = s.split()
            if len(w) < 8:
                continue
            k = 3 + len(pairs) % 4
            ctx = " ".join(w[:k])
            if count_tokens(ctx) < 16:
                pairs.append(("short", ctx, " " + " ".join(w[k:k + 12])))
                break
    # Copy: "S S first-half-of-S" -> rest of S.
    for i in order(2):
        d = docs[i]
        if len([p for p in pairs if p[0] == "copy"]) >= n_copy:
            break
        s = next((s for s in d if 10 <= len(s.split()) <= 30), None)
        if s is None:
            continue
        w = s.split()
        h = len(w) // 2
        pairs.append(("copy", f"{s} {s} " + " ".join(w[:h]), " " + " ".join(w[h:])))
    return pairs


def mode_tokenizer(a):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from hf_gguf_golden import load_tokenizer, read_gguf_metadata
    tok, _, _ = load_tokenizer(a.gguf, read_gguf_metadata(a.gguf))
    tok.save_pretrained(a.tokenizer_dir)
    print(f"saved {type(tok).__name__} to {a.tokenizer_dir}")


def mode_lmeval(a):
    import importlib.metadata
    import logging
    import requests
    from lm_eval.api.instance import Instance
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    logging.basicConfig(level=logging.WARNING)
    model = a.model
    if model is None:
        root = a.base_url.rsplit("/completions", 1)[0]
        listed = requests.get(root + "/models", timeout=30).json().get("data") or []
        if not listed:
            sys.exit(f"{root}/models lists no model (server still starting?); or pass --model")
        model = listed[0]["id"]
    lm = LocalCompletionsAPI(
        base_url=a.base_url, model=model, tokenizer=a.tokenizer_dir,
        tokenizer_backend="huggingface", tokenized_requests=True,
        batch_size=a.batch_size, num_concurrent=a.num_concurrent,
        max_length=a.max_length, max_retries=1)
    count = lambda s: len(lm.tok_encode(s))  # noqa: E731
    pairs = make_pairs(a.text, count, a.n_long, a.n_short, a.n_copy)
    reqs = [Instance(request_type="loglikelihood", doc={"kind": k}, arguments=(c, x), idx=i,
                     metadata=("kvcast_check", i, 1))
            for i, (k, c, x) in enumerate(pairs)]
    answers = lm.loglikelihood(reqs, disable_tqdm=True)
    out = {"lm_eval_version": importlib.metadata.version("lm_eval"),
           "base_url": a.base_url, "model": model, "batch_size": a.batch_size,
           "num_concurrent": a.num_concurrent, "pairs": []}
    for (k, c, x), (ll, greedy) in zip(pairs, answers):
        ctx_ids, cont_ids = lm._encode_pair(c, x)  # what lm_eval sent
        out["pairs"].append({"kind": k, "context": c, "continuation": x,
                             "context_ids": ctx_ids, "continuation_ids": cont_ids,
                             "loglikelihood": ll, "is_greedy": bool(greedy)})
    json.dump(out, open(a.out, "w"), indent=1)
    print(f"lm_eval {out['lm_eval_version']}: {len(pairs)} pairs -> {a.out}")


def mode_hf(a):
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from hf_gguf_golden import load_model, load_tokenizer, read_gguf_metadata

    res = json.load(open(a.results))
    meta = read_gguf_metadata(a.gguf)
    tok, _, _ = load_tokenizer(a.gguf, meta)
    model = load_model(a.gguf, meta)
    enc = lambda s: tok(s, add_special_tokens=False).input_ids  # noqa: E731
    rows = []
    with torch.no_grad():
        for p in res["pairs"]:
            ctx, cont = p["context_ids"], p["continuation_ids"]
            # lm_eval's split (moves trailing context spaces to the continuation).
            c, x = p["context"], p["continuation"]
            n_sp = len(c) - len(c.rstrip())
            if n_sp:
                c, x = c[:-n_sp], c[-n_sp:] + x
            whole, my_ctx = enc(c + x), enc(c)
            same_tok = my_ctx == ctx and whole[len(my_ctx):] == cont
            ids = torch.tensor([ctx + cont])
            lp = torch.log_softmax(model(ids).logits[0].double(), -1)
            pos = torch.arange(len(ctx) - 1, len(ctx) + len(cont) - 1)
            tgt = torch.tensor(cont)
            ll = float(lp[pos, tgt].sum())
            greedy = bool((lp[pos].argmax(-1) == tgt).all())
            top2 = lp[pos].topk(2, dim=-1).values
            margin = float((top2[:, 0] - top2[:, 1]).min())  # smallest top-1 lead
            rows.append((p, ll, greedy, same_tok, margin))

    print(f"lm_eval {res['lm_eval_version']} against {res['base_url']} ({res['model']}), "
          f"batch_size {res['batch_size']}, num_concurrent {res['num_concurrent']}")
    print(f"{'#':>2} {'kind':5} {'ctx':>4} {'cont':>4} {'lm_eval/kvcast':>14} {'HF':>14} "
          f"{'|diff|':>9} {'greedy kv/HF':>12} {'tok':>4} {'min lead':>8}")
    diffs, agree = [], 0
    for i, (p, ll, greedy, same_tok, margin) in enumerate(rows):
        d = abs(p["loglikelihood"] - ll)
        diffs.append(d)
        agree += p["is_greedy"] == greedy
        print(f"{i:2d} {p['kind']:5} {len(p['context_ids']):4d} {len(p['continuation_ids']):4d} "
              f"{p['loglikelihood']:14.6f} {ll:14.6f} {d:9.2e} "
              f"{str(p['is_greedy'])[0]:>6}/{str(greedy)[0]:<5} {'same' if same_tok else 'DIFF':>4} "
              f"{margin:8.4f}")
    n = len(rows)
    worst = max(diffs) if diffs else 0.0
    print(f"{n} pairs: summed log-likelihood worst |diff| {worst:.3e}, mean |diff| "
          f"{sum(diffs) / max(1, n):.3e}; is_greedy agrees on {agree} of {n} "
          f"({sum(r[2] for r in rows)} greedy per HF); HF tokenization identical on "
          f"{sum(r[3] for r in rows)} of {n}")
    ok = worst <= a.tol and agree == n
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("tokenizer", help="(HF venv) save the GGUF's tokenizer as an HF dir")
    t.add_argument("--gguf", default="build/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    t.add_argument("--tokenizer_dir", required=True)
    e = sub.add_parser("lmeval", help="(lm_eval venv) lm_eval loglikelihood against the server")
    e.add_argument("--base_url", default="http://127.0.0.1:18000/v1/completions")
    e.add_argument("--model", default=None, help="default: the first of GET .../v1/models")
    e.add_argument("--tokenizer_dir", required=True)
    e.add_argument("--text", default="build/corpus/lee_background.cor")
    e.add_argument("--out", required=True)
    e.add_argument("--n_long", type=int, default=10)
    e.add_argument("--n_short", type=int, default=6)
    e.add_argument("--n_copy", type=int, default=4)
    e.add_argument("--batch_size", type=int, default=1)
    e.add_argument("--num_concurrent", type=int, default=1)
    e.add_argument("--max_length", type=int, default=2048)
    h = sub.add_parser("hf", help="(HF venv) compare with transformers")
    h.add_argument("--gguf", default="build/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    h.add_argument("--results", required=True)
    h.add_argument("--tol", type=float, default=5e-2, help="on the summed log-likelihood")
    a = p.parse_args()
    {"tokenizer": mode_tokenizer, "lmeval": mode_lmeval, "hf": mode_hf}[a.mode](a)


if __name__ == "__main__":
    main()
