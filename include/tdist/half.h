#pragma once

/// @file half.h
/// The two 16-bit floating-point element types: Half (IEEE 754 binary16,
/// torch.float16) and BFloat16 (torch.bfloat16). Both are storage types only:
/// tdist computes on them in float32 and rounds the result back.
///
/// Conversions from float round to nearest, ties to even; values too large
/// for the type become infinity of the same sign, subnormals are exact or
/// rounded like any other value, and a NaN stays a NaN (always a quiet one,
/// sign kept). Conversions to float are exact. They are constexpr, inline and
/// written as integer arithmetic with selects and no branches or tables, so
/// that loops converting arrays of them vectorise.

#include <bit>
#include <cstdint>
#include <iosfwd>
#include <span>

namespace tdist {

namespace detail {

/// `condition ? a : b` as bit masks. Plain ternaries here let GCC turn the
/// unused float arithmetic into a branch, and since that arithmetic may trap
/// (-ftrapping-math) it then refuses to if-convert and vectorise the loop.
constexpr uint32_t select_bits(bool condition, uint32_t a, uint32_t b) noexcept {
  const uint32_t mask = 0u - static_cast<uint32_t>(condition);
  return (a & mask) | (b & ~mask);
}

/// The binary16 bit pattern nearest to `value` (ties to even).
constexpr uint16_t float_to_half_bits(float value) noexcept {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  // Normal results: rebias the exponent (127 -> 15) and drop 13 mantissa bits
  // after adding just under half of the dropped ulp plus the kept low bit, so
  // that exact ties round to even. A carry out of the mantissa moves to the
  // next exponent, and past the largest finite half it reaches infinity, where
  // the result is clamped. Below 2^-14 this wraps; that lane is not selected.
  const uint32_t kept_lsb = (ax >> 13) & 1u;
  uint32_t normal = (ax - 0x38000000u + 0x0fffu + kept_lsb) >> 13;
  normal = normal < 0x7c00u ? normal : 0x7c00u;
  // Subnormal results are multiples of 2^-24, which is the ulp of 0.5f:
  // adding 0.5f makes the FPU round |value| onto that grid (to nearest even),
  // and the low mantissa bits of the sum are the half's bits.
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(ax) + 0.5f) - 0x3f000000u;
  // NaN: keep the top payload bits and force the quiet bit, so no NaN can
  // turn into an infinity by losing its low payload bits.
  const uint32_t nan = 0x7e00u | ((ax >> 13) & 0x01ffu);
  uint32_t magnitude = select_bits(ax < 0x38800000u, subnormal, normal);
  magnitude = select_bits(ax > 0x7f800000u, nan, magnitude);
  return static_cast<uint16_t>(sign | magnitude);
}

/// The float whose value the binary16 pattern `bits` denotes (exact).
constexpr float half_bits_to_float(uint16_t bits) noexcept {
  const uint32_t h = bits;
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  // Normal: move exponent and mantissa into place and rebias (15 -> 127).
  const uint32_t normal = (em << 13) + 0x38000000u;
  // Infinity and NaN: exponent 31 becomes 255; NaNs come out quiet.
  const uint32_t special = ((em << 13) + 0x70000000u) | select_bits(em > 0x7c00u, 0x00400000u, 0u);
  // Subnormal m * 2^-24: 0.5f + m * 2^-24 is exact, so subtracting 0.5f is too.
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(0x3f000000u | em) - 0.5f);
  uint32_t magnitude = select_bits(em < 0x0400u, subnormal, normal);
  magnitude = select_bits(em >= 0x7c00u, special, magnitude);
  return std::bit_cast<float>(sign | magnitude);
}

/// The bfloat16 bit pattern nearest to `value` (ties to even).
constexpr uint16_t float_to_bfloat16_bits(float value) noexcept {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  // bfloat16 is the top half of a float: add just under half of the dropped
  // ulp plus the kept low bit (ties to even); carries reach infinity naturally.
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t nan = (x >> 16) | 0x0040u;
  return static_cast<uint16_t>(select_bits((x & 0x7fffffffu) > 0x7f800000u, nan, rounded));
}

/// The float whose value the bfloat16 pattern `bits` denotes (exact).
constexpr float bfloat16_bits_to_float(uint16_t bits) noexcept {
  const uint32_t quiet = select_bits((bits & 0x7fffu) > 0x7f80u, 0x00400000u, 0u);
  return std::bit_cast<float>((static_cast<uint32_t>(bits) << 16) | quiet);
}

}  // namespace detail

/// IEEE 754 binary16 (torch.float16): 1 sign bit, 5 exponent bits, 10
/// mantissa bits. Trivially copyable; default construction leaves `bits`
/// uninitialised (like a float), `Half{}` is +0.
struct Half {
  /// The raw bit pattern.
  uint16_t bits;

  Half() = default;
  /// Rounds `value` to the nearest half (ties to even).
  constexpr explicit Half(float value) noexcept : bits(detail::float_to_half_bits(value)) {}
  /// The exact value as a float.
  constexpr explicit operator float() const noexcept { return detail::half_bits_to_float(bits); }
  /// The half with bit pattern `raw`.
  static constexpr Half from_bits(uint16_t raw) noexcept {
    Half h{};
    h.bits = raw;
    return h;
  }
};

/// bfloat16 (torch.bfloat16): the top 16 bits of a float32 (1 sign bit, 8
/// exponent bits, 7 mantissa bits). Trivially copyable; `BFloat16{}` is +0.
struct BFloat16 {
  /// The raw bit pattern.
  uint16_t bits;

  BFloat16() = default;
  /// Rounds `value` to the nearest bfloat16 (ties to even).
  constexpr explicit BFloat16(float value) noexcept : bits(detail::float_to_bfloat16_bits(value)) {}
  /// The exact value as a float.
  constexpr explicit operator float() const noexcept { return detail::bfloat16_bits_to_float(bits); }
  /// The bfloat16 with bit pattern `raw`.
  static constexpr BFloat16 from_bits(uint16_t raw) noexcept {
    BFloat16 b{};
    b.bits = raw;
    return b;
  }
};

static_assert(sizeof(Half) == 2 && alignof(Half) == 2);          // NOLINT(misc-redundant-expression)
static_assert(sizeof(BFloat16) == 2 && alignof(BFloat16) == 2);  // NOLINT(misc-redundant-expression)

/// Converts arrays; the spans must have the same size (else
/// DistInvalidArgument).
void half_to_float(std::span<const Half> in, std::span<float> out);
void float_to_half(std::span<const float> in, std::span<Half> out);
void bfloat16_to_float(std::span<const BFloat16> in, std::span<float> out);
void float_to_bfloat16(std::span<const float> in, std::span<BFloat16> out);

/// Prints the value (as a float would print), so test failures are readable.
std::ostream& operator<<(std::ostream& os, Half value);
std::ostream& operator<<(std::ostream& os, BFloat16 value);

}  // namespace tdist
