#!/usr/bin/env python3
"""Compares kvcast's tokenizer with HF `tokenizers` (Rust) on one tokenizer.json.

  compare_hf_tokenizers.py TOKENIZER_JSON ENCODE_TOOL [--count 500] [--seed 1234]

Run by //tests/tokenizer:hf_tokenizers_comparison_test (see its script header).
ENCODE_TOOL is bazel-bin/engine/tokenizer/encode_tool. For each of COUNT
deterministic generated strings (words, punctuation, digits, scripts, emoji,
whitespace runs, contractions, combining marks, special tokens) it checks that
the ids equal HF's encode(text, add_special_tokens=False) and that kvcast's
Decode(ids) equals HF's decode(ids, skip_special_tokens=False); then it decodes
random slices of those id lists (which cut multi-byte characters, giving
U+FFFD) with both. Prints
"N passed, N failed" and exits 1 on any mismatch.
"""
import argparse
import json
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_test_strings import test_strings  # noqa: E402
from tokenizers import Tokenizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tokenizer_json")
    ap.add_argument("encode_tool")
    ap.add_argument("--count", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--show", type=int, default=5, help="mismatches to print")
    args = ap.parse_args()

    hf = Tokenizer.from_file(args.tokenizer_json)
    specials = [t.content for t in hf.get_added_tokens_decoder().values()]
    texts = test_strings(args.count, args.seed, specials)
    # Decode checks: random slices of HF's own ids.
    rng = random.Random(args.seed)
    slices = []
    for text in texts:
        ids = hf.encode(text, add_special_tokens=False).ids
        if ids:
            a = rng.randrange(len(ids))
            slices.append(ids[a:rng.randint(a + 1, len(ids))])
    stdin = "".join(json.dumps(t, ensure_ascii=True) + "\n" for t in texts)
    stdin += "".join(json.dumps(s) + "\n" for s in slices)
    proc = subprocess.run([args.encode_tool, args.tokenizer_json], input=stdin.encode(),
                          capture_output=True, check=False)
    if proc.returncode != 0:
        print(f"encode_tool failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}")
        return 1
    lines = proc.stdout.decode().splitlines()
    if len(lines) != len(texts) + len(slices):
        print(f"encode_tool printed {len(lines)} lines for {len(texts) + len(slices)} inputs")
        return 1
    passed = failed = 0
    for ids, line in zip(slices, lines[len(texts):]):
        ours = json.loads(line)["decoded"]
        want = hf.decode(ids, skip_special_tokens=False)
        if ours == want:
            passed += 1
            continue
        failed += 1
        if failed <= args.show:
            print(f"MISMATCH decoding {ids}:\n  hf:     {want!r}\n  kvcast: {ours!r}")
    for text, line in zip(texts, lines):
        ours = json.loads(line)
        want_ids = hf.encode(text, add_special_tokens=False).ids
        want_text = hf.decode(want_ids, skip_special_tokens=False)
        problem = None
        if "error" in ours:
            problem = f"error {ours['error']}"
        elif ours["ids"] != want_ids:
            problem = f"ids differ\n  hf:     {want_ids}\n  kvcast: {ours['ids']}"
        elif ours["decoded"] != want_text:
            problem = f"decode differs\n  hf:     {want_text!r}\n  kvcast: {ours['decoded']!r}"
        if problem is None:
            passed += 1
            continue
        failed += 1
        if failed <= args.show:
            print(f"MISMATCH on {text!r}: {problem}")
    print(f"{os.path.basename(args.tokenizer_json)}: {passed} passed, {failed} failed "
          f"({len(texts)} encode+decode, {len(slices)} decode-only checks)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
