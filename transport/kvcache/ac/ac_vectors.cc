// ac_vectors: test vectors of the ac tracks for decoders written elsewhere
// (tests/interop/ac_decoder.py, from docs/kvcache-wire-format.md alone).
//
//   ac_vectors --out DIR
//
// Writes DIR/cases.json, a list of {"name", "track", "layers", "heads",
// "head_dim", "tokens", "dir"}, and for each case DIR/<dir>/object_<t>.bin
// (the payload of object t of one group) and DIR/<dir>/decoded.f32 (what
// this decoder makes of them: tokens x layers x 2 x heads x head_dim
// float32, little-endian, in payload order). The KV is synthetic
// (testing/synthetic_kv.h); one case has a non-finite unit and a unit of
// zeros, one forces escapes.
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "transport/kvcache/ac/ac_codec.h"
#include "transport/kvcache/ac/testing/synthetic_kv.h"
#include "transport/kvcache/testing/vector_files.h"

ABSL_FLAG(std::string, out, "", "output directory (created)");

namespace kvcast::kvcache::ac {
namespace {

int Main() {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) {
    std::fprintf(stderr, "ac_vectors: --out DIR is required\n");
    return 2;
  }
  if (!kvcache::testing::MakeDirectory(out)) return 1;
  // A fine unrotated point (the ac track's before it moved): escapes and
  // long delta runs.
  const AcPolicy fine{"ac@255/191", 255, 191};
  AcPolicy rotated{"ac@15/8+rot", 15, 8};  // version 2, transform 1
  rotated.rotate = true;
  AcPolicy weighted = rotated;  // transform 2: every code's weight, and 1s past the list
  weighted.track = "ac@15/8+rot+kw";
  for (int i = 0; i < 4 * 2 * 32 - 7; ++i) weighted.k_channel_weights.push_back(AcChannelWeight(uint8_t(i * 37)));
  struct Case {
    std::string name;
    AcShape shape;
    int tokens;
    uint32_t seed;
    const AcPolicy* policy;
  };
  const std::vector<Case> cases = {
      {"sink group, ac", {4, 2, 32}, 128, 1, &AcHigh()},
      {"sink group, ac-lo", {4, 2, 32}, 128, 1, &AcLow()},
      {"later group, ac", {3, 3, 64}, 128, 2, &AcHigh()},
      {"short last group, ac-lo", {2, 1, 16}, 77, 4, &AcLow()},
      {"one token, ac", {2, 2, 16}, 1, 3, &AcHigh()},
      {"non-finite and zero units, ac", {2, 2, 16}, 9, 5, &AcHigh()},
      {"escapes, ac@255/191", {1, 1, 16}, 64, 6, &fine},
      {"later group, ac@255/191", {3, 3, 64}, 128, 2, &fine},
      {"rotated sink group, ac@15/8+rot", {4, 2, 32}, 128, 1, &rotated},
      {"rotated non-finite and zero units", {2, 2, 16}, 9, 5, &rotated},
      {"weighted K channels, ac@15/8+rot+kw", {4, 2, 32}, 128, 1, &weighted},
  };
  std::string json = "[\n";
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    const int n = c.shape.token_floats();
    std::vector<float> kv = SyntheticKv(c.shape, c.tokens, c.seed, c.seed % 2 == 1);
    if (c.name.find("non-finite") != std::string::npos) {
      kv[2 * n + 1 * 16 + 3] = std::numeric_limits<float>::infinity();  // unit 1
      for (int t = 0; t < c.tokens; ++t) std::fill_n(kv.begin() + t * n + 2 * 16, 16, 0.f);
    }
    if (c.name.rfind("escapes", 0) == 0) {  // a smooth ramp, then a jump across the range
      for (int t = 0; t < c.tokens; ++t) {
        for (int i = 0; i < n; ++i) kv[t * n + i] = 0.01f * (i + 1) * (t < 63 ? t : -63);
      }
    }
    AcGroupEncoder enc(c.shape, *c.policy);
    std::vector<std::vector<uint8_t>> objects;
    // A sink group starts the sequence (the policy's sink_shift).
    enc.Encode(kv.data(), c.tokens, &objects, c.name.find("sink") != std::string::npos);
    AcGroupDecoder dec(c.shape);
    std::vector<float> decoded(size_t(c.tokens) * n);
    for (int t = 0; t < c.tokens; ++t) {
      absl::Status s = dec.Decode(t, objects[t], decoded.data() + size_t(t) * n);
      if (!s.ok()) {
        std::fprintf(stderr, "ac_vectors: %s: %s\n", c.name.c_str(), s.ToString().c_str());
        return 1;
      }
    }
    const std::string dir = absl::StrCat("case", k);
    if (!kvcache::testing::WriteGroupVectors(out + "/" + dir, objects, decoded)) return 1;
    absl::StrAppend(&json, "  {\"name\": \"", c.name, "\", \"track\": \"", std::string(c.policy->track),
                    "\", \"layers\": ", c.shape.num_layers, ", \"heads\": ", c.shape.num_kv_heads,
                    ", \"head_dim\": ", c.shape.head_dim, ", \"tokens\": ", c.tokens,
                    ", \"dir\": \"", dir, "\"}", k + 1 < cases.size() ? ",\n" : "\n");
  }
  json += "]\n";
  if (!kvcache::testing::WriteFile(out + "/cases.json", json.data(), json.size())) return 1;
  std::printf("ac_vectors: %zu cases in %s\n", cases.size(), out.c_str());
  return 0;
}

}  // namespace
}  // namespace kvcast::kvcache::ac

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return kvcast::kvcache::ac::Main();
}
