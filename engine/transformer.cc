#include "engine/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvcast {

struct Transformer::Layer {
  std::unique_ptr<DeviceBuffer> input_norm, qkv, qkv_bias, o, post_norm, gate_up, down;
};

namespace {

WeightType ToWeightType(DType d) {
  switch (d) {
    case DType::kF16: return WeightType::kF16;
    case DType::kBF16: return WeightType::kBF16;
    default: return WeightType::kF32;
  }
}

// Loads tensors that are stacked along rows into one weight (q|k|v, gate|up),
// hashing every tensor into the fingerprint.
class WeightLoader {
 public:
  WeightLoader(const Checkpoint& ckpt, Backend* backend, Hasher128* hasher)
      : ckpt_(ckpt), backend_(backend), hasher_(hasher) {}

  absl::StatusOr<std::unique_ptr<DeviceBuffer>> Load(
      const std::vector<std::pair<std::string, std::vector<int64_t>>>& parts) {
    std::string bytes;
    DType dtype = DType::kF32;
    size_t count = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      ASSIGN_OR_RETURN(TensorView t, ckpt_.Get(parts[i].first, parts[i].second));
      if (i > 0 && t.dtype != dtype) {
        return absl::InvalidArgumentError(absl::StrCat(
            t.file, ": tensor '", t.name, "' is ", std::string(DTypeName(t.dtype)), " but '",
            parts[0].first, "' is ", std::string(DTypeName(dtype)), "; fused weights need one dtype"));
      }
      dtype = t.dtype;
      hasher_->Update(t.name);
      hasher_->Update(DTypeName(t.dtype));
      hasher_->Update(t.shape.data(), t.shape.size() * sizeof(int64_t));
      hasher_->Update(t.data, t.nbytes);
      count += size_t(t.numel());
      if (parts.size() == 1) {
        return backend_->LoadWeight(ToWeightType(dtype), t.data, count);
      }
      bytes.append(static_cast<const char*>(t.data), t.nbytes);
    }
    return backend_->LoadWeight(ToWeightType(dtype), bytes.data(), count);
  }

  absl::StatusOr<std::unique_ptr<DeviceBuffer>> Load(const std::string& name,
                                                     std::vector<int64_t> shape) {
    return Load({{name, std::move(shape)}});
  }

 private:
  const Checkpoint& ckpt_;
  Backend* backend_;
  Hasher128* hasher_;
};

}  // namespace

std::vector<float> RopeInverseFrequencies(const ModelConfig& c) {
  const int half = c.head_dim / 2;
  std::vector<float> inv(half);
  for (int i = 0; i < half; ++i) {
    double freq = 1.0 / std::pow(c.rope_theta, double(2 * i) / c.head_dim);
    if (c.rope_scaling.has_value()) {
      const RopeScaling& s = *c.rope_scaling;
      const double old_len = s.original_max_position_embeddings;
      const double low_wavelen = old_len / s.low_freq_factor;
      const double high_wavelen = old_len / s.high_freq_factor;
      const double wavelen = 2 * M_PI / freq;
      if (wavelen > low_wavelen) {
        freq /= s.factor;
      } else if (wavelen >= high_wavelen) {
        double smooth = (old_len / wavelen - s.low_freq_factor) /
                        (s.high_freq_factor - s.low_freq_factor);
        freq = (1 - smooth) * freq / s.factor + smooth * freq;
      }
    }
    inv[i] = float(freq);
  }
  return inv;
}

Transformer::Transformer(const ModelConfig& config, Backend* backend)
    : config_(config), backend_(backend) {}

Transformer::~Transformer() = default;

absl::StatusOr<std::unique_ptr<Transformer>> Transformer::Load(
    const Checkpoint& checkpoint, Backend* backend) {
  std::unique_ptr<Transformer> t(new Transformer(checkpoint.config(), backend));
  RETURN_IF_ERROR(t->LoadWeights(checkpoint));
  return t;
}

absl::Status Transformer::LoadWeights(const Checkpoint& ckpt) {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size, v = c.vocab_size, inter = c.intermediate_size;
  const int64_t q_dim = int64_t(c.num_attention_heads) * c.head_dim;
  const int64_t kv_dim = int64_t(c.num_key_value_heads) * c.head_dim;
  Hasher128 hasher;
  hasher.Update(c.ToJson());
  WeightLoader w(ckpt, backend_, &hasher);
  ASSIGN_OR_RETURN(embed_, w.Load("model.embed_tokens.weight", {v, h}));
  ASSIGN_OR_RETURN(final_norm_, w.Load("model.norm.weight", {h}));
  if (!c.tie_word_embeddings) {
    ASSIGN_OR_RETURN(lm_head_, w.Load("lm_head.weight", {v, h}));
  }
  layers_.resize(c.num_hidden_layers);
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    Layer& L = layers_[i];
    ASSIGN_OR_RETURN(L.input_norm, w.Load(p + "input_layernorm.weight", {h}));
    ASSIGN_OR_RETURN(L.post_norm, w.Load(p + "post_attention_layernorm.weight", {h}));
    ASSIGN_OR_RETURN(L.qkv, w.Load({{p + "self_attn.q_proj.weight", {q_dim, h}},
                                    {p + "self_attn.k_proj.weight", {kv_dim, h}},
                                    {p + "self_attn.v_proj.weight", {kv_dim, h}}}));
    if (c.attention_bias) {
      ASSIGN_OR_RETURN(L.qkv_bias, w.Load({{p + "self_attn.q_proj.bias", {q_dim}},
                                           {p + "self_attn.k_proj.bias", {kv_dim}},
                                           {p + "self_attn.v_proj.bias", {kv_dim}}}));
    }
    ASSIGN_OR_RETURN(L.o, w.Load(p + "self_attn.o_proj.weight", {h, q_dim}));
    ASSIGN_OR_RETURN(L.gate_up, w.Load({{p + "mlp.gate_proj.weight", {inter, h}},
                                        {p + "mlp.up_proj.weight", {inter, h}}}));
    ASSIGN_OR_RETURN(L.down, w.Load(p + "mlp.down_proj.weight", {h, inter}));
  }
  fingerprint_ = hasher.Digest();
  const std::vector<float> inv_freq = RopeInverseFrequencies(c);
  ASSIGN_OR_RETURN(inv_freq_, backend_->Allocate(inv_freq.size() * sizeof(float)));
  backend_->CopyToDevice(inv_freq_->data(), inv_freq.data(), inv_freq.size() * sizeof(float));
  return absl::OkStatus();
}

KvLayout Transformer::kv_layout(int page_tokens) const {
  return KvLayout{config_.num_hidden_layers, config_.num_key_value_heads,
                  config_.head_dim, page_tokens};
}

int Transformer::max_sequence_len() const {
  int n = config_.max_position_embeddings;
  // Attention here is full causal; a sliding window only matters beyond it.
  if (config_.sliding_window.has_value() && *config_.sliding_window > 0) {
    n = std::min(n, *config_.sliding_window);
  }
  return n;
}

absl::Status Transformer::Forward(absl::Span<const ForwardItem> items,
                                  KvPagePool* pool, bool all_logits,
                                  std::vector<float>* logits) {
  const ModelConfig& c = config_;
  const int page_tokens = pool->layout().page_tokens;
  // Host-side batch description.
  std::vector<int32_t> ids, positions, slots, last_rows, tables;
  std::vector<AttentionSeq> seqs(items.size());
  std::vector<size_t> table_offsets;
  for (size_t b = 0; b < items.size(); ++b) {
    const ForwardItem& it = items[b];
    const int n = int(it.tokens.size());
    const int end = it.start_pos + n;
    if (n == 0) return absl::InvalidArgumentError("forward: item with no tokens");
    if (end > max_sequence_len()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "forward: sequence of ", end, " tokens exceeds the model's limit of ",
          max_sequence_len()));
    }
    if (size_t(end + page_tokens - 1) / page_tokens > it.page_table.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "forward: page table of ", it.page_table.size(), " pages cannot hold ",
          end, " tokens"));
    }
    for (int32_t p : it.page_table) {
      if (p < 0 || p >= pool->num_pages()) {
        return absl::InvalidArgumentError(absl::StrCat("forward: no page ", p));
      }
    }
    seqs[b] = AttentionSeq{int(ids.size()), n, end, nullptr};
    table_offsets.push_back(tables.size());
    tables.insert(tables.end(), it.page_table.begin(), it.page_table.end());
    for (int j = 0; j < n; ++j) {
      int32_t tok = it.tokens[j];
      if (tok < 0 || tok >= c.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "forward: token id ", tok, " outside the vocabulary of ", c.vocab_size));
      }
      const int pos = it.start_pos + j;
      ids.push_back(tok);
      positions.push_back(pos);
      slots.push_back(it.page_table[pos / page_tokens] * page_tokens + pos % page_tokens);
    }
    last_rows.push_back(int32_t(ids.size()) - 1);
  }
  const int T = int(ids.size());
  const int H = c.hidden_size, I = c.intermediate_size, hd = c.head_dim;
  const int nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const int qkv_dim = (nh + 2 * nkv) * hd;
  const int R = all_logits ? T : int(items.size());

  // Device copies of the batch description and the activations.
  const size_t i32 = sizeof(int32_t), f32 = sizeof(float);
  ASSIGN_OR_RETURN(auto d_ids, backend_->Allocate(T * i32));
  ASSIGN_OR_RETURN(auto d_pos, backend_->Allocate(T * i32));
  ASSIGN_OR_RETURN(auto d_slots, backend_->Allocate(T * i32));
  ASSIGN_OR_RETURN(auto d_rows, backend_->Allocate(last_rows.size() * i32));
  ASSIGN_OR_RETURN(auto d_tables, backend_->Allocate(tables.size() * i32));
  ASSIGN_OR_RETURN(auto x, backend_->Allocate(size_t(T) * H * f32));
  ASSIGN_OR_RETURN(auto hbuf, backend_->Allocate(size_t(T) * H * f32));
  ASSIGN_OR_RETURN(auto qkv, backend_->Allocate(size_t(T) * qkv_dim * f32));
  ASSIGN_OR_RETURN(auto attn, backend_->Allocate(size_t(T) * nh * hd * f32));
  ASSIGN_OR_RETURN(auto gate_up, backend_->Allocate(size_t(T) * 2 * I * f32));
  ASSIGN_OR_RETURN(auto act, backend_->Allocate(size_t(T) * I * f32));
  ASSIGN_OR_RETURN(auto out, backend_->Allocate(size_t(R) * c.vocab_size * f32));
  backend_->CopyToDevice(d_ids->data(), ids.data(), T * i32);
  backend_->CopyToDevice(d_pos->data(), positions.data(), T * i32);
  backend_->CopyToDevice(d_slots->data(), slots.data(), T * i32);
  backend_->CopyToDevice(d_rows->data(), last_rows.data(), last_rows.size() * i32);
  backend_->CopyToDevice(d_tables->data(), tables.data(), tables.size() * i32);
  const auto* dev_tables = static_cast<const int32_t*>(d_tables->data());
  for (size_t b = 0; b < items.size(); ++b) seqs[b].page_table = dev_tables + table_offsets[b];
  const auto* dev_ids = static_cast<const int32_t*>(d_ids->data());
  const auto* dev_pos = static_cast<const int32_t*>(d_pos->data());
  const auto* dev_slots = static_cast<const int32_t*>(d_slots->data());

  const AttentionShape shape{nh, nkv, hd, page_tokens, 1.f / std::sqrt(float(hd))};
  const float eps = float(c.rms_norm_eps);
  backend_->Embedding(dev_ids, T, embed_->f32(), H, x->f32());
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    Layer& L = layers_[l];
    float* q = qkv->f32();
    float* k = q + nh * hd;
    float* v = k + nkv * hd;
    backend_->RmsNorm(x->f32(), L.input_norm->f32(), T, H, eps, hbuf->f32());
    backend_->Linear(hbuf->f32(), T, H, L.qkv->f32(), qkv_dim,
                     L.qkv_bias ? L.qkv_bias->f32() : nullptr, q);
    backend_->Rope(q, T, qkv_dim, nh, hd, dev_pos, inv_freq_->f32());
    backend_->Rope(k, T, qkv_dim, nkv, hd, dev_pos, inv_freq_->f32());
    backend_->WriteKv(k, v, T, qkv_dim, dev_slots, nkv, hd, pool->k_cache(l),
                      pool->v_cache(l));
    backend_->PagedAttention(q, qkv_dim, seqs.data(), int(seqs.size()), shape,
                             pool->k_cache(l), pool->v_cache(l), attn->f32());
    backend_->Linear(attn->f32(), T, nh * hd, L.o->f32(), H, nullptr, hbuf->f32());
    backend_->Add(x->f32(), hbuf->f32(), size_t(T) * H);
    backend_->RmsNorm(x->f32(), L.post_norm->f32(), T, H, eps, hbuf->f32());
    backend_->Linear(hbuf->f32(), T, H, L.gate_up->f32(), 2 * I, nullptr, gate_up->f32());
    backend_->SwiGlu(gate_up->f32(), T, I, act->f32());
    backend_->Linear(act->f32(), T, I, L.down->f32(), H, nullptr, hbuf->f32());
    backend_->Add(x->f32(), hbuf->f32(), size_t(T) * H);
  }
  const float* final_rows = x->f32();
  if (!all_logits) {
    // Gather each item's last row (an embedding lookup into x).
    backend_->Embedding(static_cast<const int32_t*>(d_rows->data()), R, x->f32(), H,
                        hbuf->f32());
    final_rows = hbuf->f32();
  }
  backend_->RmsNorm(final_rows, final_norm_->f32(), R, H, eps, hbuf->f32());
  const float* head = lm_head_ ? lm_head_->f32() : embed_->f32();
  backend_->Linear(hbuf->f32(), R, H, head, c.vocab_size, nullptr, out->f32());
  logits->resize(size_t(R) * c.vocab_size);
  backend_->CopyToHost(logits->data(), out->data(), logits->size() * f32);
  backend_->Synchronize();
  return absl::OkStatus();
}

}  // namespace kvcast
