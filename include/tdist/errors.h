#pragma once

/// @file errors.h
/// The one exception hierarchy of tdist, mirroring torch.distributed:
///
///     std::runtime_error
///       DistError                 any failure inside tdist
///         DistBackendError        a backend-specific failure
///         DistNetworkError        a peer reset, refused or vanished
///         DistStoreError          the key-value store failed
///         DistTimeoutError        a deadline passed
///         DistInvalidArgument     bad input, found before anything ran
///         DistStoreTimeoutError   (DistStoreError and DistTimeoutError)
///         DistNetworkTimeoutError (DistNetworkError and DistTimeoutError)
///
/// DistError is a virtual base so the two combined timeout types can be
/// caught as either parent and still as one DistError. Messages name the
/// operation, the ranks involved, what was expected and what came.
/// docs/errors.md lists when each is raised.
///
/// With TORCH_SHOW_CPP_STACKTRACES=1 (debug.h) what() ends with the C++
/// stack where the error was first raised, as torch's errors do.

#include <memory>
#include <stdexcept>
#include <string>

#include "tdist/debug.h"

namespace tdist {

/// Base of every exception tdist throws at its API boundary.
class DistError : public std::runtime_error {
 public:
  explicit DistError(const std::string& what)
      : std::runtime_error(what), stack_(detail::capture_cpp_stack(what)) {}
  /// The message, then (TORCH_SHOW_CPP_STACKTRACES=1) the stack, named on
  /// the first call.
  const char* what() const noexcept override {
    return stack_ ? detail::cpp_stack_text(*stack_, std::runtime_error::what()) : std::runtime_error::what();
  }

 private:
  std::shared_ptr<const detail::LazyCppStack> stack_;  // shared by copies
};

/// A backend-specific failure (a collective that a backend does not support,
/// an internal invariant of a backend that broke).
class DistBackendError : public virtual DistError {
 public:
  explicit DistBackendError(const std::string& what) : DistError(what) {}
};

/// The network failed: connection refused or reset, a peer that closed its
/// socket or died.
class DistNetworkError : public virtual DistError {
 public:
  explicit DistNetworkError(const std::string& what) : DistError(what) {}
};

/// The key-value store failed: a key that never came, a server that cannot be
/// reached, an operation the store does not support.
class DistStoreError : public virtual DistError {
 public:
  explicit DistStoreError(const std::string& what) : DistError(what) {}
};

/// A deadline passed before an operation could finish.
class DistTimeoutError : public virtual DistError {
 public:
  explicit DistTimeoutError(const std::string& what) : DistError(what) {}
};

/// The caller passed something invalid; raised before any communication.
class DistInvalidArgument : public virtual DistError {
 public:
  explicit DistInvalidArgument(const std::string& what) : DistError(what) {}
};

/// A store operation ran out of time (get/wait on a key that never came, a
/// server that never came up).
class DistStoreTimeoutError : public DistStoreError, public DistTimeoutError {
 public:
  explicit DistStoreTimeoutError(const std::string& what)
      : DistError(what), DistStoreError(what), DistTimeoutError(what) {}
};

// A new type here needs a case in with_context (src/common/errors.cc), which
// re-creates errors by their exact type.

/// A network operation ran out of time (a peer that stopped answering).
class DistNetworkTimeoutError : public DistNetworkError, public DistTimeoutError {
 public:
  explicit DistNetworkTimeoutError(const std::string& what)
      : DistError(what), DistNetworkError(what), DistTimeoutError(what) {}
};

}  // namespace tdist
