#!/usr/bin/env python3
"""Reference logits from Hugging Face transformers: the numerical oracle.

Loads a local HF-format causal LM checkpoint (config.json + *.safetensors;
LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM, ...) on the CPU,
computes in float32 by default whatever the stored dtype, runs one forward
pass over the given token ids, and writes JSON:

  {"model": basename of --model, "architecture": ..., "transformers": version,
   "torch": version, "dtype": compute dtype, "tokens": [...],
   "logits": [[vocab floats] for each position],
   # only with --greedy N:
   "greedy_tokens": [N new token ids from model.generate(do_sample=False)],
   "greedy_min_margin": smallest (top1 - top2) logit gap over those N steps,
   "greedy_margins": that gap at each of the N steps}

A small greedy_min_margin (say < 1e-3) means a near-tie: a correct engine
may pick the other token there, so compare logits, not just tokens.

With --teacher_forced, "tokens" is the prompt followed by the greedy tokens
(or --continuation_from's) and "logits" covers all of them ("prompt_len":
the prompt's length): top-1 agreement along one history. With
--linear_input_dtype bfloat16 every Linear's input is rounded to bf16 first,
as an engine feeding bf16 GEMMs does (the GPU oracle compares against both).
--logits_file writes the logits as raw float32 instead of JSON numbers.

Usage:
  .venv-hf/bin/python tools/golden/hf_logits.py --model DIR \
      --tokens 1,2,3 --out FILE.json [--dtype float32] [--greedy N]

Never touches the network (local_files_only, HF_HUB_OFFLINE). See README.md
beside this file for installing the oracle.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def parse_tokens(text):
    try:
        tokens = [int(t) for t in text.split(",") if t.strip() != ""]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--tokens must be comma-separated integers, got {text!r}")
    if not tokens:
        raise argparse.ArgumentTypeError("--tokens is empty")
    if any(t < 0 for t in tokens):
        raise argparse.ArgumentTypeError("--tokens must be >= 0")
    return tokens


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True,
                        help="directory with config.json and safetensors")
    parser.add_argument("--tokens", required=True, type=parse_tokens,
                        help="comma-separated token ids, e.g. 1,2,3")
    parser.add_argument("--out", required=True, help="output JSON file")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES),
                        help="compute dtype (default float32, whatever the "
                             "checkpoint stores)")
    parser.add_argument("--greedy", type=int, default=0, metavar="N",
                        help="also generate N tokens greedily")
    parser.add_argument("--device", default="cpu",
                        help="torch device (cpu, or cuda on the GPU machine)")
    parser.add_argument("--linear_input_dtype", default="", choices=["", "bfloat16", "float16"],
                        help="round every Linear's input to this type (and back) before "
                             "the product, as a GPU engine feeding 16-bit GEMMs does; the "
                             "product itself stays in --dtype")
    parser.add_argument("--teacher_forced", action="store_true",
                        help="report the logits over the tokens followed by the greedy "
                             "tokens (or --continuation_from's), in one pass")
    parser.add_argument("--continuation_from", default="",
                        help="with --teacher_forced: the continuation is this hf_logits "
                             "JSON's greedy_tokens")
    parser.add_argument("--logits_file", default="",
                        help="write the logits here as raw little-endian float32 "
                             "(positions x vocab) instead of into the JSON")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args(argv)

    if not os.path.isfile(os.path.join(args.model, "config.json")):
        parser.error(f"{args.model}: no config.json")
    if args.greedy < 0:
        parser.error("--greedy must be >= 0")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)  # nothing here samples; just in case
    # True float32 on a GPU: no TF32 in matrix products or convolutions.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    dtype = DTYPES[args.dtype]
    model = AutoModelForCausalLM.from_pretrained(
        args.model,
        torch_dtype=dtype,
        attn_implementation="eager",
        local_files_only=True,
    )
    model.eval()
    model.to(args.device)
    if args.linear_input_dtype:
        rounding = DTYPES[args.linear_input_dtype]

        def round_input(module, inputs):
            return tuple(x.to(rounding).to(x.dtype) for x in inputs)

        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.register_forward_pre_hook(round_input)

    vocab = model.config.vocab_size
    bad = [t for t in args.tokens if t >= vocab]
    if bad:
        parser.error(f"token ids {bad} out of range for vocab_size {vocab}")

    input_ids = torch.tensor([args.tokens], dtype=torch.long, device=args.device)
    attention_mask = torch.ones_like(input_ids)
    result = {
        "model": os.path.basename(os.path.normpath(args.model)),
        "architecture": (model.config.architectures or [type(model).__name__])[0],
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "dtype": args.dtype,
        "linear_input_dtype": args.linear_input_dtype or args.dtype,
        "tokens": args.tokens,
    }
    with torch.no_grad():
        if args.greedy > 0:
            gen_config = transformers.GenerationConfig.from_dict(
                model.generation_config.to_dict())
            # Exactly N tokens: an EOS id must not stop a random model early,
            # and no logits processor may alter the argmax.
            gen_config.eos_token_id = None
            gen_config.pad_token_id = 0
            gen_config.do_sample = False
            gen_config.num_beams = 1
            gen_config.max_new_tokens = args.greedy
            gen_config.min_new_tokens = None
            gen_config.max_length = None
            gen_config.repetition_penalty = 1.0
            gen_config.temperature = None
            gen_config.top_k = None
            gen_config.top_p = None
            gen_config.output_scores = True
            gen_config.return_dict_in_generate = True
            out = model.generate(input_ids, attention_mask=attention_mask,
                                 generation_config=gen_config)
            new_tokens = out.sequences[0, input_ids.shape[1]:].tolist()
            margins = []
            for step_scores in out.scores:
                top2 = torch.topk(step_scores[0].to(torch.float32), 2).values
                margins.append(float(top2[0] - top2[1]))
            result["greedy_tokens"] = new_tokens
            result["greedy_min_margin"] = min(margins) if margins else None
            result["greedy_margins"] = margins

        if args.teacher_forced:
            # One pass over the prompt and a continuation: every position's
            # next-token logits with the reference's tokens as the history.
            if args.continuation_from:
                with open(args.continuation_from) as f:
                    cont = json.load(f)["greedy_tokens"]
            else:
                cont = result.get("greedy_tokens", [])
            result["prompt_len"] = len(args.tokens)
            result["tokens"] = args.tokens + cont
            input_ids = torch.tensor([result["tokens"]], dtype=torch.long,
                                     device=args.device)
            attention_mask = torch.ones_like(input_ids)
        logits = model(input_ids=input_ids, attention_mask=attention_mask,
                       use_cache=False).logits[0].to(torch.float32)
        if args.logits_file:
            logits.cpu().numpy().astype("<f4").tofile(args.logits_file)
            result["logits_file"] = os.path.abspath(args.logits_file)
            result["vocab"] = vocab
        else:
            result["logits"] = logits.tolist()

    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, args.out)
    print(f"wrote {args.out}: {len(result['tokens'])} positions x {vocab} logits"
          + (f", {len(result['greedy_tokens'])} greedy tokens"
             if args.greedy > 0 else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
