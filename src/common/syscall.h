#pragma once

#include <string>

namespace tdist {

/// "Connection refused (errno 111)": strerror, thread-safe, with the number.
std::string errno_text(int err);

}  // namespace tdist
