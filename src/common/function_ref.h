#pragma once

// A non-owning reference to a callable, for hot paths where std::function
// would cost a construction (and, with more than two pointers of captures,
// an allocation) per call. The callable must outlive the reference: pass
// one down a call chain, never store it.

#include <type_traits>
#include <utility>

namespace tdist::detail {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f)  // NOLINT(google-explicit-constructor): stands in for a callable argument
      : object_(const_cast<void*>(static_cast<const void*>(&f))), call_([](void* o, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace tdist::detail
