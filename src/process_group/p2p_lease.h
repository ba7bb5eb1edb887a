#pragma once

// Who may still use a group's point-to-point transport from a send's or a
// receive's work. A thread that waits on such a work moves the transport
// along itself (P2PWork, tdist_p2p.cc), and the work may outlive the
// transport it was posted on: the group is destroyed or rebuilt while the
// thread waits, or before it does. So the wait enters through this lease,
// which the group and its works share. Before the group destroys a
// transport it closes the lease, ends the waits inside (an abort fails
// their requests) and waits for them to leave; a wait that comes later
// does not touch the transport (its request was failed as the transport
// closed, or its completion comes from the transport's own thread).
//
// On the path of every 8 B message: two atomic additions and a load, no
// lock.

#include <atomic>
#include <cstdint>

namespace tdist::detail {

class P2pLease {
 public:
  /// The lease of the connections just made: returns their generation,
  /// which the works posted on them carry.
  uint64_t open() {
    const uint64_t g = ++last_;
    open_.store(g);
    return g;
  }
  /// The generation works are posted on now (0 while none is open). Read
  /// before the transport's pointer: open() stores it after the pointer.
  uint64_t generation() const { return open_.load(); }

  /// True if the caller may use the transport of `generation`; it then
  /// calls leave() once done with it.
  bool enter(uint64_t generation) {
    users_.fetch_add(1);
    // 0: posted while the lease was closed (the transport is going).
    if (generation != 0 && open_.load() == generation) return true;
    leave();
    return false;
  }
  void leave() {
    // A closer waiting for the count to reach 0 is woken; while open,
    // nobody waits and no wake is made.
    if (users_.fetch_sub(1) == 1 && open_.load() == 0) users_.notify_all();
  }

  /// No thread enters from now on. True if some are inside (the caller
  /// must make their waits end, then drain()).
  bool close() {
    open_.store(0);
    return users_.load() != 0;
  }
  bool in_use() const { return users_.load() != 0; }
  /// Waits for the threads inside to leave.
  void drain() {
    for (int u = users_.load(); u != 0; u = users_.load()) users_.wait(u);
  }

 private:
  std::atomic<uint64_t> open_{0};
  std::atomic<int> users_{0};
  uint64_t last_ = 0;  // only the group's connect() counts it
};

}  // namespace tdist::detail
