#include "engine/kv/prefix_hash.h"

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "xxhash.h"

namespace kvcast {
namespace {

void AppendU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(char((v >> (8 * i)) & 0xff));
}

void AppendHash(std::string* out, const Hash128& h) {
  AppendU64(out, h.lo);
  AppendU64(out, h.hi);
}

}  // namespace

std::string HashToBytes(const Hash128& h) {
  std::string b(16, '\0');
  for (int i = 0; i < 8; ++i) {
    b[i] = char(h.lo >> (8 * i));
    b[8 + i] = char(h.hi >> (8 * i));
  }
  return b;
}

bool HashFromBytes(std::string_view b, Hash128* h) {
  if (b.size() != 16) return false;
  h->lo = h->hi = 0;
  for (int i = 0; i < 8; ++i) {
    h->lo |= uint64_t(uint8_t(b[i])) << (8 * i);
    h->hi |= uint64_t(uint8_t(b[8 + i])) << (8 * i);
  }
  return true;
}

std::string Hash128::ToHex() const { return absl::StrFormat("%016x%016x", hi, lo); }

absl::StatusOr<Hash128> Hash128FromHex(const std::string& hex) {
  uint64_t hi = 0, lo = 0;
  if (hex.size() != 32 || !absl::SimpleHexAtoi(hex.substr(0, 16), &hi) ||
      !absl::SimpleHexAtoi(hex.substr(16), &lo)) {
    return absl::InvalidArgumentError(absl::StrCat("\"", hex, "\" is not 32 hex digits"));
  }
  return Hash128{lo, hi};
}

Hash128 HashBytes(const void* data, size_t size) {
  XXH128_hash_t h = XXH3_128bits(data, size);
  return Hash128{h.low64, h.high64};
}

Hasher128::Hasher128() : state_(XXH3_createState()) {
  XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_));
}
Hasher128::~Hasher128() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }
void Hasher128::Update(const void* data, size_t size) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), data, size);
}
Hash128 Hasher128::Digest() const {
  XXH128_hash_t h = XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_));
  return Hash128{h.low64, h.high64};
}

Hash128 PrefixSeed(const Hash128& model_fingerprint, std::string_view salt) {
  std::string buf = "kvcast-prefix-v1";
  AppendHash(&buf, model_fingerprint);
  buf.append(salt.data(), salt.size());
  return HashBytes(buf.data(), buf.size());
}

Hash128 NextChunkHash(const Hash128& parent, absl::Span<const int32_t> chunk) {
  std::string buf;
  buf.reserve(16 + chunk.size() * 4);
  AppendHash(&buf, parent);
  for (int32_t t : chunk) {
    uint32_t u = static_cast<uint32_t>(t);
    for (int i = 0; i < 4; ++i) buf.push_back(char((u >> (8 * i)) & 0xff));
  }
  return HashBytes(buf.data(), buf.size());
}

std::vector<Hash128> ChunkHashChain(const Hash128& seed,
                                    absl::Span<const int32_t> tokens,
                                    int chunk_tokens) {
  std::vector<Hash128> chain;
  Hash128 parent = seed;
  for (size_t start = 0; start + chunk_tokens <= tokens.size(); start += chunk_tokens) {
    parent = NextChunkHash(parent, tokens.subspan(start, chunk_tokens));
    chain.push_back(parent);
  }
  return chain;
}

}  // namespace kvcast
