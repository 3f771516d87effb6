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
  prerope K_LEVELS/V_LEVELS/VARIANT ...   K coded in the pre-RoPE domain
      (KVQuant, arXiv 2401.18079): the cache's post-RoPE K is rotated back by
      -angle with the model's own cos/sin (the round trip's error is printed
      once), coded per VARIANT, rotated forward again; V is coded as in rd.
      Prints the size vs fp16 (K and V, as rd), K's bits per value alone
      (side information included), K's relative squared error and the KL.
        post      today's quantizer on post-RoPE K (the baseline: rd's numbers)
        pre       today's quantizer on pre-RoPE K
        premean   pre-RoPE K minus each channel's mean over the unit's 128
                  tokens (sent as fp16: 16 bits x D per unit, counted), the
                  residual coded with today's quantizer (step from its max)
        premean32 premean with the mean kept in fp32 (still counted as 16
                  bits): a diagnostic of what the fp16 mean's error costs
        predelta  pre-RoPE K, closed-loop delta against the previous token's
                  reconstruction within the group (the first token as is),
                  steps as today (from the unit's max |x|), entropy of the
                  deltas' codes
        postdelta the same closed-loop delta on post-RoPE K (the control:
                  what delta coding alone saves)
      The K logit error is the mean of (q . (K' - K))^2 / D over the prompt's
      own queries and the keys they see (what the attention scores feel);
      the attention-weighted one weights each key by the exact attention
      probability it gets (summed over keys, averaged over queries).

Usage: .venv-hf/bin/python tools/bench/ac_allocation_study.py GGUF {rd SPEC... | layers | entropy | transform | prerope SPEC...}
The prompt is kvcache_bench's: 256 ids (i * 7919 + 13) mod vocab; with
STUDY_TEXT=file, the first 256 tokens of that text (the GGUF's tokenizer).
STUDY_JSON=file also writes the printed rows as a result file
(tools/report/results.py: date, CPU, command, commit).
"""
import copy
import os
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM
from transformers.cache_utils import DynamicCache
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import results  # noqa: E402  (tools/report/results.py)

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


def text_tokens(path):
    """The first PROMPT tokens of a text file (the GGUF's own tokenizer)."""
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(
        os.path.dirname(os.path.abspath(gguf)), gguf_file=os.path.basename(gguf),
        local_files_only=True)
    with open(path, encoding="utf-8", errors="replace") as f:
        ids = tokenizer(f.read())["input_ids"][:PROMPT]
    if len(ids) < PROMPT:
        sys.exit(f"{path} has only {len(ids)} tokens, need {PROMPT}")
    print(f"first {PROMPT} tokens of {path}: {tokenizer.decode(ids[:24])!r}...", flush=True)
    return ids


prompt = [(i * 7919 + 13) % cfg.vocab_size for i in range(PROMPT)]
if os.environ.get("STUDY_TEXT"):
    prompt = text_tokens(os.environ["STUDY_TEXT"])

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
prompt_queries = dict(queries)  # the decode steps below overwrite queries
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


def query_energy(qs):
    """Per layer, each KV head's channels' mean q^2 over the queries `qs`
    (per layer: heads x tokens x D), summed over the heads sharing it."""
    return [(qs[l] ** 2).mean(1).view(Hk, group_heads, D).sum(1) for l in range(L)]


# STUDY_K_WEIGHT: where K's channel weights come from when they cannot be
# the prompt's own queries (an encoder that codes a group before the
# prompt's queries exist, or that has only the model):
#   static       the weights alone: E[q_c^2] with unit-variance normalized
#                hidden states, sum_j (W_q[c, j] * gamma_j)^2, each RoPE pair
#                (c, c + D/2) given its mean
#   text:FILE    the queries of another prompt (FILE's first 256 tokens),
#                as a calibration run at model load would have them
k_source = os.environ.get("STUDY_K_WEIGHT", "prompt")
if k_source == "prompt":
    k_weight = query_energy(prompt_queries)
elif k_source == "static":
    k_weight = []
    for l in range(L):
        layer = model.model.layers[l]
        w = (layer.self_attn.q_proj.weight.detach() * layer.input_layernorm.weight.detach()) ** 2
        e = w.sum(1).view(Hq, D)
        e = torch.cat([(e[:, :D // 2] + e[:, D // 2:]) / 2] * 2, 1)
        k_weight.append(e.view(Hk, group_heads, D).sum(1))
elif k_source.startswith("text:"):
    with torch.no_grad():
        model(torch.tensor([text_tokens(k_source[5:])]), use_cache=True)  # fills `queries`
    k_weight = query_energy(queries)
else:
    sys.exit(f"STUDY_K_WEIGHT={k_source}: prompt | static | text:FILE")
print(f"K channel weights from: {k_source}", flush=True)
v_weight = [(model.model.layers[l].self_attn.o_proj.weight.detach() ** 2).sum(0)
            .view(Hk, group_heads, D).sum(1) for l in range(L)]


def entropy_bits(codes):
    _, counts = np.unique(codes, return_counts=True)
    p = counts / counts.sum()
    return float(-(counts * np.log2(p)).sum())


def token_steps(block, levels):
    """The ac quantizer's step per token of one unit's group (T, D): the
    unit's largest |x| / levels, power-of-two finer for a token whose own
    largest |x| is smaller. None for an all-zero block."""
    amax = float(block.abs().max())
    if amax == 0:
        return None
    token_amax = block.abs().max(1).values.clamp_min(1e-30)
    shift = torch.floor(torch.log2(amax / token_amax)).clamp(0, 15)
    return amax / levels * torch.pow(2.0, -shift)


def quantize(x, levels, weight, alpha):
    """x: (Hk, T, D). Returns (dequantized x, bits, codes per unit)."""
    out, bits, units = torch.empty_like(x), 0.0, []
    for h in range(Hk):
        lw = torch.log2(weight[h] + 1e-30)
        mult = torch.pow(2.0, -alpha * 0.5 * (lw - lw.mean()))
        for g in range(0, x.shape[1], GROUP):
            block = x[h, g:g + GROUP]
            steps = token_steps(block, levels)
            if steps is None:
                out[h, g:g + GROUP] = 0
                continue
            step = steps[:, None] * mult[None, :]
            codes = torch.round(block / step)
            out[h, g:g + GROUP] = codes * step
            units.append(codes.numpy().astype(np.int64))
            bits += entropy_bits(units[-1].ravel())
    return out, bits, units


def forced_kl(coded, steps=STEPS):
    """Mean KL of the forced decode steps reading the coded cache."""
    kls = []
    with torch.no_grad():
        for s in range(steps):
            logp = torch.log_softmax(
                model(torch.tensor([[tokens[s]]]), past_key_values=coded).logits[0, -1], -1)
            kls.append(float((ref[s].exp() * (ref[s] - logp)).sum()))
    return float(np.mean(kls))


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
    return forced_kl(coded, STEPS if only is None else 8), bits / 8 / PROMPT / (2 * L * Hk * D * 2)


# RoPE as the model applies it at positions 0..PROMPT-1: (T, D) cos and sin.
with torch.no_grad():
    rope_cos, rope_sin = (t[0] for t in model.model.rotary_emb(
        cache.key_cache[0], torch.arange(PROMPT)[None]))


def rotate_half(x):
    return torch.cat((-x[..., D // 2:], x[..., :D // 2]), -1)


def rope(x):
    """x: (Hk, T, D) pre-RoPE -> post-RoPE (HF's apply_rotary_pos_emb)."""
    return x * rope_cos + rotate_half(x) * rope_sin


def unrope(x):
    """The inverse: each channel pair (i, i + D/2) rotated by -angle."""
    scale = rope_cos ** 2 + rope_sin ** 2  # 1 unless the rope type scales attention
    return (x * rope_cos - rotate_half(x) * rope_sin) / scale


def quantize_premean(x, levels, mean_dtype=torch.float16):
    """Per unit and group: the channels' mean over its tokens in fp16, the
    residual with today's quantizer. Returns (dequantized x, bits incl. means)."""
    mean = torch.cat([x[:, g:g + GROUP].mean(1, keepdim=True).to(mean_dtype).float()
                      .expand(-1, min(GROUP, x.shape[1] - g), -1)
                      for g in range(0, x.shape[1], GROUP)], 1)
    out, bits, _ = quantize(x - mean, levels, torch.ones(Hk, D), 0.0)
    groups = (x.shape[1] + GROUP - 1) // GROUP
    return out + mean, bits + 16 * D * Hk * groups


def quantize_predelta(x, levels):
    """Closed-loop delta against the previous token's reconstruction within
    each group (the first token against 0), today's steps (the unit's max |x|
    / levels, power-of-two finer for a smaller token). Returns (x', bits)."""
    out, bits = torch.empty_like(x), 0.0
    for h in range(Hk):
        for g in range(0, x.shape[1], GROUP):
            block = x[h, g:g + GROUP]
            step = token_steps(block, levels)
            if step is None:
                out[h, g:g + GROUP] = 0
                continue
            codes, prev = torch.empty_like(block), torch.zeros(D)
            for t in range(block.shape[0]):
                codes[t] = torch.round((block[t] - prev) / step[t])
                prev = prev + codes[t] * step[t]
                out[h, g + t] = prev
            bits += entropy_bits(codes.numpy().astype(np.int64).ravel())
    return out, bits


def prerope_kl(k_levels, v_levels, variant):
    """Returns (mean KL, bytes vs fp16, K bits per value, K relative squared
    error, K logit error, attention-weighted K logit error)."""
    coded, bits, k_bits, err, energy = DynamicCache(), 0.0, 0.0, 0.0, 0.0
    logit_err, pairs, attn_err = 0.0, 0, 0.0
    causal = torch.tril(torch.ones(PROMPT, PROMPT, dtype=torch.bool))
    for l in range(L):
        k, v = cache.key_cache[l][0], cache.value_cache[l][0]
        if variant == "post":
            kq, b, _ = quantize(k, k_levels, k_weight[l], 0.0)
        elif variant == "pre":
            kq, b, _ = quantize(unrope(k), k_levels, k_weight[l], 0.0)
            kq = rope(kq)
        elif variant in ("premean", "premean32"):
            kq, b = quantize_premean(unrope(k), k_levels,
                                     torch.float16 if variant == "premean" else torch.float32)
            kq = rope(kq)
        elif variant == "predelta":
            kq, b = quantize_predelta(unrope(k), k_levels)
            kq = rope(kq)
        elif variant == "postdelta":
            kq, b = quantize_predelta(k, k_levels)
        else:
            sys.exit(f"variant {variant}: post | pre | premean | premean32 | predelta | postdelta")
        k_bits += b
        err += float(((kq - k) ** 2).sum())
        energy += float((k ** 2).sum())
        dq = prompt_queries[l].view(Hk, group_heads, PROMPT, D) @ (kq - k)[:, None].transpose(-1, -2)
        logit_err += float((dq ** 2)[..., causal].sum()) / D
        scores = prompt_queries[l].view(Hk, group_heads, PROMPT, D) @ k[:, None].transpose(-1, -2)
        probs = torch.softmax((scores / D ** 0.5).masked_fill(~causal, float("-inf")), -1)
        attn_err += float((probs * dq ** 2).sum()) / D / (Hq * PROMPT)
        pairs += Hq * int(causal.sum())
        vq, b, _ = quantize(v, v_levels, v_weight[l], 0.0)
        bits += b
        coded.update(kq[None].clone(), vq[None].clone(), l)
    bits += k_bits
    return (forced_kl(coded), bits / 8 / PROMPT / (2 * L * Hk * D * 2),
            k_bits / (L * Hk * PROMPT * D), err / energy, logit_err / pairs, attn_err / L)

rows = []  # what each mode prints, for STUDY_JSON
if mode == "rd":
    for spec in specs:
        kl_, vl, ak, av = (float(f) for f in spec.split("/"))
        kl, size = mean_kl(kl_, vl, ak, av)
        print(f"| K {kl_:g} V {vl:g} | alpha K {ak:g} V {av:g} | {size:.3f} | {kl:.2e} |", flush=True)
        rows.append({"k_levels": kl_, "v_levels": vl, "alpha_k": ak, "alpha_v": av,
                     "size_vs_fp16": float(size), "mean_kl": float(kl)})
elif mode == "layers":
    sens = {"K": [], "V": []}
    for l in range(L):
        for kind in "KV":
            sens[kind].append(mean_kl(15, 15, only=(l, kind))[0])
        print(f"layer {l}: K {sens['K'][-1]:.2e} V {sens['V'][-1]:.2e}", flush=True)
        rows.append({"layer": l, "k_kl": float(sens["K"][-1]), "v_kl": float(sens["V"][-1])})
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
        rows.append({"k_levels": k_levels, "v_levels": v_levels,
                     "bits_per_value": {name: float(bits / n) for name, bits in total.items()}})
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
        rows.append({"k_levels": k_levels, "v_levels": v_levels,
                     "bits_per_value": {name: float(b / n) for name, b in bits.items()}})
elif mode == "prerope":
    worst, scale = 0.0, 0.0
    for l in range(L):
        k = cache.key_cache[l][0]
        worst = max(worst, float((rope(unrope(k)) - k).abs().max()))
        scale = max(scale, float(k.abs().max()))
    print(f"RoPE round trip (unrope then rope) vs the cache's K: max |error| {worst:.2e} "
          f"(largest |K| {scale:.1f})", flush=True)
    print("| variant | K levels | V levels | size vs fp16 | K bits/value | K rel. sq. error "
          "| K logit error | attention-weighted | mean KL |", flush=True)
    for spec in specs:
        k_levels, v_levels, variant = spec.split("/")
        kl, size, kbpv, kerr, lerr, aerr = prerope_kl(float(k_levels), float(v_levels), variant)
        print(f"| {variant} | {k_levels} | {v_levels} | {size:.3f} | {kbpv:.2f} | {kerr:.2e} "
              f"| {lerr:.2e} | {aerr:.2e} | {kl:.2e} |", flush=True)
        rows.append({"variant": variant, "k_levels": float(k_levels), "v_levels": float(v_levels),
                     "size_vs_fp16": float(size), "k_bits_per_value": float(kbpv),
                     "k_rel_sq_error": float(kerr), "k_logit_error": float(lerr),
                     "attention_weighted_error": float(aerr), "mean_kl": float(kl)})
else:
    sys.exit("mode: rd | layers | entropy | transform | prerope")

if os.environ.get("STUDY_JSON"):
    results.write(os.environ["STUDY_JSON"], results.header("ac_allocation_study"), rows, mode=mode,
                  prompt=os.environ.get("STUDY_TEXT") or "kvcache_bench's synthetic ids")
    print(f"result file: {os.environ['STUDY_JSON']}")
