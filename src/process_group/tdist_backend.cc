// ProcessGroupTdist (tdist_backend.h): creation, the links (connect,
// rebuild, abort) and shutdown. About 610 lines in one file: these share
// the group's links mutex and generation, and each step of one's life
// (connect, rebuild, abort, shutdown) undoes or redoes another's.

#include "tdist_backend.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include <signal.h>
#include <unistd.h>

#include "common/completion_thread.h"
#include "common/env.h"
#include "common/error_text.h"
#include "common/owned_by_process.h"
#include "forced_algorithms.h"
#include "tdist/errors.h"
#include "tdist/logging.h"
#include "transport/shm/shm_p2p_transport.h"
#include "transport/tcp/tcp_transport.h"
#include "watched_store.h"

namespace tdist {
namespace {

// Group rank 0 names the group "<host>-<pid>-<n>", n counting the groups
// this process made: no other process of the job (or of another job) can
// pick the same name. The others read it from the group's store.
// A replacement of rank 0 (a restarted process joining a live job, see
// ProcessGroupTdist::connect) finds the name its predecessor set and keeps
// it: the name is the group's, not the process's.
std::string agree_on_comm_name(Store& store, int rank) {
  static std::atomic<uint64_t> groups_made{0};
  const std::string key = "tdist/comm_name";
  if (rank == 0) {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "host");
    std::string name = std::string(host) + "-" + std::to_string(getpid()) + "-" +
                       std::to_string(groups_made.fetch_add(1, std::memory_order_relaxed));
    return to_string(store.compare_set(key, {}, to_bytes(name)));
  }
  return to_string(store.get(key));
}

// The store key counting rank r's connects of the group (its generations).
std::string generation_key(int rank) {
  return "tdist/generation/" + std::to_string(rank);
}

// The prefix under which generation g of the group meets: its transport
// addresses, shared-memory names and call notes are its own, so nothing of
// an older generation (a dead rank's keys, a late message) is read by a
// newer one.
std::string generation_prefix(int64_t generation) {
  return "tdist/gen/" + std::to_string(generation) + "/";
}

// Set by every rank that enters generation g. Generations are entered in
// order (connect_generation), so g + 1 entered means "a later generation
// than g began".
std::string entered_key(int64_t generation) {
  return generation_prefix(generation) + "entered";
}

int64_t read_count(Store& store, const std::string& key) {
  return store.add(key, 0);
}

using SteadyClock = std::chrono::steady_clock;
using detail::GenerationSuperseded;
using detail::WatchedStore;

}  // namespace

// By value: the signature every backend factory has (see process_group.cc).
// NOLINTNEXTLINE(performance-unnecessary-value-param)
Group make_tdist_process_group(std::shared_ptr<Store> store, int rank, int size,
                               const ProcessGroupOptions& options) {
  // Its worker, transports and shared memory are this process's: a forked
  // child's copy is not destroyed (common/owned_by_process.h).
  return detail::owned_by_this_process(
      std::make_unique<ProcessGroupTdist>(std::move(store), rank, size, options));
}

ProcessGroupTdist::ProcessGroupTdist(const std::shared_ptr<Store>& store, int rank, int size,
                                     const ProcessGroupOptions& options)
    : ProcessGroup(rank, size, options), store_(store) {
  if (!store) throw DistInvalidArgument("ProcessGroupTdist: the store is null");
  if (size <= 0 || rank < 0 || rank >= size) {
    throw DistInvalidArgument("ProcessGroupTdist: rank " + std::to_string(rank) + " is not in [0, " +
                              std::to_string(size) + ")");
  }
  check_calls_ = !env_bool("TDIST_TESTONLY_UNCHECKED_CALLS").value_or(false);
  record_calls_ = recorder_.enabled() && !env_bool("TDIST_TESTONLY_UNRECORDED_CALLS").value_or(false);
  forced_algos_ = detail::forced_algorithms();
  // Before the connect, whose last step is the barrier after which rank 0
  // may leave (connect_generation).
  comm_name_ = agree_on_comm_name(*store, rank);
  connect_generation();
  executor_.start();
}

void ProcessGroupTdist::startup_barrier(std::chrono::milliseconds left) {
  algorithms::CallContext ctx{
      .transport = *transport_, .op = "connect", .seq = algorithms::CallContext::kStartupSeq};
  // Within what the connect left of the group's timeout; a timeout names
  // the group's.
  ctx.timeout = options().timeout;
  ctx.deadline = algorithms::Clock::now() + left;
  try {
    algorithms::barrier(ctx);
  } catch (const DistError& e) {
    // A peer's abort() (its notice, a DistBackendError): a peer that could
    // abort the group had passed this barrier, so every rank had reached
    // it. The group is made; its first call raises that abort. Anything
    // else means it may not be: a peer that crashed or left for a later
    // generation (a DistNetworkError, which the barrier's failure passes on
    // to the others as its own abort notice, of that kind), or a timeout.
    if (!transport_->aborted_by_peer() || dynamic_cast<const DistNetworkError*>(&e) != nullptr ||
        dynamic_cast<const DistTimeoutError*>(&e) != nullptr)
      throw;
  }
  // From now on a peer that goes without a goodbye has crashed: every call
  // fails at once, naming it.
  transport_->set_crash_breaks_group(true);
}

void ProcessGroupTdist::connect(const std::shared_ptr<Store>& store, std::chrono::milliseconds timeout,
                                std::function<void()> while_waiting) {
  notes_ = std::make_unique<detail::StoreCallNotes>(store, rank(), size());
  transport::TcpOptions tcp;
  tcp.timeout = timeout;
  // `timeout` is what the rendezvous left of the group's: errors name the
  // group's.
  tcp.timeout_in_messages = options().timeout;
  tcp.while_waiting = std::move(while_waiting);
  tcp.reach_host = options().master_host;
  // Until the start-up barrier has passed, a peer that closes its
  // connections may just have finished its own connect and exited (a job
  // that starts and ends at once): only what involves it fails, not the
  // group (startup_barrier turns crashes back into group failures).
  tcp.crash_breaks_group = false;
  // Made aside, without links_mutex_ (the rendezvous may take the group's
  // timeout, and an abort must not wait for it), then put in place under it.
  auto transport = transport::connect_tcp(*store, rank(), size(), tcp);
  auto domains = connect_collective_domains(*store, *transport, timeout);
  std::unique_ptr<transport::Transport> shm_p2p;
  if (domains.shm != nullptr) {
    // Every rank is on this host: sends and receives go through shared
    // memory too, with what the collectives' domain agreed on.
    transport::shm::ShmP2pOptions p2p;
    p2p.peer_read = domains.shm->single_copy();
    p2p.policy = domains.shm->policy();
    p2p.timeout = timeout;
    p2p.watch = transport.get();
    shm_p2p = transport::shm::connect_shm_p2p(*store, rank(), size(), p2p);
  }
  {
    std::lock_guard<std::mutex> lock(links_mutex_);
    transport_ = std::move(transport);
    shm_p2p_ = std::move(shm_p2p);
    domains_ = std::move(domains);
    p2p_transport_.store(shm_p2p_ ? shm_p2p_.get() : transport_.get(), std::memory_order_release);
    (void)p2p_lease_->open();  // after the pointer (p2p_lease.h)
    all_on_shared_memory_ = shm() != nullptr && forced_algos_ == 0;
  }
  trace_register(*store);
  TDIST_LOG(DEBUG) << "tdist group of " << size() << " ranks: collectives over "
                   << domains_.collectives().name();
}

void ProcessGroupTdist::connect_generation() {
  // Generation g of the group is the g-th connect that its members make
  // together; "tdist/generation/<rank>" holds the latest one each rank
  // entered. A rank enters the next generation after its own latest, or
  // the latest any member entered if that is higher: generations are thus
  // entered in order, one more than any before at most. The survivors'
  // reinit and a replacement's creation (a new process with the rank's
  // store count) land on the same generation, the one after the dead
  // rank's. A generation that a member leaves before it is made (the
  // member died, or moved to a later one) can never be made: once a later
  // one has begun, the ranks still waiting in it move on to that, and a
  // rank whose connect failed (a member died during it) waits for a later
  // one to begin (a replacement's), all within the group's timeout.
  const auto timeout = options().timeout;
  const auto deadline = SteadyClock::now() + timeout;
  auto left = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::ceil<std::chrono::milliseconds>(deadline - SteadyClock::now()));
  };
  const std::string my_key = generation_key(rank());
  int64_t mine = read_count(*store_, my_key);
  int64_t generation = mine + 1;
  for (;;) {
    // The latest generation begun, if it is later (entered in order: the
    // first one not begun ends the search).
    while (store_->check({entered_key(generation + 1)})) ++generation;
    const int64_t entered = store_->add(my_key, generation - mine);
    if (entered != generation) {
      throw DistBackendError("connecting generation " + std::to_string(generation) + " of the group: rank " +
                             std::to_string(rank()) + "'s count in the store went from " +
                             std::to_string(mine) + " to " + std::to_string(entered) + " instead of " +
                             std::to_string(generation) + ": another process is rank " +
                             std::to_string(rank()) + " of this group too");
    }
    store_->set(entered_key(generation), to_bytes("1"));
    {
      // shrink and agree count their rounds from 0 in each generation, as a
      // replacement (a new process) does.
      std::lock_guard<std::mutex> lock(mutex_);
      generation_ = generation;
      ft_rounds_ = 0;
    }
    auto superseded = [store = store_, next = entered_key(generation + 1)] {
      if (store->check({next})) throw GenerationSuperseded();
    };
    auto watched = std::make_shared<WatchedStore>(
        std::make_shared<PrefixStore>(generation_prefix(generation), store_), superseded);
    try {
      try {
        connect(watched, left(), superseded);
        watched->disarm();
        startup_barrier(left());
        return;
      } catch (const GenerationSuperseded&) {
        TDIST_LOG(INFO) << "rank " << rank() << ": generation " << generation
                        << " of the group was superseded while connecting; moving to the next";
      } catch (const DistError& e) {
        // A member that died during the connect (or gave it up) fails it
        // here with a DistNetworkError (a connection refused, reset or
        // closed, the start-up barrier); its replacement, or the member
        // itself, begins the next generation. Other errors (a bad setting,
        // a peer that reported one, the store) no later generation mends.
        if (dynamic_cast<const DistNetworkError*>(&e) == nullptr ||
            dynamic_cast<const DistStoreError*>(&e) != nullptr || SteadyClock::now() >= deadline)
          throw;
        const std::exception_ptr failure = std::current_exception();
        disconnect();
        bool later = false;
        try {
          store_->wait({entered_key(generation + 1)}, left());
          later = true;
        } catch (const DistTimeoutError&) {
        }
        if (!later) std::rethrow_exception(failure);
        TDIST_LOG(INFO) << "rank " << rank() << ": connecting generation " << generation
                        << " of the group failed (" << e.what() << "), and a later one began; moving to it";
      }
    } catch (const DistError&) {
      // Ranks at other generations wait for each other in vain: say who.
      const std::string others = other_generations();
      if (others.empty()) throw;
      std::rethrow_exception(with_context(std::current_exception(),
                                          "connecting generation " + std::to_string(generation) +
                                              " of the group, but " + others +
                                              " (after a failure every survivor calls reinit_process_group "
                                              "once and a replacement creates the group anew): "));
    }
    disconnect();
    mine = generation++;
  }
}

std::string ProcessGroupTdist::other_generations() const {
  std::string out;
  try {
    for (int r = 0; r < size(); ++r) {
      if (r == rank() || !store_->check({generation_key(r)})) continue;
      const int64_t theirs = parse_int(to_string(store_->get(generation_key(r))), "generation", 0);
      if (theirs == generation_) continue;
      out += (out.empty() ? "rank " : ", rank ") + std::to_string(r) + " is at generation " +
             std::to_string(theirs);
    }
  } catch (...) {
    return {};  // the store may be gone: the original error says enough
  }
  return out;
}

std::string ProcessGroupTdist::next_round_prefix() {
  std::lock_guard<std::mutex> lock(mutex_);
  return generation_prefix(generation_) + "ft/" + std::to_string(ft_rounds_++) + "/";
}

namespace {
// The group whose connections this thread pins (LinksPin), if any: reinit
// from there (a callback that an abort's failed requests run) would wait
// for its own pin.
thread_local const ProcessGroupTdist* pinning_thread_group = nullptr;
}  // namespace

// Holds the connections for a thread that is not the group's owner: while
// one lives, disconnect() waits before destroying them. The pointers are
// null while the group has no connections.
class ProcessGroupTdist::LinksPin {
 public:
  explicit LinksPin(const ProcessGroupTdist& group) : group_(group), previous_(pinning_thread_group) {
    pinning_thread_group = &group;
    std::lock_guard<std::mutex> lock(group_.links_mutex_);
    ++group_.links_pins_;
    shm = group_.shm();
    local = group_.domains_.local.get();
    transport = group_.transport_.get();
    shm_p2p = group_.shm_p2p_.get();
  }
  ~LinksPin() {
    {
      std::lock_guard<std::mutex> lock(group_.links_mutex_);
      if (--group_.links_pins_ == 0) group_.links_cv_.notify_all();
    }
    pinning_thread_group = previous_;
  }
  LinksPin(const LinksPin&) = delete;
  LinksPin& operator=(const LinksPin&) = delete;

  transport::shm::ShmGroup* shm = nullptr;
  transport::shm::ShmGroup* local = nullptr;
  transport::Transport* transport = nullptr;
  transport::Transport* shm_p2p = nullptr;

 private:
  const ProcessGroupTdist& group_;
  const ProcessGroupTdist* previous_;
};

void ProcessGroupTdist::disconnect() {
  recorder_.forget_group(trace_group_);
  const bool drained = end_p2p_uses("closed (destroy_process_group, shutdown or a rebuild)");
  CollectiveDomains domains;
  std::unique_ptr<transport::Transport> transport;
  std::unique_ptr<transport::Transport> shm_p2p;
  {
    std::unique_lock<std::mutex> lock(links_mutex_);
    // Point-to-point calls (the plugin makes some from the transport's own
    // callbacks, as the old transport shuts down) find no transport from
    // here on, and raise, instead of reaching one being destroyed.
    p2p_transport_.store(nullptr, std::memory_order_release);
    domains = std::move(domains_);
    domains_ = CollectiveDomains{};
    transport = std::move(transport_);
    shm_p2p = std::move(shm_p2p_);
    all_on_shared_memory_ = false;
    // An abort or peer_crashed on another thread may be using them: new
    // ones cannot start on them (the members are empty), running ones end.
    links_cv_.wait(lock, [&] { return links_pins_ == 0; });
  }
  // Destroyed outside the lock (their threads' callbacks may call
  // peer_crashed), in the order the members' comments ask for: the domains
  // (and the hierarchy's pipeline thread) first, as they point into the
  // transport.
  // The domain first (a move-assignment would replace the members in
  // declaration order, the shared memory before the domain that uses it).
  domains.domain.reset();
  domains = CollectiveDomains{};
  if (!drained) {
    keep_for_good(std::move(shm_p2p), std::move(transport));
    return;
  }
  shm_p2p.reset();  // it watches the TCP transport
  transport.reset();
}

void ProcessGroupTdist::check_usable(std::string_view op) const {
  if (unusable_.load(std::memory_order_acquire) || forked_copy())
    throw DistBackendError(std::string(op) + ": " + unusable_text());
}

std::string ProcessGroupTdist::unusable_text() const {
  // Not under mutex_: a parent's thread may have held it when it forked.
  if (forked_copy()) {
    return detail::forked_copy_text("process group", owner_pid()) + " (pid " +
           std::to_string(detail::this_process_id()) +
           "), where it cannot run calls: its connections, threads and shared memory are the parent's. "
           "Make a new group in the child (destroy_process_group, then init_process_group)";
  }
  std::lock_guard<std::mutex> lock(mutex_);
  return unusable_reason_;
}

void ProcessGroupTdist::set_unusable(std::string reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    unusable_reason_ = std::move(reason);
  }
  unusable_.store(true, std::memory_order_release);
}

void ProcessGroupTdist::abort(const std::string& reason) {
  // A forked child's copy cannot run calls anyway (check_usable); aborting
  // it must not abort the parent's links, which it shares.
  if (forked_copy()) return;
  const auto& global = global_ranks();
  std::string why = "the group was aborted by rank " + std::to_string(rank());
  if (global[static_cast<size_t>(rank())] != rank()) {
    why += " (global rank " + std::to_string(global[static_cast<size_t>(rank())]) + ")";
  }
  why += ": " + (reason.empty() ? std::string("abort() was called") : reason);
  bool in_rebuild = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    in_rebuild = rebuilding_;
    if (in_rebuild) {
      // reinit has closed the old connections and makes new ones: it
      // applies the abort to them once they exist (the first abort stays).
      if (abort_in_rebuild_) return;
      abort_in_rebuild_ = why;
    } else if (unusable_.load(std::memory_order_relaxed)) {
      return;  // aborted (or unconnected) already
    }
    unusable_reason_ = why + "; reinit_process_group rebuilds it, or destroy it";
    unusable_.store(true, std::memory_order_release);
  }
  // Queued operations never start; the one running fails below.
  const auto unstarted = executor_.take_queued();
  const auto error = std::make_exception_ptr(DistBackendError(why));
  if (!in_rebuild) abort_links(why);
  for (auto& task : unstarted) {
    trace_end(task.trace_id, error);
    task.work->finish(error);
  }
}

void ProcessGroupTdist::abort_links(const std::string& why) {
  const LinksPin links(*this);
  // Peers waiting on shared memory wake (ShmGroup::abort) and raise "rank R
  // aborted the group: ..."; over TCP they get the transport's abort notice.
  using Kind = transport::shm::ShmGroup::AbortKind;
  if (links.shm != nullptr) links.shm->abort(why, Kind::kOther);
  if (links.local != nullptr) links.local->abort(why, Kind::kOther);
  if (links.shm_p2p != nullptr) links.shm_p2p->abort(std::make_exception_ptr(DistBackendError(why)));
  if (links.transport != nullptr) links.transport->abort(std::make_exception_ptr(DistBackendError(why)));
}

void ProcessGroupTdist::reinit(bool rebuild_links) {
  // A forked child's copy must not close or rebuild the parent's links.
  if (forked_copy()) throw DistBackendError("reinit_process_group: " + unusable_text());
  if (shut_down_.load()) {
    throw DistBackendError(
        "reinit_process_group: the process group was shut down (destroy_process_group); "
        "make a new one");
  }
  if (detail::CompletionThreadScope::current() != nullptr || pinning_thread_group == this ||
      p2p_lease_->held_here()) {
    // That thread must finish the group's operations (or is the transport's
    // own, or one inside it posting or waiting): waiting there for the
    // group to be idle would never end.
    throw DistError(
        "reinit_process_group inside an operation's completion callback would deadlock: the thread running "
        "the callback must finish the group's operations first; call it after wait() instead");
  }
  if (!rebuild_links) {
    check_usable("reinit_process_group");  // named as this call, not its barrier
    // The links stay; the barrier shows every member reached this point.
    if (auto work = barrier()) work->wait();
    return;
  }
  // Claims the group once every queued operation has run (async ones may
  // still be queued: they are the members' earlier calls).
  if (!executor_.claim_when_idle())
    throw DistError("reinit_process_group: the process group is being destroyed");
  struct Release {
    detail::CallExecutor& executor;
    ~Release() { executor.release_claim(); }
  } release{executor_};
  {
    // Aborts from here on are this rebuild's to apply (see abort()); one
    // before is behind the group.
    std::lock_guard<std::mutex> lock(mutex_);
    rebuilding_ = true;
    abort_in_rebuild_.reset();
  }
  disconnect();
  try {
    connect_generation();
  } catch (const std::exception& e) {
    disconnect();
    set_unusable("this group has no connections: reinit_process_group could not rebuild them: " +
                 std::string(e.what()) + "; destroy it and create a new one");
    std::lock_guard<std::mutex> lock(mutex_);
    rebuilding_ = false;
    throw;
  }
  // As in a new group: the peers' counts start again too.
  next_seq_.store(0, std::memory_order_relaxed);
  last_sig_ = Signature{};
  std::optional<std::string> aborted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    rebuilding_ = false;
    aborted.swap(abort_in_rebuild_);
    // Rebuilt: an abort (or an earlier failed rebuild) before it is behind
    // the group; one during it is not (abort() set the reason).
    if (!aborted) unusable_.store(false, std::memory_order_release);
  }
  if (aborted) {
    // The peers, which may have rebuilt already, learn of it as of any abort.
    abort_links(*aborted);
    throw DistBackendError("reinit_process_group: " + *aborted +
                           " (while the group was being rebuilt; the new connections are aborted too, so "
                           "every member must call reinit_process_group again)");
  }
}

void ProcessGroupTdist::stop_worker(const char* why) {
  // Queued work that never ran fails.
  for (auto& task : executor_.stop()) {
    task.work->finish(std::make_exception_ptr(
        DistError(task.op + ": the process group was " + why + " before the operation ran")));
  }
}

void ProcessGroupTdist::shutdown() {
  if (on_p2p_transport_thread()) {
    // This thread runs a callback inside a point-to-point transport of the
    // group (its own thread, or one driving it from a wait or a post):
    // closing the transport would wait for this thread.
    throw DistError(
        "destroy_process_group (shutdown) inside the completion callback of a send or receive would "
        "deadlock: the thread running the callback is inside the group's connections; call it after wait() "
        "instead");
  }
  if (shut_down_.exchange(true)) return;
  // A forked child's copy has no worker to stop and leaves the parent's
  // links alone (common/owned_by_process.h).
  if (forked_copy()) return;
  // The worker finishes what is queued (it leaves once the queue is empty).
  stop_worker("shut down");
  set_unusable("the process group was shut down (destroy_process_group)");
  disconnect();
}

ProcessGroupTdist::~ProcessGroupTdist() {
  recorder_.forget_group(trace_group_);
  stop_worker("destroyed");
  // The last handle went without a shutdown (destroy_process_group()
  // drops its own): a thread may still post or wait on the links that the
  // members' destruction frees next. A forked child's copy has none of
  // its own.
  if (shut_down_.load() || forked_copy()) return;
  if (!on_p2p_transport_thread()) {
    if (end_p2p_uses("freed (the group's last handle went)")) return;
  } else {
    // Freed by a callback that runs inside a point-to-point transport (its
    // own thread, or one driving it from a wait or a post): the transport
    // must outlive that thread's return into it, and cannot join its own
    // thread.
    TDIST_LOG(WARNING) << "a process group was freed inside the completion callback of a send or receive; "
                          "its connections are kept open (leaked)";
    (void)p2p_lease_->close();
  }
  // The collectives' domains go as usual (no such thread is in them).
  keep_for_good(std::move(shm_p2p_), std::move(transport_));
}

void ProcessGroupTdist::trace_register(Store& store) {
  detail::TraceGroupInfo info;
  info.rank = rank();
  info.size = size();
  info.global_ranks = global_ranks();
  info.transport = domains_.collectives().name();
  if (record_calls_ && shm() == nullptr) {
    // Ranks on other hosts than rank 0 put their times on its clock.
    const auto clock = detail::clock_offset_to_rank0(store, rank(), size());
    info.clock_offset_ns = clock.offset_ns;
    info.clock_uncertainty_ns = clock.uncertainty_ns;
  }
  if (shm() != nullptr) {
    // Records exist only on shared memory (the ranks of a hierarchical
    // group's own host would be a subset: left out).
    auto* shm = this->shm();
    info.peer_entered = [shm](int r, uint64_t seq) -> std::optional<int64_t> {
      const auto record = shm->signature_of(r, seq);
      if (!record || record->entered_at == 0) return std::nullopt;
      return record->entered_at;
    };
    info.peer_last_call = [shm](int r) -> std::optional<Signature> {
      const uint64_t begun = shm->calls_begun(r);
      if (begun == 0) return std::nullopt;
      const auto record = shm->signature_of(r, begun - 1);
      if (!record) return std::nullopt;
      return record->sig;
    };
  } else {
    // Over TCP: the newest call of which a peer's message reached this rank.
    auto* transport = transport_.get();
    info.peer_last_call = [transport](int r) { return transport->last_call_from(r); };
  }
  trace_group_ = recorder_.add_group(std::move(info));
  detail::install_trace_signal_handler();
}

bool ProcessGroupTdist::peer_crashed(int peer) const {
  if (peer < 0 || peer >= size() || peer == rank()) return false;
  const LinksPin links(*this);  // a reinit on another thread does not destroy them meanwhile
  if (links.shm != nullptr) {
    // A process that is gone is dead for sure, whatever the sockets say
    // (ranks that are threads of one process share a pid and never are).
    const pid_t pid = links.shm->pid(peer);
    if (pid > 0 && pid != getpid() && kill(pid, 0) != 0 && errno == ESRCH) return true;
  }
  const transport::Transport* transport = links.transport;
  if (transport == nullptr) return false;
  // Asking peer_failed first makes the transport watch its sockets while
  // no call does, so that a peer's end-of-stream is read at all.
  return transport->peer_failed(peer) && transport->peer_crashed(peer);
}

bool ProcessGroupTdist::idle() const {
  // A thread waiting on a send's or receive's work is a call in progress.
  return executor_.idle() && !p2p_lease_->in_use();
}

}  // namespace tdist
