#!/usr/bin/env python3
"""kvcast's logits against llama.cpp's on the same GGUF file: every
position of one prompt, through llama-cpp-python (an independent reader of
the file with its own kernels; install with tools/bench/setup_llamacpp.sh).

  .venv-llamacpp/bin/python tools/golden/llamacpp_logits_compare.py \\
      MODEL.gguf 1,17,200,33 kvcast_logits_output.json [more.json ...]

Each JSON file is `kvcast_logits --model MODEL.gguf --tokens ... --out F`'s
output for the same tokens. Prints, per file, the largest |logit gap| over
all positions and the vocabulary, the largest |logit| of llama.cpp's, and
at how many positions the top-1 token agrees. Exit status 1 if a file's
shape differs from llama.cpp's, 2 on bad arguments.
"""
import json
import sys

import numpy as np
from llama_cpp import Llama


def main(argv):
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    model, tokens = argv[1], [int(t) for t in argv[2].split(",")]
    llm = Llama(model_path=model, n_ctx=max(64, 2 * len(tokens)), n_threads=2, logits_all=True,
                verbose=False)
    llm.eval(tokens)
    want = np.array(llm.scores[:len(tokens)], dtype=np.float64)
    for path in argv[3:]:
        with open(path) as f:
            got = np.array(json.load(f)["logits"], dtype=np.float64)
        if got.size != want.size:
            print(f"{path}: {got.size} logits, llama.cpp has {want.size}", file=sys.stderr)
            return 1
        got = got.reshape(want.shape)
        agree = int((got.argmax(1) == want.argmax(1)).sum())
        print(f"{path}: worst |gap| {np.abs(got - want).max():.3f} on logits up to "
              f"{np.abs(want).max():.2f}; top-1 equal at {agree} of {len(tokens)} positions")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
