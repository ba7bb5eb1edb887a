#pragma once

#include <exception>
#include <string>

namespace tdist {

/// "Connection refused (errno 111)": strerror, thread-safe, with the number.
std::string errno_text(int err);

/// what() of the exception `error` holds ("unknown error" for a non-std one).
std::string exception_text(const std::exception_ptr& error);

}  // namespace tdist
