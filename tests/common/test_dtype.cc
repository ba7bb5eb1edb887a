// DType names, sizes, predicates and dispatch; Half and BFloat16 conversions
// checked against an independent reference that rounds with double arithmetic.

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tdist/dtype.h"
#include "tdist/errors.h"
#include "tdist/half.h"

namespace tdist {
namespace {

// ---- DType ----------------------------------------------------------------

TEST(DType, NamesAndSizes) {
  struct Expected {
    DType dtype;
    const char* name;
    size_t size;
  };
  const Expected table[] = {
      {DType::kBool, "bool", 1},           {DType::kUInt8, "uint8", 1},
      {DType::kInt8, "int8", 1},           {DType::kInt16, "int16", 2},
      {DType::kInt32, "int32", 4},         {DType::kInt64, "int64", 8},
      {DType::kFloat16, "float16", 2},     {DType::kBFloat16, "bfloat16", 2},
      {DType::kFloat32, "float32", 4},     {DType::kFloat64, "float64", 8},
      {DType::kComplex64, "complex64", 8}, {DType::kComplex128, "complex128", 16},
  };
  ASSERT_EQ(kAllDTypes.size(), std::size(table));
  for (size_t i = 0; i < std::size(table); ++i) {
    EXPECT_EQ(kAllDTypes[i], table[i].dtype);
    EXPECT_STREQ(dtype_name(table[i].dtype), table[i].name);
    EXPECT_EQ(element_size(table[i].dtype), table[i].size) << table[i].name;
    EXPECT_EQ(parse_dtype(table[i].name), table[i].dtype);
  }
}

TEST(DType, InvalidEnumValue) {
  const DType bogus = static_cast<DType>(200);
  EXPECT_STREQ(dtype_name(bogus), "unknown");
  EXPECT_THROW(element_size(bogus), DistInvalidArgument);
  EXPECT_THROW(dispatch_dtype(bogus, [](auto) { return 0; }), DistInvalidArgument);
}

TEST(DType, ParseAliasesCaseInsensitive) {
  EXPECT_EQ(parse_dtype("half"), DType::kFloat16);
  EXPECT_EQ(parse_dtype("Half"), DType::kFloat16);
  EXPECT_EQ(parse_dtype("float"), DType::kFloat32);
  EXPECT_EQ(parse_dtype("FLOAT32"), DType::kFloat32);
  EXPECT_EQ(parse_dtype("double"), DType::kFloat64);
  EXPECT_EQ(parse_dtype("short"), DType::kInt16);
  EXPECT_EQ(parse_dtype("int"), DType::kInt32);
  EXPECT_EQ(parse_dtype("Long"), DType::kInt64);
  EXPECT_EQ(parse_dtype("cfloat"), DType::kComplex64);
  EXPECT_EQ(parse_dtype("cDouble"), DType::kComplex128);
  EXPECT_EQ(parse_dtype("byte"), DType::kUInt8);
  EXPECT_EQ(parse_dtype("char"), DType::kInt8);
  EXPECT_EQ(parse_dtype("BFloat16"), DType::kBFloat16);
  EXPECT_EQ(parse_dtype("BOOL"), DType::kBool);
}

TEST(DType, ParseRejectsUnknownNamesListingValidOnes) {
  for (const char* bad : {"", "float8", "int 32", "float32 ", "uint16", "complex"}) {
    try {
      parse_dtype(bad);
      ADD_FAILURE() << "parse_dtype accepted \"" << bad << "\"";
    } catch (const DistInvalidArgument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find('"' + std::string(bad) + '"'), std::string::npos) << message;
      EXPECT_NE(message.find("bfloat16"), std::string::npos) << message;
      EXPECT_NE(message.find("complex128"), std::string::npos) << message;
      EXPECT_NE(message.find("cdouble"), std::string::npos) << message;
    }
  }
}

TEST(DType, Predicates) {
  for (DType d : kAllDTypes) {
    const std::string name = dtype_name(d);
    const bool fp = name == "float16" || name == "bfloat16" || name == "float32" || name == "float64";
    const bool cx = name == "complex64" || name == "complex128";
    const bool integer =
        name == "uint8" || name == "int8" || name == "int16" || name == "int32" || name == "int64";
    EXPECT_EQ(is_floating_point(d), fp) << name;
    EXPECT_EQ(is_complex(d), cx) << name;
    EXPECT_EQ(is_integral(d, false), integer) << name;
    EXPECT_EQ(is_integral(d, true), integer || name == "bool") << name;
  }
}

TEST(DType, CompileTimeMapping) {
  static_assert(dtype_of<float>() == DType::kFloat32);
  static_assert(dtype_of<Half>() == DType::kFloat16);
  static_assert(dtype_of<std::complex<double>>() == DType::kComplex128);
  static_assert(std::is_same_v<cpp_type_t<DType::kBFloat16>, BFloat16>);
  static_assert(std::is_same_v<cpp_type_t<DType::kInt8>, int8_t>);
  static_assert(ElementType<int64_t> && !ElementType<uint16_t> && !ElementType<const float>);
  static_assert(std::is_trivially_copyable_v<Half> && std::is_trivially_copyable_v<BFloat16>);
  static_assert(Half(1.0f).bits == 0x3c00 && BFloat16(1.0f).bits == 0x3f80);
  SUCCEED();
}

TEST(DType, DispatchHandsTheMatchingType) {
  for (DType d : kAllDTypes) {
    const auto [size, round_trip] = dispatch_dtype(d, [](auto tag) {
      using T = typename decltype(tag)::type;
      return std::pair<size_t, DType>(sizeof(T), dtype_of<T>());
    });
    EXPECT_EQ(size, element_size(d)) << dtype_name(d);
    EXPECT_EQ(round_trip, d) << dtype_name(d);
  }
}

// ---- Reference 16-bit conversions -------------------------------------------
// Written from the definitions of the formats with double arithmetic, sharing
// nothing with the bit tricks in half.h.

float ref_half_to_float(uint16_t h) {
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  if (exponent == 0x1f) {
    return mantissa ? std::numeric_limits<float>::quiet_NaN()
                    : static_cast<float>(sign * std::numeric_limits<double>::infinity());
  }
  if (exponent == 0) return static_cast<float>(sign * std::ldexp(mantissa, -24));
  return static_cast<float>(sign * std::ldexp(1024 + mantissa, exponent - 25));
}

// Rounds |value| to a multiple of the ulp of its binade (exponent clamped at
// the smallest normal's, giving subnormals), ties to even via nearbyint; the
// pattern is then (binade << mantissa_bits) + rounded significand, which
// carries into the next binade and into infinity on its own.
uint16_t ref_round(float value, int mantissa_bits, int min_exponent, uint16_t inf_bits) {
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(value));
  if (std::isinf(a)) return sign | inf_bits;
  if (a == 0) return sign;
  const int e = std::max(std::ilogb(a), min_exponent);
  const double significand = std::nearbyint(std::ldexp(a, mantissa_bits - e));
  const int64_t bits =
      (static_cast<int64_t>(e - min_exponent) << mantissa_bits) + static_cast<int64_t>(significand);
  return static_cast<uint16_t>(sign | std::min<int64_t>(bits, inf_bits));
}

uint16_t ref_float_to_half(float value) {
  return ref_round(value, 10, -14, 0x7c00);
}
uint16_t ref_float_to_bfloat16(float value) {
  return ref_round(value, 7, -126, 0x7f80);
}

bool is_half_nan(uint16_t h) {
  return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}
bool is_bf16_nan(uint16_t b) {
  return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0;
}

float float_from_bits(uint32_t bits) {
  return std::bit_cast<float>(bits);
}

// ---- Half -------------------------------------------------------------------

TEST(Half, KnownPatterns) {
  EXPECT_EQ(Half(1.0f).bits, 0x3c00);
  EXPECT_EQ(Half(-2.0f).bits, 0xc000);
  EXPECT_EQ(Half(0.0f).bits, 0x0000);
  EXPECT_EQ(Half(-0.0f).bits, 0x8000);
  EXPECT_EQ(Half(65504.0f).bits, 0x7bff);  // largest finite
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to the even 1.
  EXPECT_EQ(Half(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  EXPECT_EQ(Half(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3c02);
  // Just above a tie rounds up.
  EXPECT_EQ(Half(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)).bits, 0x3c01);
  EXPECT_EQ(Half(65519.0f).bits, 0x7bff);
  EXPECT_EQ(Half(65520.0f).bits, 0x7c00);  // the tie above 65504 goes to inf
  EXPECT_EQ(Half(-65520.0f).bits, 0xfc00);
  EXPECT_EQ(Half(1e10f).bits, 0x7c00);
  EXPECT_EQ(Half(std::numeric_limits<float>::max()).bits, 0x7c00);
  EXPECT_EQ(Half(std::numeric_limits<float>::infinity()).bits, 0x7c00);
  EXPECT_EQ(Half(-std::numeric_limits<float>::infinity()).bits, 0xfc00);
  // Subnormals: multiples of 2^-24.
  EXPECT_EQ(Half(std::ldexp(1.0f, -14)).bits, 0x0400);  // smallest normal
  EXPECT_EQ(Half(std::ldexp(1.0f, -24)).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(Half(std::ldexp(1.0f, -25)).bits, 0x0000);  // tie to even (0)
  EXPECT_EQ(Half(std::ldexp(3.0f, -25)).bits, 0x0002);  // tie to even (2)
  EXPECT_EQ(Half(std::ldexp(5.0f, -26)).bits, 0x0001);  // 1.25 ulp
  EXPECT_EQ(Half(-std::ldexp(1023.0f, -24)).bits, 0x83ff);
  EXPECT_EQ(Half(std::numeric_limits<float>::denorm_min()).bits, 0x0000);
  EXPECT_EQ(Half(-std::numeric_limits<float>::denorm_min()).bits, 0x8000);
}

TEST(Half, NaNStaysQuietNaN) {
  for (uint32_t bits : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fbfffffu, 0x7f802000u}) {
    const Half h(float_from_bits(bits));
    EXPECT_TRUE(is_half_nan(h.bits)) << std::hex << bits << " -> " << h.bits;
    EXPECT_TRUE(h.bits & 0x0200) << "not quiet: " << std::hex << h.bits;
    EXPECT_EQ(h.bits & 0x8000, (bits >> 16) & 0x8000) << "sign lost";
  }
  // Half NaNs, signalling ones included, become quiet float NaNs.
  for (uint16_t bits : {0x7e00, 0x7c01, 0xfd00, 0x7fff}) {
    const float f = static_cast<float>(Half::from_bits(bits));
    EXPECT_TRUE(std::isnan(f)) << std::hex << bits;
    EXPECT_TRUE(std::bit_cast<uint32_t>(f) & 0x00400000u) << std::hex << bits;
    EXPECT_EQ(std::signbit(f), (bits & 0x8000) != 0);
  }
}

TEST(Half, EveryPatternDecodesExactlyAndRoundTrips) {
  for (uint32_t i = 0; i <= 0xffff; ++i) {
    const uint16_t bits = static_cast<uint16_t>(i);
    const float got = static_cast<float>(Half::from_bits(bits));
    const float want = ref_half_to_float(bits);
    if (is_half_nan(bits)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << bits;
      ASSERT_TRUE(is_half_nan(Half(got).bits)) << std::hex << bits;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << std::hex << bits;
      ASSERT_EQ(Half(got).bits, bits) << "round trip of " << std::hex << bits;
    }
  }
}

TEST(Half, RoundingMatchesReferenceAtEveryTie) {
  // For each pair of neighbouring positive halves: the exact midpoint (a
  // float, since halves have 11 significant bits) and the floats on either
  // side of it, with both signs.
  for (uint16_t bits = 0; bits < 0x7c00; ++bits) {
    const double lo = ref_half_to_float(bits);
    const double hi = bits + 1 == 0x7c00 ? 65536.0 : ref_half_to_float(bits + 1);
    const float mid = static_cast<float>((lo + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f), static_cast<float>(lo)}) {
      ASSERT_EQ(Half(f).bits, ref_float_to_half(f)) << f;
      ASSERT_EQ(Half(-f).bits, ref_float_to_half(-f)) << -f;
    }
  }
}

TEST(Half, RoundingMatchesReferenceOverFloatSweep) {
  // A stride coprime with 2^32 visits floats of every exponent and mantissa.
  uint32_t bits = 12345;
  for (int i = 0; i < 2000000; ++i, bits += 2147007u) {
    const float f = float_from_bits(bits);
    const uint16_t got = Half(f).bits;
    if (std::isnan(f)) {
      ASSERT_TRUE(is_half_nan(got)) << std::hex << bits;
    } else {
      ASSERT_EQ(got, ref_float_to_half(f)) << std::hex << bits << " " << f;
    }
  }
}

TEST(Half, ArrayConversions) {
  const std::vector<float> in = {1.0f, -0.5f, 65520.0f, std::ldexp(1.0f, -24), 3.0f};
  std::vector<Half> halves(in.size());
  float_to_half(in, halves);
  const uint16_t expected[] = {0x3c00, 0xb800, 0x7c00, 0x0001, 0x4200};
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(halves[i].bits, expected[i]) << i;
  std::vector<float> back(in.size());
  half_to_float(halves, back);
  EXPECT_EQ(back[1], -0.5f);
  EXPECT_TRUE(std::isinf(back[2]));
  std::vector<float> short_out(2);
  EXPECT_THROW(half_to_float(halves, short_out), DistInvalidArgument);
}

// ---- BFloat16 ---------------------------------------------------------------

TEST(BFloat16, KnownPatterns) {
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(BFloat16(-1.0f).bits, 0xbf80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to the even 1.
  EXPECT_EQ(BFloat16(1.00390625f).bits, 0x3f80);
  // 1 + 3 * 2^-8: halfway between 0x3f81 (odd) and 0x3f82 (even).
  EXPECT_EQ(BFloat16(1.01171875f).bits, 0x3f82);
  EXPECT_EQ(BFloat16(1.0078125f).bits, 0x3f81);  // exact
  EXPECT_EQ(BFloat16(std::nextafter(1.00390625f, 2.0f)).bits, 0x3f81);
  EXPECT_EQ(BFloat16(std::numeric_limits<float>::max()).bits, 0x7f80);  // rounds to inf
  EXPECT_EQ(BFloat16(float_from_bits(0x7f7f7fffu)).bits, 0x7f7f);
  EXPECT_EQ(BFloat16(float_from_bits(0x7f7f8000u)).bits, 0x7f80);  // tie, odd -> inf
  EXPECT_EQ(BFloat16(-std::numeric_limits<float>::infinity()).bits, 0xff80);
  // Subnormals round like everything else.
  EXPECT_EQ(BFloat16(float_from_bits(0x00018000u)).bits, 0x0002);  // tie, odd -> up
  EXPECT_EQ(BFloat16(float_from_bits(0x00008000u)).bits, 0x0000);  // tie, even -> down
  EXPECT_EQ(BFloat16(float_from_bits(0x80008001u)).bits, 0x8001);
  EXPECT_EQ(BFloat16(-0.0f).bits, 0x8000);
}

TEST(BFloat16, NaNStaysQuietNaN) {
  for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu}) {
    const BFloat16 b(float_from_bits(bits));
    EXPECT_TRUE(is_bf16_nan(b.bits)) << std::hex << bits << " -> " << b.bits;
    EXPECT_TRUE(b.bits & 0x0040) << std::hex << b.bits;
    EXPECT_EQ(b.bits & 0x8000, (bits >> 16) & 0x8000);
  }
  const float f = static_cast<float>(BFloat16::from_bits(0x7f81));  // signalling
  EXPECT_TRUE(std::isnan(f));
  EXPECT_TRUE(std::bit_cast<uint32_t>(f) & 0x00400000u);
}

TEST(BFloat16, EveryPatternDecodesExactly) {
  for (uint32_t i = 0; i <= 0xffff; ++i) {
    const uint16_t bits = static_cast<uint16_t>(i);
    const float got = static_cast<float>(BFloat16::from_bits(bits));
    if (is_bf16_nan(bits)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << bits;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(got), i << 16) << std::hex << bits;
      ASSERT_EQ(BFloat16(got).bits, bits);
    }
  }
}

TEST(BFloat16, RoundingMatchesReferenceOverFloatSweep) {
  uint32_t bits = 777;
  for (int i = 0; i < 2000000; ++i, bits += 2147007u) {
    const float f = float_from_bits(bits);
    const uint16_t got = BFloat16(f).bits;
    if (std::isnan(f)) {
      ASSERT_TRUE(is_bf16_nan(got)) << std::hex << bits;
    } else {
      ASSERT_EQ(got, ref_float_to_bfloat16(f)) << std::hex << bits << " " << f;
    }
  }
  // Every tie: low 16 bits exactly 0x8000.
  for (uint32_t high = 0; high < 0x7f80; high += 3) {
    const float f = float_from_bits((high << 16) | 0x8000u);
    ASSERT_EQ(BFloat16(f).bits, ref_float_to_bfloat16(f)) << std::hex << high;
  }
}

}  // namespace
}  // namespace tdist
