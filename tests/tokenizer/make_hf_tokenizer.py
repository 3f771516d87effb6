#!/usr/bin/env python3
"""Trains a realistic tokenizer.json with HF `tokenizers` (the oracle).

  make_hf_tokenizer.py --style {llama3,qwen2,gpt2} --vocab-size 4000 OUT.json

llama3: Split(Llama-3 regex) + ByteLevel(use_regex=false), ignore_merges.
qwen2:  Split(Qwen2 regex) + ByteLevel(use_regex=false), NFC normalizer.
gpt2:   ByteLevel(use_regex=true).
Special tokens <|begin_of_text|>, <|end_of_text|> are added.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_test_strings import corpus  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--style", choices=["llama3", "qwen2", "gpt2"], default="llama3")
    ap.add_argument("--vocab-size", type=int, default=4000)
    ap.add_argument("out")
    args = ap.parse_args()
    tok = Tokenizer(models.BPE(ignore_merges=args.style == "llama3"))
    if args.style == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        pattern = LLAMA3 if args.style == "llama3" else QWEN2
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    if args.style == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=args.vocab_size,
        special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False)
    tok.train_from_iterator(corpus().split("\n"), trainer)
    tok.save(args.out)


if __name__ == "__main__":
    main()
