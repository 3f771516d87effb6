// KVCache-over-MoQT names: see naming.h.
#include "transport/kvcache/naming.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the KV wire format is little-endian; big-endian hosts need byte swaps");

namespace kvcast::kvcache {
namespace {

constexpr std::pair<KvFormat, std::string_view> kTrackNames[] = {
    {KvFormat::kFp16, "fp16"},         {KvFormat::kBf16, "bf16"},
    {KvFormat::kFp8E4M3, "fp8-e4m3"}, {KvFormat::kInt8, "int8"},
    {KvFormat::kFp4E2M1, "fp4-e2m1"}, {KvFormat::kInt4, "int4"},
};
// The formats with a rotated track: "<name>-rot".
constexpr KvFormat kRotatedTracks[] = {KvFormat::kFp4E2M1, KvFormat::kInt4};
constexpr std::string_view kRotatedSuffix = "-rot";

bool IsHex32(std::string_view s) {
  if (s.size() != 32) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

std::string TrackNameOf(KvFormat format) {
  for (const auto& [f, name] : kTrackNames) {
    if (f == format) return std::string(name);
  }
  return "?";
}

std::string TrackNameOf(const KvCompression& c) {
  if (c.ac) return std::string(c.ac->track);
  if (c.xl) return std::string(c.xl->track);
  return c.rotated ? TrackNameOf(c.format) + std::string(kRotatedSuffix) : TrackNameOf(c.format);
}

absl::StatusOr<KvCompression> CompressionOfTrackName(std::string_view name) {
  for (const auto& [f, n] : kTrackNames) {
    if (n == name) return KvCompression(f);
  }
  for (KvFormat f : kRotatedTracks) {
    if (TrackNameOf(KvCompression(f, true)) == name) return KvCompression(f, true);
  }
  if (const ac::AcPolicy* policy = ac::AcPolicyOf(name)) return KvCompression(policy);
  if (const xl::XlPoint* point = xl::XlPointOf(name)) return KvCompression(point);
  std::vector<std::string> known;
  for (const auto& entry : kTrackNames) known.emplace_back(entry.second);
  for (KvFormat f : kRotatedTracks) known.push_back(TrackNameOf(KvCompression(f, true)));
  for (const ac::AcPolicy* p : {&ac::AcHigh(), &ac::AcLow()}) known.emplace_back(p->track);
  for (const xl::XlPoint* p : {&xl::XlHigh(), &xl::XlLow()}) known.emplace_back(p->track);
  return absl::NotFoundError(absl::StrCat("unknown KV compression track \"", std::string(name),
                                          "\"; known: ", absl::StrJoin(known, ", ")));
}

std::string ModelId(const Hash128& model_fingerprint) { return model_fingerprint.ToHex(); }

Hash128 PromptDigest(const Hash128& prefix_seed, absl::Span<const int32_t> tokens,
                     int chunk_tokens) {
  const size_t full = tokens.size() / chunk_tokens;
  Hash128 last = prefix_seed;
  if (full > 0) last = ChunkHashChain(prefix_seed, tokens, chunk_tokens).back();
  Hasher128 h;
  h.Update("kvcast-prompt-v1");
  const uint64_t words[2] = {last.lo, last.hi};
  h.Update(words, sizeof(words));
  const auto tail = tokens.subspan(full * chunk_tokens);
  h.Update(tail.data(), tail.size() * sizeof(int32_t));
  const uint64_t count = tokens.size();
  h.Update(&count, sizeof(count));
  return h.Digest();
}

moqt::TrackNamespace NamespaceOf(std::string_view model_id, std::string_view prompt_digest) {
  return {std::string(kNamespaceRoot), std::string(model_id), std::string(prompt_digest)};
}

moqt::FullTrackName FullTrackNameOf(const KvTrack& track) {
  return {NamespaceOf(track.model_id, track.prompt_digest), TrackNameOf(track.compression)};
}

bool IsKvNamespace(const moqt::TrackNamespace& ns) {
  return !ns.empty() && ns[0] == kNamespaceRoot;
}

absl::StatusOr<KvTrack> ParseTrack(const moqt::FullTrackName& name) {
  const auto& ns = name.ns;
  if (ns.size() != 3 || !IsKvNamespace(ns)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a KVCache namespace: want (\"", std::string(kNamespaceRoot),
        "\", model id, prompt digest), got ", ns.size(), " element(s)",
        ns.empty() ? "" : absl::StrCat(" starting \"", ns[0], "\"")));
  }
  if (!IsHex32(ns[1])) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV model id must be 32 lowercase hex digits, got \"", ns[1], "\""));
  }
  if (!IsHex32(ns[2])) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV prompt digest must be 32 lowercase hex digits, got \"", ns[2], "\""));
  }
  KvTrack track;
  track.model_id = ns[1];
  track.prompt_digest = ns[2];
  auto compression = CompressionOfTrackName(name.name);
  if (!compression.ok()) return compression.status();
  track.compression = *compression;
  return track;
}

}  // namespace kvcast::kvcache
