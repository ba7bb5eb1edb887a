#include "reduce_kernels.h"

#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "tdist/errors.h"
#include "tdist/half.h"

// Vectorisation, checked with -O3 -fopt-info-vec-optimized and the vect
// tree dump per instantiation (GCC 12, x86-64 baseline SSE2): accumulate(),
// accumulate_right() and combine() vectorise for every valid op on float32, float64, float16,
// bfloat16, int8/16/32, uint8 and bool, complex SUM, and int64 SUM and the
// bitwise ops (float32 SUM and int32 SUM included, the ones that matter
// most). int64 MIN/MAX/PRODUCT stay scalar: SSE2 has no 64-bit compare or
// multiply (they vectorise with -msse4.2 / -mavx512dq). scale_*() vectorise
// except for int64; AVG's integer division stays scalar (no vector divide).

namespace tdist {

namespace {

template <typename T>
constexpr bool kIsHalfLike = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <typename T>
constexpr bool kIsComplex = std::is_same_v<T, std::complex<float>> || std::is_same_v<T, std::complex<double>>;

// bool is reduced as bytes (reduce_bool), so it is no integer here.
template <typename T>
constexpr bool kIsInteger = std::is_integral_v<T> && !std::is_same_v<T, bool>;

// Signed overflow is undefined behaviour; unsigned arithmetic wraps. Integer
// SUM and PRODUCT therefore run in an unsigned type at least as wide as
// unsigned int (a narrower one would promote to signed int, where a product
// can overflow) and convert back, which C++20 defines as modulo 2^N.
template <typename T>
using WrapType = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <typename T>
T wrap_add(T a, T b) {
  return static_cast<T>(static_cast<WrapType<T>>(a) + static_cast<WrapType<T>>(b));
}

template <typename T>
T wrap_mul(T a, T b) {
  return static_cast<T>(static_cast<WrapType<T>>(a) * static_cast<WrapType<T>>(b));
}

struct SumFn {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (kIsInteger<T>) {
      return wrap_add(a, b);
    } else if constexpr (kIsHalfLike<T>) {
      return T(static_cast<float>(a) + static_cast<float>(b));
    } else {
      return a + b;
    }
  }
};

struct ProductFn {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (kIsInteger<T>) {
      return wrap_mul(a, b);
    } else if constexpr (kIsHalfLike<T>) {
      return T(static_cast<float>(a) * static_cast<float>(b));
    } else {
      return a * b;
    }
  }
};

// MIN and MAX propagate NaN like torch.minimum/maximum: `a` is kept when it
// wins or is NaN, otherwise `b` (which may be the NaN). The non-short-circuit
// `|` keeps the body free of branches, so it becomes vector compares and
// selects. Half types compare as floats but return an input unchanged,
// picked by bit masks: a ternary on 16-bit structs chosen by 32-bit compares
// would not vectorise.
struct MinFn {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (kIsInteger<T>) {
      return a < b ? a : b;
    } else if constexpr (kIsHalfLike<T>) {
      const float fa = static_cast<float>(a);
      const float fb = static_cast<float>(b);
      return T::from_bits(
          static_cast<uint16_t>(detail::select_bits((fa < fb) | std::isnan(fa), a.bits, b.bits)));
    } else {
      return ((a < b) | std::isnan(a)) ? a : b;
    }
  }
};

struct MaxFn {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (kIsInteger<T>) {
      return a > b ? a : b;
    } else if constexpr (kIsHalfLike<T>) {
      const float fa = static_cast<float>(a);
      const float fb = static_cast<float>(b);
      return T::from_bits(
          static_cast<uint16_t>(detail::select_bits((fa > fb) | std::isnan(fa), a.bits, b.bits)));
    } else {
      return ((a > b) | std::isnan(a)) ? a : b;
    }
  }
};

struct BandFn {
  template <typename T>
  T operator()(T a, T b) const {
    return static_cast<T>(a & b);
  }
};

struct BorFn {
  template <typename T>
  T operator()(T a, T b) const {
    return static_cast<T>(a | b);
  }
};

struct BxorFn {
  template <typename T>
  T operator()(T a, T b) const {
    return static_cast<T>(a ^ b);
  }
};

// bool as bytes: any nonzero byte is true, results are 0 or 1.
struct BoolOrFn {
  uint8_t operator()(uint8_t a, uint8_t b) const { return static_cast<uint8_t>((a | b) != 0); }
};

struct BoolAndFn {
  uint8_t operator()(uint8_t a, uint8_t b) const { return static_cast<uint8_t>((a != 0) & (b != 0)); }
};

struct BoolXorFn {
  uint8_t operator()(uint8_t a, uint8_t b) const { return static_cast<uint8_t>((a != 0) ^ (b != 0)); }
};

// The hot path of every reducing collective: fold a received chunk into the
// local one. __restrict promises that the ranges do not overlap, so GCC
// vectorises without a runtime alias check and a scalar fallback copy.
template <typename T, typename Fn>
void accumulate(T* __restrict dst, const T* __restrict src, size_t n, Fn fn) {
  for (size_t i = 0; i < n; ++i) dst[i] = fn(dst[i], src[i]);
}

// The same with the operands the other way round, for dst == b: keeping
// a op b in that order makes MIN/MAX pick the same one of two equal values
// (signed zeros) or NaNs in every aliasing.
template <typename T, typename Fn>
void accumulate_right(T* __restrict dst, const T* __restrict src, size_t n, Fn fn) {
  for (size_t i = 0; i < n; ++i) dst[i] = fn(src[i], dst[i]);
}

template <typename T, typename Fn>
void combine(T* __restrict dst, const T* __restrict a, const T* __restrict b, size_t n, Fn fn) {
  for (size_t i = 0; i < n; ++i) dst[i] = fn(a[i], b[i]);
}

// dst == a == b: the restrict loops above would lie to the compiler.
template <typename T, typename Fn>
void combine_self(T* data, size_t n, Fn fn) {
  for (size_t i = 0; i < n; ++i) data[i] = fn(data[i], data[i]);
}

// float32 SUM, the reduction that dominates real use, also as AVX2 and
// AVX-512 code that the dynamic loader picks for the CPU (GCC's
// target_clones, an ifunc); everything else stays at the x86-64 baseline so
// the library runs on any x86-64. 64 MiB all_reduce (2026-11-25, Xeon VM):
// 2 ranks 9.3-9.6 -> 8.9-9.0 ms, 4 ranks 24.0-25.8 -> 23.4-24.2 ms, as fast
// as a build of the whole library with -march=native run beside it.
// Not under ThreadSanitizer: the dynamic loader runs an ifunc's resolver
// before the sanitizer's runtime has started, and the instrumented resolver
// then crashes every program at load (those builds run the baseline code).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define TDIST_FLOAT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TDIST_FLOAT_CLONES
#endif

TDIST_FLOAT_CLONES void add_float_into(float* __restrict dst, const float* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

// dst = ((s[0] + s[1]) + s[2]) + ... in one pass: each element is loaded
// once from every source and stored once, where pairwise reduce_into passes
// read and write the partial result N - 1 times.
template <int N>
[[gnu::always_inline]] inline void sum_float_n(float* __restrict dst, const float* const* srcs,
                                               size_t count) {
  const float* s[N];
  for (int j = 0; j < N; ++j) s[j] = srcs[j];
  for (size_t i = 0; i < count; ++i) {
    float acc = s[0][i] + s[1][i];
    for (int j = 2; j < N; ++j) acc += s[j][i];
    dst[i] = acc;
  }
}

template <typename T, typename Fn>
void run_binary(void* dst, const void* a, const void* b, size_t n, Fn fn) {
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  if constexpr (std::is_same_v<T, float> && std::is_same_v<Fn, SumFn>) {
    // The vector clones. A float sum's operands commute bit for bit (only a
    // NaN's payload may differ, which reduce_into leaves unspecified).
    if (d != x && d != y) {
      const float* sources[] = {x, y};
      sum_float32_sources(d, sources, 2, n);
      return;
    }
    if (d != x || d != y) {
      add_float_into(d, d == x ? y : x, n);
      return;
    }
  }
  if (d == x && d == y) {
    combine_self(d, n, fn);
  } else if (d == x) {
    accumulate(d, y, n, fn);
  } else if (d == y) {
    accumulate_right(d, x, n, fn);
  } else {
    combine(d, x, y, n, fn);
  }
}

template <typename T>
void reduce_typed(void* dst, const void* a, const void* b, size_t n, ReduceOp::Kind kind) {
  // Pairs that check_reduce_supported rejects are never instantiated.
  switch (kind) {
    case ReduceOp::SUM:
    case ReduceOp::AVG:
    case ReduceOp::PREMUL_SUM:
      run_binary<T>(dst, a, b, n, SumFn{});
      return;
    case ReduceOp::PRODUCT:
      if constexpr (!kIsComplex<T>) run_binary<T>(dst, a, b, n, ProductFn{});
      return;
    case ReduceOp::MIN:
      if constexpr (!kIsComplex<T>) run_binary<T>(dst, a, b, n, MinFn{});
      return;
    case ReduceOp::MAX:
      if constexpr (!kIsComplex<T>) run_binary<T>(dst, a, b, n, MaxFn{});
      return;
    case ReduceOp::BAND:
      if constexpr (kIsInteger<T>) run_binary<T>(dst, a, b, n, BandFn{});
      return;
    case ReduceOp::BOR:
      if constexpr (kIsInteger<T>) run_binary<T>(dst, a, b, n, BorFn{});
      return;
    case ReduceOp::BXOR:
      if constexpr (kIsInteger<T>) run_binary<T>(dst, a, b, n, BxorFn{});
      return;
  }
}

// Bytes rather than bool: loading a bool whose byte is neither 0 nor 1 is
// undefined behaviour, and wrapped user memory may hold any byte.
void reduce_bool(void* dst, const void* a, const void* b, size_t n, ReduceOp::Kind kind) {
  switch (kind) {
    case ReduceOp::SUM:
    case ReduceOp::MAX:
    case ReduceOp::BOR:
      run_binary<uint8_t>(dst, a, b, n, BoolOrFn{});
      return;
    case ReduceOp::PRODUCT:
    case ReduceOp::MIN:
    case ReduceOp::BAND:
      run_binary<uint8_t>(dst, a, b, n, BoolAndFn{});
      return;
    case ReduceOp::BXOR:
      run_binary<uint8_t>(dst, a, b, n, BoolXorFn{});
      return;
    case ReduceOp::AVG:
    case ReduceOp::PREMUL_SUM:
      return;  // rejected by check_reduce_supported
  }
}

// The factor in the type the elements are multiplied in: the tensor's own
// integer type (its range was checked by check_reduce_supported), float32 for
// the 16- and 32-bit float types, double for the 64-bit ones.
template <typename T>
auto scale_factor(double factor) {
  if constexpr (kIsInteger<T>) {
    return static_cast<T>(std::trunc(factor));
  } else if constexpr (std::is_same_v<T, double> || std::is_same_v<T, std::complex<double>>) {
    return factor;
  } else {
    return static_cast<float>(factor);
  }
}

template <typename T, typename S>
T scale(T x, S k) {
  if constexpr (kIsInteger<T>) {
    return wrap_mul(x, k);
  } else if constexpr (kIsHalfLike<T>) {
    return T(static_cast<float>(x) * k);
  } else if constexpr (kIsComplex<T>) {
    // Componentwise: a real factor needs no full complex multiply.
    return T(x.real() * k, x.imag() * k);
  } else {
    return x * k;
  }
}

template <typename T>
void scale_in_place(T* __restrict data, size_t n, double factor) {
  const auto k = scale_factor<T>(factor);
  for (size_t i = 0; i < n; ++i) data[i] = scale(data[i], k);
}

template <typename T>
void scale_into(T* __restrict dst, const T* __restrict src, size_t n, double factor) {
  const auto k = scale_factor<T>(factor);
  for (size_t i = 0; i < n; ++i) dst[i] = scale(src[i], k);
}

template <typename T>
void divide(T* __restrict data, size_t n, int world_size) {
  if constexpr (kIsInteger<T>) {
    // Divide in a type at least as wide as int so that a world size beyond
    // the range of int8 is not truncated; C++ division truncates toward 0.
    using Wide = std::common_type_t<T, int>;
    const Wide d = static_cast<Wide>(world_size);
    for (size_t i = 0; i < n; ++i) data[i] = static_cast<T>(static_cast<Wide>(data[i]) / d);
  } else if constexpr (kIsHalfLike<T>) {
    const float d = static_cast<float>(world_size);
    for (size_t i = 0; i < n; ++i) data[i] = T(static_cast<float>(data[i]) / d);
  } else if constexpr (kIsComplex<T>) {
    using Real = typename T::value_type;
    const Real d = static_cast<Real>(world_size);
    for (size_t i = 0; i < n; ++i) data[i] = T(data[i].real() / d, data[i].imag() / d);
  } else {
    const T d = static_cast<T>(world_size);
    for (size_t i = 0; i < n; ++i) data[i] /= d;
  }
}

}  // namespace

void reduce_into(void* dst, const void* a, const void* b, size_t count, DType dtype, const ReduceOp& op) {
  check_reduce_supported(dtype, op, "reduce_into");
  if (count == 0) return;
  if (dtype == DType::kBool) {
    reduce_bool(dst, a, b, count, op.kind);
    return;
  }
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) reduce_typed<T>(dst, a, b, count, op.kind);
  });
}

TDIST_FLOAT_CLONES bool sum_float32_sources(float* dst, const float* const* srcs, int n, size_t count) {
  switch (n) {
    case 2:
      sum_float_n<2>(dst, srcs, count);
      return true;
    case 3:
      sum_float_n<3>(dst, srcs, count);
      return true;
    case 4:
      sum_float_n<4>(dst, srcs, count);
      return true;
    case 5:
      sum_float_n<5>(dst, srcs, count);
      return true;
    case 6:
      sum_float_n<6>(dst, srcs, count);
      return true;
    case 7:
      sum_float_n<7>(dst, srcs, count);
      return true;
    case 8:
      sum_float_n<8>(dst, srcs, count);
      return true;
    default:
      return false;
  }
}

void premultiply(void* data, size_t count, DType dtype, const ReduceOp& op) {
  check_reduce_supported(dtype, op, "premultiply");
  if (op.kind != ReduceOp::PREMUL_SUM || count == 0) return;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      scale_in_place(static_cast<T*>(data), count, op.premul_factor);
    }
  });
}

void premultiply_into(void* dst, const void* src, size_t count, DType dtype, const ReduceOp& op) {
  check_reduce_supported(dtype, op, "premultiply_into");
  if (count == 0) return;
  if (op.kind != ReduceOp::PREMUL_SUM) {
    if (dst != src) std::memcpy(dst, src, count * element_size(dtype));
    return;
  }
  if (dst == src) {
    premultiply(dst, count, dtype, op);
    return;
  }
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      scale_into(static_cast<T*>(dst), static_cast<const T*>(src), count, op.premul_factor);
    }
  });
}

void finalize_reduce(void* data, size_t count, DType dtype, const ReduceOp& op, int world_size) {
  check_reduce_supported(dtype, op, "finalize_reduce");
  if (world_size < 1) {
    throw DistInvalidArgument("finalize_reduce: world_size must be at least 1, got " +
                              std::to_string(world_size));
  }
  if (op.kind != ReduceOp::AVG || count == 0 || world_size == 1) return;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) divide(static_cast<T*>(data), count, world_size);
  });
}

}  // namespace tdist
