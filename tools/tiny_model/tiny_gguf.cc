#include "tools/tiny_model/tiny_gguf.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/model/checkpoint.h"
#include "common/dtype.h"
#include "engine/model/internal/file_util.h"
#include "engine/model/internal/gguf_writer.h"
#include "nlohmann/json.hpp"

namespace kvcast {
namespace {

using model_internal::GgufWriter;

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// ggml's Q8_0: per 32 values a half scale amax/127 and round(x * 127/amax).
std::string EncodeQ8_0(const std::vector<float>& v) {
  std::string out;
  for (size_t b = 0; b < v.size(); b += 32) {
    float amax = 0;
    for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(v[i]));
    const float d = amax / 127.0f, inv = d != 0 ? 1.0f / d : 0.0f;
    const uint16_t half = FloatToHalf(d);
    out.append(reinterpret_cast<const char*>(&half), 2);
    for (size_t i = b; i < b + 32; ++i) out.push_back(char(int8_t(std::round(v[i] * inv))));
  }
  return out;
}

// ggml's Q4_0 (x = d * (q - 8); d = the signed value of largest magnitude
// / -8), Q4_1 (x = d * q + m; m = the minimum, d = range / 15) and their
// 5-bit forms Q5_0 (q - 16, / -16) and Q5_1 (range / 31), blocks of 32,
// value j < 16 in the low nibble of byte j and j + 16 in its high one; Q5
// keeps value j's fifth bit in bit j of 4 bytes before the nibbles.
std::string EncodeSmall(const std::vector<float>& v, GgmlType type) {
  const bool five = type == GgmlType::kQ5_0 || type == GgmlType::kQ5_1;
  const bool has_min = type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1;
  const int top = five ? 31 : 15, offset = five ? 16 : 8;
  std::string out;
  for (size_t b = 0; b < v.size(); b += 32) {
    float lo = v[b], hi = v[b], big = 0;
    for (size_t i = b; i < b + 32; ++i) {
      lo = std::min(lo, v[i]);
      hi = std::max(hi, v[i]);
      if (std::fabs(v[i]) > std::fabs(big)) big = v[i];
    }
    const float d = has_min ? (hi - lo) / float(top) : big / -float(offset);
    const float m = has_min ? lo : 0.0f, inv = d != 0 ? 1.0f / d : 0.0f;
    const uint16_t hd = FloatToHalf(d), hm = FloatToHalf(m);
    out.append(reinterpret_cast<const char*>(&hd), 2);
    if (has_min) out.append(reinterpret_cast<const char*>(&hm), 2);
    uint8_t q[32];
    uint32_t qh = 0;
    for (int i = 0; i < 32; ++i) {
      const float x = has_min ? (v[b + i] - m) * inv + 0.5f : v[b + i] * inv + float(offset) + 0.5f;
      q[i] = uint8_t(std::min(top, std::max(0, int(x))));
      qh |= uint32_t(q[i] >> 4) << i;
    }
    if (five) out.append(reinterpret_cast<const char*>(&qh), 4);
    for (int i = 0; i < 16; ++i) out.push_back(char((q[i] & 15) | (q[i + 16] & 15) << 4));
  }
  return out;
}

// ggml's Q6_K: per 256 values 16 sub-blocks of 16 with an int8 scale sc
// (the sub-block's value of largest magnitude / -32, in steps of d = the
// largest such scale / -128), x = (d * sc) * (q - 32), q of 6 bits; the low
// four bits of value v in byte 64 (v / 128) + v % 32 + 32 ((v / 32) % 2) of
// ql[128] (low nibble for (v / 32) % 4 < 2), its top two at bit
// 2 ((v / 32) % 4) of byte 32 (v / 128) + v % 32 of qh[64]; then the 16
// scales and fp16 d.
std::string EncodeQ6_K(const std::vector<float>& v) {
  std::string out;
  for (size_t b = 0; b < v.size(); b += 256) {
    float scale[16], big_scale = 0;
    for (int j = 0; j < 16; ++j) {
      float big = 0;
      for (int i = 0; i < 16; ++i) {
        if (std::fabs(v[b + 16 * j + i]) > std::fabs(big)) big = v[b + 16 * j + i];
      }
      scale[j] = big / -32.0f;
      if (std::fabs(scale[j]) > std::fabs(big_scale)) big_scale = scale[j];
    }
    const float d = HalfToFloat(FloatToHalf(big_scale / -128.0f));
    int8_t sc[16];
    uint8_t ql[128] = {}, qh[64] = {};
    for (int j = 0; j < 16; ++j) {
      sc[j] = int8_t(d != 0 ? std::max(-128, std::min(127, int(std::lround(scale[j] / d)))) : 0);
      const float step = d * float(sc[j]);
      for (int i = 0; i < 16; ++i) {
        const int vi = 16 * j + i, quarter = (vi / 32) % 4;
        const int q =
            step != 0 ? std::max(-32, std::min(31, int(std::lround(v[b + vi] / step)))) + 32 : 32;
        ql[64 * (vi / 128) + vi % 32 + 32 * (quarter % 2)] |=
            uint8_t(quarter < 2 ? q & 15 : (q & 15) << 4);
        qh[32 * (vi / 128) + vi % 32] |= uint8_t((q >> 4) << (2 * quarter));
      }
    }
    out.append(reinterpret_cast<const char*>(ql), 128);
    out.append(reinterpret_cast<const char*>(qh), 64);
    out.append(reinterpret_cast<const char*>(sc), 16);
    const uint16_t hd = FloatToHalf(d);
    out.append(reinterpret_cast<const char*>(&hd), 2);
  }
  return out;
}

// ggml's Q4_K (`five` false) and Q5_K: per 256 values fp16 d and dmin, 8
// sub-blocks of 32 with a 6-bit scale s and min t packed in 12 bytes,
// x = (d * s) * q - dmin * t, q of 4 (or 5) bits; each sub-block spans
// [-(dmin * t), -(dmin * t) + 15 (31) * d * s] (its minimum clamped to
// <= 0, as ggml does). Q5_K keeps value e's fifth bit of sub-block j in bit j
// of byte e of 32 bytes before the nibbles.
std::string EncodeK(const std::vector<float>& v, bool five) {
  const float levels = five ? 31.0f : 15.0f;
  std::string out;
  for (size_t b = 0; b < v.size(); b += 256) {
    float scale[8], mins[8], dmax = 0, mmax = 0;
    for (int j = 0; j < 8; ++j) {
      float lo = 0, hi = v[b + 32 * j];
      for (int i = 0; i < 32; ++i) {
        lo = std::min(lo, v[b + 32 * j + i]);
        hi = std::max(hi, v[b + 32 * j + i]);
      }
      scale[j] = (hi - lo) / levels;
      mins[j] = -lo;
      dmax = std::max(dmax, scale[j]);
      mmax = std::max(mmax, mins[j]);
    }
    const float d = HalfToFloat(FloatToHalf(dmax / 63.0f));
    const float dmin = HalfToFloat(FloatToHalf(mmax / 63.0f));
    int sc[8], mn[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = d > 0 ? std::min(63, int(std::lround(scale[j] / d))) : 0;
      mn[j] = dmin > 0 ? std::min(63, int(std::lround(mins[j] / dmin))) : 0;
    }
    uint8_t packed[12];
    for (int j = 0; j < 4; ++j) {
      packed[j] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
      packed[j + 4] = uint8_t((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
      packed[j + 8] = uint8_t((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
    }
    const uint16_t hd = FloatToHalf(d), hm = FloatToHalf(dmin);
    out.append(reinterpret_cast<const char*>(&hd), 2);
    out.append(reinterpret_cast<const char*>(&hm), 2);
    out.append(reinterpret_cast<const char*>(packed), 12);
    uint8_t q[256];
    for (int j = 0; j < 8; ++j) {
      const float dj = d * float(sc[j]), mj = dmin * float(mn[j]);
      for (int i = 0; i < 32; ++i) {
        const float x = dj > 0 ? (v[b + 32 * j + i] + mj) / dj + 0.5f : 0.0f;
        q[32 * j + i] = uint8_t(std::min(int(levels), std::max(0, int(x))));
      }
    }
    if (five) {
      for (int e = 0; e < 32; ++e) {
        uint8_t bits = 0;
        for (int j = 0; j < 8; ++j) bits |= uint8_t((q[32 * j + e] >> 4) << j);
        out.push_back(char(bits));
      }
    }
    for (int pair = 0; pair < 4; ++pair) {
      for (int i = 0; i < 32; ++i) {
        out.push_back(char((q[64 * pair + i] & 15) | (q[64 * pair + 32 + i] & 15) << 4));
      }
    }
  }
  return out;
}

std::string EncodeMatrix(const std::vector<float>& v, GgmlType type) {
  switch (type) {
    case GgmlType::kQ8_0: return EncodeQ8_0(v);
    case GgmlType::kQ4_K: return EncodeK(v, false);
    case GgmlType::kQ5_K: return EncodeK(v, true);
    case GgmlType::kQ6_K: return EncodeQ6_K(v);
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1: return EncodeSmall(v, type);
    default: return Bytes(v);
  }
}

// HF row s*D/2 + i of a head becomes GGUF row 2i + s (llama.cpp's permute).
std::vector<float> PermuteRows(const std::vector<float>& w, int heads, int64_t cols) {
  const int64_t head_dim = int64_t(w.size()) / cols / heads, half = head_dim / 2;
  std::vector<float> out(w.size());
  for (int h = 0; h < heads; ++h) {
    for (int s = 0; s < 2; ++s) {
      for (int64_t i = 0; i < half; ++i) {
        std::memcpy(&out[(h * head_dim + 2 * i + s) * cols], &w[(h * head_dim + s * half + i) * cols],
                    cols * sizeof(float));
      }
    }
  }
  return out;
}

absl::Status AddTokenizer(const std::string& hf_dir, const ModelConfig& c, GgufWriter* w) {
  ASSIGN_OR_RETURN(std::string text,
                   model_internal::ReadFile(model_internal::JoinPath(hf_dir, "tokenizer.json")));
  const nlohmann::json tok = nlohmann::json::parse(text);
  std::vector<std::string> tokens(c.vocab_size);
  std::vector<int32_t> types(c.vocab_size, 1);
  for (const auto& [piece, id] : tok["model"]["vocab"].items()) tokens[id.get<int>()] = piece;
  for (const auto& added : tok["added_tokens"]) {
    tokens[added["id"].get<int>()] = added["content"];
    types[added["id"].get<int>()] = added["special"].get<bool>() ? 3 : 4;
  }
  std::vector<std::string> merges;
  for (const auto& m : tok["model"]["merges"]) merges.push_back(m);
  w->AddString("tokenizer.ggml.model", "gpt2");
  w->AddString("tokenizer.ggml.pre", "llama-bpe");
  w->AddStringArray("tokenizer.ggml.tokens", tokens);
  w->AddInt32Array("tokenizer.ggml.token_type", types);
  w->AddStringArray("tokenizer.ggml.merges", merges);
  w->AddUint32("tokenizer.ggml.bos_token_id", c.bos_token_id);
  w->AddUint32("tokenizer.ggml.eos_token_id", c.eos_token_ids.at(0));
  w->AddBool("tokenizer.ggml.add_bos_token", false);
  return absl::OkStatus();
}

}  // namespace

bool TinyGgufMatrixType(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K: return true;
    default: return false;
  }
}

absl::Status WriteTinyGguf(const TinyModelOptions& options, GgmlType matrix_type,
                           const std::string& path) {
  if (options.arch != "llama" && options.arch != "qwen2") {
    return absl::InvalidArgumentError(absl::StrCat("tiny GGUF: arch '", options.arch,
                                                   "' (llama or qwen2 only)"));
  }
  if (!TinyGgufMatrixType(matrix_type)) {
    return absl::InvalidArgumentError(
        "tiny GGUF: matrices are F32, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K or Q6_K");
  }
  const std::string hf_dir = path + ".hf";
  RETURN_IF_ERROR(WriteTinyModel(options, hf_dir));
  ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(hf_dir));
  const ModelConfig& c = ckpt->config();
  const std::string a = options.arch;
  GgufWriter w;
  w.AddString("general.architecture", a);
  w.AddString("general.name", "kvcast tiny " + a);
  w.AddUint32(a + ".block_count", c.num_hidden_layers);
  w.AddUint32(a + ".context_length", c.max_position_embeddings);
  w.AddUint32(a + ".embedding_length", c.hidden_size);
  w.AddUint32(a + ".feed_forward_length", c.intermediate_size);
  w.AddUint32(a + ".attention.head_count", c.num_attention_heads);
  w.AddUint32(a + ".attention.head_count_kv", c.num_key_value_heads);
  w.AddFloat32(a + ".rope.freq_base", float(c.rope_theta));
  w.AddFloat32(a + ".attention.layer_norm_rms_epsilon", float(c.rms_norm_eps));
  RETURN_IF_ERROR(AddTokenizer(hf_dir, c, &w));

  const int64_t H = c.hidden_size, V = c.vocab_size, I = c.intermediate_size;
  const int64_t qd = int64_t(c.num_attention_heads) * c.head_dim;
  const int64_t kvd = int64_t(c.num_key_value_heads) * c.head_dim;
  struct Entry {
    std::string hf, gguf;
    std::vector<int64_t> shape;  // HF order
    int permute_heads;           // > 0: llama.cpp's rotary row order
  };
  std::vector<Entry> entries = {{"model.embed_tokens.weight", "token_embd.weight", {V, H}, 0},
                                {"model.norm.weight", "output_norm.weight", {H}, 0}};
  if (!c.tie_word_embeddings) entries.push_back({"lm_head.weight", "output.weight", {V, H}, 0});
  const bool permute = a == "llama";
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string hf = absl::StrCat("model.layers.", l, "."), g = absl::StrCat("blk.", l, ".");
    const std::vector<Entry> layer = {
        {hf + "input_layernorm.weight", g + "attn_norm.weight", {H}, 0},
        {hf + "post_attention_layernorm.weight", g + "ffn_norm.weight", {H}, 0},
        {hf + "self_attn.q_proj.weight", g + "attn_q.weight", {qd, H},
         permute ? c.num_attention_heads : 0},
        {hf + "self_attn.k_proj.weight", g + "attn_k.weight", {kvd, H},
         permute ? c.num_key_value_heads : 0},
        {hf + "self_attn.v_proj.weight", g + "attn_v.weight", {kvd, H}, 0},
        {hf + "self_attn.o_proj.weight", g + "attn_output.weight", {H, qd}, 0},
        {hf + "self_attn.q_proj.bias", g + "attn_q.bias", {qd}, 0},
        {hf + "self_attn.k_proj.bias", g + "attn_k.bias", {kvd}, 0},
        {hf + "self_attn.v_proj.bias", g + "attn_v.bias", {kvd}, 0},
        {hf + "mlp.gate_proj.weight", g + "ffn_gate.weight", {I, H}, 0},
        {hf + "mlp.up_proj.weight", g + "ffn_up.weight", {I, H}, 0},
        {hf + "mlp.down_proj.weight", g + "ffn_down.weight", {H, I}, 0},
    };
    entries.insert(entries.end(), layer.begin(), layer.end());
  }
  for (const Entry& e : entries) {
    if (!ckpt->Has(e.hf)) continue;  // q/k/v biases exist for qwen2 only.
    ASSIGN_OR_RETURN(TensorView t, ckpt->Get(e.hf, e.shape));
    std::vector<float> values(size_t(t.numel()));
    ConvertToFloat(t, values.data());
    const bool matrix = e.shape.size() == 2;
    if (e.permute_heads > 0) values = PermuteRows(values, e.permute_heads, e.shape[1]);
    std::vector<int64_t> dims(e.shape.rbegin(), e.shape.rend());
    // Rows that do not fill the type's blocks stay F32 (llama.cpp's
    // quantizer falls back to another type there too).
    const int64_t block = matrix_type == GgmlType::kQ4_K || matrix_type == GgmlType::kQ5_K ||
                                  matrix_type == GgmlType::kQ6_K
                              ? 256
                              : 32;
    const GgmlType type = matrix && dims[0] % block == 0 ? matrix_type : GgmlType::kF32;
    w.AddTensor(e.gguf, uint32_t(type), dims, EncodeMatrix(values, type));
  }
  if (c.rope_scaling.has_value()) {
    // Llama-3.1 scaling as llama.cpp's converter stores it: one divisor per
    // rotary frequency.
    const RopeScaling& r = *c.rope_scaling;
    const double low_wavelen = r.original_max_position_embeddings / r.low_freq_factor;
    const double high_wavelen = r.original_max_position_embeddings / r.high_freq_factor;
    std::vector<float> factors;
    for (int i = 0; i < c.head_dim / 2; ++i) {
      const double freq = 1.0 / std::pow(c.rope_theta, double(2 * i) / c.head_dim);
      const double wavelen = 2 * M_PI / freq;
      double f = 1.0;
      if (wavelen > low_wavelen) {
        f = r.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (r.original_max_position_embeddings / wavelen - r.low_freq_factor) /
                              (r.high_freq_factor - r.low_freq_factor);
        f = 1 / ((1 - smooth) / r.factor + smooth);
      }
      factors.push_back(float(f));
    }
    w.AddTensor("rope_freqs.weight", uint32_t(GgmlType::kF32), {int64_t(factors.size())},
                Bytes(factors));
  }
  RETURN_IF_ERROR(model_internal::WriteFile(path, w.Build()));
  return absl::OkStatus();
}

}  // namespace kvcast
