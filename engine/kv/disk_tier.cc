// DiskKvTier: see disk_tier.h.
#include "engine/kv/disk_tier.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "xxhash.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "chunk files are little-endian");

namespace kvcast {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'K', 'V', 'C', 'H', 'U', 'N', 'K', '1'};
constexpr char kSuffix[] = ".kvchunk";
constexpr size_t kHeaderBytes = DiskKvTier::kHeaderBytes;

struct Header {
  Hash128 model;
  Hash128 chunk;
  uint32_t format = 0, chunk_tokens = 0, layers = 0, heads = 0, head_dim = 0;
  uint64_t payload_bytes = 0;
  uint64_t checksum = 0;
};

template <typename T>
void Put(std::vector<uint8_t>* out, T v) {
  const size_t at = out->size();
  out->resize(at + sizeof(T));
  std::memcpy(out->data() + at, &v, sizeof(T));
}

template <typename T>
T Get(const uint8_t** p) {
  T v;
  std::memcpy(&v, *p, sizeof(T));
  *p += sizeof(T);
  return v;
}

std::vector<uint8_t> Encode(const Header& h) {
  std::vector<uint8_t> out(kMagic, kMagic + 8);
  for (const Hash128& x : {h.model, h.chunk}) {
    Put(&out, x.lo);
    Put(&out, x.hi);
  }
  for (uint32_t v : {h.format, h.chunk_tokens, h.layers, h.heads, h.head_dim}) Put(&out, v);
  Put(&out, h.payload_bytes);
  Put(&out, h.checksum);
  return out;
}

bool Decode(const uint8_t* p, Header* h) {
  if (std::memcmp(p, kMagic, 8) != 0) return false;
  p += 8;
  for (Hash128* x : {&h->model, &h->chunk}) {
    x->lo = Get<uint64_t>(&p);
    x->hi = Get<uint64_t>(&p);
  }
  for (uint32_t* v : {&h->format, &h->chunk_tokens, &h->layers, &h->heads, &h->head_dim}) {
    *v = Get<uint32_t>(&p);
  }
  h->payload_bytes = Get<uint64_t>(&p);
  h->checksum = Get<uint64_t>(&p);
  return true;
}

// The header of a file's first bytes (`head`, kHeaderBytes of them).
bool ReadHeader(const std::string& path, Header* h) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  uint8_t head[kHeaderBytes];
  const bool ok = std::fread(head, 1, kHeaderBytes, f) == kHeaderBytes && Decode(head, h);
  std::fclose(f);
  return ok;
}

bool Matches(const Header& h, const DiskKvTier::Shape& shape) {
  return h.model == shape.model_fingerprint && h.format == uint32_t(shape.format) &&
         h.chunk_tokens == uint32_t(shape.chunk_tokens) &&
         h.layers == uint32_t(shape.layout.num_layers) &&
         h.heads == uint32_t(shape.layout.num_kv_heads) &&
         h.head_dim == uint32_t(shape.layout.head_dim) && h.payload_bytes == shape.chunk_bytes;
}

}  // namespace

DiskKvTier::DiskKvTier(const Shape& shape, std::unique_ptr<WriteBehindStore> store)
    : shape_(shape), store_(std::move(store)) {}

absl::StatusOr<std::unique_ptr<DiskKvTier>> DiskKvTier::Open(const std::string& dir,
                                                             const Shape& shape,
                                                             uint64_t budget_bytes) {
  // A file of another model, shape or format, a truncated one, or one named
  // for another hash is not this tier's.
  auto accept = [shape](const std::string& path, uint64_t size) -> std::optional<std::string> {
    Header h;
    if (!ReadHeader(path, &h) || !Matches(h, shape) || size != kHeaderBytes + h.payload_bytes) {
      return std::nullopt;
    }
    const std::string key = h.chunk.ToHex();
    if (fs::path(path).filename().string() != key + kSuffix) return std::nullopt;
    return key;
  };
  // The budget in payload bytes: that many whole chunks, as files.
  const uint64_t file_bytes = kHeaderBytes + shape.chunk_bytes;
  const uint64_t chunks = shape.chunk_bytes > 0 ? budget_bytes / shape.chunk_bytes : 0;
  ASSIGN_OR_RETURN(auto store,
                   WriteBehindStore::Open("disk KV tier", dir, kSuffix,
                                          WriteBehindStore::Names::kByKey, chunks * file_bytes,
                                          accept));
  return std::unique_ptr<DiskKvTier>(new DiskKvTier(shape, std::move(store)));
}

void DiskKvTier::Put(const Hash128& hash, const std::vector<uint8_t>& payload,
                     uint64_t checksum, std::vector<Hash128>* dropped) {
  const std::string key = hash.ToHex();
  if (store_->Touch(key)) return;
  if (payload.size() != shape_.chunk_bytes) return;
  Header h;
  h.model = shape_.model_fingerprint;
  h.chunk = hash;
  h.format = uint32_t(shape_.format);
  h.chunk_tokens = uint32_t(shape_.chunk_tokens);
  h.layers = uint32_t(shape_.layout.num_layers);
  h.heads = uint32_t(shape_.layout.num_kv_heads);
  h.head_dim = uint32_t(shape_.layout.head_dim);
  h.payload_bytes = payload.size();
  h.checksum = checksum;
  const std::vector<uint8_t> head = Encode(h);
  auto file = std::make_shared<std::string>();
  file->reserve(head.size() + payload.size());
  file->append(reinterpret_cast<const char*>(head.data()), head.size());
  file->append(reinterpret_cast<const char*>(payload.data()), payload.size());
  std::vector<std::string> evicted;
  store_->Put(key, std::move(file), &evicted);
  for (const std::string& k : evicted) {
    if (auto h = Hash128FromHex(k); h.ok()) dropped->push_back(*h);
  }
}

absl::StatusOr<DiskKvTier::Chunk> DiskKvTier::Get(const Hash128& hash) {
  const std::string key = hash.ToHex();
  absl::StatusOr<std::shared_ptr<const std::string>> file = store_->Read(key);
  if (absl::IsNotFound(file.status())) return absl::NotFoundError("chunk not in the disk tier");
  if (!file.ok()) return absl::DataLossError(absl::StrCat("disk KV tier: ", file.status().message()));
  Header h;
  const auto* bytes = reinterpret_cast<const uint8_t*>((*file)->data());
  const uint8_t* payload = bytes + kHeaderBytes;
  if ((*file)->size() != kHeaderBytes + shape_.chunk_bytes || !Decode(bytes, &h) ||
      h.chunk != hash || h.payload_bytes != shape_.chunk_bytes ||
      XXH3_64bits(payload, shape_.chunk_bytes) != h.checksum) {
    store_->Remove(key, /*rejected=*/true);
    return absl::DataLossError(
        absl::StrCat("disk KV tier: chunk ", key, " no longer matches its checksum; dropped"));
  }
  ++hits_;
  return Chunk{*std::move(file)};
}

std::vector<Hash128> DiskKvTier::Chunks() const {
  std::vector<Hash128> out;
  for (const std::string& k : store_->Keys()) {
    if (auto h = Hash128FromHex(k); h.ok()) out.push_back(*h);
  }
  return out;
}

DiskKvTier::Stats DiskKvTier::stats() const {
  const WriteBehindStore::Stats s = store_->stats();
  Stats out;
  out.chunks = s.files;
  out.bytes = s.files * shape_.chunk_bytes;
  out.hits = hits_.load();
  out.writes = s.writes;
  out.pending = s.pending;
  out.evictions = s.evictions;
  out.rejected = s.rejected;
  return out;
}

}  // namespace kvcast
