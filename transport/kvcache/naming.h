// KVCache-over-MoQT names (docs/kvcache-wire-format.md).
//
//   namespace = ("moq://kvcache.moq.arpa/v1/", model id, prompt digest)
//   track     = compression: "fp16" "bf16" "fp8-e4m3" "int8" "fp4-e2m1" "int4"
//               ("ac", arithmetic coding, is reserved and not served yet)
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
#include "transport/moqt/messages.h"

namespace kvcast::kvcache {

// First namespace element; the "v1" is the wire-format version.
inline constexpr std::string_view kNamespaceRoot = "moq://kvcache.moq.arpa/v1/";
// Reserved track name of arithmetic coding (a later wire-format addition).
inline constexpr std::string_view kArithmeticCodingTrack = "ac";

// The track name of a compression, e.g. "fp8-e4m3".
std::string TrackNameOf(KvFormat format);
// The compression a track name stands for. NotFound names the known ones;
// "ac" is Unimplemented.
absl::StatusOr<KvFormat> FormatOfTrackName(std::string_view name);

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
  KvFormat format = KvFormat::kFp16;
};

moqt::TrackNamespace NamespaceOf(std::string_view model_id, std::string_view prompt_digest);
moqt::FullTrackName FullTrackNameOf(const KvTrack& track);
// InvalidArgument for a namespace that is not (root, 32 hex, 32 hex); the
// track-name errors of FormatOfTrackName.
absl::StatusOr<KvTrack> ParseTrack(const moqt::FullTrackName& name);
// Whether `ns` is a KVCache namespace of this wire version (any model).
bool IsKvNamespace(const moqt::TrackNamespace& ns);

}  // namespace kvcast::kvcache

#endif  // KVCAST_TRANSPORT_KVCACHE_NAMING_H_
