#pragma once

// Marks the threads on which tdist completes operations: a group's worker
// thread and the TCP transport's event loop. Future callbacks run there, so
// a callback that blocks on another tdist operation would wait for the very
// thread it occupies. Future::wait() checks the mark and raises an error
// naming the problem instead of hanging, when the operation waited for is
// one that this very thread would finish (each Future knows its completer:
// the group for collectives, the transport for point-to-point).

namespace tdist::detail {

class CompletionThreadScope {
 public:
  /// `completer` identifies what this thread completes (a group, a transport).
  explicit CompletionThreadScope(const void* completer) : previous_(current_) { current_ = completer; }
  ~CompletionThreadScope() { current_ = previous_; }
  CompletionThreadScope(const CompletionThreadScope&) = delete;
  CompletionThreadScope& operator=(const CompletionThreadScope&) = delete;

  /// What this thread completes, or null on other threads.
  static const void* current() { return current_; }

 private:
  const void* previous_;
  static thread_local const void* current_;
};

}  // namespace tdist::detail
