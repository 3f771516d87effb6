// The SIMD encoder kernels (AVX2, AVX-512) against the scalar ones, pass
// by pass, on awkward inputs (ac_codec_test compares whole groups' bytes).
#include "transport/kvcache/ac/internal/encode_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "common/dtype.h"
#include "gtest/gtest.h"

namespace kvcast::kvcache::ac::internal {
namespace {

struct Kernels {
  EncoderKernels scalar, simd;
};

// Each SIMD kernel set against the scalar reference.
class EncodeKernels : public testing::TestWithParam<KernelSet> {
 protected:
  // Both kernel sets, or false (the test is skipped) where the CPU lacks
  // the set.
  bool GetKernels(Kernels* k) {
    if (!KernelSetAvailable(GetParam())) return false;
    CapKernelSet(KernelSet::kScalar);
    k->scalar = SelectEncoderKernels();
    CapKernelSet(GetParam());
    k->simd = SelectEncoderKernels();
    CapKernelSet(KernelSet::kAvx512);
    return true;
  }
};
INSTANTIATE_TEST_SUITE_P(Sets, EncodeKernels,
                         testing::Values(KernelSet::kAvx2, KernelSet::kAvx512),
                         [](const auto& info) { return std::string(KernelSetName(info.param)); });

float Awkward(std::mt19937& rng) {
  switch (rng() % 10) {
    case 0: return 0.f;
    case 1: return -0.f;
    case 2: return std::ldexp(float(rng() % 100) - 50, -140);  // subnormal
    case 3: return (rng() % 2 ? 1 : -1) * 3e38f;
    case 4: return float(int(rng() % 21) - 10) * 0.5f;  // ties once scaled by 1 or 2
    default: return std::normal_distribution<float>(0, 3)(rng);
  }
}

// Every fp16 bit pattern (subnormals, infinities, NaNs) widens as
// HalfToFloat does, at lengths around the vector widths.
TEST_P(EncodeKernels, WidenHalf) {
  Kernels k;
  if (!GetKernels(&k)) GTEST_SKIP() << "no " << KernelSetName(GetParam()) << " here";
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = uint16_t(i);
  for (size_t n : {size_t(65536), size_t(1), size_t(7), size_t(17), size_t(33)}) {
    std::vector<float> a(n), b(n);
    k.scalar.widen_half(all.data() + 65536 - n, n, a.data());
    k.simd.widen_half(all.data() + 65536 - n, n, b.data());
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(std::memcmp(&a[i], &b[i], 4) == 0 || (std::isnan(a[i]) && std::isnan(b[i])))
          << std::hex << all[65536 - n + i];
    }
  }
}

TEST_P(EncodeKernels, AbsMax) {
  Kernels k;
  if (!GetKernels(&k)) GTEST_SKIP() << "no " << KernelSetName(GetParam()) << " here";
  std::mt19937 rng(1);
  for (int trial = 0; trial < 2000; ++trial) {
    const int d = 16 * (1 + rng() % 8);
    std::vector<float> x(d);
    for (float& v : x) v = Awkward(rng);
    if (trial % 5 == 1) x[rng() % d] = std::numeric_limits<float>::infinity();
    if (trial % 5 == 2) x[rng() % d] = -std::numeric_limits<float>::quiet_NaN();
    if (trial % 5 == 3) std::fill(x.begin(), x.end(), 0.f);
    const float a = k.scalar.abs_max(x.data(), d), b = k.simd.abs_max(x.data(), d);
    ASSERT_TRUE(std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b))) << a << " " << b;
    // The same values as halves (3e38 becomes infinity; subnormal halves
    // from the small ones), the largest alone sometimes subnormal.
    std::vector<uint16_t> h(d);
    for (int c = 0; c < d; ++c) h[c] = FloatToHalf(trial % 7 == 4 ? x[c] * 1e-6f : x[c]);
    const float ha = k.scalar.abs_max_half(h.data(), d), hb = k.simd.abs_max_half(h.data(), d);
    ASSERT_TRUE(std::memcmp(&ha, &hb, 4) == 0 || (std::isnan(ha) && std::isnan(hb)))
        << ha << " " << hb << " d=" << d;
  }
}

TEST_P(EncodeKernels, QuantizeAndModeCosts) {
  Kernels k;
  if (!GetKernels(&k)) GTEST_SKIP() << "no " << KernelSetName(GetParam()) << " here";
  std::mt19937 rng(2);
  for (int trial = 0; trial < 300; ++trial) {
    const int d = 16 * (1 + rng() % 8), tokens = 1 + rng() % 9;
    const size_t stride = d + 16 * (rng() % 3);
    std::vector<float> x(stride * tokens), inv(tokens);
    std::vector<uint8_t> same(tokens);
    for (float& v : x) v = Awkward(rng);
    for (int t = 0; t < tokens; ++t) {
      // 1 and 2 keep the ties; huge factors clamp (x * inv may be inf);
      // tiny ones round to 0. (Never inv = inf: the encoder's token steps
      // are at least 2^-115, ac_encoder.cc.)
      const float pick[] = {1.f, 2.f, 1e30f, 1e-30f, 127.f / 3.f, 3e38f};
      inv[t] = pick[rng() % 6];
      same[t] = t > 0 && rng() % 4 != 0;
    }
    for (float& v : x) {  // no inf or NaN: the encoder quantizes finite units only
      if (!std::isfinite(v * 0.f)) v = 1.f;
    }
    std::vector<int16_t> q[2];
    std::vector<uint32_t> raw[2], delta[2];
    const EncoderKernels* ks[2] = {&k.scalar, &k.simd};
    for (int s = 0; s < 2; ++s) {
      q[s].assign(size_t(tokens) * d, 7);
      raw[s].assign(d, 3);
      delta[s].assign(d, 5);
      ks[s]->quantize(x.data(), stride, inv.data(), same.data(), tokens, d, q[s].data(),
                      raw[s].data(), delta[s].data());
    }
    ASSERT_EQ(q[0], q[1]);
    ASSERT_EQ(raw[0], raw[1]);
    ASSERT_EQ(delta[0], delta[1]);
  }
}

TEST_P(EncodeKernels, SymbolizeCountsAndEscapes) {
  Kernels k;
  if (!GetKernels(&k)) GTEST_SKIP() << "no " << KernelSetName(GetParam()) << " here";
  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    // The first two units have more than 65535 symbols (the SIMD counters
    // are 16 bits wide), the first all one symbol; the second has 512
    // channels, with more escapes per token than the SIMD kernel gathers
    // at once.
    const bool big = trial < 2;
    const int d = big ? (trial == 0 ? 128 : 512) : 16 * (1 + rng() % 8);
    const int tokens = big ? (trial == 0 ? 600 : 150) : 1 + rng() % 11;
    std::vector<int16_t> q(size_t(tokens) * d);
    for (int16_t& v : q) {
      const int r = rng() % 8;
      v = r == 0 ? 32767 : r == 1 ? -32767 : r == 2 ? int16_t(rng() % 600) - 300 : int16_t(rng() % 9) - 4;
      if (trial == 0) v = 0;
    }
    std::vector<uint16_t> masks(d / 16);
    for (uint16_t& m : masks) m = trial % 7 == 0 ? 0 : trial % 7 == 1 ? 0xffff : uint16_t(rng());
    std::vector<uint8_t> same(tokens);
    for (int t = 1; t < tokens; ++t) same[t] = rng() % 3 != 0;
    std::vector<uint16_t> sym[2];
    std::vector<uint32_t> counts[2];
    std::vector<EncodeStream> streams[2];
    const EncoderKernels* ks[2] = {&k.scalar, &k.simd};
    for (int s = 0; s < 2; ++s) {
      sym[s].assign(size_t(tokens) * d, 0);
      counts[s].assign(2 * kMaxSymbols, 1);
      streams[s].resize(tokens);
      for (auto& st : streams[s]) st.escapes = {42};  // appended to
      ks[s]->symbolize(q.data(), same.data(), masks.data(), tokens, d, sym[s].data(),
                       counts[s].data(), streams[s].data());
    }
    ASSERT_EQ(sym[0], sym[1]);
    ASSERT_EQ(counts[0], counts[1]);
    for (int t = 0; t < tokens; ++t) ASSERT_EQ(streams[0][t].escapes, streams[1][t].escapes);
  }
}

// Escapes' varints, last first: the same bytes from both kernels, which
// GetVarint reads back; batches with values of 2^14 and more included.
TEST_P(EncodeKernels, PutEscapes) {
  Kernels k;
  if (!GetKernels(&k)) GTEST_SKIP() << "no " << KernelSetName(GetParam()) << " here";
  std::mt19937 rng(5);
  for (int trial = 0; trial < 400; ++trial) {
    const size_t n = rng() % 70;
    std::vector<uint32_t> esc(n);
    for (uint32_t& v : esc) {
      const int r = rng() % 16;
      v = r == 0 ? rng() % kMaxEscape : r < 8 ? rng() % 0x80 : r < 15 ? rng() % 0x4000 : 0x4000 + rng() % 100;
      if (trial % 5 == 0) v = rng() % 0x4000;  // whole batches on the fast path
    }
    std::vector<uint8_t> out[2];
    const EncoderKernels* ks[2] = {&k.scalar, &k.simd};
    for (int s = 0; s < 2; ++s) {
      out[s].assign(5 * n + 64, 0xee);
      out[s].resize(ks[s]->put_escapes(esc.data(), n, out[s].data()) - out[s].data());
    }
    ASSERT_EQ(out[0], out[1]) << "trial " << trial;
    const uint8_t* p = out[1].data();
    for (size_t i = n; i-- > 0;) {
      uint32_t v;
      ASSERT_TRUE(GetVarint(&p, out[1].data() + out[1].size(), &v));
      ASSERT_EQ(v, esc[i]) << "trial " << trial << ", escape " << i;
    }
    EXPECT_EQ(p, out[1].data() + out[1].size());
  }
}

// The header's frequencies: varints in order, on the fast path while
// every value of a batch is below 2^14.
TEST_P(EncodeKernels, PutVarints) {
  Kernels k;
  if (!GetKernels(&k)) GTEST_SKIP() << "no " << KernelSetName(GetParam()) << " here";
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const size_t n = rng() % 300;
    std::vector<uint16_t> v(n);
    for (uint16_t& x : v) {
      const int r = rng() % 16;
      x = uint16_t(r < 8 ? rng() % 0x80 : r < 15 || trial % 3 == 0 ? rng() % 0x4000 : rng());
    }
    std::vector<uint8_t> out[2];
    const EncoderKernels* ks[2] = {&k.scalar, &k.simd};
    for (int s = 0; s < 2; ++s) {
      out[s].assign(3 * n + 64, 0xee);
      out[s].resize(ks[s]->put_varints(v.data(), n, out[s].data()) - out[s].data());
    }
    ASSERT_EQ(out[0], out[1]) << "trial " << trial;
    const uint8_t* p = out[1].data();
    for (size_t i = 0; i < n; ++i) {
      uint32_t x;
      ASSERT_TRUE(GetVarint(&p, out[1].data() + out[1].size(), &x));
      ASSERT_EQ(x, v[i]) << "trial " << trial << ", value " << i;
    }
    EXPECT_EQ(p, out[1].data() + out[1].size());
  }
}

TEST_P(EncodeKernels, NormalizeFrequencies) {
  Kernels k;
  if (!GetKernels(&k)) GTEST_SKIP() << "no " << KernelSetName(GetParam()) << " here";
  std::mt19937 rng(6);
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = trial % 9 == 0 ? 1 + rng() % 3 : 1 + rng() % kMaxSymbols;
    std::vector<uint32_t> counts(n);
    for (uint32_t& c : counts) {
      switch (trial % 6) {
        case 0: c = 1; break;                                           // surplus taken back
        case 1: c = rng() % 3 == 0 ? 0 : 1 + rng() % 5; break;          // zeros among few
        case 2: c = rng() % 40 == 0 ? 1u << 30 : rng() % 2; break;       // one or two giants
        case 3: c = uint32_t(rng()); break;                             // totals past 2^32
        default: c = rng() % 4 == 0 ? 0 : uint32_t(std::exp2(rng() % 200 / 10.0)); break;
      }
    }
    counts[rng() % n] |= 1;  // not all zero
    std::vector<uint16_t> f[2];
    const EncoderKernels* ks[2] = {&k.scalar, &k.simd};
    for (int s = 0; s < 2; ++s) {
      f[s].assign(n + 1, 77);  // the entry past n is left alone
      ks[s]->normalize(counts.data(), n, f[s].data());
    }
    ASSERT_EQ(f[0], f[1]) << "trial " << trial;
  }
}

TEST_P(EncodeKernels, RansEncode) {
  Kernels k;
  if (!GetKernels(&k)) GTEST_SKIP() << "no " << KernelSetName(GetParam()) << " here";
  std::mt19937 rng(4);
  for (int trial = 0; trial < 200; ++trial) {
    const int d = 16 * (1 + rng() % 8), tokens = 1 + rng() % 19;
    // Raw and delta tables: skewed, flat, or one symbol (f = 4096).
    std::vector<uint32_t> fc(2 * kMaxSymbols);
    std::vector<double> rcp(2 * kMaxSymbols);
    int nsym[2];
    for (int m = 0; m < 2; ++m) {
      nsym[m] = trial % 5 == 0 ? 1 : 1 + rng() % kMaxSymbols;
      std::vector<uint32_t> counts(nsym[m]);
      for (uint32_t& c : counts) c = trial % 3 ? 1 + rng() % 1000 : (rng() % 50 == 0 ? 100000 : 1);
      const std::vector<uint16_t> f = NormalizeFrequencies(counts);
      ASSERT_TRUE(BuildEncodeTable(f, &fc[m * kMaxSymbols], &rcp[m * kMaxSymbols]));
    }
    std::vector<uint16_t> sym(size_t(tokens) * d);
    for (uint16_t& s : sym) {
      const int m = rng() % 2;
      s = uint16_t(m * kMaxSymbols + (rng() % 2 ? rng() % nsym[m] : 0));
    }
    const int rounds = 1 + rng() % 3;  // states carried between calls
    std::vector<uint8_t> words[2];
    std::vector<EncodeStream> streams[2];
    const EncoderKernels* ks[2] = {&k.scalar, &k.simd};
    const size_t room = size_t(d) * 2 * rounds + kStreamSlack;
    for (int s = 0; s < 2; ++s) {
      words[s].assign(room * tokens, 0xa5);
      streams[s].resize(tokens);
      for (int t = 0; t < tokens; ++t) {
        std::fill(streams[s][t].state, streams[s][t].state + kLanes, kStateLow);
        streams[s][t].w = words[s].data() + room * (t + 1);
      }
      LinePrefetch pf;
      pf.run = reinterpret_cast<const char*>(sym.data());
      pf.left = 3;
      for (int r = 0; r < rounds; ++r) {
        ks[s]->encode(streams[s].data(), sym.data(), tokens, d, fc.data(), rcp.data(), &pf);
      }
    }
    // The same words; below them the SIMD kernel may have written into
    // the slack, never further.
    for (int t = 0; t < tokens; ++t) {
      const size_t front = streams[0][t].w - words[0].data();
      ASSERT_EQ(front, size_t(streams[1][t].w - words[1].data()));
      const size_t end = room * (t + 1);
      ASSERT_TRUE(std::equal(words[0].begin() + front, words[0].begin() + end,
                             words[1].begin() + front))
          << "token " << t;
      for (size_t i = room * t; i + kStreamSlack < front; ++i) {
        ASSERT_EQ(words[1][i], 0xa5) << "token " << t << ": a write " << front - i
                                     << " bytes below its words";
      }
      ASSERT_EQ(0, std::memcmp(streams[0][t].state, streams[1][t].state, sizeof(uint32_t) * kLanes));
    }
  }
}

// The SIMD coder's float division, for every divisor at the quotients'
// edges (multiples of f, one below, f - 1 above) up to x < f 2^20.
TEST_P(EncodeKernels, FloatDivisionIsExact) {
  uint32_t x[16] = {}, f[16], quot[16], rem[16];
  std::fill(f, f + 16, 1u);  // lanes past n keep valid divisors
  if (!DivideForTest(GetParam(), x, f, quot, rem)) GTEST_SKIP() << "no " << KernelSetName(GetParam()) << " here";
  std::mt19937 rng(5);
  int n = 0;
  auto check = [&] {
    ASSERT_TRUE(DivideForTest(GetParam(), x, f, quot, rem));
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(quot[i], x[i] / f[i]) << x[i] << " / " << f[i];
      ASSERT_EQ(rem[i], x[i] % f[i]) << x[i] << " % " << f[i];
    }
    n = 0;
  };
  for (uint32_t d = 1; d <= kProbScale; ++d) {
    const uint64_t limit = uint64_t{d} << 20;  // x < f 2^20
    for (int k = 0; k < 48; ++k) {
      const uint64_t q = k < 16 ? k : k < 32 ? (limit / d) - (k - 15) : rng() % (limit / d);
      for (uint64_t v : {q * d, q * d + d - 1, q * d - 1, q * d + d / 2}) {
        if (v >= limit || v > 0xffffffffu || (q == 0 && v == q * d - 1)) continue;
        x[n] = uint32_t(v);
        f[n] = d;
        if (++n == 16) check();
      }
    }
  }
  for (int i = n; i < 16; ++i) x[i] = f[i] = 1;
  check();
}

}  // namespace
}  // namespace kvcast::kvcache::ac::internal
