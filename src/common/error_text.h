#pragma once

#include <exception>
#include <string>

namespace tdist {

/// "Connection refused (errno 111)": strerror, thread-safe, with the number.
std::string errno_text(int err);

/// what() of the exception `error` holds ("unknown error" for a non-std one).
std::string exception_text(const std::exception_ptr& error);

/// What kind of failure `error` is, so that the peers of a rank that gives
/// up raise the same kind: a timeout (any DistTimeoutError), a network
/// failure (any other DistNetworkError), or anything else (a mismatched
/// call, a bad argument found by an algorithm, ...).
enum class ErrorKind { kTimeout, kNetwork, kOther };
ErrorKind error_kind(const std::exception_ptr& error);

/// `error` with `context` ("all_reduce (call #7 in this group): ") put into
/// its message, as an exception of the same tdist type: after a leading
/// "rank R: " (the reporting rank, which the transports' messages start
/// with), else in front. Returned as it is if it is no DistError or its
/// message already has an op's context there. Extend it with any new
/// DistError type (include/tdist/errors.h).
std::exception_ptr with_context(const std::exception_ptr& error, const std::string& context);

}  // namespace tdist
