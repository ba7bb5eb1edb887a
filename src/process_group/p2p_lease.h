#pragma once

// Who may still use a group's point-to-point transport: a send or receive
// being posted, and a thread that waits on its work. Such a thread moves
// the transport along itself (P2PWork, tdist_p2p.cc), and the work may
// outlive the transport it was posted on: the group is shut down, freed
// or rebuilt while the thread waits, or before it does. So posts and waits
// enter through this lease, which the group and its works share. Before
// the group destroys a transport it closes the lease, ends the waits
// inside (an abort fails their requests) and waits for them to leave; a
// wait that comes later does not touch the transport (its request was
// failed as the transport closed, or its completion comes from the
// transport's own thread), and a post raises.
//
// On the path of every 8 B message: two loads and two atomic additions per
// post and per wait, no lock.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

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
    // Works of a closed generation (0: posted while the lease was closed)
    // are not counted, even for a moment: a count makes a closing group
    // abort its peers instead of saying goodbye.
    if (generation == 0 || open_.load() != generation) return false;
    users_.fetch_add(1);
    if (open_.load() == generation) return true;
    leave();
    return false;
  }
  void leave() {
    // A closer waiting for the count to reach 0 is woken; while open,
    // nobody waits and no wake is made.
    if (users_.fetch_sub(1) == 1 && open_.load() == 0) {
      const std::lock_guard<std::mutex> lock(drain_mutex_);
      drained_.notify_all();
    }
  }

  /// No thread enters from now on. True if some are inside (the caller
  /// must make their waits end, then drain()).
  bool close() {
    open_.store(0);
    return users_.load() != 0;
  }
  bool in_use() const { return users_.load() != 0; }
  /// Waits up to `limit` for the threads inside to leave; false if one is
  /// still inside (it may be blocked in a callback: a Python one waiting
  /// for the interpreter lock that the closing thread holds). Not on a
  /// thread inside (held_here()): it would wait for itself.
  bool drain_for(std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(drain_mutex_);
    return drained_.wait_for(lock, limit, [&] { return users_.load() == 0; });
  }
  /// True if this thread is inside: a callback run by a thread waiting on
  /// one of the group's works.
  bool held_here() const { return t_held == this; }

  /// enter() and leave() for a scope, marking the thread as inside.
  class Entry {
   public:
    Entry(P2pLease& lease, uint64_t generation)
        : lease_(lease), entered_(lease.enter(generation)), previous_(t_held) {
      if (entered_) t_held = &lease;
    }
    ~Entry() {
      if (!entered_) return;
      t_held = previous_;
      lease_.leave();
    }
    Entry(const Entry&) = delete;
    Entry& operator=(const Entry&) = delete;
    explicit operator bool() const { return entered_; }

   private:
    P2pLease& lease_;
    const bool entered_;
    const P2pLease* const previous_;
  };

 private:
  static inline thread_local const P2pLease* t_held = nullptr;
  std::atomic<uint64_t> open_{0};
  std::atomic<int> users_{0};
  std::mutex drain_mutex_;
  std::condition_variable drained_;
  uint64_t last_ = 0;  // only the group's connect() counts it
};

}  // namespace tdist::detail
