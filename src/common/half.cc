#include "tdist/half.h"

#include <ostream>
#include <string>

#include "tdist/errors.h"

namespace tdist {

namespace {

void check_sizes(const char* function, size_t in, size_t out) {
  if (in != out) {
    throw DistInvalidArgument(std::string(function) + ": input has " + std::to_string(in) +
                              " elements but output has " + std::to_string(out));
  }
}

// One loop per direction; the element conversions are branch-free so the
// compiler can vectorise these.
template <typename From, typename To>
void convert(const char* function, std::span<const From> in, std::span<To> out) {
  check_sizes(function, in.size(), out.size());
  const From* src = in.data();
  To* dst = out.data();
  for (size_t i = 0; i < in.size(); ++i) dst[i] = static_cast<To>(src[i]);
}

}  // namespace

void half_to_float(std::span<const Half> in, std::span<float> out) {
  convert("half_to_float", in, out);
}

void float_to_half(std::span<const float> in, std::span<Half> out) {
  convert("float_to_half", in, out);
}

void bfloat16_to_float(std::span<const BFloat16> in, std::span<float> out) {
  convert("bfloat16_to_float", in, out);
}

void float_to_bfloat16(std::span<const float> in, std::span<BFloat16> out) {
  convert("float_to_bfloat16", in, out);
}

std::ostream& operator<<(std::ostream& os, Half value) {
  return os << static_cast<float>(value);
}

std::ostream& operator<<(std::ostream& os, BFloat16 value) {
  return os << static_cast<float>(value);
}

}  // namespace tdist
