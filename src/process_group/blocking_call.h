#pragma once

// Set by the functional API (distributed.cc) while it issues a call with
// async_op=false, whose caller will block on the result at once. A backend
// may then run the operation on the caller's thread, when nothing is queued
// before it, and save the hand-offs to and from its worker thread (a few
// microseconds each, most of a small collective's time). Never set for
// async_op=true: such a call must return before its peers have arrived.

namespace tdist::detail {

class BlockingCallScope {
 public:
  explicit BlockingCallScope(bool blocking) : previous_(active_) { active_ = blocking; }
  ~BlockingCallScope() { active_ = previous_; }
  BlockingCallScope(const BlockingCallScope&) = delete;
  BlockingCallScope& operator=(const BlockingCallScope&) = delete;

  static bool active() { return active_; }

 private:
  bool previous_;
  static thread_local bool active_;
};

}  // namespace tdist::detail
