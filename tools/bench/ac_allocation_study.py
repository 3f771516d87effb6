#!/usr/bin/env python3
"""How far could model-aware bit allocation take the ac tracks? (issue 18)

A study on SmolLM2-135M-Instruct's real KV with HF transformers (the oracle
venv, .venv-hf: bash tools/golden/install_oracle.sh), not kvcast code: it
simulates the ac encoder's quantizer (one step per (layer, K/V, KV head) and
128-token group = the unit's largest |x| / levels, power-of-two finer for a
token whose largest |x| is smaller) on the prompt's KV, estimates the coded
size as the empirical entropy of each unit's codes (the ac tracks code each
unit with one table per group; this ignores delta coding, worth ~5%), and
measures the KL divergence of 32 forced decode steps against exact KV.

  rd K_LEVELS/V_LEVELS/ALPHA_K/ALPHA_V ...   size and KL per setting. ALPHA
      weights each channel's step by (channel weight / geometric mean)^(-ALPHA/2):
      K channel weight = the energy of the queries that read it (from the
      prompt's own queries), V channel weight = the squared norm of W_o's
      columns that read it. ALPHA 1 is the rate-distortion optimum if errors
      add up independently; 0 is what the ac tracks do.
  layers    KL when only one layer's K (or V) is coarse (15 levels): the
      spread of these sensitivities bounds what per-layer levels can save,
      0.5 log2(arithmetic mean / geometric mean) bits per value.
  transform bits per value at the same step in the channel basis and in each
      unit's principal axes (a KLT fitted to the prompt's own KV: a bound).
  entropy   bits per value with one table per unit (the format), per channel
      (an unreachable lower bound: 128 samples per table), and per class of
      channels sorted by spread (4 or 8 tables per unit).

Usage: .venv-hf/bin/python tools/bench/ac_allocation_study.py GGUF {rd SPEC... | layers | entropy | transform}
The prompt is kvcache_bench's: 256 ids (i * 7919 + 13) mod vocab.
"""
import copy
import os
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM
from transformers.cache_utils import DynamicCache
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

PROMPT, STEPS, GROUP = 256, 32, 128
torch.set_num_threads(2)
gguf, mode, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
model = AutoModelForCausalLM.from_pretrained(
    os.path.dirname(os.path.abspath(gguf)), gguf_file=os.path.basename(gguf),
    torch_dtype=torch.float32, attn_implementation="eager", tie_word_embeddings=True,
    local_files_only=True).eval()
cfg = model.config
L, Hq, Hk = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads
D = cfg.hidden_size // Hq
prompt = [(i * 7919 + 13) % cfg.vocab_size for i in range(PROMPT)]

# The prompt's post-rope queries per layer, captured on the way through.
queries = {}
for layer in model.model.layers:
    attn, forward = layer.self_attn, layer.self_attn.forward
    def capture(*args, _attn=attn, _forward=forward, **kw):
        h = kw["hidden_states"]
        cos, sin = kw["position_embeddings"]
        q = _attn.q_proj(h).view(1, h.shape[1], Hq, D).transpose(1, 2)
        queries[_attn.layer_idx] = apply_rotary_pos_emb(q, q, cos, sin)[0][0].detach()
        return _forward(*args, **kw)
    attn.forward = capture
with torch.no_grad():
    out = model(torch.tensor([prompt]), use_cache=True)
cache = out.past_key_values
if isinstance(cache, tuple):
    cache = DynamicCache.from_legacy_cache(cache)
# Exact greedy continuation: the forced tokens and the reference logits.
with torch.no_grad():
    tokens, ref, state, logits = [], [], copy.deepcopy(cache), out.logits[0, -1]
    for _ in range(STEPS):
        tokens.append(int(logits.argmax()))
        logits = model(torch.tensor([[tokens[-1]]]), past_key_values=state).logits[0, -1]
        ref.append(torch.log_softmax(logits, -1))
group_heads = Hq // Hk
k_weight = [(queries[l] ** 2).mean(1).view(Hk, group_heads, D).sum(1) for l in range(L)]
v_weight = [(model.model.layers[l].self_attn.o_proj.weight.detach() ** 2).sum(0)
            .view(Hk, group_heads, D).sum(1) for l in range(L)]


def entropy_bits(codes):
    _, counts = np.unique(codes, return_counts=True)
    p = counts / counts.sum()
    return float(-(counts * np.log2(p)).sum())


def quantize(x, levels, weight, alpha):
    """x: (Hk, T, D). Returns (dequantized x, bits, codes per unit)."""
    out, bits, units = torch.empty_like(x), 0.0, []
    for h in range(Hk):
        lw = torch.log2(weight[h] + 1e-30)
        mult = torch.pow(2.0, -alpha * 0.5 * (lw - lw.mean()))
        for g in range(0, x.shape[1], GROUP):
            block = x[h, g:g + GROUP]
            amax = float(block.abs().max())
            if amax == 0:
                out[h, g:g + GROUP] = 0
                continue
            token_amax = block.abs().max(1).values.clamp_min(1e-30)
            shift = torch.floor(torch.log2(amax / token_amax)).clamp(0, 15)
            step = amax / levels * torch.pow(2.0, -shift)[:, None] * mult[None, :]
            codes = torch.round(block / step)
            out[h, g:g + GROUP] = codes * step
            units.append(codes.numpy().astype(np.int64))
            bits += entropy_bits(units[-1].ravel())
    return out, bits, units


def mean_kl(k_levels, v_levels, alpha_k=0.0, alpha_v=0.0, only=None):
    """KL over the forced steps with the prompt's KV quantized (only=(layer, kind):
    that one alone, at the given levels). Returns (mean KL, bytes vs fp16)."""
    coded, bits = DynamicCache(), 0.0
    for l in range(L):
        k, v = cache.key_cache[l][0], cache.value_cache[l][0]
        if only is None or only == (l, "K"):
            k, b, _ = quantize(k, k_levels, k_weight[l], alpha_k)
            bits += b
        if only is None or only == (l, "V"):
            v, b, _ = quantize(v, v_levels, v_weight[l], alpha_v)
            bits += b
        coded.update(k[None].clone(), v[None].clone(), l)
    kls = []
    with torch.no_grad():
        for s in range(STEPS if only is None else 8):
            logp = torch.log_softmax(
                model(torch.tensor([[tokens[s]]]), past_key_values=coded).logits[0, -1], -1)
            kls.append(float((ref[s].exp() * (ref[s] - logp)).sum()))
    return float(np.mean(kls)), bits / 8 / PROMPT / (2 * L * Hk * D * 2)


if mode == "rd":
    for spec in specs:
        kl_, vl, ak, av = (float(f) for f in spec.split("/"))
        kl, size = mean_kl(kl_, vl, ak, av)
        print(f"| K {kl_:g} V {vl:g} | alpha K {ak:g} V {av:g} | {size:.3f} | {kl:.2e} |", flush=True)
elif mode == "layers":
    sens = {"K": [], "V": []}
    for l in range(L):
        for kind in "KV":
            sens[kind].append(mean_kl(15, 15, only=(l, kind))[0])
        print(f"layer {l}: K {sens['K'][-1]:.2e} V {sens['V'][-1]:.2e}", flush=True)
    for name, s in (("K", sens["K"]), ("V", sens["V"]), ("K and V", sens["K"] + sens["V"])):
        s = np.array(s)
        print(f"{name}: max/min {s.max() / s.min():.0f}x, bound on the saving "
              f"{0.5 * np.log2(s.mean() / np.exp(np.log(s).mean())):.2f} bits/value")
elif mode == "entropy":
    for k_levels, v_levels in ((255, 191), (127, 32)):
        total = {"one table per unit": 0.0, "per channel (bound)": 0.0, "4 classes": 0.0,
                 "8 classes": 0.0}
        n = 0
        for l in range(L):
            for x, lev, w in ((cache.key_cache[l][0], k_levels, k_weight[l]),
                              (cache.value_cache[l][0], v_levels, v_weight[l])):
                _, bits, units = quantize(x, lev, w, 0.0)
                total["one table per unit"] += bits
                for q in units:
                    n += q.size
                    total["per channel (bound)"] += sum(entropy_bits(q[:, c]) for c in range(D))
                    order = np.argsort(q.std(0))
                    for classes in (4, 8):
                        total[f"{classes} classes"] += sum(
                            entropy_bits(q[:, order[j * D // classes:(j + 1) * D // classes]].ravel())
                            for j in range(classes))
        print(f"K {k_levels} V {v_levels}: " + ", ".join(
            f"{name} {bits / n:.2f}" for name, bits in total.items()) + " bits/value")
elif mode == "transform":
    # The same step (so the same squared error: the transform is orthogonal)
    # in the channel basis and in each unit's own principal axes (KLT from
    # this prompt's KV: a bound, the decoder would need the D x D basis).
    for k_levels, v_levels in ((255, 191), (127, 32)):
        bits = {"channels": 0.0, "principal axes": 0.0}
        n = 0
        for l in range(L):
            for x, lev in ((cache.key_cache[l][0], k_levels), (cache.value_cache[l][0], v_levels)):
                for h in range(Hk):
                    xh = x[h].numpy().astype(np.float64)
                    step = np.abs(xh).max() / lev
                    _, vecs = np.linalg.eigh(np.cov(xh.T))
                    for name, y in (("channels", xh), ("principal axes", xh @ vecs)):
                        q = np.round(y / step).astype(np.int64)
                        bits[name] += sum(entropy_bits(q[g:g + GROUP].ravel())
                                          for g in range(0, PROMPT, GROUP))
                    n += xh.size
        print(f"K {k_levels} V {v_levels}, one table per unit and group: " +
              ", ".join(f"{name} {b / n:.2f}" for name, b in bits.items()) + " bits/value")
else:
    sys.exit("mode: rd | layers | entropy | transform")
