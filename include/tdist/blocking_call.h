#pragma once

// Set while a call is issued on a group whose caller will block on the
// result at once: by the functional API (distributed_calls.cc) for
// async_op=false, and by the torch plugin for torch's asyncOp=false
// (torch.distributed's functions with async_op=False, torch 2.7 and later).
// That group's backend may then run the operation on the caller's thread,
// when nothing is queued before it, and save the hand-offs to and from its
// worker thread (a few microseconds each, most of a small collective's
// time); it returns no work then (the call is done). Never set for
// async_op=true: such a call must return before its peers have arrived.
//
// The scope names its group and is taken by the first claim: a backend
// that itself calls another group from inside the operation (a wrapper, a
// Python ProcessGroup subclass) gets a real work from it, as it expects.

namespace tdist::detail {

class BlockingCallScope {
 public:
  BlockingCallScope(const void* group, bool blocking) : previous_(target_) {
    target_ = blocking ? group : nullptr;
  }
  ~BlockingCallScope() { target_ = previous_; }
  BlockingCallScope(const BlockingCallScope&) = delete;
  BlockingCallScope& operator=(const BlockingCallScope&) = delete;

  /// True if the innermost scope was opened for `group` and not taken yet;
  /// takes it.
  static bool take(const void* group) {
    if (target_ == nullptr || target_ != group) return false;
    target_ = nullptr;
    return true;
  }

 private:
  const void* previous_;
  static thread_local const void* target_;
};

}  // namespace tdist::detail
