#include "common/syscall.h"

#include <cstring>
#include <string>

namespace tdist {

std::string errno_text(int err) {
  // strerror_r (GNU flavour) is thread-safe where strerror is not.
  char buf[256];
  const char* text = strerror_r(err, buf, sizeof(buf));
  return std::string(text) + " (errno " + std::to_string(err) + ")";
}

}  // namespace tdist
