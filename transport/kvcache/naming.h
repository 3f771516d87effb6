// KVCache-over-MoQT names (docs/kvcache-wire-format.md).
//
//   namespace = ("moq://kvcache.moq.arpa/v1/", model id, prompt digest)
//   track     = compression: "fp16" "bf16" "fp8-e4m3" "int8" "fp4-e2m1" "int4"
//               (fixed-size tokens), "fp4-e2m1-rot" "int4-rot" (the 4-bit ones
//               with each head Hadamard-rotated), "ac" "ac-lo"
//               (arithmetic-coded groups, transport/kvcache/ac/) or "xl"
//               "xl-lo" (a transform across layers over the model's KV
//               basis, transport/kvcache/xl/)
//   group     = chunk index (chunk_tokens tokens per group, default 128)
//   object    = token index within the chunk
//
// The model id is the model fingerprint (architecture, shapes, dtypes and
// weight bytes; Transformer::fingerprint) as 32 lowercase hex digits; the
// prompt digest names the full token sequence of the publishing request
// under that model and tenant salt (PromptDigest), also 32 hex digits.
//
// Pure functions; thread-safe.
#ifndef KVCAST_TRANSPORT_KVCACHE_NAMING_H_
#define KVCAST_TRANSPORT_KVCACHE_NAMING_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/kv/prefix_hash.h"
#include "kernels/kv_codec.h"
#include "transport/kvcache/ac/ac_codec.h"
#include "transport/kvcache/xl/xl_point.h"
#include "transport/moqt/messages.h"

namespace kvcast::kvcache {

// First namespace element; the "v1" is the wire-format version.
inline constexpr std::string_view kNamespaceRoot = "moq://kvcache.moq.arpa/v1/";

// What a track name selects: a fixed-size format (its heads rotated or
// not: TokenCodec), an arithmetic-coded operating point, or a cross-layer
// transform point (which needs the model's KV basis at both ends).
struct KvCompression {
  KvFormat format = KvFormat::kFp16;  // when ac and xl are null
  bool rotated = false;               // when ac and xl are null
  const ac::AcPolicy* ac = nullptr;   // AcHigh() or AcLow()
  const xl::XlPoint* xl = nullptr;    // XlHigh() or XlLow(): over the model's KV basis
  KvCompression() = default;
  KvCompression(KvFormat f, bool r = false) : format(f), rotated(r) {}  // NOLINT: a format is one
  explicit KvCompression(const ac::AcPolicy* policy) : ac(policy) {}
  explicit KvCompression(const xl::XlPoint* point) : xl(point) {}
  // A fixed-size row format (TokenCodec), not a coded group.
  bool fixed_size() const { return ac == nullptr && xl == nullptr; }
  bool operator==(const KvCompression& o) const {
    return ac == o.ac && xl == o.xl &&
           (!fixed_size() || (format == o.format && rotated == o.rotated));
  }
  bool operator<(const KvCompression& o) const {
    if (ac != o.ac) return ac < o.ac;
    if (xl != o.xl) return xl < o.xl;
    if (!fixed_size()) return false;
    return format != o.format ? format < o.format : rotated < o.rotated;
  }
};

// Not a track: as a request's compression (KvSource.compression, the
// scheduler's --kv_compression) it lets the decode worker choose a track per
// group from the bandwidth it sees (adaptive bitrate, services/decode/kv_abr.h).
inline constexpr std::string_view kAdaptiveCompression = "abr";

// The track name of a compression, e.g. "fp8-e4m3", "int4-rot", "ac" (a
// rotated format without a track, e.g. int8 rotated, "int8-rot": the
// harness's names; no track name parses to it).
std::string TrackNameOf(KvFormat format);
std::string TrackNameOf(const KvCompression& compression);
// The compression a track name stands for. NotFound names the known ones.
absl::StatusOr<KvCompression> CompressionOfTrackName(std::string_view name);

// 32 lowercase hex digits of a 128-bit hash (Hash128::ToHex).
std::string ModelId(const Hash128& model_fingerprint);

// The digest of a whole prompt: with h the chain hash of its last full chunk
// (the prefix seed when there is none), XXH3-128 of
//   "kvcast-prompt-v1" || h || tokens after that chunk (int32 LE) ||
//   token count (uint64 LE).
// Two prompts share a digest only if they share model, salt and every token.
Hash128 PromptDigest(const Hash128& prefix_seed, absl::Span<const int32_t> tokens,
                     int chunk_tokens);

// A parsed KVCache track name.
struct KvTrack {
  std::string model_id;       // 32 hex digits
  std::string prompt_digest;  // 32 hex digits
  KvCompression compression;
};

moqt::TrackNamespace NamespaceOf(std::string_view model_id, std::string_view prompt_digest);
moqt::FullTrackName FullTrackNameOf(const KvTrack& track);
// InvalidArgument for a namespace that is not (root, 32 hex, 32 hex); the
// track-name errors of CompressionOfTrackName.
absl::StatusOr<KvTrack> ParseTrack(const moqt::FullTrackName& name);
// Whether `ns` is a KVCache namespace of this wire version (any model).
bool IsKvNamespace(const moqt::TrackNamespace& ns);

}  // namespace kvcast::kvcache

#endif  // KVCAST_TRANSPORT_KVCACHE_NAMING_H_
