#pragma once

// Marks the threads on which tdist completes operations: a group's worker
// thread and the TCP transport's event loop. Future callbacks run there, so
// a callback that blocks on another tdist operation would wait for the very
// thread it occupies. Future::wait() checks the mark and raises an error
// naming the problem instead of hanging.

namespace tdist::detail {

class CompletionThreadScope {
 public:
  CompletionThreadScope() : previous_(active_) { active_ = true; }
  ~CompletionThreadScope() { active_ = previous_; }
  CompletionThreadScope(const CompletionThreadScope&) = delete;
  CompletionThreadScope& operator=(const CompletionThreadScope&) = delete;

  /// True on a thread that completes tdist operations.
  static bool active() { return active_; }

 private:
  bool previous_;
  static thread_local bool active_;
};

}  // namespace tdist::detail
