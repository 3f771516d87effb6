// How much a coding error in each K channel moves the attention scores: an
// error e in channel c of a key moves its score with a query q by q_c e,
// and how large the channel's keys are sets its share of a rotated head's
// step: the channel's weight comes from both energies (ac_tuning.h,
// FitKChannelWeights). A backend that passes everything to its inner one
// and, while measuring, adds up the squared query values PagedAttention is
// given and the squared key values WriteKv is given (after RoPE, as they
// meet), per layer, KV head and channel.
//
// Thread safety: none; the model's thread uses it.
#ifndef KVCAST_TOOLS_KVQUALITY_QUERY_ENERGY_H_
#define KVCAST_TOOLS_KVQUALITY_QUERY_ENERGY_H_

#include <vector>

#include "engine/kv/kv_page_pool.h"
#include "kernels/forwarding_backend.h"

namespace kvcast::kvquality {

class QueryEnergyBackend : public ForwardingBackend {
 public:
  explicit QueryEnergyBackend(Backend* inner) : ForwardingBackend(inner) {}

  // From now on, attention over `pool`'s layers adds its queries up (null:
  // stops).
  void Measure(const KvPagePool* pool);
  // Per layer, KV head and channel (layers x kv heads x head_dim): the mean
  // over the queries seen of the squared value, summed over the KV head's
  // query heads; and over the keys written, of theirs. Empty before any was
  // seen.
  std::vector<double> MeanEnergy() const;
  std::vector<double> MeanKeyEnergy() const;

  void PagedAttention(const float* q, int q_stride, const AttentionSeq* seqs, int num_seqs,
                      const AttentionShape& shape, const void* k_cache, const void* v_cache,
                      float* out) override;
  void WriteKv(const float* k, const float* v, int num_tokens, int stride, const int32_t* slots,
               int num_kv_heads, int head_dim, KvStorage storage, void* k_cache,
               void* v_cache) override;

 private:
  // The measured pool's layer of `k_cache`, or -1; sizes the sums.
  int LayerOf(const void* k_cache, int kv_heads, int head_dim);
  static std::vector<double> Mean(const std::vector<double>& sum, const std::vector<long>& count,
                                  size_t per_layer);

  const KvPagePool* pool_ = nullptr;
  int heads_ = 0, dim_ = 0;
  std::vector<double> sum_, key_sum_;   // layers x kv heads x head_dim
  std::vector<long> queries_, keys_;    // per layer
};

}  // namespace kvcast::kvquality

#endif  // KVCAST_TOOLS_KVQUALITY_QUERY_ENERGY_H_
