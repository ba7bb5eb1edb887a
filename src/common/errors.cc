#include "common/error_text.h"

#include <cctype>
#include <cstring>
#include <string>

#include "tdist/errors.h"

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

namespace {

// Where `context` goes in `what`: after "rank <digits>: " if it starts so.
std::string insert_context(const std::string& what, const std::string& context) {
  size_t at = 0;
  if (what.rfind("rank ", 0) == 0) {
    size_t i = 5;
    while (i < what.size() && std::isdigit(static_cast<unsigned char>(what[i])) != 0) ++i;
    if (i > 5 && what.compare(i, 2, ": ") == 0) at = i + 2;
  }
  return what.substr(0, at) + context + what.substr(at);
}

}  // namespace

std::exception_ptr with_context(const std::exception_ptr& error, const std::string& context) {
  try {
    std::rethrow_exception(error);
  } catch (const DistError& e) {
    const std::string what = e.what();
    if (what.find(context) != std::string::npos) return error;
    const std::string text = insert_context(what, context);
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
