// ReduceOp validity and the reduction kernels, against a scalar reference
// written here from the spec (never by calling the kernels). About 840
// lines in one file: the reference (a third of it) belongs beside the
// tests that hold the kernels to it.

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "common/reduce_kernels.h"
#include "tdist/dtype.h"
#include "tdist/errors.h"
#include "tdist/half.h"
#include "tdist/reduce_op.h"

namespace tdist {

// Readable parameters in gtest output (found by argument-dependent lookup).
void PrintTo(DType dtype, std::ostream* os) {
  *os << dtype_name(dtype);
}

namespace {

using Kind = ReduceOp::Kind;

constexpr Kind kAllKinds[] = {ReduceOp::SUM,  ReduceOp::PRODUCT, ReduceOp::MIN,
                              ReduceOp::MAX,  ReduceOp::BAND,    ReduceOp::BOR,
                              ReduceOp::BXOR, ReduceOp::AVG,     ReduceOp::PREMUL_SUM};

constexpr int kWorldSize = 3;  // AVG divides by this in the matrix test

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// ---- Independent reference ----------------------------------------------------

// The spec's table of valid (dtype, op) pairs, restated by hand.
bool spec_valid(DType d, Kind k) {
  const bool is_bool = d == DType::kBool;
  const bool is_complex = d == DType::kComplex64 || d == DType::kComplex128;
  const bool is_int = d == DType::kUInt8 || d == DType::kInt8 || d == DType::kInt16 || d == DType::kInt32 ||
                      d == DType::kInt64;
  switch (k) {
    case ReduceOp::SUM:
      return true;
    case ReduceOp::BAND:
    case ReduceOp::BOR:
    case ReduceOp::BXOR:
      return is_int || is_bool;
    case ReduceOp::MIN:
    case ReduceOp::MAX:
    case ReduceOp::PRODUCT:
      return !is_complex;
    case ReduceOp::AVG:
    case ReduceOp::PREMUL_SUM:
      return !is_bool;
  }
  return false;
}

// Elements as the test stores them: bool as raw bytes (any nonzero is true).
template <typename T>
using Stored = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;

template <typename T>
constexpr bool kHalfLike = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <typename T>
constexpr bool kComplex = std::is_same_v<T, std::complex<float>> || std::is_same_v<T, std::complex<double>>;
template <typename T>
constexpr bool kInt = std::is_integral_v<T> && !std::is_same_v<T, bool>;

// 16-bit floats decoded and rounded from their definitions with double
// arithmetic (nearbyint ties to even), independent of half.h.
float ref_decode(Half h) {
  const double sign = (h.bits & 0x8000) ? -1.0 : 1.0;
  const int e = (h.bits >> 10) & 0x1f;
  const int m = h.bits & 0x3ff;
  if (e == 0x1f) return m ? NAN : static_cast<float>(sign * INFINITY);
  return static_cast<float>(sign * (e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25)));
}

float ref_decode(BFloat16 b) {
  const double sign = (b.bits & 0x8000) ? -1.0 : 1.0;
  const int e = (b.bits >> 7) & 0xff;
  const int m = b.bits & 0x7f;
  if (e == 0xff) return m ? NAN : static_cast<float>(sign * INFINITY);
  return static_cast<float>(sign * (e == 0 ? std::ldexp(m, -133) : std::ldexp(128 + m, e - 134)));
}

uint16_t ref_round(float value, int mantissa_bits, int min_exponent, uint16_t inf_bits) {
  if (std::isnan(value)) return static_cast<uint16_t>(inf_bits | 1);  // any NaN
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(value));
  if (std::isinf(a)) return sign | inf_bits;
  if (a == 0) return sign;
  const int e = std::max(std::ilogb(a), min_exponent);
  const int64_t bits = (static_cast<int64_t>(e - min_exponent) << mantissa_bits) +
                       static_cast<int64_t>(std::nearbyint(std::ldexp(a, mantissa_bits - e)));
  return static_cast<uint16_t>(sign | std::min<int64_t>(bits, inf_bits));
}

template <typename T>
T ref_encode(float value) {
  if constexpr (std::is_same_v<T, Half>) {
    return T::from_bits(ref_round(value, 10, -14, 0x7c00));
  } else {
    return T::from_bits(ref_round(value, 7, -126, 0x7f80));
  }
}

// Integer results wrap modulo 2^bits: compute in uint64 (exact modulo 2^64)
// and let the conversion to T reduce modulo 2^N (defined in C++20).
template <typename T>
T ref_wrap(uint64_t value) {
  return static_cast<T>(value);
}
template <typename T>
uint64_t as_u64(T v) {
  return static_cast<uint64_t>(static_cast<int64_t>(v));
}

template <typename T>
Stored<T> ref_binary(Kind k, Stored<T> a, Stored<T> b) {
  if constexpr (std::is_same_v<T, bool>) {
    const bool x = a != 0, y = b != 0;
    switch (k) {
      case ReduceOp::SUM:
      case ReduceOp::MAX:
      case ReduceOp::BOR:
        return x || y;
      case ReduceOp::PRODUCT:
      case ReduceOp::MIN:
      case ReduceOp::BAND:
        return x && y;
      case ReduceOp::BXOR:
        return x != y;
      default:
        break;
    }
  } else if constexpr (kInt<T>) {
    switch (k) {
      case ReduceOp::SUM:
      case ReduceOp::AVG:
      case ReduceOp::PREMUL_SUM:
        return ref_wrap<T>(as_u64(a) + as_u64(b));
      case ReduceOp::PRODUCT:
        return ref_wrap<T>(as_u64(a) * as_u64(b));
      case ReduceOp::MIN:
        return std::min(a, b);
      case ReduceOp::MAX:
        return std::max(a, b);
      case ReduceOp::BAND:
        return static_cast<T>(a & b);
      case ReduceOp::BOR:
        return static_cast<T>(a | b);
      case ReduceOp::BXOR:
        return static_cast<T>(a ^ b);
    }
  } else if constexpr (kHalfLike<T>) {
    const float x = ref_decode(a), y = ref_decode(b);
    switch (k) {
      case ReduceOp::SUM:
      case ReduceOp::AVG:
      case ReduceOp::PREMUL_SUM:
        return ref_encode<T>(x + y);
      case ReduceOp::PRODUCT:
        return ref_encode<T>(x * y);
      case ReduceOp::MIN:
        if (std::isnan(x)) return a;
        if (std::isnan(y)) return b;
        return y < x ? b : a;
      case ReduceOp::MAX:
        if (std::isnan(x)) return a;
        if (std::isnan(y)) return b;
        return y > x ? b : a;
      default:
        break;
    }
  } else if constexpr (kComplex<T>) {
    return T(a.real() + b.real(), a.imag() + b.imag());  // only sums are valid
  } else {
    switch (k) {
      case ReduceOp::SUM:
      case ReduceOp::AVG:
      case ReduceOp::PREMUL_SUM:
        return a + b;
      case ReduceOp::PRODUCT:
        return a * b;
      case ReduceOp::MIN:
        if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
        return std::fmin(a, b);
      case ReduceOp::MAX:
        if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
        return std::fmax(a, b);
      default:
        break;
    }
  }
  ADD_FAILURE() << "reference asked for an invalid pair";
  return Stored<T>{};
}

template <typename T>
T ref_scale(T x, double factor) {
  if constexpr (kInt<T>) {
    return ref_wrap<T>(as_u64(x) * static_cast<uint64_t>(static_cast<int64_t>(factor)));
  } else if constexpr (kHalfLike<T>) {
    return ref_encode<T>(ref_decode(x) * static_cast<float>(factor));
  } else if constexpr (std::is_same_v<T, std::complex<float>>) {
    return T(x.real() * static_cast<float>(factor), x.imag() * static_cast<float>(factor));
  } else if constexpr (std::is_same_v<T, std::complex<double>>) {
    return T(x.real() * factor, x.imag() * factor);
  } else {
    return static_cast<T>(x * static_cast<T>(factor));
  }
}

template <typename T>
T ref_divide(T x, int n) {
  if constexpr (kInt<T>) {
    return static_cast<T>(static_cast<int64_t>(x) / n);  // truncates toward zero
  } else if constexpr (kHalfLike<T>) {
    return ref_encode<T>(ref_decode(x) / static_cast<float>(n));
  } else if constexpr (kComplex<T>) {
    using R = typename T::value_type;
    return T(x.real() / static_cast<R>(n), x.imag() / static_cast<R>(n));
  } else {
    return x / static_cast<T>(n);
  }
}

// The whole pipeline for one element: premultiply, sum or op, finalize.
template <typename T>
Stored<T> ref_reduce(const ReduceOp& op, Stored<T> a, Stored<T> b) {
  if constexpr (!std::is_same_v<T, bool>) {
    if (op.kind == ReduceOp::PREMUL_SUM) {
      return ref_binary<T>(ReduceOp::SUM, ref_scale(a, op.premul_factor), ref_scale(b, op.premul_factor));
    }
    if (op.kind == ReduceOp::AVG) {
      return ref_divide(ref_binary<T>(ReduceOp::SUM, a, b), kWorldSize);
    }
  }
  return ref_binary<T>(op.kind, a, b);
}

// Equal values (NaN equals NaN; +0 equals -0 only for MIN/MAX ties, which
// pick either zero).
template <typename T>
bool same(Stored<T> x, Stored<T> y) {
  if constexpr (kHalfLike<T>) {
    const float fx = ref_decode(x), fy = ref_decode(y);
    return (std::isnan(fx) && std::isnan(fy)) || fx == fy;
  } else if constexpr (kComplex<T>) {
    auto eq = [](auto p, auto q) { return (std::isnan(p) && std::isnan(q)) || p == q; };
    return eq(x.real(), y.real()) && eq(x.imag(), y.imag());
  } else if constexpr (std::is_floating_point_v<T>) {
    return (std::isnan(x) && std::isnan(y)) || x == y;
  } else {
    return x == y;
  }
}

template <typename T>
std::string show(Stored<T> v) {
  if constexpr (kHalfLike<T>) {
    return std::to_string(ref_decode(v)) + " (bits " + std::to_string(v.bits) + ")";
  } else if constexpr (kComplex<T>) {
    return "(" + std::to_string(v.real()) + ", " + std::to_string(v.imag()) + ")";
  } else {
    return std::to_string(+v);
  }
}

// Random inputs covering the whole range: integers over all values (so sums
// and products overflow), 16-bit floats over all bit patterns (NaN, inf,
// subnormals included), wider floats mostly moderate with some specials.
template <typename T>
Stored<T> random_value(std::mt19937_64& rng) {
  if constexpr (std::is_same_v<T, bool>) {
    return static_cast<uint8_t>(rng() & 1);
  } else if constexpr (kInt<T>) {
    return static_cast<T>(rng());
  } else if constexpr (kHalfLike<T>) {
    return T::from_bits(static_cast<uint16_t>(rng()));
  } else if constexpr (kComplex<T>) {
    using R = typename T::value_type;
    std::uniform_real_distribution<R> dist(-1000, 1000);
    return T(dist(rng), dist(rng));
  } else {
    const uint64_t pick = rng() % 32;
    constexpr T kSpecial[] = {std::numeric_limits<T>::quiet_NaN(),
                              std::numeric_limits<T>::infinity(),
                              -std::numeric_limits<T>::infinity(),
                              0,
                              -T(0),
                              std::numeric_limits<T>::denorm_min(),
                              std::numeric_limits<T>::max()};
    if (pick < std::size(kSpecial)) return kSpecial[pick];
    std::uniform_real_distribution<T> dist(-1000, 1000);
    return dist(rng);
  }
}

double matrix_factor(DType d) {
  // Integers use the truncated factor (3); floats an inexact one.
  return is_integral(d, false) ? 3.7 : 0.37;
}

// ---- The dtype x op matrix ----------------------------------------------------

enum class Alias { kNone, kDstIsA, kDstIsB, kAll };

template <typename T>
void run_valid_case(DType dtype, const ReduceOp& op, size_t count, size_t offset, Alias alias,
                    std::mt19937_64& rng) {
  using S = Stored<T>;
  SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + reduce_op_name(op) + " count " + std::to_string(count) +
               " offset " + std::to_string(offset) + " alias " + std::to_string(static_cast<int>(alias)));
  constexpr size_t kGuard = 5;
  const size_t total = offset + count + kGuard;
  // Guard elements around the range must come out untouched.
  std::vector<S> a_buf(total), b_buf(total), d_buf(total);
  for (auto* buf : {&a_buf, &b_buf, &d_buf}) {
    for (auto& v : *buf) v = random_value<T>(rng);
  }
  const std::vector<S> a_orig = a_buf, b_orig = b_buf, d_orig = d_buf;

  S* a = a_buf.data() + offset;
  S* b = alias == Alias::kAll ? a : b_buf.data() + offset;
  S* dst = alias == Alias::kNone ? d_buf.data() + offset : alias == Alias::kDstIsB ? b : a;
  std::vector<S> expected(count);
  for (size_t i = 0; i < count; ++i) expected[i] = ref_reduce<T>(op, a[i], b[i]);

  if (op.kind == ReduceOp::PREMUL_SUM) {
    // In place for a, out of place into a scratch buffer for b (unless b is a).
    premultiply(a, count, dtype, op);
    if (b != a) {
      std::vector<S> scaled(count + 1);
      premultiply_into(scaled.data() + 1, b, count, dtype, op);
      std::copy(scaled.begin() + 1, scaled.end(), b);
    }
  }
  reduce_into(dst, a, b, count, dtype, op);
  finalize_reduce(dst, count, dtype, op, kWorldSize);

  int reported = 0;
  for (size_t i = 0; i < count && reported < 5; ++i) {
    if (!same<T>(expected[i], dst[i])) {
      ADD_FAILURE() << "element " << i << ": a=" << show<T>(a_orig[offset + i])
                    << " b=" << show<T>((alias == Alias::kAll ? a_orig : b_orig)[offset + i]) << " expected "
                    << show<T>(expected[i]) << " got " << show<T>(dst[i]);
      ++reported;
    }
  }
  // Nothing outside [offset, offset + count) of any buffer changed, and the
  // inputs that are not the destination kept their values (PREMUL_SUM scales
  // its inputs on purpose).
  auto untouched = [&](const std::vector<S>& now, const std::vector<S>& before, size_t from, size_t to,
                       const char* name) {
    for (size_t i = from; i < to; ++i) {
      ASSERT_TRUE(same<T>(now[i], before[i]))
          << name << "[" << i << "] changed (range starts at " << offset << ")";
    }
  };
  struct Buffer {
    const std::vector<S>* now;
    const std::vector<S>* before;
    const char* name;
  };
  for (const Buffer& buf :
       {Buffer{&a_buf, &a_orig, "a"}, Buffer{&b_buf, &b_orig, "b"}, Buffer{&d_buf, &d_orig, "dst"}}) {
    untouched(*buf.now, *buf.before, 0, offset, buf.name);
    untouched(*buf.now, *buf.before, offset + count, total, buf.name);
  }
  if (op.kind != ReduceOp::PREMUL_SUM) {
    if (alias == Alias::kNone) {
      untouched(a_buf, a_orig, 0, total, "a");
      untouched(b_buf, b_orig, 0, total, "b");
    } else if (alias == Alias::kDstIsA) {
      untouched(b_buf, b_orig, 0, total, "b");
    } else if (alias == Alias::kDstIsB) {
      untouched(a_buf, a_orig, 0, total, "a");
    }
  }
}

class ReduceMatrix : public ::testing::TestWithParam<std::tuple<DType, Kind>> {};

TEST_P(ReduceMatrix, MatchesReferenceOrThrows) {
  const DType dtype = std::get<0>(GetParam());
  const Kind kind = std::get<1>(GetParam());
  const ReduceOp op =
      kind == ReduceOp::PREMUL_SUM ? ReduceOp::premul_sum(matrix_factor(dtype)) : ReduceOp(kind);
  EXPECT_EQ(is_reduce_supported(dtype, op), spec_valid(dtype, kind));

  if (!spec_valid(dtype, kind)) {
    const std::string dname = dtype_name(dtype), oname = reduce_op_name(kind);
    // The message names the collective, the reduce op and the dtype.
    try {
      check_reduce_supported(dtype, op, "all_reduce");
      FAIL() << "check_reduce_supported accepted " << oname << " on " << dname;
    } catch (const DistInvalidArgument& e) {
      EXPECT_TRUE(contains(e.what(), "all_reduce") && contains(e.what(), oname) && contains(e.what(), dname))
          << e.what();
      EXPECT_TRUE(contains(e.what(), "(")) << "no reason given: " << e.what();
    }
    // The kernels refuse before touching memory.
    std::vector<unsigned char> a(64, 0x11), b(64, 0x22), d(64, 0x33);
    auto expect_refused = [&](auto call, const char* fn) {
      try {
        call();
        ADD_FAILURE() << fn << " accepted " << oname << " on " << dname;
      } catch (const DistInvalidArgument& e) {
        EXPECT_TRUE(contains(e.what(), fn) && contains(e.what(), oname) && contains(e.what(), dname))
            << e.what();
      }
    };
    expect_refused([&] { reduce_into(d.data(), a.data(), b.data(), 4, dtype, op); }, "reduce_into");
    expect_refused([&] { premultiply(a.data(), 4, dtype, op); }, "premultiply");
    expect_refused([&] { premultiply_into(d.data(), a.data(), 4, dtype, op); }, "premultiply_into");
    expect_refused([&] { finalize_reduce(d.data(), 4, dtype, op, 2); }, "finalize_reduce");
    expect_refused([&] { reduce_into(nullptr, nullptr, nullptr, 0, dtype, op); }, "reduce_into");
    EXPECT_EQ(a, std::vector<unsigned char>(64, 0x11));
    EXPECT_EQ(b, std::vector<unsigned char>(64, 0x22));
    EXPECT_EQ(d, std::vector<unsigned char>(64, 0x33));
    return;
  }

  std::mt19937_64 rng(static_cast<uint64_t>(dtype) * 131 + static_cast<uint64_t>(kind));
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000 + 17}}) {
      for (size_t offset : {size_t{0}, size_t{1}, size_t{3}}) {
        for (Alias alias : {Alias::kNone, Alias::kDstIsA, Alias::kDstIsB, Alias::kAll}) {
          run_valid_case<T>(dtype, op, count, offset, alias, rng);
          if (HasFatalFailure()) return;
        }
      }
    }
  });
  // Zero elements with null pointers is a valid no-op.
  reduce_into(nullptr, nullptr, nullptr, 0, dtype, op);
  premultiply(nullptr, 0, dtype, op);
  premultiply_into(nullptr, nullptr, 0, dtype, op);
  finalize_reduce(nullptr, 0, dtype, op, kWorldSize);
}

INSTANTIATE_TEST_SUITE_P(AllPairs, ReduceMatrix,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes), ::testing::ValuesIn(kAllKinds)),
                         [](const auto& param_info) {
                           return std::string(dtype_name(std::get<0>(param_info.param))) + "_" +
                                  reduce_op_name(std::get<1>(param_info.param));
                         });

// ---- ReduceOp -------------------------------------------------------------------

TEST(ReduceOp, ConstructionAndNames) {
  ReduceOp op = ReduceOp::MAX;
  EXPECT_EQ(op.kind, ReduceOp::MAX);
  EXPECT_STREQ(reduce_op_name(op), "MAX");
  const ReduceOp pre = ReduceOp::premul_sum(0.25);
  EXPECT_EQ(pre.kind, ReduceOp::PREMUL_SUM);
  EXPECT_EQ(pre.premul_factor, 0.25);
  EXPECT_EQ(ReduceOp(), ReduceOp(ReduceOp::SUM));
  EXPECT_FALSE(pre == ReduceOp::premul_sum(0.5));
  const char* names[] = {"SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "AVG", "PREMUL_SUM"};
  for (size_t i = 0; i < std::size(kAllKinds); ++i) {
    EXPECT_STREQ(reduce_op_name(kAllKinds[i]), names[i]);
  }
  EXPECT_STREQ(reduce_op_name(static_cast<Kind>(99)), "UNKNOWN");
  EXPECT_FALSE(is_reduce_supported(DType::kFloat32, static_cast<Kind>(99)));
}

TEST(ReduceOp, MessageExplainsWhy) {
  try {
    check_reduce_supported(DType::kFloat32, ReduceOp::BAND, "all_reduce");
    FAIL();
  } catch (const DistInvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "all_reduce: reduce op BAND is not defined for dtype float32 (bitwise ops need "
                 "an integer or bool tensor)");
  }
  try {
    check_reduce_supported(DType::kComplex128, ReduceOp::MAX, "reduce_scatter");
    FAIL();
  } catch (const DistInvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "reduce_scatter") && contains(e.what(), "complex128") &&
                contains(e.what(), "ordered"))
        << e.what();
  }
}

TEST(ReduceOp, IntegerPremulFactorMustFit) {
  EXPECT_TRUE(is_reduce_supported(DType::kInt8, ReduceOp::premul_sum(127.9)));
  EXPECT_TRUE(is_reduce_supported(DType::kInt8, ReduceOp::premul_sum(-128.5)));
  EXPECT_FALSE(is_reduce_supported(DType::kInt8, ReduceOp::premul_sum(128.0)));
  EXPECT_FALSE(is_reduce_supported(DType::kUInt8, ReduceOp::premul_sum(-1.0)));
  EXPECT_TRUE(is_reduce_supported(DType::kUInt8, ReduceOp::premul_sum(-0.5)));  // truncates to 0
  EXPECT_FALSE(is_reduce_supported(DType::kInt64, ReduceOp::premul_sum(9.3e18)));
  EXPECT_TRUE(is_reduce_supported(DType::kInt64, ReduceOp::premul_sum(-9.2e18)));
  EXPECT_FALSE(is_reduce_supported(DType::kInt32, ReduceOp::premul_sum(NAN)));
  EXPECT_FALSE(is_reduce_supported(DType::kInt32, ReduceOp::premul_sum(INFINITY)));
  // Floats take any factor.
  EXPECT_TRUE(is_reduce_supported(DType::kFloat16, ReduceOp::premul_sum(1e300)));
  try {
    check_reduce_supported(DType::kInt8, ReduceOp::premul_sum(300), "reduce");
    FAIL();
  } catch (const DistInvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "PREMUL_SUM") && contains(e.what(), "300") && contains(e.what(), "int8"))
        << e.what();
  }
}

// ---- Targeted kernel cases --------------------------------------------------------

template <typename T>
std::vector<T> run_reduce(const std::vector<T>& a, const std::vector<T>& b, DType d, ReduceOp op,
                          int world_size = 1) {
  std::vector<T> sa = a, sb = b, out(a.size());
  premultiply(sa.data(), sa.size(), d, op);
  premultiply(sb.data(), sb.size(), d, op);
  reduce_into(out.data(), sa.data(), sb.data(), out.size(), d, op);
  finalize_reduce(out.data(), out.size(), d, op, world_size);
  return out;
}

// Repeats a short pattern so that vector bodies and scalar tails both see it.
template <typename T>
std::vector<T> tile(std::vector<T> pattern, size_t n = 37) {
  std::vector<T> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = pattern[i % pattern.size()];
  return out;
}

TEST(ReduceKernels, IntegerWrapAround) {
  EXPECT_EQ(run_reduce<int8_t>(tile<int8_t>({127, -128, 100}), tile<int8_t>({1, -1, 100}), DType::kInt8,
                               ReduceOp::SUM),
            tile<int8_t>({-128, 127, -56}));
  EXPECT_EQ(run_reduce<int8_t>(tile<int8_t>({16, -128, 11}), tile<int8_t>({16, -1, 13}), DType::kInt8,
                               ReduceOp::PRODUCT),
            tile<int8_t>({0, -128, -113}));  // 256 -> 0, 128 -> -128, 143 -> -113
  EXPECT_EQ(run_reduce<uint8_t>(tile<uint8_t>({255, 200, 16}), tile<uint8_t>({1, 100, 16}), DType::kUInt8,
                                ReduceOp::SUM),
            tile<uint8_t>({0, 44, 32}));
  EXPECT_EQ(run_reduce<uint8_t>(tile<uint8_t>({255, 200, 16}), tile<uint8_t>({255, 2, 16}), DType::kUInt8,
                                ReduceOp::PRODUCT),
            tile<uint8_t>({1, 144, 0}));
  EXPECT_EQ(run_reduce<int16_t>(tile<int16_t>({32767, 300, -32768}), tile<int16_t>({1, 300, -32768}),
                                DType::kInt16, ReduceOp::SUM),
            tile<int16_t>({-32768, 600, 0}));
  EXPECT_EQ(run_reduce<int16_t>(tile<int16_t>({32767, 300, -32768}), tile<int16_t>({32767, 300, -1}),
                                DType::kInt16, ReduceOp::PRODUCT),
            tile<int16_t>({1, 24464, -32768}));
  const int32_t i32max = std::numeric_limits<int32_t>::max();
  const int32_t i32min = std::numeric_limits<int32_t>::min();
  EXPECT_EQ(run_reduce<int32_t>(tile<int32_t>({i32max, i32min, 5}), tile<int32_t>({1, -1, 6}), DType::kInt32,
                                ReduceOp::SUM),
            tile<int32_t>({i32min, i32max, 11}));
  EXPECT_EQ(run_reduce<int32_t>(tile<int32_t>({65536, 46341, i32min}), tile<int32_t>({65536, 46341, -1}),
                                DType::kInt32, ReduceOp::PRODUCT),
            tile<int32_t>({0, -2147479015, i32min}));
  const int64_t i64max = std::numeric_limits<int64_t>::max();
  const int64_t i64min = std::numeric_limits<int64_t>::min();
  const int64_t two62 = int64_t{1} << 62;
  EXPECT_EQ(run_reduce<int64_t>(tile<int64_t>({i64max, i64min, two62}), tile<int64_t>({1, -1, two62}),
                                DType::kInt64, ReduceOp::SUM),
            tile<int64_t>({i64min, i64max, i64min}));
  EXPECT_EQ(run_reduce<int64_t>(tile<int64_t>({int64_t{1} << 32, two62 + 1, i64min}),
                                tile<int64_t>({int64_t{1} << 32, 4, -1}), DType::kInt64, ReduceOp::PRODUCT),
            tile<int64_t>({0, 4, i64min}));
}

TEST(ReduceKernels, FloatSpecialValues) {
  const float inf = INFINITY, nan = NAN;
  const std::vector<float> a = tile<float>({inf, inf, nan, 1.0f, -inf, 0.0f, 2.0f});
  const std::vector<float> b = tile<float>({-inf, 1.0f, 1.0f, nan, 3.0f, inf, -inf});
  auto check = [&](ReduceOp op, const std::vector<float>& pattern) {
    const std::vector<float> got = run_reduce(a, b, DType::kFloat32, op);
    const std::vector<float> want = tile(pattern);
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::isnan(want[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << reduce_op_name(op) << " " << i << " " << got[i];
      } else {
        EXPECT_EQ(got[i], want[i]) << reduce_op_name(op) << " " << i;
      }
    }
  };
  check(ReduceOp::SUM, {nan, inf, nan, nan, -inf, inf, -inf});
  check(ReduceOp::PRODUCT, {-inf, inf, nan, nan, -inf, nan, -inf});
  check(ReduceOp::MIN, {-inf, 1.0f, nan, nan, -inf, 0.0f, -inf});
  check(ReduceOp::MAX, {inf, inf, nan, nan, 3.0f, inf, 2.0f});

  // The same through the other floating types.
  const std::vector<double> da = tile<double>({1.0, NAN, -INFINITY}), db = tile<double>({NAN, 2.0, 5.0});
  const std::vector<double> dmin = run_reduce(da, db, DType::kFloat64, ReduceOp::MIN);
  const std::vector<double> dmax = run_reduce(da, db, DType::kFloat64, ReduceOp::MAX);
  for (size_t i = 0; i < dmin.size(); ++i) {
    EXPECT_EQ(std::isnan(dmin[i]), i % 3 != 2) << i;
    EXPECT_EQ(std::isnan(dmax[i]), i % 3 != 2) << i;
  }
  EXPECT_EQ(dmin[2], -INFINITY);
  EXPECT_EQ(dmax[2], 5.0);

  const Half h_nan = Half::from_bits(0x7e00), h_one = Half::from_bits(0x3c00),
             h_inf = Half::from_bits(0x7c00), h_ninf = Half::from_bits(0xfc00);
  const std::vector<Half> ha = tile<Half>({h_nan, h_one, h_inf, h_inf});
  const std::vector<Half> hb = tile<Half>({h_one, h_nan, h_ninf, h_one});
  for (Kind k : {ReduceOp::SUM, ReduceOp::MIN, ReduceOp::MAX, ReduceOp::PRODUCT}) {
    const std::vector<Half> got = run_reduce(ha, hb, DType::kFloat16, k);
    for (size_t i = 0; i < got.size(); ++i) {
      const uint16_t bits = got[i].bits;
      const bool is_nan = (bits & 0x7c00) == 0x7c00 && (bits & 0x3ff);
      if (i % 4 < 2) {
        EXPECT_TRUE(is_nan) << reduce_op_name(k) << " " << i;
      }
    }
    if (k == ReduceOp::SUM) {
      EXPECT_TRUE((got[2].bits & 0x3ff) && (got[2].bits & 0x7c00) == 0x7c00);  // inf - inf
      EXPECT_EQ(got[3].bits, 0x7c00);
    } else if (k == ReduceOp::MIN) {
      EXPECT_EQ(got[2].bits, 0xfc00);
      EXPECT_EQ(got[3].bits, 0x3c00);
    } else if (k == ReduceOp::MAX) {
      EXPECT_EQ(got[2].bits, 0x7c00);
      EXPECT_EQ(got[3].bits, 0x7c00);
    } else {
      EXPECT_EQ(got[2].bits, 0xfc00);
      EXPECT_EQ(got[3].bits, 0x7c00);
    }
  }
}

TEST(ReduceKernels, HalfAndBFloat16RoundEachStep) {
  // 1 + 2^-11 is a tie in half: 1 + (2^-11) rounds to 1, so the sum stays 1.
  const std::vector<Half> a = tile<Half>({Half::from_bits(0x3c00)});
  const std::vector<Half> b = tile<Half>({Half::from_bits(0x1000)});  // 2^-11
  for (Half h : run_reduce(a, b, DType::kFloat16, ReduceOp::SUM)) EXPECT_EQ(h.bits, 0x3c00);
  // 65504 + 16 = 65520 rounds to inf.
  const std::vector<Half> big = tile<Half>({Half::from_bits(0x7bff)});
  const std::vector<Half> sixteen = tile<Half>({Half::from_bits(0x4c00)});
  for (Half h : run_reduce(big, sixteen, DType::kFloat16, ReduceOp::SUM)) EXPECT_EQ(h.bits, 0x7c00);
  // Smallest subnormal * 0.5 is a tie to 0; * 1.5 is a tie to 2 ulps.
  const std::vector<Half> tiny = tile<Half>({Half::from_bits(0x0001), Half::from_bits(0x0003)});
  const std::vector<Half> half_ = tile<Half>({Half::from_bits(0x3800), Half::from_bits(0x3800)});
  const std::vector<Half> p = run_reduce(tiny, half_, DType::kFloat16, ReduceOp::PRODUCT);
  EXPECT_EQ(p[0].bits, 0x0000);
  EXPECT_EQ(p[1].bits, 0x0002);
  // bfloat16: 1 + 2^-8 is a tie to 1; 1 + 3*2^-8 a tie to 1 + 2^-6.
  const std::vector<BFloat16> one = tile<BFloat16>({BFloat16::from_bits(0x3f80)});
  const std::vector<BFloat16> add =
      tile<BFloat16>({BFloat16::from_bits(0x3b80) /* 2^-8 */, BFloat16::from_bits(0x3c40) /* 3*2^-8 */});
  const std::vector<BFloat16> s = run_reduce(one, add, DType::kBFloat16, ReduceOp::SUM);
  EXPECT_EQ(s[0].bits, 0x3f80);
  EXPECT_EQ(s[1].bits, 0x3f82);
}

TEST(ReduceKernels, Average) {
  EXPECT_EQ(run_reduce<int32_t>({7, -7, 5, 0, -1}, {1, -1, 0, 0, 0}, DType::kInt32, ReduceOp::AVG, 3),
            (std::vector<int32_t>{2, -2, 1, 0, 0}));  // truncation toward zero
  EXPECT_EQ(run_reduce<int8_t>({100, -100}, {100, -100}, DType::kInt8, ReduceOp::AVG, 200),
            (std::vector<int8_t>{0, 0}));  // wrapped sum -56 / 200
  EXPECT_EQ(run_reduce<uint8_t>({200, 3}, {100, 4}, DType::kUInt8, ReduceOp::AVG, 2),
            (std::vector<uint8_t>{22, 3}));  // 300 wraps to 44
  EXPECT_EQ(run_reduce<int64_t>({int64_t{1} << 40, -9}, {0, 0}, DType::kInt64, ReduceOp::AVG, 1024),
            (std::vector<int64_t>{int64_t{1} << 30, 0}));
  EXPECT_EQ(run_reduce<float>({1, 2}, {2, 2}, DType::kFloat32, ReduceOp::AVG, 2),
            (std::vector<float>{1.5f, 2.0f}));
  EXPECT_EQ(run_reduce<double>({1}, {0}, DType::kFloat64, ReduceOp::AVG, 3),
            (std::vector<double>{1.0 / 3.0}));
  const std::vector<Half> h = run_reduce<Half>({Half::from_bits(0x3c00)}, {Half::from_bits(0x4000)},
                                               DType::kFloat16, ReduceOp::AVG, 2);
  EXPECT_EQ(h[0].bits, 0x3e00);  // (1 + 2) / 2 = 1.5
  const std::vector<std::complex<float>> c =
      run_reduce<std::complex<float>>({{1, -3}}, {{3, 1}}, DType::kComplex64, ReduceOp::AVG, 4);
  EXPECT_EQ(c[0], std::complex<float>(1.0f, -0.5f));
  // AVG needs a world size; other ops ignore it but still validate it.
  std::vector<float> v(3, 1.0f);
  EXPECT_THROW(finalize_reduce(v.data(), v.size(), DType::kFloat32, ReduceOp::AVG, 0), DistInvalidArgument);
  finalize_reduce(v.data(), v.size(), DType::kFloat32, ReduceOp::SUM, 4);
  EXPECT_EQ(v, std::vector<float>(3, 1.0f));
}

TEST(ReduceKernels, PremulSum) {
  EXPECT_EQ(run_reduce<int32_t>({3, -3, 1000000}, {4, 5, 1000000}, DType::kInt32, ReduceOp::premul_sum(2.9)),
            (std::vector<int32_t>{14, 4, 4000000}));  // factor truncates to 2
  EXPECT_EQ(run_reduce<int16_t>({3, 20000}, {4, 0}, DType::kInt16, ReduceOp::premul_sum(-1.5)),
            (std::vector<int16_t>{-7, -20000}));
  EXPECT_EQ(run_reduce<int8_t>({100}, {0}, DType::kInt8, ReduceOp::premul_sum(2)),
            (std::vector<int8_t>{-56}));  // 200 wraps
  EXPECT_EQ(run_reduce<float>({1, 2}, {3, -8}, DType::kFloat32, ReduceOp::premul_sum(0.5)),
            (std::vector<float>{2, -3}));
  EXPECT_EQ(run_reduce<double>({1}, {2}, DType::kFloat64, ReduceOp::premul_sum(0.1)),
            (std::vector<double>{1 * 0.1 + 2 * 0.1}));
  const std::vector<BFloat16> bf =
      run_reduce<BFloat16>({BFloat16::from_bits(0x4040)}, {BFloat16::from_bits(0x3f80)}, DType::kBFloat16,
                           ReduceOp::premul_sum(0.25));  // 3 * 0.25 + 1 * 0.25 = 1
  EXPECT_EQ(bf[0].bits, 0x3f80);
  const std::vector<std::complex<double>> c =
      run_reduce<std::complex<double>>({{1, 2}}, {{-3, 4}}, DType::kComplex128, ReduceOp::premul_sum(-2));
  EXPECT_EQ(c[0], std::complex<double>(4, -12));
  // premultiply_into copies for other ops and scales for PREMUL_SUM.
  std::vector<int32_t> src = {1, 2, 3}, dst(3);
  premultiply_into(dst.data(), src.data(), 3, DType::kInt32, ReduceOp::MAX);
  EXPECT_EQ(dst, src);
  premultiply_into(dst.data(), src.data(), 3, DType::kInt32, ReduceOp::premul_sum(-3));
  EXPECT_EQ(dst, (std::vector<int32_t>{-3, -6, -9}));
  EXPECT_EQ(src, (std::vector<int32_t>{1, 2, 3}));
  premultiply_into(src.data(), src.data(), 3, DType::kInt32, ReduceOp::premul_sum(10));
  EXPECT_EQ(src, (std::vector<int32_t>{10, 20, 30}));
  // A factor the integer type cannot hold is refused, memory untouched.
  EXPECT_THROW(premultiply(src.data(), 3, DType::kInt32, ReduceOp::premul_sum(1e10)), DistInvalidArgument);
  EXPECT_EQ(src, (std::vector<int32_t>{10, 20, 30}));
}

TEST(ReduceKernels, BoolTreatsAnyNonzeroByteAsTrue) {
  const std::vector<uint8_t> a = tile<uint8_t>({2, 4, 0, 0, 255});
  const std::vector<uint8_t> b = tile<uint8_t>({4, 0, 0, 7, 1});
  EXPECT_EQ(run_reduce(a, b, DType::kBool, ReduceOp::BAND), tile<uint8_t>({1, 0, 0, 0, 1}));
  EXPECT_EQ(run_reduce(a, b, DType::kBool, ReduceOp::BXOR), tile<uint8_t>({0, 1, 0, 1, 0}));
  EXPECT_EQ(run_reduce(a, b, DType::kBool, ReduceOp::SUM), tile<uint8_t>({1, 1, 0, 1, 1}));
  EXPECT_EQ(run_reduce(a, b, DType::kBool, ReduceOp::MIN), tile<uint8_t>({1, 0, 0, 0, 1}));
}

// dst == a, dst == b and distinct buffers give the same bits: the operand
// order is kept, which decides which signed zero or NaN payload MIN/MAX
// return. (SUM and PRODUCT results are exact values whatever the order;
// only the payload of a NaN they produce is left to the compiler, which
// may commute their operands, so those are compared as "both NaN".)
template <typename T, typename Bits, typename IsNan>
void expect_alias_independent(DType dtype, std::vector<T> a, std::vector<T> b, Bits bits, IsNan is_nan) {
  for (Kind k : {ReduceOp::SUM, ReduceOp::PRODUCT, ReduceOp::MIN, ReduceOp::MAX}) {
    std::vector<T> plain(a.size()), into_a = a, into_b = b;
    reduce_into(plain.data(), a.data(), b.data(), a.size(), dtype, k);
    reduce_into(into_a.data(), into_a.data(), b.data(), a.size(), dtype, k);
    reduce_into(into_b.data(), a.data(), into_b.data(), a.size(), dtype, k);
    const bool exact_bits = k == ReduceOp::MIN || k == ReduceOp::MAX;
    for (size_t i = 0; i < a.size(); ++i) {
      for (const T& got : {into_a[i], into_b[i]}) {
        if (exact_bits || !is_nan(plain[i])) {
          EXPECT_EQ(bits(plain[i]), bits(got)) << dtype_name(dtype) << " " << reduce_op_name(k) << " " << i;
        } else {
          EXPECT_TRUE(is_nan(got)) << dtype_name(dtype) << " " << reduce_op_name(k) << " " << i;
        }
      }
    }
  }
}

TEST(ReduceKernels, AliasingKeepsOperandOrderBitwise) {
  const float nan1 = std::bit_cast<float>(0x7fc00001u), nan2 = std::bit_cast<float>(0xffc00002u);
  expect_alias_independent<float>(
      DType::kFloat32, tile<float>({0.0f, -0.0f, nan1, 1.0f, nan1}),
      tile<float>({-0.0f, 0.0f, nan2, nan2, 1.0f}), [](float v) { return std::bit_cast<uint32_t>(v); },
      [](float v) { return std::isnan(v); });
  const double dnan1 = std::bit_cast<double>(0x7ff8000000000001ull);
  const double dnan2 = std::bit_cast<double>(0xfff8000000000002ull);
  expect_alias_independent<double>(
      DType::kFloat64, tile<double>({0.0, -0.0, dnan1}), tile<double>({-0.0, 0.0, dnan2}),
      [](double v) { return std::bit_cast<uint64_t>(v); }, [](double v) { return std::isnan(v); });
  expect_alias_independent<Half>(
      DType::kFloat16,
      tile<Half>({Half::from_bits(0x0000), Half::from_bits(0x8000), Half::from_bits(0x7e01)}),
      tile<Half>({Half::from_bits(0x8000), Half::from_bits(0x0000), Half::from_bits(0xfe02)}),
      [](Half v) { return v.bits; }, [](Half v) { return (v.bits & 0x7fff) > 0x7c00; });
}

TEST(ReduceKernels, AliasingAccumulatesLikeAnAllReduce) {
  // Folding four ranks' buffers into the first, as a ring step would.
  std::vector<std::vector<float>> ranks = {{1, 2, 3}, {10, 20, 30}, {100, 200, 300}, {0, 0, 1}};
  for (size_t r = 1; r < ranks.size(); ++r) {
    reduce_into(ranks[0].data(), ranks[0].data(), ranks[r].data(), 3, DType::kFloat32, ReduceOp::AVG);
  }
  finalize_reduce(ranks[0].data(), 3, DType::kFloat32, ReduceOp::AVG, 4);
  EXPECT_EQ(ranks[0], (std::vector<float>{111.0f / 4, 222.0f / 4, 334.0f / 4}));
  EXPECT_EQ(ranks[1], (std::vector<float>{10, 20, 30}));
}

}  // namespace
}  // namespace tdist

// The one-pass float32 sum of 2-8 sources gives exactly the bits of the
// left-to-right sum, rounded to float at every step, at every length
// around the vector widths and at unaligned starts; other counts of sources
// are refused.
TEST(ReduceKernels, Float32SumOfSourcesIsTheLeftToRightSum) {
  std::mt19937 rng(7);
  // Magnitudes far apart, so that the order of additions changes the bits.
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  for (int n = 2; n <= 8; ++n) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{16}, size_t{33}, size_t{1000}}) {
      for (size_t offset : {size_t{0}, size_t{1}}) {
        std::vector<std::vector<float>> sources(static_cast<size_t>(n), std::vector<float>(count + offset));
        for (auto& source : sources) {
          for (float& x : source) x = std::ldexp(mantissa(rng), exponent(rng));
        }
        if (count > 0) sources[0][offset] = NAN;  // a NaN poisons its element
        std::vector<const float*> pointers;
        pointers.reserve(sources.size());
        for (auto& source : sources) pointers.push_back(source.data() + offset);
        std::vector<float> got(count + offset, -1.0f);
        ASSERT_TRUE(tdist::sum_float32_sources(got.data() + offset, pointers.data(), n, count));
        for (size_t i = 0; i < count; ++i) {
          volatile float want = sources[0][offset + i];  // volatile: one float rounding per step
          for (int j = 1; j < n; ++j) want = want + sources[static_cast<size_t>(j)][offset + i];
          const float w = want;
          if (std::isnan(w)) {
            EXPECT_TRUE(std::isnan(got[offset + i])) << n << " sources, element " << i;
          } else {
            EXPECT_EQ(std::bit_cast<uint32_t>(got[offset + i]), std::bit_cast<uint32_t>(w))
                << n << " sources, element " << i << ": " << got[offset + i] << " instead of " << w;
          }
        }
      }
    }
  }
  float dst = 0;
  const float one = 1;
  const float* single[] = {&one};
  EXPECT_FALSE(tdist::sum_float32_sources(&dst, single, 1, 1));
  std::vector<const float*> nine(9, &one);
  EXPECT_FALSE(tdist::sum_float32_sources(&dst, nine.data(), 9, 1));
  EXPECT_EQ(dst, 0.0f);
}
