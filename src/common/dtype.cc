#include "tdist/dtype.h"

#include <string>

#include "tdist/errors.h"

namespace tdist {

namespace {

struct DTypeInfo {
  const char* name;
  size_t size;
};

// Indexed by the enum value; the static_asserts below keep it in step with
// the C++ types that dispatch_dtype hands to kernels.
constexpr std::array<DTypeInfo, kAllDTypes.size()> kInfo = {{
    {"bool", 1},
    {"uint8", 1},
    {"int8", 1},
    {"int16", 2},
    {"int32", 4},
    {"int64", 8},
    {"float16", 2},
    {"bfloat16", 2},
    {"float32", 4},
    {"float64", 8},
    {"complex64", 8},
    {"complex128", 16},
}};

template <DType D>
constexpr bool size_matches() {
  return kInfo[static_cast<size_t>(D)].size == sizeof(cpp_type_t<D>) && dtype_of<cpp_type_t<D>>() == D;
}
static_assert(size_matches<DType::kBool>() && size_matches<DType::kUInt8>() && size_matches<DType::kInt8>() &&
              size_matches<DType::kInt16>() && size_matches<DType::kInt32>() &&
              size_matches<DType::kInt64>() && size_matches<DType::kFloat16>() &&
              size_matches<DType::kBFloat16>() && size_matches<DType::kFloat32>() &&
              size_matches<DType::kFloat64>() && size_matches<DType::kComplex64>() &&
              size_matches<DType::kComplex128>());

struct Alias {
  const char* name;
  DType dtype;
};

// torch's historical names (torch.half, torch.float, ...).
constexpr Alias kAliases[] = {
    {"half", DType::kFloat16},     {"float", DType::kFloat32},      {"double", DType::kFloat64},
    {"short", DType::kInt16},      {"int", DType::kInt32},          {"long", DType::kInt64},
    {"cfloat", DType::kComplex64}, {"cdouble", DType::kComplex128}, {"byte", DType::kUInt8},
    {"char", DType::kInt8},
};

bool valid(DType dtype) {
  return static_cast<size_t>(dtype) < kInfo.size();
}

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char c = a[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != b[i]) return false;
  }
  return true;
}

}  // namespace

namespace detail {

void throw_invalid_dtype(DType dtype) {
  throw DistInvalidArgument("invalid dtype value " + std::to_string(static_cast<int>(dtype)));
}

}  // namespace detail

size_t element_size(DType dtype) {
  if (!valid(dtype)) detail::throw_invalid_dtype(dtype);
  return kInfo[static_cast<size_t>(dtype)].size;
}

const char* dtype_name(DType dtype) {
  return valid(dtype) ? kInfo[static_cast<size_t>(dtype)].name : "unknown";
}

DType parse_dtype(std::string_view name) {
  for (DType dtype : kAllDTypes) {
    if (equals_ignoring_case(name, dtype_name(dtype))) return dtype;
  }
  for (const Alias& alias : kAliases) {
    if (equals_ignoring_case(name, alias.name)) return alias.dtype;
  }
  std::string message = "unknown dtype \"" + std::string(name) + "\"; valid names: ";
  for (DType dtype : kAllDTypes) {
    message += dtype_name(dtype);
    message += ", ";
  }
  message += "and the aliases";
  for (const Alias& alias : kAliases) {
    message += ' ';
    message += alias.name;
  }
  throw DistInvalidArgument(message);
}

bool is_floating_point(DType dtype) {
  return dtype == DType::kFloat16 || dtype == DType::kBFloat16 || dtype == DType::kFloat32 ||
         dtype == DType::kFloat64;
}

bool is_complex(DType dtype) {
  return dtype == DType::kComplex64 || dtype == DType::kComplex128;
}

bool is_integral(DType dtype, bool include_bool) {
  switch (dtype) {
    case DType::kBool:
      return include_bool;
    case DType::kUInt8:
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
      return true;
    default:
      return false;
  }
}

}  // namespace tdist
