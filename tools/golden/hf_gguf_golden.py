#!/usr/bin/env python3
"""Golden logits and greedy tokens for SmolLM2-135M-Instruct (GGUF, Q4_1).

Loads the GGUF file with Hugging Face transformers (the independent oracle:
transformers' own GGUF reader dequantizes the weights with PyPI's gguf
package), computes on the CPU in float32 with attn_implementation="eager" and
2 torch threads, and writes tests/data/golden_smollm2_gguf.json:

  {"format": "kvcast-golden-gguf-v1",
   "gguf_file": NAME, "gguf_sha256": ...,
   "oracle": {tool, transformers, torch, gguf, numpy, python, tokenizers,
              accelerate, dtype, attn_implementation, torch_threads},
   "gguf_metadata": {the GGUF keys that matter for these numbers},
   "config": {what transformers derived: vocab, hidden, layers, heads, ...},
   "tokenizer": {how token_ids were made, add_bos findings, ...},
   "greedy": {"steps": 64, "call": how generate() was called},
   "loader_notes": [what transformers does with this file, and what this
                    script overrides],
   "prompts": [{"name", "text", ("messages", "rendering": chat only),
                "num_tokens", "token_ids",
                "last_logits_argmax", "greedy_tokens", "greedy_text",
                "greedy_min_margin", "greedy_margins",
                "kv_cache_vs_full_pass_max_abs_diff",
                "teacher_forced": {"top_k": 32, "ids": [64 x 32 token ids],
                                   "logprobs": [64 x 32 log-probabilities]},
                "last_logits": [vocab floats, 6 significant digits]}, ...]}

last_logits are the logits after the whole prompt (one forward pass over the
prompt, no KV cache). greedy_tokens are the 64 tokens model.generate(
do_sample=False) appends, with no EOS (it cannot stop early) and no logits
processor; greedy_margins is the top1 - top2 logit gap at each step.
kv_cache_vs_full_pass_max_abs_diff is the largest difference between
generate()'s per-step logits (KV cache) and one forward pass over prompt +
greedy tokens (no cache): the oracle's own float32 noise. teacher_forced
holds, for that pass's 64 positions (the prompt's last and the first 63
greedy tokens, each predicting the next), HF's 32 likeliest tokens and their
log-probabilities: top-1 agreement and KL along HF's own history.

Usage (from the repository root; see README.md beside this file):
  .venv-hf/bin/python tools/golden/hf_gguf_golden.py \
      [--gguf build/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf] \
      [--out tests/data/golden_smollm2_gguf.json]

Never touches the network (HF_HUB_OFFLINE, local_files_only).
"""

import argparse
import importlib.metadata
import json
import os
import platform
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TQDM_DISABLE", "1")

import numpy  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from gguf import GGUFReader  # noqa: E402
from tokenizers import pre_tokenizers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from file_digest import sha256  # noqa: E402

DEFAULT_GGUF = "build/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
EXPECTED_SHA256 = \
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
THREADS = 2
GREEDY_STEPS = 64
TOP_K = 32  # teacher-forced log-probabilities kept per step

# The three prompts. (b) is longer than 128 tokens, so an engine that
# prefills in 128-token chunks crosses a chunk boundary.
SENTENCE = ("The old lighthouse keeper climbed the steep winding stairs "
            "every evening to light the lamp for the returning fishing "
            "boats.")
PARAGRAPH = (
    "Bread is one of the oldest prepared foods. People in the Middle East "
    "were grinding wild grains into flour more than fourteen thousand years "
    "ago. Early bread was flat and dense, baked "
    "on hot stones or in the ashes of a fire. The discovery that dough left "
    "to stand would rise, thanks to wild yeast in the air, changed "
    "everything: loaves became lighter, softer and easier to digest. In "
    "medieval Europe the color of a loaf showed social "
    "rank, with white bread for the rich and dark rye or barley for the "
    "poor. The industrial revolution brought steel roller mills and "
    "commercial yeast, and in 1928 a machine that sliced bread before it "
    "was wrapped. Today bakers around the world are rediscovering slow "
    "fermentation, and sourdough has become popular again in home kitchens.")
CHAT_MESSAGES = [
    {"role": "system",
     "content": "You are a friendly assistant who gives short, clear "
                "answers."},
    {"role": "user",
     "content": "What are three simple ways to save water at home?"},
]

# What the GGUF's tokenizer.ggml.pre names -> the pre-tokenizer of the
# model's own tokenizer. transformers 4.45.2 ignores tokenizer.ggml.pre and
# always uses GPT-2's ByteLevel split, which differs where a digit follows
# whitespace (e.g. "x  3", "\n\n3"). "smollm" = each digit alone, then
# GPT-2's split: llama.cpp's LLAMA_VOCAB_PRE_TYPE_SMOLLM (regexes "\p{N}"
# then GPT-2's), the same as SmolLM2's tokenizer.json (Digits with
# individual_digits, then ByteLevel without prefix space).
PRE_TOKENIZERS = {
    "smollm": lambda: pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                 use_regex=True),
    ]),
}


def versions():
    def v(name):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None
    return {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "gguf": v("gguf"),
        "numpy": numpy.__version__,
        "python": platform.python_version(),
        "tokenizers": v("tokenizers"),
        "accelerate": v("accelerate"),
    }


def read_gguf_metadata(path):
    """The GGUF keys behind the golden numbers, read with gguf's reader."""
    reader = GGUFReader(path)

    def field(key):
        f = reader.fields.get(key)
        if f is None or not f.data:
            return None
        if f.types[0].name == "STRING":
            return bytes(f.parts[f.data[0]]).decode("utf-8")
        value = f.parts[f.data[0]].tolist()
        return value[0] if len(value) == 1 else value

    arch = field("general.architecture")
    meta = {"general.architecture": arch, "general.name": field("general.name")}
    for key in ("block_count", "context_length", "embedding_length",
                "feed_forward_length", "attention.head_count",
                "attention.head_count_kv", "rope.freq_base",
                "rope.dimension_count", "attention.layer_norm_rms_epsilon",
                "vocab_size"):
        meta[f"{arch}.{key}"] = field(f"{arch}.{key}")
    for key in ("model", "pre", "add_bos_token", "add_eos_token",
                "add_space_prefix", "bos_token_id", "eos_token_id",
                "unknown_token_id", "padding_token_id"):
        meta[f"tokenizer.ggml.{key}"] = field(f"tokenizer.ggml.{key}")
    meta["tokenizer.chat_template"] = field("tokenizer.chat_template")
    counts = {}
    for t in reader.tensors:
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    meta["tensor_types"] = dict(sorted(counts.items()))
    names = {t.name: t.tensor_type.name for t in reader.tensors}
    meta["token_embd.weight"] = names.get("token_embd.weight")
    meta["output.weight"] = names.get("output.weight")  # None: tied
    return meta


def load_tokenizer(gguf_path, meta):
    """transformers' GGUF tokenizer, with the model's own pre-tokenizer.

    Returns (patched tokenizer, tokenizer exactly as transformers builds it,
    description of the pre-tokenizer used)."""
    d, name = os.path.split(os.path.abspath(gguf_path))
    raw = AutoTokenizer.from_pretrained(d, gguf_file=name, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name, local_files_only=True)
    pre = meta.get("tokenizer.ggml.pre")
    if pre in PRE_TOKENIZERS:
        tok.backend_tokenizer.pre_tokenizer = PRE_TOKENIZERS[pre]()
    state = json.loads(tok.backend_tokenizer.to_str())["pre_tokenizer"]
    return tok, raw, state


def load_model(gguf_path, meta):
    d, name = os.path.split(os.path.abspath(gguf_path))
    # No output.weight in the file: the output projection is token_embd
    # (llama.cpp's rule). transformers 4.45.2 does not infer this: its
    # LlamaConfig defaults to tie_word_embeddings=False and it would leave
    # lm_head randomly initialized, so tie explicitly.
    tie = meta["output.weight"] is None
    model, info = AutoModelForCausalLM.from_pretrained(
        d, gguf_file=name, torch_dtype=torch.float32,
        attn_implementation="eager", tie_word_embeddings=tie,
        local_files_only=True, output_loading_info=True)
    model.eval()
    missing = [k for k in info["missing_keys"]
               if not (tie and k == "lm_head.weight")]
    if missing or info["unexpected_keys"] or info["mismatched_keys"]:
        sys.exit(f"{gguf_path}: loading info {info}")
    if tie and model.lm_head.weight.data_ptr() != \
            model.model.embed_tokens.weight.data_ptr():
        sys.exit("lm_head is not tied to embed_tokens")
    for p in model.parameters():
        if p.dtype != torch.float32:
            sys.exit(f"parameter of dtype {p.dtype}")
    return model


def config_record(model):
    c = model.config
    return {
        "architecture": type(model).__name__,
        "model_type": c.model_type,
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads,
        "head_dim": getattr(c, "head_dim", c.hidden_size // c.num_attention_heads),
        "rope_theta": c.rope_theta,
        "rope_scaling": c.rope_scaling,
        "rms_norm_eps": c.rms_norm_eps,
        "tie_word_embeddings": c.tie_word_embeddings,
        "max_position_embeddings": c.max_position_embeddings,
        "hidden_act": c.hidden_act,
        "attention_bias": getattr(c, "attention_bias", None),
        "mlp_bias": getattr(c, "mlp_bias", None),
        "bos_token_id": c.bos_token_id,
        "eos_token_id": c.eos_token_id,
        "pad_token_id": c.pad_token_id,
    }


def g6(x):
    return float(f"{x:.6g}")


def run_prompt(model, tok, raw_tok, name, text, extra):
    ids = tok(text, add_special_tokens=False)["input_ids"]
    raw_ids = raw_tok(text, add_special_tokens=False)["input_ids"]
    if ids != raw_ids:
        sys.exit(f"prompt {name}: the pre-tokenizer fix changes its ids; "
                 "pick a prompt both agree on")
    input_ids = torch.tensor([ids], dtype=torch.long)
    attention_mask = torch.ones_like(input_ids)
    with torch.no_grad():
        last = model(input_ids=input_ids, attention_mask=attention_mask,
                     use_cache=False).logits[0, -1].to(torch.float32)

        gen = transformers.GenerationConfig(
            do_sample=False, num_beams=1,
            max_new_tokens=GREEDY_STEPS, min_new_tokens=GREEDY_STEPS,
            # No EOS: generation cannot stop early, and without an EOS id
            # min_new_tokens adds no logits processor either. No
            # temperature/top-k/top-p/repetition penalty.
            eos_token_id=None, pad_token_id=model.config.pad_token_id,
            bos_token_id=None, temperature=None, top_k=None, top_p=None,
            repetition_penalty=None,
            output_scores=True, output_logits=True,
            return_dict_in_generate=True)
        # generate() fills a None eos_token_id from model.generation_config
        # (2, <|im_end|>, from the GGUF), so clear it there too.
        model.generation_config.eos_token_id = None
        out = model.generate(input_ids, attention_mask=attention_mask,
                             generation_config=gen)
        new = out.sequences[0, len(ids):].tolist()
        if len(new) != GREEDY_STEPS:
            sys.exit(f"prompt {name}: generated {len(new)} tokens")
        scores = torch.stack([s[0] for s in out.scores]).to(torch.float32)
        logits = torch.stack([s[0] for s in out.logits]).to(torch.float32)
        if not torch.equal(scores, logits):
            sys.exit(f"prompt {name}: a logits processor altered the scores")
        top2 = torch.topk(scores, 2, dim=-1).values
        margins = (top2[:, 0] - top2[:, 1]).tolist()
        if scores.argmax(-1).tolist() != new:
            sys.exit(f"prompt {name}: generated tokens are not the argmax")

        # The same logits without a KV cache: one pass over prompt + tokens.
        full = torch.tensor([ids + new[:-1]], dtype=torch.long)
        full_logits = model(input_ids=full, attention_mask=torch.ones_like(full),
                            use_cache=False).logits[0, len(ids) - 1:]
        full_logits = full_logits.to(torch.float32)
        cache_diff = float((full_logits - scores).abs().max())
        first_diff = float((last - scores[0]).abs().max())
        for step, (a, b) in enumerate(zip(full_logits.argmax(-1).tolist(), new)):
            if a != b and margins[step] > 1e-3:
                sys.exit(f"prompt {name}: step {step} argmax {a} without "
                         f"KV cache vs {b} with it (margin {margins[step]})")

    # Teacher-forced: at each of the 64 steps, HF's log-probabilities of its
    # TOP_K likeliest tokens (float64 log-softmax of the no-cache pass), so an
    # engine fed the same tokens can be scored by top-1 agreement and by KL
    # over those tokens plus the rest of the mass.
    logp = torch.log_softmax(full_logits.to(torch.float64), dim=-1)
    top = torch.topk(logp, TOP_K, dim=-1)
    teacher = {"top_k": TOP_K,
               "ids": top.indices.tolist(),
               "logprobs": [[g6(x) for x in row] for row in top.values.tolist()]}

    last_list = last.tolist()
    return {
        "name": name,
        "text": text,
        **extra,
        "num_tokens": len(ids),
        "token_ids": ids,
        "last_logits_argmax": int(last.argmax()),
        "greedy_tokens": new,
        "greedy_text": tok.decode(new, skip_special_tokens=False,
                                  clean_up_tokenization_spaces=False),
        "greedy_min_margin": min(margins),
        "greedy_margins": [g6(m) for m in margins],
        "kv_cache_vs_full_pass_max_abs_diff": g6(max(cache_diff, first_diff)),
        "teacher_forced": teacher,
        "last_logits": [g6(x) for x in last_list],
    }


def write_json(path, golden):
    """Top-level keys one per line; each prompt's fields one per line, so a
    prompt's 49152 logits are a single line."""
    def dump(v):
        return json.dumps(v, ensure_ascii=False, separators=(",", ":"))

    lines = ["{"]
    keys = list(golden)
    for i, k in enumerate(keys):
        sep = "," if i + 1 < len(keys) else ""
        if k == "prompts":
            lines.append(' "prompts": [')
            for j, p in enumerate(golden[k]):
                lines.append("  {")
                pk = list(p)
                for m, f in enumerate(pk):
                    lines.append(f"   {dump(f)}: {dump(p[f])}"
                                 + ("," if m + 1 < len(pk) else ""))
                lines.append("  }" + ("," if j + 1 < len(golden[k]) else ""))
            lines.append(" ]" + sep)
        else:
            lines.append(f" {dump(k)}: {dump(golden[k])}{sep}")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    json.loads(text)  # well-formed
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
    return len(text.encode("utf-8"))


def tokenizer_record(tok, raw_tok, meta, pre_state):
    probe = "Hello"
    default_ids = raw_tok(probe)["input_ids"]
    plain_ids = raw_tok(probe, add_special_tokens=False)["input_ids"]
    return {
        "token_ids_encoding": "tokenizer(text, add_special_tokens=False)",
        "gguf_add_bos_token": meta["tokenizer.ggml.add_bos_token"],
        "hf_add_bos_token": getattr(raw_tok, "add_bos_token", None),
        "hf_default_prepends": default_ids[:len(default_ids) - len(plain_ids)],
        "hf_bos_token": [raw_tok.bos_token, raw_tok.bos_token_id],
        "hf_eos_token": [raw_tok.eos_token, raw_tok.eos_token_id],
        "gguf_pre": meta["tokenizer.ggml.pre"],
        "pre_tokenizer_used": pre_state,
        "hf_gguf_pre_tokenizer": json.loads(
            raw_tok.backend_tokenizer.to_str())["pre_tokenizer"],
        "tokenizer_class": type(tok).__name__,
    }


LOADER_NOTES = [
    "Weights: transformers 4.45.2 (modeling_gguf_pytorch_utils."
    "load_gguf_checkpoint) dequantizes every tensor to float32 numpy with "
    "gguf.dequantize: Q4_1 as d*q + m (d, m float16 -> float32, q the 4-bit "
    "nibble; low nibbles are elements 0..15 of a 32-block, high nibbles "
    "16..31), Q8_0 (token_embd) as d*q, F32 as stored.",
    "attn_q / attn_k: for general.architecture llama transformers undoes "
    "llama.cpp's rotary permutation (reverse_permute_weights: rows "
    "reshaped to (heads, head_dim/2, 2, ...) and the two middle axes "
    "swapped; attn_q with n_head=9, attn_k with n_head_kv=3), so HF's "
    "rotate_half RoPE sees the original HF layout.",
    "No output.weight in the GGUF: transformers 4.45.2 derives "
    "tie_word_embeddings=False (LlamaConfig's default) and would randomly "
    "initialize lm_head; this script passes tie_word_embeddings=True, so "
    "lm_head is token_embd (Q8_0, dequantized).",
    "Loading a GGUF model needs accelerate; gguf 0.10.0 imports "
    "sentencepiece at import time without declaring it.",
    "Tokenizer: transformers builds a LlamaTokenizerFast whose bos_token and "
    "eos_token are both <|im_start|> (id 1) and whose add_bos_token is True, "
    "so tokenizer(text) prepends id 1 although the GGUF says "
    "tokenizer.ggml.add_bos_token=false; token_ids here are encoded with "
    "add_special_tokens=False (no BOS), as the GGUF asks. It also ignores "
    "tokenizer.ggml.pre (smollm); see tokenizer.pre_tokenizer_used.",
]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gguf", default=DEFAULT_GGUF)
    p.add_argument("--out", default="tests/data/golden_smollm2_gguf.json")
    args = p.parse_args()
    start = time.time()

    digest = sha256(args.gguf)
    if digest != EXPECTED_SHA256:
        sys.exit(f"{args.gguf}: sha256 {digest}, expected {EXPECTED_SHA256}")
    torch.set_num_threads(THREADS)
    torch.manual_seed(0)  # nothing here samples; just in case

    meta = read_gguf_metadata(args.gguf)
    tok, raw_tok, pre_state = load_tokenizer(args.gguf, meta)
    model = load_model(args.gguf, meta)

    chat_text = tok.apply_chat_template(CHAT_MESSAGES, tokenize=False,
                                        add_generation_prompt=True)
    chat_extra = {"messages": CHAT_MESSAGES,
                  "rendering": "tokenizer.apply_chat_template(messages, "
                               "tokenize=False, add_generation_prompt=True)"}
    prompts = []
    for name, text, extra in (("sentence", SENTENCE, {}),
                              ("paragraph", PARAGRAPH, {}),
                              ("chat", chat_text, chat_extra)):
        r = run_prompt(model, tok, raw_tok, name, text, extra)
        prompts.append(r)
        print(f"{name}: {r['num_tokens']} tokens, min margin "
              f"{r['greedy_min_margin']:.4g}: {r['greedy_text']!r}",
              file=sys.stderr)

    golden = {
        "format": "kvcast-golden-gguf-v1",
        "gguf_file": os.path.basename(args.gguf),
        "gguf_sha256": digest,
        "oracle": dict(tool="tools/golden/hf_gguf_golden.py", **versions(),
                       dtype="float32", attn_implementation="eager",
                       torch_threads=THREADS),
        "gguf_metadata": meta,
        "config": config_record(model),
        "tokenizer": tokenizer_record(tok, raw_tok, meta, pre_state),
        "loader_notes": LOADER_NOTES,
        "greedy": {"steps": GREEDY_STEPS, "call": (
            "model.generate(do_sample=False, num_beams=1, max_new_tokens=64, "
            "min_new_tokens=64, eos_token_id=None): no EOS, no logits "
            "processor (scores == raw logits checked)")},
        "prompts": prompts,
    }
    size = write_json(args.out, golden)
    print(f"wrote {args.out}: {size} bytes, {time.time() - start:.1f} s",
          file=sys.stderr)


if __name__ == "__main__":
    main()
