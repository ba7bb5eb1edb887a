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
#include <tuple>
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
    DType::kBool,    DType::kUInt8,   DType::kInt8,      DType::kInt16,
    DType::kInt32,   DType::kInt64,   DType::kFloat16,   DType::kBFloat16,
    DType::kFloat32, DType::kFloat64, DType::kComplex64, DType::kComplex128,
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

namespace detail {

/// The C++ type of each DType's elements, in enum order.
using ElementTypes = std::tuple<bool, uint8_t, int8_t, int16_t, int32_t, int64_t, Half, BFloat16, float,
                                double, std::complex<float>, std::complex<double>>;
static_assert(std::tuple_size_v<ElementTypes> == kAllDTypes.size());

/// The position of T in ElementTypes, or the tuple size if T is not there.
template <typename T, size_t I = 0>
constexpr size_t element_type_index() {
  if constexpr (I == std::tuple_size_v<ElementTypes>) {
    return I;
  } else if constexpr (std::is_same_v<T, std::tuple_element_t<I, ElementTypes>>) {
    return I;
  } else {
    return element_type_index<T, I + 1>();
  }
}

/// Raises DistInvalidArgument for a DType value outside the enum.
[[noreturn]] void throw_invalid_dtype(DType dtype);

}  // namespace detail

/// The C++ element type of `D`, e.g. `cpp_type_t<DType::kFloat16>` is Half.
template <DType D>
using cpp_type_t = std::tuple_element_t<static_cast<size_t>(D), detail::ElementTypes>;

namespace detail {
template <typename T>
inline constexpr bool kIsElementType = element_type_index<T>() < std::tuple_size_v<ElementTypes>;

template <DType D, typename F>
constexpr decltype(auto) call_with_type(F&& fn) {
  return std::forward<F>(fn)(std::type_identity<cpp_type_t<D>>{});
}
}  // namespace detail

/// A C++ type that is the element type of some DType (unqualified: `const
/// float` is not one).
template <typename T>
concept ElementType = detail::kIsElementType<T>;

/// The DType whose elements are `T`, e.g. `dtype_of<int32_t>()` is kInt32.
template <ElementType T>
constexpr DType dtype_of() noexcept {
  return static_cast<DType>(detail::element_type_index<T>());
}

/// Calls `fn(std::type_identity<T>{})` with T the C++ element type of
/// `dtype` and returns what it returns (every instantiation must return the
/// same type). Raises DistInvalidArgument for a value outside the enum.
template <typename F>
constexpr decltype(auto) dispatch_dtype(DType dtype, F&& fn) {
  switch (dtype) {
    case DType::kBool:
      return detail::call_with_type<DType::kBool>(std::forward<F>(fn));
    case DType::kUInt8:
      return detail::call_with_type<DType::kUInt8>(std::forward<F>(fn));
    case DType::kInt8:
      return detail::call_with_type<DType::kInt8>(std::forward<F>(fn));
    case DType::kInt16:
      return detail::call_with_type<DType::kInt16>(std::forward<F>(fn));
    case DType::kInt32:
      return detail::call_with_type<DType::kInt32>(std::forward<F>(fn));
    case DType::kInt64:
      return detail::call_with_type<DType::kInt64>(std::forward<F>(fn));
    case DType::kFloat16:
      return detail::call_with_type<DType::kFloat16>(std::forward<F>(fn));
    case DType::kBFloat16:
      return detail::call_with_type<DType::kBFloat16>(std::forward<F>(fn));
    case DType::kFloat32:
      return detail::call_with_type<DType::kFloat32>(std::forward<F>(fn));
    case DType::kFloat64:
      return detail::call_with_type<DType::kFloat64>(std::forward<F>(fn));
    case DType::kComplex64:
      return detail::call_with_type<DType::kComplex64>(std::forward<F>(fn));
    case DType::kComplex128:
      return detail::call_with_type<DType::kComplex128>(std::forward<F>(fn));
  }
  detail::throw_invalid_dtype(dtype);
}

}  // namespace tdist
