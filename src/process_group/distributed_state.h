#pragma once

// What the functional API's two files share (tdist/distributed.h):
// distributed.cc makes, queries and destroys the groups; distributed_calls.cc
// runs point-to-point, the collectives and the object collectives on them.
// Internal to src/process_group.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tdist/distributed.h"
#include "tdist/errors.h"
#include "tdist/tcp_store.h"

namespace tdist::detail::api {

struct State {
  std::mutex mutex;
  Group world;

  std::shared_ptr<Store> store;  // prefixed, shared by every group
  // The TCPStore that init_process_group's rendezvous made (env://, tcp://;
  // not a store the caller passed): left through store_leave.h when the
  // default group is destroyed.
  std::shared_ptr<TCPStore> made_store;
  std::string backend;
  std::chrono::milliseconds timeout{kDefaultPgTimeout};
  std::string master_host;
  int new_group_calls = 0;
  std::map<std::string, int> local_group_calls;
  // Every group made by init_process_group and new_group since the last
  // destroy_process_group(): destroying the default group destroys them all.
  std::vector<std::weak_ptr<ProcessGroup>> groups;
};

State& state();

// state().world.get(), for the collectives to read without the lock (set
// and cleared under it; a constant-initialized global, so reading it needs
// no guard either). g_world_calls counts the calls that may be using it:
// destroy_process_group() clears g_world, then waits for the count to drop
// to 0 before it frees the group, so nothing is freed under a call.
extern constinit std::atomic<ProcessGroup*> g_world;
extern constinit std::atomic<int64_t> g_world_calls;
// How many destroy_process_group() calls wait for g_world_calls to drop to
// 0: only then does the last call to leave take the lock and wake them.
extern constinit std::atomic<int> g_world_drainers;
// destroy_process_group() waits here for g_world_calls to drop to 0.
extern std::mutex g_world_drain_mutex;
extern std::condition_variable g_world_drained;

// The default group, or DistError if there is none.
Group world_or_throw();
[[noreturn]] void throw_destroyed(const char* op);
// `group`, or the default group for a null one; raises for a destroyed group.
Group resolve(const Group& group, const char* op);

// resolve() for the collectives, held for the whole call: no lock and no
// reference count on their path (an 8 B collective takes a few hundred
// nanoseconds in all), only one counter. It lets destroy_process_group() see
// the call (and abort the group to end it): the group's own, or for the
// default group read through g_world, g_world_calls, which also keeps it alive.
class GroupCall {
 public:
  GroupCall(const Group& group, const char* op) {
    if (group) {
      if (group->destroyed()) throw_destroyed(op);
      group_ = group.get();  // the caller's handle keeps it alive
      group_->enter_call();
      return;
    }
    // Counted before g_world is read, so that a destroy that cleared it
    // after this read waits for the call (both sequentially consistent).
    g_world_calls.fetch_add(1);
    group_ = g_world.load();
    if (group_ == nullptr) {
      leave_world();
      world_or_throw();  // raises
    }
    world_ = true;
  }
  ~GroupCall() {
    if (world_) {
      leave_world();
    } else {
      group_->leave_call();
    }
  }
  GroupCall(const GroupCall&) = delete;
  GroupCall& operator=(const GroupCall&) = delete;
  ProcessGroup& operator*() const { return *group_; }

 private:
  static void leave_world() {
    // The count drops to 0 at the end of nearly every call: the lock and
    // the wake are for a destroy that waits, not for every collective.
    if (g_world_calls.fetch_sub(1) == 1 && g_world_drainers.load() != 0) {
      std::lock_guard<std::mutex> lock(g_world_drain_mutex);
      g_world_drained.notify_all();
    }
  }
  ProcessGroup* group_ = nullptr;
  bool world_ = false;
};

// User tags of point-to-point operations: 0..2^31-1, as torch's Gloo
// ("Tag must be nonnegative"). Negative ones are tdist's own (the torch
// plugin's payloads, monitored_barrier).
void check_user_tag(const char* op, int tag);

// Forgets groups that are gone, then remembers `group` (under the lock).
void remember_locked(const Group& group);

// The member of `g` with global rank `global_rank`, or DistInvalidArgument.
int group_rank_or_throw(const ProcessGroup& g, int global_rank, const char* op, const char* what);

inline int to_group_rank(const ProcessGroup& g, int global_rank, const char* op, const char* what) {
  // The world and groups of leading ranks map a rank to itself.
  const auto& ranks = g.global_ranks();
  if (global_rank >= 0 && static_cast<size_t>(global_rank) < ranks.size() &&
      ranks[static_cast<size_t>(global_rank)] == global_rank)
    return global_rank;
  return group_rank_or_throw(g, global_rank, op, what);
}

// A blocking call that the backend ran on this thread returns no work: it
// is done (see tdist/blocking_call.h).
inline WorkPtr finish(const WorkPtr& work, bool async_op) {
  if (async_op) return work;
  if (work) work->wait();
  return nullptr;
}

inline Tensor bytes_tensor(std::vector<uint8_t>& data) {
  return Tensor::wrap(data);
}

}  // namespace tdist::detail::api
