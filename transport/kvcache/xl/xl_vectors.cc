// xl_vectors: test vectors of the xl tracks for decoders written elsewhere
// (tests/interop/xl_decoder.py, from docs/kvcache-wire-format.md alone).
//
//   xl_vectors --out DIR
//
// Writes DIR/cases.json, a list of {"name", "basis", "basis_id", "layers",
// "heads", "head_dim", "group_layers", "tokens", "k_step", "v_step",
// "sink", "dir"}, the bases DIR/<basis> (KVXLBAS1 files; "basis_id" is the
// C++ id, FNV-1a 64 of the file, as "0x" and 16 hex digits), and for each
// case DIR/<dir>/object_<t>.bin (the payload of object t of one group) and
// DIR/<dir>/decoded.f32 (what the C++ decoder makes of them: tokens x
// layers x 2 x heads x head_dim float32, little-endian, payload order, K
// before RoPE).
//
// The bases are fitted (KvBasisFitter) on synthetic KV of low rank per
// block: each block (group of layers, K or V) is a mean plus a few
// orthonormal directions spread across its layers, times Gaussian
// coefficients of spread scale_b x 8 / 2^i, plus a little noise. The
// blocks' scales differ, and one block's is tiny, so that a coarse step
// codes none of its components while the others code some; a fine step
// makes codes past 127 (escapes, symbol 255).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "transport/kvcache/testing/vector_files.h"
#include "transport/kvcache/xl/kv_basis.h"
#include "transport/kvcache/xl/testing/low_rank_kv.h"
#include "transport/kvcache/xl/xl_codec.h"

ABSL_FLAG(std::string, out, "", "output directory (created)");

namespace kvcast::kvcache::xl {
namespace {

// The vectors' synthetic KV: block 1 (group 0's V) tiny, so that a coarse
// step codes none of it; the others at scales 1, 1/2, 1/3 in turn; a little
// noise; with `sink`, token 0 an outlier, as a sequence's first is.
std::vector<float> LowRankKv(const AcShape& shape, int group_layers, int tokens, uint32_t seed,
                             bool sink, uint32_t structure_seed) {
  testing::LowRankOptions o;
  o.mean_scale = 2;
  for (int b = 0; b < 2 * shape.num_layers; ++b) {
    o.block_scales.push_back(b == 1 ? 0.01f : 1.f / float(1 + b % 3));
  }
  o.noise = 0.001f;
  o.sink = sink;
  return testing::MakeLowRankKv(shape, group_layers, tokens, seed, structure_seed, o).tokens;
}

int Main() {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) {
    std::fprintf(stderr, "xl_vectors: --out DIR is required\n");
    return 2;
  }
  if (!kvcache::testing::MakeDirectory(out)) return 1;

  // The bases: L = 4 in groups of 2; L = 5 in groups of 3 (3 + 2 layers)
  // and of 2 (2 + 2 + 1).
  struct Basis {
    std::string file;
    AcShape shape;
    int group_layers;
    uint32_t structure_seed;
    std::shared_ptr<const KvBasis> basis;
  };
  std::vector<Basis> bases = {
      {"basis_L4_G2.bin", {4, 2, 16}, 2, 100, nullptr},
      {"basis_L5_G3.bin", {5, 2, 16}, 3, 200, nullptr},
      {"basis_L5_G2.bin", {5, 2, 16}, 2, 300, nullptr},
  };
  for (Basis& b : bases) {
    KvBasisFitter fitter(b.shape, b.group_layers);
    constexpr int kSamples = 3000;
    const std::vector<float> calibration =
        LowRankKv(b.shape, b.group_layers, kSamples, b.structure_seed + 1, false, b.structure_seed);
    for (int t = 0; t < kSamples; t += 500) {  // in batches, as a caller adds windows
      fitter.Add(calibration.data() + size_t(t) * b.shape.token_floats(), 500);
    }
    absl::StatusOr<KvBasis> fitted = fitter.Fit();
    if (!fitted.ok()) {
      std::fprintf(stderr, "xl_vectors: %s: %s\n", b.file.c_str(), fitted.status().ToString().c_str());
      return 1;
    }
    b.basis = std::make_shared<const KvBasis>(*std::move(fitted));
    absl::Status saved = b.basis->Save(out + "/" + b.file);
    if (!saved.ok()) {
      std::fprintf(stderr, "xl_vectors: %s: %s\n", b.file.c_str(), saved.ToString().c_str());
      return 1;
    }
  }

  struct Case {
    std::string name;
    int basis;  // index into bases
    int tokens;
    uint32_t seed;
    float k_step, v_step;
    bool sink;
  };
  // Steps: 0.01 is fine (the leading components' codes reach ~1000:
  // escapes); 0.5 / 2 are coarse (group 0's V block, scale 0.01, codes no
  // component); 1e6 codes nothing at all (sections of 0 coefficients);
  // 0.002 codes every component, the noise's too (variance 1e-6), so that
  // the sums run over whole blocks.
  const std::vector<Case> cases = {
      {"sink group, fine (escapes), L4 G2", 0, 40, 1, 0.01f, 0.01f, true},
      {"later group, coarse, L4 G2", 0, 33, 2, 0.5f, 2.f, false},
      {"sink group, coarse, L5 G3 (3 + 2 layers)", 1, 37, 3, 0.5f, 2.f, true},
      {"later group, fine (escapes), L5 G3", 1, 25, 4, 0.01f, 0.02f, false},
      {"later group, mixed steps, L5 G2 (2 + 2 + 1)", 2, 50, 5, 0.05f, 0.3f, false},
      {"one token, L5 G2", 2, 1, 6, 0.05f, 0.05f, false},
      {"sink only (one token), L5 G3", 1, 1, 7, 0.05f, 0.05f, true},
      {"nothing coded, L4 G2", 0, 5, 8, 1e6f, 1e6f, false},
      {"every component coded, L5 G3", 1, 20, 9, 0.002f, 0.002f, true},
  };
  std::string json = "[\n";
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    const Basis& b = bases[c.basis];
    const int n = b.shape.token_floats();
    const std::vector<float> kv =
        LowRankKv(b.shape, b.group_layers, c.tokens, 1000 + c.seed, c.sink, b.structure_seed);
    XlGroupEncoder enc(b.basis, {"xl@vectors", c.k_step, c.v_step});
    std::vector<std::vector<uint8_t>> objects;
    enc.Encode(kv.data(), c.tokens, &objects, c.sink);
    std::vector<absl::Span<const uint8_t>> spans(objects.begin(), objects.end());
    std::vector<float> decoded(size_t(c.tokens) * n);
    XlGroupDecoder dec(b.basis);
    absl::Status s = dec.DecodeGroup(spans, decoded.data());
    if (!s.ok()) {
      std::fprintf(stderr, "xl_vectors: %s: %s\n", c.name.c_str(), s.ToString().c_str());
      return 1;
    }
    const std::string dir = absl::StrCat("case", k);
    if (!kvcache::testing::WriteGroupVectors(out + "/" + dir, objects, decoded)) return 1;
    absl::StrAppend(&json, "  {\"name\": \"", c.name, "\", \"basis\": \"", b.file,
                    "\", \"basis_id\": \"", absl::StrFormat("0x%016x", b.basis->id()),
                    "\", \"layers\": ", b.shape.num_layers, ", \"heads\": ", b.shape.num_kv_heads,
                    ", \"head_dim\": ", b.shape.head_dim, ", \"group_layers\": ", b.group_layers,
                    ", \"tokens\": ", c.tokens, ", \"k_step\": ", absl::StrFormat("%.9g", c.k_step),
                    ", \"v_step\": ", absl::StrFormat("%.9g", c.v_step),
                    ", \"sink\": ", c.sink ? "true" : "false", ", \"dir\": \"", dir, "\"}",
                    k + 1 < cases.size() ? ",\n" : "\n");
  }
  json += "]\n";
  if (!kvcache::testing::WriteFile(out + "/cases.json", json.data(), json.size())) return 1;
  std::printf("xl_vectors: %zu cases, %zu bases in %s\n", cases.size(), bases.size(), out.c_str());
  return 0;
}

}  // namespace
}  // namespace kvcast::kvcache::xl

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return kvcast::kvcache::xl::Main();
}
