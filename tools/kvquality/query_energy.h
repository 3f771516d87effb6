// How much a coding error in each K channel moves the attention scores: an
// error e in channel c of a key moves its score with a query q by q_c e, so
// the channel's weight is the energy of the queries that read it
// (ac_tuning.h, FitKChannelWeights). A backend that passes everything to
// its inner one and, while measuring, adds up the squared query values
// PagedAttention is given (after RoPE, as they meet the keys), per layer,
// KV head and channel.
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
  // query heads. Empty before any query was seen.
  std::vector<double> MeanEnergy() const;

  void PagedAttention(const float* q, int q_stride, const AttentionSeq* seqs, int num_seqs,
                      const AttentionShape& shape, const void* k_cache, const void* v_cache,
                      float* out) override;

 private:
  const KvPagePool* pool_ = nullptr;
  int heads_ = 0, dim_ = 0;
  std::vector<double> sum_;      // layers x kv heads x head_dim
  std::vector<long> queries_;    // per layer
};

}  // namespace kvcast::kvquality

#endif  // KVCAST_TOOLS_KVQUALITY_QUERY_ENERGY_H_
