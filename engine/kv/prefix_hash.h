// Chunk hash chain: the identity of a prefix of KV.
//
// For full chunks of `chunk_tokens` tokens:
//   h_0 = XXH3-128(seed || tokens of chunk 0)
//   h_i = XXH3-128(h_{i-1} || tokens of chunk i)
// where seed = XXH3-128("kvcast-prefix-v1" || model fingerprint || salt), all
// integers little-endian (tokens as int32, hashes as lo then hi uint64). Equal
// hashes mean equal model, equal salt (tenant isolation) and equal tokens
// from the start of the sequence, so KV computed for one can serve the other.
// Pure functions; thread-safe.
#ifndef KVCAST_ENGINE_KV_PREFIX_HASH_H_
#define KVCAST_ENGINE_KV_PREFIX_HASH_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kvcast {

struct Hash128 {
  uint64_t lo = 0;
  uint64_t hi = 0;

  bool operator==(const Hash128& o) const { return lo == o.lo && hi == o.hi; }
  bool operator!=(const Hash128& o) const { return !(*this == o); }
  template <typename H>
  friend H AbslHashValue(H h, const Hash128& x) {
    return H::combine(std::move(h), x.lo, x.hi);
  }
  // 32 lowercase hex digits, hi first.
  std::string ToHex() const;
};

// ToHex's inverse: InvalidArgument unless `hex` is 32 hex digits.
absl::StatusOr<Hash128> Hash128FromHex(const std::string& hex);

// The 16-byte wire form of a hash (KV events, registration snapshots): lo
// then hi, each little-endian. FromBytes: false unless exactly 16 bytes.
std::string HashToBytes(const Hash128& h);
bool HashFromBytes(std::string_view bytes, Hash128* h);

// XXH3-128 of raw bytes.
Hash128 HashBytes(const void* data, size_t size);

// Incremental XXH3-128 over many pieces (e.g. a model's weights).
class Hasher128 {
 public:
  Hasher128();
  ~Hasher128();
  Hasher128(const Hasher128&) = delete;
  Hasher128& operator=(const Hasher128&) = delete;
  void Update(const void* data, size_t size);
  void Update(std::string_view s) { Update(s.data(), s.size()); }
  Hash128 Digest() const;

 private:
  void* state_;  // XXH3_state_t, kept out of this header
};

// The chain seed for a model fingerprint and an optional tenant salt.
Hash128 PrefixSeed(const Hash128& model_fingerprint, std::string_view salt = "");

// Hashes of the full chunks of `tokens` (a trailing partial chunk has none).
std::vector<Hash128> ChunkHashChain(const Hash128& seed,
                                    absl::Span<const int32_t> tokens,
                                    int chunk_tokens);

// The hash of one chunk given its parent (the seed for chunk 0).
Hash128 NextChunkHash(const Hash128& parent, absl::Span<const int32_t> chunk);

}  // namespace kvcast

#endif  // KVCAST_ENGINE_KV_PREFIX_HASH_H_
