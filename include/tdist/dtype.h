#pragma once

/// @file dtype.h
/// Element types of tensors, named as torch names them, with the mapping
/// between DType values and C++ types so that kernels are written once:
///
///     size_t bytes = dispatch_dtype(dtype, [&](auto tag) {
///       using T = typename decltype(tag)::type;   // bool, int32_t, Half, ...
///       return sizeof(T);
///     });

#include <array>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

#include "tdist/half.h"

namespace tdist {

/// The element type of a tensor (torch.dtype).
enum class DType : uint8_t {
  kBool,        ///< bool, one byte holding 0 or 1
  kUInt8,       ///< uint8_t
  kInt8,        ///< int8_t
  kInt16,       ///< int16_t
  kInt32,       ///< int32_t
  kInt64,       ///< int64_t
  kFloat16,     ///< Half (IEEE binary16)
  kBFloat16,    ///< BFloat16
  kFloat32,     ///< float
  kFloat64,     ///< double
  kComplex64,   ///< std::complex<float>
  kComplex128,  ///< std::complex<double>
};

/// Every DType, in declaration order.
inline constexpr std::array<DType, 12> kAllDTypes = {
    DType::kBool,    DType::kUInt8,    DType::kInt8,    DType::kInt16,
    DType::kInt32,   DType::kInt64,    DType::kFloat16, DType::kBFloat16,
    DType::kFloat32, DType::kFloat64,  DType::kComplex64, DType::kComplex128,
};

/// Bytes per element (1 for bool, 8 for complex64, ...). Raises
/// DistInvalidArgument for a value outside the enum.
size_t element_size(DType dtype);

/// The torch name: "bool", "uint8", ..., "float16", "bfloat16", "float32",
/// "complex128". "unknown" for a value outside the enum.
const char* dtype_name(DType dtype);

/// Parses a torch dtype name or alias, case-insensitively: the names of
/// dtype_name() plus "half", "float", "double", "int", "long", "short",
/// "cfloat", "cdouble", "byte" (uint8) and "char" (int8). Raises
/// DistInvalidArgument listing the valid names for anything else.
DType parse_dtype(std::string_view name);

/// float16, bfloat16, float32, float64 (not complex, as in torch).
bool is_floating_point(DType dtype);
/// complex64, complex128.
bool is_complex(DType dtype);
/// uint8, int8, int16, int32, int64, and bool if `include_bool`.
bool is_integral(DType dtype, bool include_bool);

/// The C++ type that holds one element of each DType (specialised below).
template <DType D>
struct DTypeCppType;

template <> struct DTypeCppType<DType::kBool> { using type = bool; };
template <> struct DTypeCppType<DType::kUInt8> { using type = uint8_t; };
template <> struct DTypeCppType<DType::kInt8> { using type = int8_t; };
template <> struct DTypeCppType<DType::kInt16> { using type = int16_t; };
template <> struct DTypeCppType<DType::kInt32> { using type = int32_t; };
template <> struct DTypeCppType<DType::kInt64> { using type = int64_t; };
template <> struct DTypeCppType<DType::kFloat16> { using type = Half; };
template <> struct DTypeCppType<DType::kBFloat16> { using type = BFloat16; };
template <> struct DTypeCppType<DType::kFloat32> { using type = float; };
template <> struct DTypeCppType<DType::kFloat64> { using type = double; };
template <> struct DTypeCppType<DType::kComplex64> { using type = std::complex<float>; };
template <> struct DTypeCppType<DType::kComplex128> { using type = std::complex<double>; };

/// The C++ element type of `D`, e.g. `cpp_type_t<DType::kFloat16>` is Half.
template <DType D>
using cpp_type_t = typename DTypeCppType<D>::type;

namespace detail {

template <typename T>
struct DTypeOf {};
template <> struct DTypeOf<bool> { static constexpr DType value = DType::kBool; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kUInt8; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::kInt8; };
template <> struct DTypeOf<int16_t> { static constexpr DType value = DType::kInt16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kInt32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kInt64; };
template <> struct DTypeOf<Half> { static constexpr DType value = DType::kFloat16; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::kBFloat16; };
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kFloat64; };
template <> struct DTypeOf<std::complex<float>> {
  static constexpr DType value = DType::kComplex64;
};
template <> struct DTypeOf<std::complex<double>> {
  static constexpr DType value = DType::kComplex128;
};

/// Raises DistInvalidArgument for a DType value outside the enum.
[[noreturn]] void throw_invalid_dtype(DType dtype);

}  // namespace detail

/// A C++ type that is the element type of some DType (unqualified).
template <typename T>
concept ElementType = requires { detail::DTypeOf<T>::value; };

/// The DType whose elements are `T`, e.g. `dtype_of<int32_t>()` is kInt32.
template <ElementType T>
constexpr DType dtype_of() noexcept {
  return detail::DTypeOf<T>::value;
}

/// Calls `fn(std::type_identity<T>{})` with T the C++ element type of
/// `dtype` and returns what it returns (every instantiation must return the
/// same type). Raises DistInvalidArgument for a value outside the enum.
template <typename F>
constexpr decltype(auto) dispatch_dtype(DType dtype, F&& fn) {
  switch (dtype) {
    case DType::kBool: return std::forward<F>(fn)(std::type_identity<bool>{});
    case DType::kUInt8: return std::forward<F>(fn)(std::type_identity<uint8_t>{});
    case DType::kInt8: return std::forward<F>(fn)(std::type_identity<int8_t>{});
    case DType::kInt16: return std::forward<F>(fn)(std::type_identity<int16_t>{});
    case DType::kInt32: return std::forward<F>(fn)(std::type_identity<int32_t>{});
    case DType::kInt64: return std::forward<F>(fn)(std::type_identity<int64_t>{});
    case DType::kFloat16: return std::forward<F>(fn)(std::type_identity<Half>{});
    case DType::kBFloat16: return std::forward<F>(fn)(std::type_identity<BFloat16>{});
    case DType::kFloat32: return std::forward<F>(fn)(std::type_identity<float>{});
    case DType::kFloat64: return std::forward<F>(fn)(std::type_identity<double>{});
    case DType::kComplex64:
      return std::forward<F>(fn)(std::type_identity<std::complex<float>>{});
    case DType::kComplex128:
      return std::forward<F>(fn)(std::type_identity<std::complex<double>>{});
  }
  detail::throw_invalid_dtype(dtype);
}

}  // namespace tdist
