#include "engine/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvcast {

struct Transformer::Layer {
  Weight input_norm, qkv, qkv_bias, o, post_norm, gate_up, down;
};

// Activations and the batch description on the backend, kept across
// Forward() calls and grown (never shrunk) to the largest batch seen, so a
// steady decode loop allocates nothing.
struct Transformer::Workspace {
  int tokens = 0, rows = 0, items = 0;
  size_t table_entries = 0;
  std::unique_ptr<DeviceBuffer> ids, positions, slots, last_rows, tables;
  std::unique_ptr<DeviceBuffer> x, h, qkv, attn, gate_up, act, final_rows, logits;
};

namespace {

WeightType ToWeightType(DType d) {
  switch (d) {
    case DType::kF16: return WeightType::kF16;
    case DType::kBF16: return WeightType::kBF16;
    default: return WeightType::kF32;
  }
}

// The backend type of a GGUF tensor kept as blocks.
std::optional<WeightType> BlockWeightType(const TensorView& t) {
  if (t.gguf_blocks == GgmlType::kQ4_0) return WeightType::kQ4_0Blocks;
  if (t.gguf_blocks == GgmlType::kQ4_1) return WeightType::kQ4_1Blocks;
  if (t.gguf_blocks == GgmlType::kQ4_K) return WeightType::kQ4_KBlocks;
  if (t.gguf_blocks == GgmlType::kQ5_K) return WeightType::kQ5_KBlocks;
  if (t.gguf_blocks == GgmlType::kQ5_0) return WeightType::kQ5_0Blocks;
  if (t.gguf_blocks == GgmlType::kQ5_1) return WeightType::kQ5_1Blocks;
  if (t.gguf_blocks == GgmlType::kQ6_K) return WeightType::kQ6_KBlocks;
  if (t.gguf_blocks == GgmlType::kQ8_0) return WeightType::kQ8_0Blocks;
  return std::nullopt;
}

// Loads tensors that are stacked along rows into one weight (q|k|v, gate|up),
// hashing every tensor into the fingerprint. GGUF blocks go to the backend
// as they are when it takes them and every part has the same block type;
// otherwise they are widened to float32 here.
class WeightLoader {
  static WeightKind KindOf(const std::vector<int64_t>& shape) {
    return shape.size() == 1 ? WeightKind::kVector : WeightKind::kMatrix;
  }
  static WeightKind KindOf(const TensorView& t) { return KindOf(t.shape); }

 public:
  WeightLoader(const Checkpoint& ckpt, Backend* backend, Hasher128* hasher)
      : ckpt_(ckpt), backend_(backend), hasher_(hasher) {}

  absl::StatusOr<Weight> Load(
      const std::vector<std::pair<std::string, std::vector<int64_t>>>& parts) {
    absl::StatusOr<Weight> w = LoadParts(parts);
    if (w.ok()) bytes_ += w->bytes();
    return w;
  }

  absl::StatusOr<Weight> Load(const std::string& name, std::vector<int64_t> shape) {
    return Load({{name, std::move(shape)}});
  }

  // Bytes of the weights loaded so far, on the backend.
  size_t bytes() const { return bytes_; }

 private:
  absl::StatusOr<Weight> LoadParts(
      const std::vector<std::pair<std::string, std::vector<int64_t>>>& parts) {
    std::vector<TensorView> views;
    for (const auto& [name, shape] : parts) {
      ASSIGN_OR_RETURN(TensorView t, ckpt_.Get(name, shape));
      if (!views.empty() && t.dtype != views[0].dtype) {
        return absl::InvalidArgumentError(absl::StrCat(
            t.file, ": tensor '", t.name, "' is ", std::string(DTypeName(t.dtype)), " but '",
            parts[0].first, "' is ", std::string(DTypeName(views[0].dtype)),
            "; fused weights need one dtype"));
      }
      hasher_->Update(t.name);
      hasher_->Update(t.gguf_blocks ? GgmlTypeName(uint32_t(*t.gguf_blocks))
                                    : std::string(DTypeName(t.dtype)));
      hasher_->Update(t.shape.data(), t.shape.size() * sizeof(int64_t));
      hasher_->Update(t.data, t.nbytes);
      views.push_back(std::move(t));
    }
    std::optional<WeightType> blocks = BlockWeightType(views[0]);
    for (const TensorView& t : views) {
      if (BlockWeightType(t) != blocks) blocks.reset();
    }
    // Parts stack along rows (q|k|v, gate|up); a vector is one row.
    const WeightKind kind = KindOf(views[0]);
    if (blocks && (kind == WeightKind::kVector || !backend_->TakesWeightType(*blocks))) {
      blocks.reset();  // widened below: vectors are always float32
    }
    const WeightType type = blocks ? *blocks : ToWeightType(views[0].dtype);
    size_t count = 0;
    for (const TensorView& t : views) count += size_t(t.numel());
    const size_t cols = kind == WeightKind::kVector ? count : size_t(views[0].shape[1]);
    std::string bytes;
    for (const TensorView& t : views) {
      if (t.gguf_blocks && !blocks) {
        std::string widened(size_t(t.numel()) * sizeof(float), '\0');
        ConvertToFloat(t, reinterpret_cast<float*>(widened.data()));
        if (views.size() == 1) {
          return backend_->LoadWeight(type, kind, widened.data(), count / cols, cols);
        }
        bytes += widened;
      } else if (views.size() == 1) {
        return backend_->LoadWeight(type, kind, t.data, count / cols, cols);
      } else {
        bytes.append(static_cast<const char*>(t.data), t.nbytes);
      }
    }
    return backend_->LoadWeight(type, kind, bytes.data(), count / cols, cols);
  }

  const Checkpoint& ckpt_;
  Backend* backend_;
  Hasher128* hasher_;
  size_t bytes_ = 0;
};

}  // namespace

std::vector<float> RopeInverseFrequencies(const ModelConfig& c) {
  const int half = c.head_dim / 2;
  std::vector<float> inv(half);
  for (int i = 0; i < half; ++i) {
    double freq = 1.0 / std::pow(c.rope_theta, double(2 * i) / c.head_dim);
    if (c.rope_scaling.has_value() && c.rope_scaling->rope_type == "linear") {
      freq /= c.rope_scaling->factor;
    } else if (c.rope_scaling.has_value()) {
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
    if (!c.rope_freq_factors.empty()) freq /= c.rope_freq_factors[i];
    inv[i] = float(freq);
  }
  return inv;
}

Transformer::Transformer(const ModelConfig& config, Backend* backend)
    : config_(config), backend_(backend), ws_(std::make_unique<Workspace>()) {}

Transformer::~Transformer() = default;

absl::StatusOr<std::unique_ptr<Transformer>> Transformer::Load(
    const Checkpoint& checkpoint, Backend* backend) {
  const ModelConfig& c = checkpoint.config();
  // Before any weight moves: a shape the backend's attention cannot run.
  if (absl::Status s = backend->SupportsAttention(c.num_attention_heads, c.num_key_value_heads,
                                                  c.head_dim);
      !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(checkpoint.dir(), ": ", c.architecture, " model: ", s.message()));
  }
  std::unique_ptr<Transformer> t(new Transformer(c, backend));
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
  hasher.Update(c.rope_freq_factors.data(), c.rope_freq_factors.size() * sizeof(float));
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
  weight_bytes_ = w.bytes();
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
  ASSIGN_OR_RETURN(const float* dev_logits, ForwardLogits(items, pool, all_logits));
  size_t rows = items.size();
  for (const ForwardItem& it : items) {
    if (all_logits || it.every_logit) rows += it.tokens.size() - 1;
  }
  logits->resize(rows * config_.vocab_size);
  backend_->CopyToHost(logits->data(), dev_logits, logits->size() * sizeof(float));
  return backend_->Synchronize();
}

absl::StatusOr<const float*> Transformer::ForwardLogits(absl::Span<const ForwardItem> items,
                                                        KvPagePool* pool, bool all_logits) {
  const ModelConfig& c = config_;
  const int page_tokens = pool->layout().page_tokens;
  // Host-side batch description.
  std::vector<int32_t> ids, positions, slots, last_rows, other_rows, tables;
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
    if (it.every_logit) {
      for (int j = 0; j + 1 < n; ++j) other_rows.push_back(int32_t(ids.size()) - n + j);
    }
  }
  last_rows.insert(last_rows.end(), other_rows.begin(), other_rows.end());
  const int T = int(ids.size());
  const int H = c.hidden_size, I = c.intermediate_size, hd = c.head_dim;
  const int nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const int qkv_dim = (nh + 2 * nkv) * hd;
  const int R = all_logits ? T : int(last_rows.size());

  RETURN_IF_ERROR(Reserve(T, R, int(items.size()), tables.size()));
  Workspace& w = *ws_;
  const size_t i32 = sizeof(int32_t);
  backend_->CopyToDevice(w.ids->data(), ids.data(), T * i32);
  backend_->CopyToDevice(w.positions->data(), positions.data(), T * i32);
  backend_->CopyToDevice(w.slots->data(), slots.data(), T * i32);
  backend_->CopyToDevice(w.last_rows->data(), last_rows.data(), last_rows.size() * i32);
  backend_->CopyToDevice(w.tables->data(), tables.data(), tables.size() * i32);
  const auto* dev_tables = static_cast<const int32_t*>(w.tables->data());
  for (size_t b = 0; b < items.size(); ++b) seqs[b].page_table = dev_tables + table_offsets[b];
  const auto* dev_pos = static_cast<const int32_t*>(w.positions->data());
  const auto* dev_slots = static_cast<const int32_t*>(w.slots->data());
  float* const x = w.x->f32();
  float* const h = w.h->f32();

  const AttentionShape shape{nh, nkv, hd, page_tokens, 1.f / std::sqrt(float(hd)),
                             pool->layout().storage};
  const float eps = float(c.rms_norm_eps);
  backend_->Embedding(static_cast<const int32_t*>(w.ids->data()), T, embed_, H, x);
  backend_->RmsNorm(x, layers_[0].input_norm.f32(), T, H, eps, h);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    Layer& L = layers_[l];
    // h holds this layer's normed input; each residual add is fused with the
    // norm after it (the next layer's input norm, or the final norm).
    const float* next_norm =
        l + 1 < c.num_hidden_layers ? layers_[l + 1].input_norm.f32() : final_norm_.f32();
    float* q = w.qkv->f32();
    float* k = q + nh * hd;
    float* v = k + nkv * hd;
    backend_->Linear(h, T, H, L.qkv, qkv_dim, L.qkv_bias ? L.qkv_bias.f32() : nullptr, q);
    backend_->Rope(q, T, qkv_dim, nh, hd, dev_pos, inv_freq_->f32());
    backend_->Rope(k, T, qkv_dim, nkv, hd, dev_pos, inv_freq_->f32());
    backend_->WriteKv(k, v, T, qkv_dim, dev_slots, nkv, hd, shape.storage, pool->k_pages(l),
                      pool->v_pages(l));
    backend_->PagedAttention(q, qkv_dim, seqs.data(), int(seqs.size()), shape, pool->k_pages(l),
                             pool->v_pages(l), w.attn->f32());
    backend_->Linear(w.attn->f32(), T, nh * hd, L.o, H, nullptr, h);
    backend_->AddRmsNorm(x, h, L.post_norm.f32(), T, H, eps, h);
    backend_->Linear(h, T, H, L.gate_up, 2 * I, nullptr, w.gate_up->f32());
    backend_->SwiGlu(w.gate_up->f32(), T, I, w.act->f32());
    backend_->Linear(w.act->f32(), T, I, L.down, H, nullptr, h);
    backend_->AddRmsNorm(x, h, next_norm, T, H, eps, h);
    layers_run_.fetch_add(1, std::memory_order_relaxed);
  }
  const float* final_rows = h;
  if (!all_logits) {
    backend_->GatherRows(h, static_cast<const int32_t*>(w.last_rows->data()), R, H,
                         w.final_rows->f32());
    final_rows = w.final_rows->f32();
  }
  backend_->Linear(final_rows, R, H, lm_head_ ? lm_head_ : embed_, c.vocab_size, nullptr,
                   w.logits->f32());
  return w.logits->f32();
}

absl::Status PrefillInChunks(Transformer& model, absl::Span<const int32_t> tokens,
                             absl::Span<const int32_t> page_table, int chunk_tokens,
                             KvPagePool* pool, std::vector<float>* logits) {
  if (chunk_tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("prefill: chunk of ", chunk_tokens, " tokens"));
  }
  const int n = int(tokens.size());
  for (int start = 0; start < n; start += chunk_tokens) {
    ForwardItem item{tokens.subspan(start, std::min(chunk_tokens, n - start)), start, page_table};
    RETURN_IF_ERROR(model.Forward({&item, 1}, pool, /*all_logits=*/false, logits));
  }
  return absl::OkStatus();
}

absl::Status Transformer::Reserve(int tokens, int rows, int items, size_t table_entries) {
  Workspace& w = *ws_;
  if (tokens <= w.tokens && rows <= w.rows && items <= w.items &&
      table_entries <= w.table_entries) {
    return absl::OkStatus();
  }
  const ModelConfig& c = config_;
  // Grow to the next power of two so a growing batch reallocates rarely.
  auto grow = [](size_t have, size_t want) {
    size_t n = std::max<size_t>(have, 1);
    while (n < want) n *= 2;
    return n;
  };
  const size_t T = grow(w.tokens, tokens), R = grow(w.rows, rows), B = grow(w.items, items);
  const size_t P = grow(w.table_entries, table_entries);
  const size_t f32 = sizeof(float), i32 = sizeof(int32_t);
  const size_t qkv_dim = size_t(c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim;
  w = Workspace{};  // frees the old buffers first
  ASSIGN_OR_RETURN(w.ids, backend_->Allocate(T * i32));
  ASSIGN_OR_RETURN(w.positions, backend_->Allocate(T * i32));
  ASSIGN_OR_RETURN(w.slots, backend_->Allocate(T * i32));
  ASSIGN_OR_RETURN(w.last_rows, backend_->Allocate(std::max(B, R) * i32));
  ASSIGN_OR_RETURN(w.tables, backend_->Allocate(P * i32));
  ASSIGN_OR_RETURN(w.x, backend_->Allocate(T * c.hidden_size * f32));
  ASSIGN_OR_RETURN(w.h, backend_->Allocate(T * c.hidden_size * f32));
  ASSIGN_OR_RETURN(w.qkv, backend_->Allocate(T * qkv_dim * f32));
  ASSIGN_OR_RETURN(w.attn, backend_->Allocate(T * c.num_attention_heads * c.head_dim * f32));
  ASSIGN_OR_RETURN(w.gate_up, backend_->Allocate(T * 2 * c.intermediate_size * f32));
  ASSIGN_OR_RETURN(w.act, backend_->Allocate(T * c.intermediate_size * f32));
  ASSIGN_OR_RETURN(w.final_rows, backend_->Allocate(std::max(B, R) * c.hidden_size * f32));
  ASSIGN_OR_RETURN(w.logits, backend_->Allocate(R * c.vocab_size * f32));
  w.tokens = int(T);
  w.rows = int(R);
  w.items = int(B);
  w.table_entries = P;
  return absl::OkStatus();
}

}  // namespace kvcast
