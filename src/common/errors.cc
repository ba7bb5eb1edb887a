#include "common/error_text.h"

#include <cctype>
#include <cstring>
#include <string>

#include "tdist/debug.h"
#include "tdist/errors.h"

namespace tdist {

std::string errno_text(int err) {
  // strerror_r (GNU flavour) is thread-safe where strerror is not.
  char buf[256];
  const char* text = strerror_r(err, buf, sizeof(buf));
  return std::string(text) + " (errno " + std::to_string(err) + ")";
}

ErrorKind error_kind(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const DistTimeoutError&) {
    return ErrorKind::kTimeout;
  } catch (const DistNetworkError&) {
    return ErrorKind::kNetwork;
  } catch (...) {
    return ErrorKind::kOther;
  }
}

std::string exception_text(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    // Without this process's C++ stack: the text goes to peers and into the
    // flight recorder, and a peer's error gets its own stack.
    return detail::without_cpp_stack(e.what());
  } catch (...) {
    return "unknown error";
  }
}

namespace {

// The end of the digits of `what` from `at` (`at` itself if none).
size_t skip_digits(const std::string& what, size_t at) {
  while (at < what.size() && std::isdigit(static_cast<unsigned char>(what[at])) != 0) ++at;
  return at;
}

// Where a context goes in `what`: after "rank <digits>: " if it starts so.
size_t context_position(const std::string& what) {
  if (what.rfind("rank ", 0) != 0) return 0;
  const size_t i = skip_digits(what, 5);
  return i > 5 && what.compare(i, 2, ": ") == 0 ? i + 2 : 0;
}

// Whether `what` already has an op's context where one would go
// ("all_reduce (call #7 in this group): ..."): an error that aborted the
// group, seen again by a later call, keeps the op that raised it.
bool has_context_at(const std::string& what, size_t at) {
  const size_t space = what.find(' ', at);
  if (space == std::string::npos || space == at || what.compare(space, 8, " (call #") != 0) return false;
  const size_t i = skip_digits(what, space + 8);
  return i > space + 8 && what.compare(i, 17, " in this group): ") == 0;
}

}  // namespace

std::exception_ptr with_context(const std::exception_ptr& error, const std::string& context) {
  try {
    std::rethrow_exception(error);
  } catch (const DistError& e) {
    const std::string what = e.what();
    const size_t at = context_position(what);
    if (has_context_at(what, at)) return error;
    const std::string text = what.substr(0, at) + context + what.substr(at);
    // Most derived first: the copy keeps every base a handler may catch.
    if (dynamic_cast<const DistNetworkTimeoutError*>(&e))
      return std::make_exception_ptr(DistNetworkTimeoutError(text));
    if (dynamic_cast<const DistStoreTimeoutError*>(&e))
      return std::make_exception_ptr(DistStoreTimeoutError(text));
    if (dynamic_cast<const DistNetworkError*>(&e)) return std::make_exception_ptr(DistNetworkError(text));
    if (dynamic_cast<const DistStoreError*>(&e)) return std::make_exception_ptr(DistStoreError(text));
    if (dynamic_cast<const DistTimeoutError*>(&e)) return std::make_exception_ptr(DistTimeoutError(text));
    if (dynamic_cast<const DistInvalidArgument*>(&e))
      return std::make_exception_ptr(DistInvalidArgument(text));
    if (dynamic_cast<const DistBackendError*>(&e)) return std::make_exception_ptr(DistBackendError(text));
    return std::make_exception_ptr(DistError(text));
  } catch (...) {
    return error;
  }
}

}  // namespace tdist
