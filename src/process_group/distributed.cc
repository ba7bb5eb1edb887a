// The functional API (tdist/distributed.h): making, querying and destroying
// groups. The calls on them are in distributed_calls.cc; what both share in
// distributed_state.h.

#include "tdist/distributed.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/owned_by_process.h"
#include "distributed_state.h"
#include "flight_recorder.h"
#include "group_resolve.h"
#include "object_codec.h"
#include "store_leave.h"
#include "tdist/blocking_call.h"
#include "tdist/debug.h"
#include "tdist/errors.h"
#include "tdist/logging.h"
#include "tdist/rendezvous.h"
#include "tdist/tcp_store.h"
#include "validate.h"

namespace tdist {

thread_local const void* detail::BlockingCallScope::target_ = nullptr;

namespace detail::api {

State& state() {
  static State instance;
  return instance;
}

constinit std::atomic<ProcessGroup*> g_world{nullptr};
constinit std::atomic<int64_t> g_world_calls{0};
constinit std::atomic<int> g_world_drainers{0};
std::mutex g_world_drain_mutex;
std::condition_variable g_world_drained;

Group world_or_throw() {
  std::lock_guard<std::mutex> lock(state().mutex);
  if (!state().world) {
    throw DistError(
        "Default process group has not been initialized, please make sure to call init_process_group.");
  }
  return state().world;
}

[[noreturn]] void throw_destroyed(const char* op) {
  throw DistError(std::string(op) +
                  ": the process group was destroyed by destroy_process_group() and cannot be used any more "
                  "(create a new one: new_group(), after init_process_group() if the default group was "
                  "destroyed)");
}

Group resolve(const Group& group, const char* op) {
  if (!group) return world_or_throw();
  if (group->destroyed()) throw_destroyed(op);
  return group;
}

void check_user_tag(const char* op, int tag) {
  if (tag < 0) {
    throw DistInvalidArgument(std::string(op) + ": tag " + std::to_string(tag) +
                              " is invalid: tags must be non-negative (0 to 2147483647); negative tags are "
                              "reserved for tdist's own messages");
  }
}

void remember_locked(const Group& group) {
  auto& groups = state().groups;
  std::erase_if(groups, [](const std::weak_ptr<ProcessGroup>& g) { return g.expired(); });
  groups.push_back(group);
}

int group_rank_or_throw(const ProcessGroup& g, int global_rank, const char* op, const char* what) {
  const auto& ranks = g.global_ranks();
  auto it = std::find(ranks.begin(), ranks.end(), global_rank);
  if (it == ranks.end()) {
    std::string members;
    for (int r : ranks) members += (members.empty() ? "" : ", ") + std::to_string(r);
    throw DistInvalidArgument(std::string(op) + ": " + what + " " + std::to_string(global_rank) +
                              " is not a member of the group (global ranks " + members + ")");
  }
  return static_cast<int>(it - ranks.begin());
}

}  // namespace detail::api

namespace {

using detail::api::g_world;
using detail::api::g_world_calls;
using detail::api::g_world_drain_mutex;
using detail::api::g_world_drained;
using detail::api::g_world_drainers;
using detail::api::remember_locked;
using detail::api::resolve;
using detail::api::state;
using detail::api::world_or_throw;

// What a process that is not in a group holds for it: it knows the members
// but takes part in nothing.
class NonMemberGroup final : public ProcessGroup {
 public:
  NonMemberGroup(int size, ProcessGroupOptions options, std::string backend)
      : ProcessGroup(-1, size, std::move(options)), backend_(std::move(backend)) {}
  std::string backend_name() const override { return backend_; }

 private:
  std::string backend_;
};

// Ends what a destroyed group is doing: a group with a call in progress
// (`world_calls` more for the default group, counted apart) or an operation
// queued is aborted, so that those calls raise (naming the destroy) instead
// of waiting for peers. Idle groups are left alone: their peers may still be
// finishing the last call they shared.
void stop_calls(ProcessGroup& group, int global_rank, int64_t world_calls = 0) {
  if (group.rank() < 0 || (group.calls_in_progress() == 0 && world_calls == 0 && group.idle())) return;
  try {
    group.abort("destroy_process_group() was called on rank " + std::to_string(global_rank) +
                " while the group had a call in progress");
  } catch (const DistError& error) {  // a backend that cannot abort
    TDIST_LOG(WARNING) << "destroy_process_group: could not abort a group with calls in progress: "
                       << error.what();
  }
}

// Waits for the calls that read the default group through g_world to
// return (destroy has cleared g_world and aborted the group). A call that
// does not return within `limit` (it waits in code that no abort reaches)
// keeps the group alive for good instead: a leak, never a use after free.
void free_world_after_calls(Group world, std::chrono::milliseconds limit) {
  // Counted before the count of calls is looked at (both sequentially
  // consistent): the last call to leave then either sees this and wakes
  // the wait, or left before the look.
  g_world_drainers.fetch_add(1);
  struct Done {
    ~Done() { g_world_drainers.fetch_sub(1); }
  } done;
  std::unique_lock<std::mutex> lock(g_world_drain_mutex);
  if (g_world_drained.wait_for(lock, limit, [] { return g_world_calls.load() == 0; })) return;
  TDIST_LOG(WARNING) << "destroy_process_group: a call on the default group did not return within "
                     << limit.count() << " ms of the destroy; the group is kept, not freed";
  // Never destroyed (not even at exit, where the call may still run).
  static auto* kept = new std::vector<Group>;  // guarded by g_world_drain_mutex
  kept->push_back(std::move(world));
}

// A program's exit: a default group still there is destroyed (the Python
// package does that first, while the interpreter runs), and rank 0 then
// waits for the other ranks to leave the store it hosts (store_leave.h).
// Registered by the first init_process_group, after the statics its groups
// use exist, so it runs before they are destroyed.
void end_job_at_exit() {
  bool destroy = false;
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    destroy = state().world && !state().world->forked_copy();
  }
  if (destroy) {
    try {
      destroy_process_group(nullptr);
    } catch (const std::exception& e) {  // another thread's destroy came first, say
      TDIST_LOG(WARNING) << "at exit: " << e.what();
    }
  }
  detail::release_kept_store();
}

}  // namespace

void init_process_group(const InitProcessGroupOptions& options) {
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    if (state().world) {
      throw DistError(
          "init_process_group: the default process group is already initialized; call "
          "destroy_process_group() first");
    }
  }
  validate::positive_timeout("init_process_group", options.timeout);
  // A bad TDIST_DEBUG / TORCH_DISTRIBUTED_DEBUG fails here, before anything
  // is created, as torch fails at import.
  const DebugLevel debug = debug_level();
  // -1 (the default) means "not given": taken from init_method or the
  // environment. Any other negative value is a mistake, not "not given".
  if (options.rank < -1) {
    throw DistInvalidArgument("init_process_group: rank " + std::to_string(options.rank) +
                              " is invalid: a rank is >= 0 (-1, the default, means: take it from init_method "
                              "or the environment)");
  }
  if (options.world_size < -1 || options.world_size == 0) {
    throw DistInvalidArgument("init_process_group: world_size " + std::to_string(options.world_size) +
                              " is invalid: it must be positive (-1, the default, means: take it from "
                              "init_method or the environment)");
  }
  std::string backend = backend_name(options.backend);
  // The last job's store, if this process hosted it and kept it for the
  // other ranks, goes before this job's store may take its port.
  detail::release_kept_store();
  RendezvousResult r;
  if (options.store) {
    if (!options.init_method.empty()) {
      throw DistInvalidArgument("init_process_group: init_method and store are mutually exclusive");
    }
    if (options.rank < 0 || options.world_size <= 0) {
      throw DistInvalidArgument(
          "init_process_group: rank and world_size are required with an explicit store (got "
          "rank " +
          std::to_string(options.rank) + ", world_size " + std::to_string(options.world_size) + ")");
    }
    r = rendezvous(options.store, options.rank, options.world_size);
  } else {
    r = rendezvous(options.init_method.empty() ? "env://" : options.init_method, options.rank,
                   options.world_size, options.timeout);
  }
  std::shared_ptr<TCPStore> tcp = std::dynamic_pointer_cast<TCPStore>(r.store);
  const std::string master_host = tcp ? tcp->host() : "";
  // The store rank 0 hosts for this job (not one the caller passed).
  std::shared_ptr<TCPStore> made_store = r.rank_0_hosts_store ? tcp : nullptr;
  auto store = std::make_shared<PrefixStore>("tdist", r.store);
  ProcessGroupOptions pg_options;
  pg_options.timeout = options.timeout;
  pg_options.master_host = master_host;
  Group world = create_process_group(backend, std::make_shared<PrefixStore>("default_pg", store), r.rank,
                                     r.world_size, pg_options);
  std::lock_guard<std::mutex> lock(state().mutex);
  state().world = std::move(world);
  g_world.store(state().world.get(), std::memory_order_release);
  state().store = std::move(store);
  state().made_store = std::move(made_store);
  state().backend = backend;
  state().timeout = options.timeout;
  state().master_host = master_host;
  state().new_group_calls = 0;
  state().local_group_calls.clear();
  remember_locked(state().world);
  static const bool at_exit = std::atexit(end_job_at_exit) == 0;
  if (!at_exit) TDIST_LOG(WARNING) << "init_process_group: cannot end the job at exit (atexit failed)";
  if (debug >= DebugLevel::kInfo) {
    std::string method = options.init_method.empty() ? "env://" : options.init_method;
    if (options.store) method = "(explicit store)";
    TDIST_LOG(INFO) << "init_process_group: rank " << r.rank << " of " << r.world_size << ", backend "
                    << backend << ", timeout " << options.timeout.count() << " ms, init_method " << method
                    << ", debug level " << debug_level_name(debug);
  }
}

void destroy_process_group(const Group& group) {
  std::unique_lock<std::mutex> lock(state().mutex);
  if (group && group != state().world) {
    // One group: no call may use it any more; its last handle frees it.
    if (group->destroyed()) {
      throw DistError(
          "destroy_process_group: Invalid process group specified (the group was already destroyed)");
    }
    group->mark_destroyed();
    std::erase_if(state().groups, [&](const std::weak_ptr<ProcessGroup>& g) { return g.lock() == group; });
    const int global_rank = state().world ? state().world->rank() : -1;
    lock.unlock();
    stop_calls(*group, global_rank);
    return;
  }
  if (!state().world) {
    throw DistError(
        "destroy_process_group: the default process group is not initialized (destroy_process_group() "
        "was called before init_process_group(), or twice)");
  }
  const int global_rank = state().world->rank();
  // A forked child's copy leaves the parent's store alone (its connection
  // is the parent's) and has no calls of its own to wait for.
  const bool forked = state().world->forked_copy();
  // The default group and every group made since: handles kept of them
  // fail from now on instead of running.
  std::vector<Group> destroyed;
  for (const auto& weak : state().groups) {
    if (auto g = weak.lock()) {
      g->mark_destroyed();
      destroyed.push_back(std::move(g));
    }
  }
  state().groups.clear();
  g_world.store(nullptr);
  Group world = std::move(state().world);
  state().world.reset();
  const std::shared_ptr<Store> store = std::move(state().store);
  const std::shared_ptr<TCPStore> made_store = std::move(state().made_store);
  lock.unlock();
  // Outside the lock: the calls that end now may need it to raise.
  for (const auto& g : destroyed) stop_calls(*g, global_rank, g == world ? g_world_calls.load() : 0);
  destroyed.clear();
  const auto limit =
      forked ? std::chrono::milliseconds(0) : std::min(world->timeout(), std::chrono::milliseconds(30000));
  const int world_size = world->size();
  const auto timeout = world->timeout();
  free_world_after_calls(std::move(world), limit);
  if (forked) return;
  // The last uses of the store, after the groups: a rank that waited for
  // this one in a call has its error now, and can come to its own destroy
  // (or exit) and write its part. Each waits at most the timeout and 60 s.
  const auto last_wait = std::min(timeout, std::chrono::milliseconds(60000));
  detail::write_job_trace(*store, global_rank, world_size, last_wait);
  if (made_store) detail::leave_made_store(made_store, global_rank, world_size, last_wait);
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().world != nullptr;
}

Group default_group() {
  return world_or_throw();
}

bool is_member(const Group& group) {
  return resolve(group, "is_member")->rank() >= 0;
}

int get_rank(const Group& group) {
  return resolve(group, "get_rank")->rank();
}

int get_world_size(const Group& group) {
  Group g = resolve(group, "get_world_size");
  return g->rank() >= 0 ? g->size() : -1;
}

std::string get_backend(const Group& group) {
  return resolve(group, "get_backend")->backend_name();
}

void reinit_process_group(const Group& group, bool rebuild_link) {
  Group g = resolve(group, "reinit_process_group");
  if (g->rank() < 0) return;
  g->reinit(rebuild_link);
}

void abort_process_group(const Group& group, const std::string& reason) {
  Group g = resolve(group, "abort_process_group");
  if (g->rank() < 0) return;
  g->abort(reason);
}

std::string get_comm_name(const Group& group) {
  Group g = resolve(group, "get_comm_name");
  return g->rank() >= 0 ? g->comm_name() : std::string();
}

Group new_group(const std::vector<int>& ranks, std::optional<std::chrono::milliseconds> timeout,
                const std::string& backend, bool use_local_synchronization) {
  Group world = world_or_throw();
  if (world->forked_copy()) {
    // Its rendezvous would go through the parent's store connection, as the
    // parent's rank.
    throw DistBackendError("new_group: " + detail::forked_copy_text("default group", world->owner_pid()) +
                           ": destroy_process_group, then init_process_group");
  }
  if (timeout) validate::positive_timeout("new_group", *timeout);
  int world_size = world->size();
  std::vector<int> members = ranks;
  if (members.empty()) {
    for (int r = 0; r < world_size; ++r) members.push_back(r);
  }
  std::vector<int> sorted = members;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= world_size) {
      throw DistInvalidArgument("new_group: rank " + std::to_string(sorted[i]) + " is not in [0, " +
                                std::to_string(world_size) + ")");
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      throw DistInvalidArgument("new_group: rank " + std::to_string(sorted[i]) + " is listed twice");
    }
  }
  // Group rank order is ascending global rank, as in torch.
  members = sorted;
  std::string key;
  for (int r : members) key += std::to_string(r) + ",";
  std::string name;
  std::shared_ptr<Store> base;
  std::string chosen_backend;
  ProcessGroupOptions options;
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    // Every caller numbers its groups the same way: all ranks count every
    // new_group call, or with local synchronization, members count the calls
    // for this member list.
    if (use_local_synchronization) {
      name = "group_local/" + key + "/" + std::to_string(state().local_group_calls[key]++);
    } else {
      name = "group/" + std::to_string(state().new_group_calls++);
    }
    base = state().store;
    chosen_backend = backend.empty() ? state().backend : backend_name(backend);
    options.timeout = timeout.value_or(state().timeout);
    options.master_host = state().master_host;
  }
  options.global_ranks = members;
  int me = world->rank();
  auto it = std::find(members.begin(), members.end(), me);
  if (it == members.end()) {
    if (use_local_synchronization) {
      throw DistInvalidArgument(
          "new_group: with use_local_synchronization=true only members call new_group; rank " +
          std::to_string(me) + " is not in the group");
    }
  }
  Group group =
      it == members.end()
          ? std::make_shared<NonMemberGroup>(static_cast<int>(members.size()), options, chosen_backend)
          : create_process_group(chosen_backend, std::make_shared<PrefixStore>(name, base),
                                 static_cast<int>(it - members.begin()), static_cast<int>(members.size()),
                                 options);
  if (debug_level() >= DebugLevel::kInfo) {
    const std::string role =
        group->rank() >= 0 ? "is group rank " + std::to_string(group->rank()) : "is not a member";
    TDIST_LOG(INFO) << "new_group " << name << ": global ranks [" << key.substr(0, key.size() - 1)
                    << "], this rank " << role << ", backend " << chosen_backend << ", timeout "
                    << options.timeout.count() << " ms";
  }
  std::lock_guard<std::mutex> lock(state().mutex);
  remember_locked(group);
  return group;
}

int get_group_rank(const Group& group, int global_rank) {
  const auto& ranks = resolve(group, "get_group_rank")->global_ranks();
  auto it = std::find(ranks.begin(), ranks.end(), global_rank);
  return it == ranks.end() ? -1 : static_cast<int>(it - ranks.begin());
}

int get_global_rank(const Group& group, int group_rank) {
  const auto& ranks = resolve(group, "get_global_rank")->global_ranks();
  if (group_rank < 0 || group_rank >= static_cast<int>(ranks.size())) {
    throw DistInvalidArgument("get_global_rank: group rank " + std::to_string(group_rank) +
                              " is not in [0, " + std::to_string(ranks.size()) + ")");
  }
  return ranks[static_cast<size_t>(group_rank)];
}

std::vector<int> get_process_group_ranks(const Group& group) {
  return resolve(group, "get_process_group_ranks")->global_ranks();
}

}  // namespace tdist
