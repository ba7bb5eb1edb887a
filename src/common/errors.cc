#include "common/error_text.h"

#include <cstring>
#include <string>

namespace tdist {

std::string errno_text(int err) {
  // strerror_r (GNU flavour) is thread-safe where strerror is not.
  char buf[256];
  const char* text = strerror_r(err, buf, sizeof(buf));
  return std::string(text) + " (errno " + std::to_string(err) + ")";
}

std::string exception_text(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace tdist
