// BigInt against values computed independently: Python's own results
// (pasted below), __int128 arithmetic for operands of 64 bits, glibc's
// correctly rounded strtod, and identities on random operands of up to
// 1,000 bits (Python's floor division and modulo, decimal round trips).
#include "engine/chat/internal/bigint.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace kvcast {
namespace jinja_internal {
namespace {

BigInt Parse(const std::string& text) {
  const bool negative = !text.empty() && text[0] == '-';
  std::optional<BigInt> v = BigInt::FromDigits(negative ? text.substr(1) : text, 10);
  EXPECT_TRUE(v.has_value()) << text;
  return negative ? -*v : *v;
}

std::string Int128Text(__int128 v) {
  if (v == 0) return "0";
  const bool negative = v < 0;
  unsigned __int128 u = negative ? -static_cast<unsigned __int128>(v) : static_cast<unsigned __int128>(v);
  std::string out;
  for (; u != 0; u /= 10) out.insert(out.begin(), static_cast<char>('0' + static_cast<int>(u % 10)));
  return negative ? "-" + out : out;
}

// A random integer of up to `max_bits` bits, either sign, often with runs
// of 0 and 1 bits (the edges of carries and of quotient estimates).
BigInt RandomBigInt(std::mt19937_64& rng, int max_bits) {
  const int bits = 1 + static_cast<int>(rng() % max_bits);
  std::string hex;
  for (int i = 0; i < (bits + 3) / 4; ++i) {
    const uint64_t kind = rng() % 4;
    hex.push_back(kind == 0 ? '0' : kind == 1 ? 'f' : "0123456789abcdef"[rng() % 16]);
  }
  BigInt v = *BigInt::FromDigits(hex, 16);
  return rng() % 2 ? -v : v;
}

TEST(BigIntTest, MatchesPython) {
  const BigInt a = Parse("123456789012345678901234567890");
  const BigInt b = Parse("-987654321098765432109876543210");
  EXPECT_EQ((a * b).ToString(), "-121932631137021795226185032733622923332237463801111263526900");
  EXPECT_EQ((a + b).ToString(), "-864197532086419753208641975320");
  EXPECT_EQ((a - b).ToString(), "1111111110111111111011111111100");
  EXPECT_EQ(BigInt(2).Pow(100).ToString(), "1267650600228229401496703205376");
  EXPECT_EQ(BigInt(3).Pow(200).ToString(),
            "265613988875874769338781322035779626829233452653394495974574961739092490901302182994384699044001");
  EXPECT_EQ(BigInt(-3).Pow(3).ToString(), "-27");
  EXPECT_EQ(BigInt(7).Pow(0).ToString(), "1");
  EXPECT_EQ((BigInt(2).Pow(127) - BigInt(1)).ToString(16), "7fffffffffffffffffffffffffffffff");
  EXPECT_EQ(BigInt(2).Pow(90).ToString(8), "1000000000000000000000000000000");
  EXPECT_EQ(BigInt::FromDigits("zzzzzzzzzzzzzzzzzzzz", 36)->ToString(), "13367494538843734067838845976575");
  EXPECT_EQ(BigInt::FromDigits("ZZZZZZZZZZZZZZZZZZZZ", 36)->ToString(36), "zzzzzzzzzzzzzzzzzzzz");
  EXPECT_EQ(BigInt::FromDouble(1e300).ToString(),
            "1000000000000000052504760255204420248704468581108159154915854115511802457988908195786371375080447864"
            "0437044438328838781769425232353604305756447921847867069828483872009265758037378302337947880900593689"
            "53234970799945081119038967640880074652742780142494579258788820056842838115669472196386865459400540160");
  EXPECT_EQ(BigInt::FromDouble(-2.75).ToString(), "-2");
  EXPECT_EQ(BigInt::FromDouble(-0.5).ToString(), "0");
  EXPECT_FALSE(BigInt::FromDouble(-0.5).negative());
  EXPECT_FALSE(BigInt::FromDigits("", 10).has_value());
  EXPECT_FALSE(BigInt::FromDigits("12a", 10).has_value());
  EXPECT_FALSE(BigInt::FromDigits("-1", 10).has_value());
  EXPECT_EQ(BigInt::FromDigits("000", 10)->ToString(), "0");
}

// Python's floor division and modulo: the remainder has the divisor's sign.
TEST(BigIntTest, FloorDivisionAndModuloAsPython) {
  struct Case {
    const char *a, *b, *q, *r;
  };
  const Case cases[] = {
      {"-1606938044258990275541962092341162602522202993782792835289031", "717897987691852588770249",
       "-2238393297946874000179418290327143434", "468230674383506259606035"},
      {"-1606938044258990275541962092341162602522202993782792835289031", "-717897987691852588770249",
       "2238393297946874000179418290327143433", "-249667313308346329164214"},
      {"1606938044258990275541962092341162602522202993782792835289031", "717897987691852588770249",
       "2238393297946874000179418290327143433", "249667313308346329164214"},
      {"1606938044258990275541962092341162602522202993782792835289031", "-717897987691852588770249",
       "-2238393297946874000179418290327143434", "-468230674383506259606035"},
      {"-18446744073709551616", "7", "-2635249153387078803", "5"},
      {"7", "-18446744073709551616", "-1", "-18446744073709551609"},
      {"-7", "18446744073709551616", "-1", "18446744073709551609"},
      {"18446744073709551616", "18446744073709551616", "1", "0"},
      {"5", "18446744073709551616", "0", "5"},
      // A quotient limb whose estimate is one too large even after the two
      // limb check: the step that adds the divisor back.
      {"170141183539696185329355398719255609344", "79226953606891185567397052414", "2147516416",
       "79226953597667954270178181120"},
  };
  for (const Case& c : cases) {
    BigInt q, r;
    BigInt::DivMod(Parse(c.a), Parse(c.b), &q, &r);
    EXPECT_EQ(q.ToString(), c.q) << c.a << " // " << c.b;
    EXPECT_EQ(r.ToString(), c.r) << c.a << " % " << c.b;
  }
}

// Operands of 64 bits against __int128, the floor rules written out again.
TEST(BigIntTest, SmallOperandsMatchInt128) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 20000; ++trial) {
    const int64_t x = static_cast<int64_t>(rng()) >> (rng() % 64);
    const int64_t y = static_cast<int64_t>(rng()) >> (rng() % 64);
    const BigInt a(x), b(y);
    EXPECT_EQ((a + b).ToString(), Int128Text(__int128{x} + y));
    EXPECT_EQ((a - b).ToString(), Int128Text(__int128{x} - y));
    EXPECT_EQ((a * b).ToString(), Int128Text(__int128{x} * y));
    EXPECT_EQ(Compare(a, b), (x > y) - (x < y));
    EXPECT_EQ(a.ToInt64(), x);
    if (y == 0) continue;
    __int128 q = __int128{x} / y, r = __int128{x} % y;
    if (r != 0 && ((r < 0) != (y < 0))) {
      q -= 1;
      r += y;
    }
    BigInt bq, br;
    BigInt::DivMod(a, b, &bq, &br);
    ASSERT_EQ(bq.ToString(), Int128Text(q)) << x << " // " << y;
    ASSERT_EQ(br.ToString(), Int128Text(r)) << x << " % " << y;
  }
}

TEST(BigIntTest, Int64Edges) {
  EXPECT_EQ(BigInt(INT64_MIN).ToString(), "-9223372036854775808");
  EXPECT_EQ(BigInt(INT64_MIN).ToInt64(), INT64_MIN);
  EXPECT_EQ(BigInt(INT64_MAX).ToInt64(), INT64_MAX);
  EXPECT_FALSE((BigInt(INT64_MAX) + BigInt(1)).ToInt64().has_value());
  EXPECT_FALSE((BigInt(INT64_MIN) - BigInt(1)).ToInt64().has_value());
  EXPECT_EQ((-BigInt(INT64_MIN)).ToString(), "9223372036854775808");
  EXPECT_EQ(BigInt(INT64_MIN).BitLength(), 64);
  EXPECT_EQ(BigInt(0).BitLength(), 0);
  EXPECT_EQ(BigInt(-1).BitLength(), 1);
  EXPECT_EQ(BigInt(2).Pow(4095).BitLength(), 4096);
  EXPECT_TRUE(BigInt(-7).is_odd());
  EXPECT_FALSE(BigInt(2).Pow(70).is_odd());
}

// Random operands of up to 1,000 bits: (a * b) // b == a, a == (a // b) * b
// + a % b with 0 <= |a % b| < |b| of b's sign, a + b - b == a, powers as
// repeated products, and digits that read back as the same number.
TEST(BigIntTest, RandomIdentities) {
  std::mt19937_64 rng(20240726);
  for (int trial = 0; trial < 3000; ++trial) {
    const BigInt a = RandomBigInt(rng, 1000);
    const BigInt b = RandomBigInt(rng, 1 + static_cast<int>(rng() % 1000));
    EXPECT_EQ(a + b - b, a);
    EXPECT_EQ(a - b + b, a);
    EXPECT_EQ(a * b, b * a);
    if (b.is_zero()) continue;
    BigInt q, r;
    BigInt::DivMod(a * b, b, &q, &r);
    ASSERT_EQ(q, a) << a.ToString() << " * " << b.ToString();
    ASSERT_TRUE(r.is_zero());
    BigInt::DivMod(a, b, &q, &r);
    ASSERT_EQ(q * b + r, a) << a.ToString() << " // " << b.ToString();
    ASSERT_LT(Compare(r.Abs(), b.Abs()), 0);
    ASSERT_TRUE(r.is_zero() || r.negative() == b.negative()) << a.ToString() << " % " << b.ToString();
    for (int base : {2, 8, 10, 16, 36}) {
      const std::string text = a.ToString(base);
      const bool negative = text[0] == '-';
      const BigInt back = *BigInt::FromDigits(negative ? text.substr(1) : text, base);
      ASSERT_EQ(negative ? -back : back, a) << text;
    }
  }
  for (int trial = 0; trial < 200; ++trial) {
    const BigInt x = RandomBigInt(rng, 150);
    EXPECT_EQ(x.Pow(5), x * x * x * x * x);
  }
}

// The nearest double, ties to even, as glibc's strtod reads the decimal
// digits; +-inf beyond the range (2^1024 - 2^970 is the tie above DBL_MAX).
TEST(BigIntTest, ToDoubleRoundsAsStrtod) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 5000; ++trial) {
    BigInt x = RandomBigInt(rng, 1100);
    if (trial % 2 == 0) {  // 54 bits ending in 1, shifted: a tie, or next to one.
      const BigInt tie(static_cast<int64_t>((rng() >> 10) | (uint64_t{1} << 53) | 1));
      x = tie * BigInt(2).Pow(rng() % 1000) + BigInt(static_cast<int64_t>(rng() % 3) - 1);
    }
    const std::string text = x.ToString();
    ASSERT_EQ(x.ToDouble(), std::strtod(text.c_str(), nullptr)) << text;
  }
  // 2^53 + 1 is a tie between 2^53 and 2^53 + 2: to the even 2^53.
  EXPECT_EQ((BigInt(2).Pow(53) + BigInt(1)).ToDouble(), 9007199254740992.0);
  EXPECT_EQ((BigInt(2).Pow(53) + BigInt(3)).ToDouble(), 9007199254740996.0);
  EXPECT_EQ((BigInt(2).Pow(1024) - BigInt(2).Pow(971)).ToDouble(), 1.7976931348623157e308);
  EXPECT_EQ((BigInt(2).Pow(1024) - BigInt(2).Pow(970)).ToDouble(), HUGE_VAL);
  EXPECT_EQ((-BigInt(2).Pow(1100)).ToDouble(), -HUGE_VAL);
}

// a / b rounded once: |a - r * b| is at most half of r's last place times
// |b|, checked exactly, and a tie goes to the even neighbour.
TEST(BigIntTest, DivideRoundsOnce) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 5000; ++trial) {
    const BigInt a = RandomBigInt(rng, 1 + static_cast<int>(rng() % 1500));
    const BigInt b = RandomBigInt(rng, 1 + static_cast<int>(rng() % 1500));
    if (b.is_zero()) continue;
    const double r = BigInt::Divide(a, b);
    if (std::isinf(r) || r == 0) continue;
    int exponent = 0;
    const double fraction = std::frexp(r, &exponent);
    const int e = std::max(exponent - 53, -1074);  // r = m * 2^e.
    const BigInt m = BigInt::FromDouble(std::ldexp(fraction, exponent - e));
    const BigInt scale = BigInt(2).Pow(std::abs(e));
    // 2^-e * (a - m * 2^e * b), in whole numbers.
    const BigInt error = e >= 0 ? a - m * scale * b : a * scale - m * b;
    const BigInt twice = (error + error).Abs();
    const BigInt limit = e >= 0 ? scale * b.Abs() : b.Abs();
    const int c = Compare(twice, limit);
    ASSERT_LE(c, 0) << a.ToString() << " / " << b.ToString() << " = " << r;
    if (c == 0) {
      EXPECT_FALSE(m.is_odd()) << a.ToString() << " / " << b.ToString();
    }
  }
  EXPECT_EQ(BigInt::Divide(BigInt(2).Pow(1100), BigInt(2).Pow(1099)), 2.0);
  EXPECT_EQ(BigInt::Divide(BigInt(1), BigInt(2).Pow(1074)), 4.9406564584124654e-324);
  EXPECT_EQ(BigInt::Divide(BigInt(1), BigInt(2).Pow(1075)), 0.0);                      // A tie: to 0.
  EXPECT_EQ(BigInt::Divide(BigInt(3), BigInt(2).Pow(1076)), 4.9406564584124654e-324);  // 0.75 of the least.
  EXPECT_TRUE(std::signbit(BigInt::Divide(BigInt(0), BigInt(-5))));
  EXPECT_EQ(BigInt::Divide(BigInt(2).Pow(1100), BigInt(3)), HUGE_VAL);
}

TEST(BigIntTest, CompareToDoubleExactly) {
  const BigInt two53 = BigInt(2).Pow(53);
  EXPECT_EQ((two53 + BigInt(1)).CompareToDouble(9007199254740992.0), 1);
  EXPECT_EQ(two53.CompareToDouble(9007199254740992.0), 0);
  EXPECT_EQ((-BigInt(2).Pow(64)).CompareToDouble(-18446744073709551616.0), 0);
  EXPECT_EQ(BigInt(5).CompareToDouble(5.5), -1);
  EXPECT_EQ(BigInt(-5).CompareToDouble(-5.5), 1);
  EXPECT_EQ(BigInt(-6).CompareToDouble(-5.5), -1);
  EXPECT_EQ(BigInt(2).Pow(1100).CompareToDouble(1e308), 1);
  EXPECT_EQ(BigInt(2).Pow(1100).CompareToDouble(HUGE_VAL), -1);
  EXPECT_EQ((-BigInt(2).Pow(1100)).CompareToDouble(-HUGE_VAL), 1);
}

}  // namespace
}  // namespace jinja_internal
}  // namespace kvcast
