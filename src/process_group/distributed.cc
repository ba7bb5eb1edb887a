#include "tdist/distributed.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "blocking_call.h"
#include "flight_recorder.h"
#include "group_resolve.h"
#include "object_codec.h"
#include "tdist/debug.h"
#include "tdist/errors.h"
#include "tdist/logging.h"
#include "tdist/rendezvous.h"
#include "tdist/tcp_store.h"
#include "validate.h"

namespace tdist {

thread_local const void* detail::BlockingCallScope::target_ = nullptr;
namespace {

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

struct State {
  std::mutex mutex;
  Group world;

  std::shared_ptr<Store> store;  // prefixed, shared by every group
  std::string backend;
  std::chrono::milliseconds timeout{kDefaultPgTimeout};
  std::string master_host;
  int new_group_calls = 0;
  std::map<std::string, int> local_group_calls;
  // Every group made by init_process_group and new_group since the last
  // destroy_process_group(): destroying the default group destroys them all.
  std::vector<std::weak_ptr<ProcessGroup>> groups;
};

State& state() {
  static State instance;
  return instance;
}

// state().world.get(), for the collectives to read without the lock (set
// and cleared under it; a constant-initialized global, so reading it needs
// no guard either). g_world_calls counts the calls that may be using it:
// destroy_process_group() clears g_world, then waits for the count to drop
// to 0 before it frees the group, so nothing is freed under a call.
constinit std::atomic<ProcessGroup*> g_world{nullptr};
constinit std::atomic<int64_t> g_world_calls{0};
// destroy_process_group() waits here for g_world_calls to drop to 0.
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
    if (g_world_calls.fetch_sub(1) == 1) {
      std::lock_guard<std::mutex> lock(g_world_drain_mutex);
      g_world_drained.notify_all();
    }
  }
  ProcessGroup* group_ = nullptr;
  bool world_ = false;
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
  std::unique_lock<std::mutex> lock(g_world_drain_mutex);
  if (g_world_drained.wait_for(lock, limit, [] { return g_world_calls.load() == 0; })) return;
  TDIST_LOG(WARNING) << "destroy_process_group: a call on the default group did not return within "
                     << limit.count() << " ms of the destroy; the group is kept, not freed";
  // Never destroyed (not even at exit, where the call may still run).
  static auto* kept = new std::vector<Group>;  // guarded by g_world_drain_mutex
  kept->push_back(std::move(world));
}

// User tags of point-to-point operations: 0..2^31-1, as torch's Gloo
// ("Tag must be nonnegative"). Negative ones are tdist's own (the torch
// plugin's payloads, monitored_barrier).
void check_user_tag(const char* op, int tag) {
  if (tag < 0) {
    throw DistInvalidArgument(std::string(op) + ": tag " + std::to_string(tag) +
                              " is invalid: tags must be non-negative (0 to 2147483647); negative tags are "
                              "reserved for tdist's own messages");
  }
}

// Forgets groups that are gone, then remembers `group` (under the lock).
void remember_locked(const Group& group) {
  auto& groups = state().groups;
  std::erase_if(groups, [](const std::weak_ptr<ProcessGroup>& g) { return g.expired(); });
  groups.push_back(group);
}

// The member of `g` with global rank `global_rank`, or DistInvalidArgument.
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

inline int to_group_rank(const ProcessGroup& g, int global_rank, const char* op, const char* what) {
  // The world and groups of leading ranks map a rank to itself.
  const auto& ranks = g.global_ranks();
  if (global_rank >= 0 && static_cast<size_t>(global_rank) < ranks.size() &&
      ranks[static_cast<size_t>(global_rank)] == global_rank)
    return global_rank;
  return group_rank_or_throw(g, global_rank, op, what);
}

// A blocking call that the backend ran on this thread returns no work: it
// is done (see blocking_call.h).
WorkPtr finish(const WorkPtr& work, bool async_op) {
  if (async_op) return work;
  if (work) work->wait();
  return nullptr;
}

Tensor bytes_tensor(std::vector<uint8_t>& data) {
  return Tensor::wrap(data);
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
  std::string master_host;
  if (auto* tcp = dynamic_cast<TCPStore*>(r.store.get())) master_host = tcp->host();
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
  state().backend = backend;
  state().timeout = options.timeout;
  state().master_host = master_host;
  state().new_group_calls = 0;
  state().local_group_calls.clear();
  remember_locked(state().world);
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
  if (global_rank >= 0) {
    detail::write_job_trace(*state().store, global_rank, state().world->size(), state().world->timeout());
  }
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
  state().store.reset();
  lock.unlock();
  // Outside the lock: the calls that end now may need it to raise.
  for (const auto& g : destroyed) stop_calls(*g, global_rank, g == world ? g_world_calls.load() : 0);
  destroyed.clear();
  const auto limit = std::min(world->timeout(), std::chrono::milliseconds(30000));
  free_world_after_calls(std::move(world), limit);
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

// ---- Point to point ----

namespace {

// isend/irecv under the name of the call the user made ("send", "irecv", ...).
WorkPtr start_send(const char* op, const Tensor& tensor, int dst, const Group& group, int tag) {
  Group g = resolve(group, op);
  if (g->rank() < 0) return nullptr;
  return g->send(tensor, to_group_rank(*g, dst, op, "dst"), tag);
}

WorkPtr start_recv(const char* op, const Tensor& tensor, std::optional<int> src, const Group& group,
                   int tag) {
  Group g = resolve(group, op);
  if (g->rank() < 0) return nullptr;
  return g->recv(tensor, src ? to_group_rank(*g, *src, op, "src") : -1, tag);
}

}  // namespace

WorkPtr isend(const Tensor& tensor, int dst, const Group& group, int tag) {
  check_user_tag("isend", tag);
  return start_send("isend", tensor, dst, group, tag);
}

WorkPtr irecv(const Tensor& tensor, std::optional<int> src, const Group& group, int tag) {
  check_user_tag("irecv", tag);
  return start_recv("irecv", tensor, src, group, tag);
}

void send(const Tensor& tensor, int dst, const Group& group, int tag) {
  check_user_tag("send", tag);
  if (auto work = start_send("send", tensor, dst, group, tag)) work->wait();
}

int recv(const Tensor& tensor, std::optional<int> src, const Group& group, int tag) {
  check_user_tag("recv", tag);
  Group g = resolve(group, "recv");
  auto work = start_recv("recv", tensor, src, g, tag);
  if (!work) return -1;
  work->wait();
  return get_global_rank(g, work->source_rank());
}

namespace detail {

Group resolve_group(const Group& group, const char* op) {
  return resolve(group, op);
}

void remember_group(const Group& group) {
  std::lock_guard<std::mutex> lock(state().mutex);
  remember_locked(group);
}

WorkPtr isend_reserved_tag(const Tensor& tensor, int dst, const Group& group, int tag) {
  return start_send("isend", tensor, dst, group, tag);
}

WorkPtr irecv_reserved_tag(const Tensor& tensor, std::optional<int> src, const Group& group, int tag) {
  return start_recv("irecv", tensor, src, group, tag);
}

}  // namespace detail

std::vector<WorkPtr> batch_isend_irecv(const std::vector<P2POp>& p2p_op_list) {
  // Every operation is checked before the first is posted.
  for (const auto& op : p2p_op_list) check_user_tag("batch_isend_irecv", op.tag);
  std::vector<WorkPtr> works;
  works.reserve(p2p_op_list.size());
  for (const auto& op : p2p_op_list) {
    works.push_back(op.op == P2POp::Kind::kIsend ? isend(op.tensor, op.peer, op.group, op.tag)
                                                 : irecv(op.tensor, op.peer, op.group, op.tag));
  }
  return works;
}

// ---- Collectives ----

WorkPtr broadcast(const Tensor& tensor, int src, const Group& group, bool async_op) {
  const GroupCall call(group, "broadcast");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.broadcast(tensor, to_group_rank(g, src, "broadcast", "src")), async_op);
}

WorkPtr all_reduce(const Tensor& tensor, const ReduceOp& op, const Group& group, bool async_op) {
  const GroupCall call(group, "all_reduce");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.all_reduce(tensor, op), async_op);
}

WorkPtr reduce(const Tensor& tensor, int dst, const ReduceOp& op, const Group& group, bool async_op) {
  const GroupCall call(group, "reduce");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.reduce(tensor, to_group_rank(g, dst, "reduce", "dst"), op), async_op);
}

WorkPtr all_gather(const std::vector<Tensor>& tensor_list, const Tensor& tensor, const Group& group,
                   bool async_op) {
  const GroupCall call(group, "all_gather");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.all_gather(tensor_list, tensor), async_op);
}

WorkPtr all_gather_into_tensor(const Tensor& output_tensor, const Tensor& input_tensor, const Group& group,
                               bool async_op) {
  const GroupCall call(group, "all_gather_into_tensor");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.all_gather_into_tensor(output_tensor, input_tensor), async_op);
}

WorkPtr all_gather_into_tensor_uneven(const Tensor& output, const Tensor& input,
                                      const std::vector<int64_t>& output_split_sizes, const Group& group,
                                      bool async_op) {
  const GroupCall call(group, "all_gather_into_tensor_uneven");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.all_gather_into_tensor_uneven(output, input, output_split_sizes), async_op);
}

WorkPtr gather(const Tensor& tensor, const std::vector<Tensor>& gather_list, int dst, const Group& group,
               bool async_op) {
  const GroupCall call(group, "gather");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.gather(gather_list, tensor, to_group_rank(g, dst, "gather", "dst")), async_op);
}

WorkPtr scatter(const Tensor& tensor, const std::vector<Tensor>& scatter_list, int src, const Group& group,
                bool async_op) {
  const GroupCall call(group, "scatter");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.scatter(tensor, scatter_list, to_group_rank(g, src, "scatter", "src")), async_op);
}

WorkPtr reduce_scatter(const Tensor& output, const std::vector<Tensor>& input_list, const ReduceOp& op,
                       const Group& group, bool async_op) {
  const GroupCall call(group, "reduce_scatter");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.reduce_scatter(output, input_list, op), async_op);
}

WorkPtr reduce_scatter_tensor(const Tensor& output, const Tensor& input, const ReduceOp& op,
                              const Group& group, bool async_op) {
  const GroupCall call(group, "reduce_scatter_tensor");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.reduce_scatter_tensor(output, input, op), async_op);
}

WorkPtr reduce_scatter_tensor_uneven(const Tensor& output, const Tensor& input,
                                     const std::vector<int64_t>& input_split_sizes, const ReduceOp& op,
                                     const Group& group, bool async_op) {
  const GroupCall call(group, "reduce_scatter_tensor_uneven");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.reduce_scatter_tensor_uneven(output, input, input_split_sizes, op), async_op);
}

WorkPtr all_to_all(const std::vector<Tensor>& output_tensor_list,
                   const std::vector<Tensor>& input_tensor_list, const Group& group, bool async_op) {
  const GroupCall call(group, "all_to_all");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.all_to_all(output_tensor_list, input_tensor_list), async_op);
}

WorkPtr all_to_all_single(const Tensor& output, const Tensor& input,
                          const std::vector<int64_t>& output_split_sizes,
                          const std::vector<int64_t>& input_split_sizes, const Group& group, bool async_op) {
  const GroupCall call(group, "all_to_all_single");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.all_to_all_single(output, input, output_split_sizes, input_split_sizes), async_op);
}

WorkPtr barrier(const Group& group, bool async_op) {
  const GroupCall call(group, "barrier");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.barrier(), async_op);
}

// ---- Object collectives ----
// Objects travel as bytes: first their sizes, then the bytes themselves,
// padded to the largest where the underlying collective needs equal blocks.
// What peers send is decoded by object_codec.h, checked and fuzzed.

void broadcast_object_list(std::vector<Bytes>& object_list, int src, const Group& group) {
  Group g = resolve(group, "broadcast_object_list");
  if (g->rank() < 0) return;
  std::vector<int64_t> sizes(object_list.size(), 0);
  bool is_src = get_global_rank(g, g->rank()) == src;
  if (is_src) {
    for (size_t i = 0; i < object_list.size(); ++i) sizes[i] = static_cast<int64_t>(object_list[i].size());
  }
  broadcast(Tensor::wrap(sizes), src, g);
  std::vector<uint8_t> data(detail::object_bytes(sizes, "broadcast_object_list"));
  if (is_src) {
    size_t offset = 0;
    for (const auto& obj : object_list) {
      if (!obj.empty()) std::memcpy(data.data() + offset, obj.data(), obj.size());
      offset += obj.size();
    }
  }
  broadcast(bytes_tensor(data), src, g);
  if (!is_src) object_list = detail::split_objects(sizes, data, "broadcast_object_list");
}

void all_gather_object(std::vector<Bytes>& object_list, const Bytes& obj, const Group& group) {
  Group g = resolve(group, "all_gather_object");
  if (g->rank() < 0) return;
  int n = g->size();
  std::vector<int64_t> sizes(static_cast<size_t>(n), 0);
  std::vector<int64_t> mine{static_cast<int64_t>(obj.size())};
  all_gather_into_tensor(Tensor::wrap(sizes), Tensor::wrap(mine), g);
  std::vector<uint8_t> data(detail::object_bytes(sizes, "all_gather_object"));
  std::vector<uint8_t> input(obj.begin(), obj.end());
  all_gather_into_tensor_uneven(bytes_tensor(data), bytes_tensor(input), sizes, g);
  object_list = detail::split_objects(sizes, data, "all_gather_object");
}

void gather_object(const Bytes& obj, std::vector<Bytes>* object_gather_list, int dst, const Group& group) {
  Group g = resolve(group, "gather_object");
  if (g->rank() < 0) return;
  bool is_dst = get_global_rank(g, g->rank()) == dst;
  if (is_dst && object_gather_list == nullptr) {
    throw DistInvalidArgument("gather_object: object_gather_list is required on dst " + std::to_string(dst));
  }
  if (!is_dst && object_gather_list != nullptr) {
    throw DistInvalidArgument("gather_object: object_gather_list must be null on ranks other than dst " +
                              std::to_string(dst));
  }
  int n = g->size();
  std::vector<int64_t> sizes(static_cast<size_t>(n), 0);
  std::vector<int64_t> mine{static_cast<int64_t>(obj.size())};
  all_gather_into_tensor(Tensor::wrap(sizes), Tensor::wrap(mine), g);
  detail::object_bytes(sizes, "gather_object");
  int64_t largest = *std::max_element(sizes.begin(), sizes.end());
  std::vector<uint8_t> input(static_cast<size_t>(largest), 0);
  if (!obj.empty()) std::memcpy(input.data(), obj.data(), obj.size());
  std::vector<std::vector<uint8_t>> blocks;
  std::vector<Tensor> gather_list;
  if (is_dst) {
    blocks.assign(static_cast<size_t>(n), std::vector<uint8_t>(static_cast<size_t>(largest)));
    for (auto& b : blocks) gather_list.push_back(bytes_tensor(b));
  }
  gather(bytes_tensor(input), gather_list, dst, g);
  if (is_dst) {
    object_gather_list->assign(static_cast<size_t>(n), Bytes{});
    for (int r = 0; r < n; ++r) {
      auto& b = blocks[static_cast<size_t>(r)];
      (*object_gather_list)[static_cast<size_t>(r)].assign(
          b.begin(), b.begin() + static_cast<std::ptrdiff_t>(sizes[static_cast<size_t>(r)]));
    }
  }
}

void scatter_object_list(std::vector<Bytes>& scatter_object_output_list,
                         const std::vector<Bytes>& scatter_object_input_list, int src, const Group& group) {
  Group g = resolve(group, "scatter_object_list");
  if (g->rank() < 0) return;
  int n = g->size();
  bool is_src = get_global_rank(g, g->rank()) == src;
  if (is_src && scatter_object_input_list.size() != static_cast<size_t>(n)) {
    throw DistInvalidArgument("scatter_object_list: scatter_object_input_list has " +
                              std::to_string(scatter_object_input_list.size()) +
                              " objects but the group has " + std::to_string(n) + " ranks");
  }
  std::vector<int64_t> sizes(static_cast<size_t>(n), 0);
  if (is_src) {
    for (int r = 0; r < n; ++r) {
      sizes[static_cast<size_t>(r)] =
          static_cast<int64_t>(scatter_object_input_list[static_cast<size_t>(r)].size());
    }
  }
  broadcast(Tensor::wrap(sizes), src, g);
  detail::object_bytes(sizes, "scatter_object_list");
  int64_t largest = *std::max_element(sizes.begin(), sizes.end());
  std::vector<std::vector<uint8_t>> blocks;
  std::vector<Tensor> scatter_list;
  if (is_src) {
    for (const auto& obj : scatter_object_input_list) {
      blocks.emplace_back(static_cast<size_t>(largest), 0);
      if (!obj.empty()) std::memcpy(blocks.back().data(), obj.data(), obj.size());
    }
    for (auto& b : blocks) scatter_list.push_back(bytes_tensor(b));
  }
  std::vector<uint8_t> output(static_cast<size_t>(largest));
  scatter(bytes_tensor(output), scatter_list, src, g);
  auto mine = static_cast<size_t>(sizes[static_cast<size_t>(g->rank())]);
  scatter_object_output_list.assign(
      1, Bytes(output.begin(), output.begin() + static_cast<std::ptrdiff_t>(mine)));
}

}  // namespace tdist
