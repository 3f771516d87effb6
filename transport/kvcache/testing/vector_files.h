// Files of the KV codecs' test vectors (ac_vectors, xl_vectors), which the
// decoders written elsewhere read (tests/interop/*_decoder_test.py).
//
// Thread safety: plain file I/O.
#ifndef KVCAST_TRANSPORT_KVCACHE_TESTING_VECTOR_FILES_H_
#define KVCAST_TRANSPORT_KVCACHE_TESTING_VECTOR_FILES_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"

namespace kvcast::kvcache::testing {

// Creates directory `dir` and its parents; false if it cannot.
bool MakeDirectory(const std::string& dir);

// Writes `size` bytes at `data` to `path`; false on an I/O error.
bool WriteFile(const std::string& path, const void* data, size_t size);

// Creates directory `dir` (and its parents) and writes one group's vectors
// into it: object_<t>.bin, the payload of object t, and decoded.f32, what
// the C++ decoder made of them (float32, little-endian). False on an I/O
// error.
bool WriteGroupVectors(const std::string& dir, const std::vector<std::vector<uint8_t>>& objects,
                       absl::Span<const float> decoded);

}  // namespace kvcast::kvcache::testing

#endif  // KVCAST_TRANSPORT_KVCACHE_TESTING_VECTOR_FILES_H_
