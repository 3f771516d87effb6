#!/usr/bin/env python3
"""Writes a tiny random HF checkpoint (config.json + model.safetensors).

For testing the oracle (hf_logits.py) and loaders before real checkpoints
exist. Weights are drawn from a seeded torch generator via the model's own
initializer, then stored in --dtype.

  .venv-hf/bin/python tools/golden/make_random_checkpoint.py \
      --arch llama3 --dtype bfloat16 --out /tmp/tiny-llama3
"""

import argparse
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from transformers import (  # noqa: E402
    LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
    Qwen2Config, Qwen2ForCausalLM)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16,
          "float16": torch.float16}

COMMON = dict(vocab_size=512, hidden_size=64, intermediate_size=160,
              num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=512,
              rms_norm_eps=1e-5, initializer_range=0.2,
              bos_token_id=1, eos_token_id=2)

ARCHS = {
    "llama": (LlamaConfig, LlamaForCausalLM, dict(rope_theta=10000.0)),
    # Llama 3.x style: large theta, "llama3" rope scaling with a short
    # original context so the scaling actually changes frequencies.
    "llama3": (LlamaConfig, LlamaForCausalLM, dict(
        rope_theta=500000.0, tie_word_embeddings=True,
        rope_scaling={"rope_type": "llama3", "factor": 8.0,
                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 64})),
    # Qwen2 has q/k/v biases.
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, dict(
        rope_theta=1000000.0, tie_word_embeddings=False)),
    "mistral": (MistralConfig, MistralForCausalLM, dict(
        rope_theta=10000.0, sliding_window=None)),
}


# Real model shapes with random weights, for the GPU checks
# (tests/cuda/run_gpu_checks.sh): Llama-3.2-1B, Qwen2-0.5B and
# SmolLM2-135M (a Llama: 9 query heads over 3 KV heads of 64).
SIZES = {
    "tiny": {},
    "1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
               num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, max_position_embeddings=131072,
               initializer_range=0.05, tie_word_embeddings=True,
               rope_scaling={"rope_type": "llama3", "factor": 32.0,
                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8192}),
    "0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                 num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, max_position_embeddings=32768,
                 initializer_range=0.05, tie_word_embeddings=True),
    "135m": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                 num_hidden_layers=30, num_attention_heads=9,
                 num_key_value_heads=3, max_position_embeddings=8192,
                 initializer_range=0.05, tie_word_embeddings=True,
                 rope_theta=100000.0, rope_scaling=None),
}


def make(arch, dtype, out, seed=0, size="tiny", device="cpu"):
    config_cls, model_cls, extra = ARCHS[arch]
    torch.manual_seed(seed)
    config = config_cls(**{**COMMON, **extra, **SIZES[size]})
    # Initialized on `device` (cuda: seconds for a 1B model instead of a
    # minute of CPU); the same seed gives other weights on another device.
    if device == "cpu":  # also where torch.device is no context manager (torch < 2)
        model = model_cls(config).eval()
    else:
        with torch.device(device):
            model = model_cls(config).eval()
    model.to(DTYPES[dtype])
    model.config.torch_dtype = DTYPES[dtype]
    model.save_pretrained(out, safe_serialization=True)
    return model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", choices=sorted(ARCHS), default="llama")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny",
                        help="tiny, or a real model's shape: 1b (Llama-3.2-1B), "
                             "0.5b (Qwen2-0.5B), 135m (SmolLM2-135M, with --arch llama)")
    parser.add_argument("--device", default="cpu",
                        help="torch device the weights are drawn on (cuda: faster)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    make(args.arch, args.dtype, args.out, args.seed, args.size, args.device)
    print(f"wrote {args.out} ({args.arch}, {args.dtype})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
