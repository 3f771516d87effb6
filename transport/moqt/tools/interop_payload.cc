#include "transport/moqt/tools/interop_payload.h"

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>

#include "absl/strings/str_cat.h"

namespace kvcast::moqt {

std::string InteropPayload(uint64_t seed, uint64_t group, uint64_t object, size_t size) {
  std::string out;
  out.reserve(size + 32);
  std::string base = absl::StrCat("kvcast-interop:", seed, ":", group, ":", object, ":");
  for (uint64_t i = 0; out.size() < size; ++i) {
    std::string input = absl::StrCat(base, i);
    unsigned char digest[32];
    gnutls_hash_fast(GNUTLS_DIG_SHA256, input.data(), input.size(), digest);
    out.append(reinterpret_cast<const char*>(digest), sizeof(digest));
  }
  out.resize(size);
  return out;
}

}  // namespace kvcast::moqt
