"""Constrained decoding's per-token mask against llguidance and xgrammar:
the same tokenizer (SmolLM2's, from the GGUF), the same grammars and the same
documents, walked token by token, timing each engine's full-vocabulary mask
at every step, in one run, the engines alternating per round.

  .venv-grammar/bin/python tools/bench/grammar_peers.py --model M.gguf \
      --mask_bench bazel-bin/engine/grammar/mask_bench [--rounds 3] [--cold_walks 5] [--json FILE]

(.venv-grammar: pip install llguidance xgrammar transformers gguf.) For each
engine: the grammar's compile time, then per-token mask time on a fresh
matcher of a freshly compiled grammar (cold: a schema's first request) and
on a second matcher of the same compiled grammar (warm: its later ones).
kvcast's numbers come from its own mask_bench binary, which measures the
same way (engine/grammar/mask_bench.cc). Each round gives every engine
--cold_walks walks each on a freshly compiled grammar (pooled: mean, median,
max per token), then one warm walk, and the "first request" time: a compile
plus one cold walk's masks.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import results  # noqa: E402  (tools/report: the result files' header)

DOCS = [
    ("any JSON object", None,
     '{"name": "Ana Lopez", "age": 31, "tags": ["x", "yy"], "address": {"city": "Lisbon", "zip": "1000-001"}}'),
    ("Profile schema", json.load(open(os.path.join(os.path.dirname(__file__), "grammar_profile_schema.json"))),
     '{\n  "first": "Rosa",\n  "last": "Green",\n  "age": 42,\n  "email": "rosa@garden.org",\n'
     '  "active": true,\n  "color": "green",\n  "tags": ["roses", "soil"],\n  "score": 9.5\n}'),
]


def summary(times_us):
    return (f"mean {statistics.mean(times_us):7.1f} us, median {statistics.median(times_us):6.1f} us, "
            f"max {max(times_us):7.1f} us")


def walk(fill, accept, ids):
    times = []
    for t in ids:
        a = time.perf_counter()
        fill()
        times.append((time.perf_counter() - a) * 1e6)
        accept(t)
    return times


def run_xgrammar(tok, vocab, schema, ids, cold_walks):
    import xgrammar as xgr
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=vocab)
    bitmask = xgr.allocate_token_bitmask(1, vocab)
    compiles, cold = [], []
    for _ in range(cold_walks):
        a = time.perf_counter()
        compiler = xgr.GrammarCompiler(info, cache_enabled=False)
        compiled = (compiler.compile_builtin_json_grammar() if schema is None
                    else compiler.compile_json_schema(json.dumps(schema), any_whitespace=True))
        compiles.append((time.perf_counter() - a) * 1e6)
        m = xgr.GrammarMatcher(compiled)
        cold += walk(lambda: m.fill_next_token_bitmask(bitmask),
                     lambda t: m.accept_token(t) or sys.exit(f"xgrammar refused {t}"), ids)
    m = xgr.GrammarMatcher(compiled)
    warm = walk(lambda: m.fill_next_token_bitmask(bitmask),
                lambda t: m.accept_token(t) or sys.exit(f"xgrammar refused {t}"), ids)
    return statistics.mean(compiles), cold, warm


def run_llguidance(tok, vocab, schema, ids, cold_walks):
    import llguidance
    import llguidance.hf
    import llguidance.numpy
    lltok = llguidance.hf.from_tokenizer(tok, n_vocab=vocab)
    bitmask = llguidance.numpy.allocate_token_bitmask(1, vocab)
    compiles, cold = [], []

    def one_walk(grammar):
        m = llguidance.LLMatcher(lltok, grammar)
        if m.is_error():
            sys.exit(f"llguidance: {m.get_error()}")
        return walk(lambda: llguidance.numpy.fill_next_token_bitmask(m, bitmask, 0),
                    lambda t: m.consume_token(t) or sys.exit(f"llguidance refused {t}"), ids)
    for _ in range(cold_walks):
        a = time.perf_counter()
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            schema if schema is not None else {"type": "object"})
        compiles.append((time.perf_counter() - a) * 1e6)
        cold += one_walk(grammar)
    return statistics.mean(compiles), cold, one_walk(grammar)


def run_kvcast(binary, model, schema, doc, cold_walks):
    args = [binary, "--model", model, "--document", doc, "--repeats", "2", "--cold_walks", str(cold_walks),
            "--times"]
    if schema is not None:
        path = "/tmp/grammar_peers_schema.json"
        with open(path, "w") as f:
            json.dump(schema, f)
        args += ["--schema_file", path]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    compile_us = float(re.search(r"compiled in (\d+) us", out).group(1))
    cold = [float(t) for t in re.search(r"^cold times: (.*)$", out, re.M).group(1).split()]
    warm = [float(t) for t in re.search(r"^warm times: (.*)$", out, re.M).group(1).split()]
    return compile_us, cold, warm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--mask_bench", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cold_walks", type=int, default=5,
                    help="per engine and round: walks each on a freshly compiled grammar")
    ap.add_argument("--json", default="", help="also write every round here as a result file")
    args = ap.parse_args()
    rows = []
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(args.model)),
                                        gguf_file=os.path.basename(args.model))
    vocab = 49152
    from importlib.metadata import version
    print(f"tokenizer: {args.model}; xgrammar {version('xgrammar')}, llguidance {version('llguidance')}")
    for name, schema, doc in DOCS:
        ids = tok.encode(doc, add_special_tokens=False)
        print(f"\n{name}: {len(ids)} tokens")
        for r in range(args.rounds):
            for label, fn in (("kvcast", lambda *a: run_kvcast(args.mask_bench, args.model, schema, doc, a[-1])),
                              ("xgrammar", run_xgrammar), ("llguidance", run_llguidance)):
                c, cold, warm = fn(tok, vocab, schema, ids, args.cold_walks)
                # A new schema's first request: its compile and one cold walk's masks.
                request_us = c + sum(cold) / args.cold_walks
                print(f"  round {r + 1} {label:11s} compile {c:8.0f} us; cold {summary(cold)}; "
                      f"warm mean {statistics.mean(warm):7.1f} us; first request {request_us / 1000:6.2f} ms")
                rows.append({"document": name, "round": r + 1, "engine": label, "compile_us": c,
                             "cold_mean_us": statistics.mean(cold), "cold_median_us": statistics.median(cold),
                             "cold_max_us": max(cold), "warm_mean_us": statistics.mean(warm),
                             "first_request_us": request_us})
    if args.json:
        results.write(args.json, results.header("grammar_peers"), rows,
                      xgrammar=version("xgrammar"), llguidance=version("llguidance"))


if __name__ == "__main__":
    main()
