#include "tdist_backend.h"

#include <cerrno>
#include <cstring>
#include <numeric>
#include <optional>
#include <sstream>

#include <signal.h>
#include <unistd.h>

#include "algorithms/patterns/chunking.h"
#include "algorithms/selector.h"
#include "algorithms/shm/shm_collectives.h"
#include "blocking_call.h"
#include "common/completion_thread.h"
#include "common/env.h"
#include "common/error_text.h"
#include "common/scratch.h"
#include "store/store_deadline.h"
#include "tdist/errors.h"
#include "tdist/logging.h"
#include "transport/tcp/tcp_transport.h"
#include "transport_choice.h"
#include "validate.h"

namespace tdist {
namespace {

namespace algo = algorithms;
namespace sig = tdist::detail;
using tdist::detail::CallKind;

uint64_t count_of(const Tensor& t) {
  return static_cast<uint64_t>(t.numel());
}

uint64_t total_count(const std::vector<Tensor>& tensors) {
  uint64_t n = 0;
  for (const auto& t : tensors) n += count_of(t);
  return n;
}

// Point-to-point tags have the top bit set; collective tags never do.
uint64_t p2p_tag(int tag) {
  return (uint64_t{1} << 63) | static_cast<uint32_t>(tag);
}

size_t to_size(int64_t v) {
  return static_cast<size_t>(v);
}

// True if the tensors lie back to back in memory in list order, so a
// collective can write them as one buffer without staging.
bool back_to_back(const std::vector<Tensor>& tensors) {
  if (tensors.empty()) return true;
  const auto* base = static_cast<const uint8_t*>(tensors[0].data());
  size_t offset = 0;
  for (const auto& t : tensors) {
    if (t.nbytes() > 0 && static_cast<const uint8_t*>(t.data()) != base + offset) return false;
    offset += t.nbytes();
  }
  return true;
}

std::vector<size_t> nbytes_of(const std::vector<Tensor>& tensors) {
  std::vector<size_t> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back(t.nbytes());
  return out;
}

// One contiguous buffer standing for a list of tensors: the tensors' own
// memory when they are back to back, else a staging buffer.
struct Blocks {
  std::vector<Tensor> tensors;
  detail::Scratch staging;  // recycled memory: no page faults per call; empty when not staged
  uint8_t* base = nullptr;

  explicit Blocks(std::vector<Tensor> list) : tensors(std::move(list)) {
    if (back_to_back(tensors) && !tensors.empty()) {
      base = static_cast<uint8_t*>(tensors[0].data());
    } else {
      size_t total = 0;
      for (const auto& t : tensors) total += t.nbytes();
      staging = detail::Scratch(total);
      base = staging.get();
    }
  }
  bool staged() const { return staging.get() != nullptr; }
  void copy_in() {
    if (!staged()) return;
    size_t offset = 0;
    for (const auto& t : tensors) {
      if (t.nbytes() > 0) std::memcpy(base + offset, t.data(), t.nbytes());
      offset += t.nbytes();
    }
  }
  void copy_out() {
    if (!staged()) return;
    size_t offset = 0;
    for (const auto& t : tensors) {
      if (t.nbytes() > 0) std::memcpy(t.data(), base + offset, t.nbytes());
      offset += t.nbytes();
    }
  }
};

// Where a list of tensors lies, as one base address and each tensor's
// offset from it (the lowest address among the non-empty tensors): the form
// in which the all_to_all algorithms take their blocks, so that a list in
// separate allocations is read and written in place instead of staged.
struct Scattered {
  uint8_t* base = nullptr;
  std::vector<size_t> offsets;

  explicit Scattered(const std::vector<Tensor>& tensors) : offsets(tensors.size(), 0) {
    uintptr_t low = UINTPTR_MAX;
    for (const auto& t : tensors) {
      if (t.nbytes() > 0) low = std::min(low, reinterpret_cast<uintptr_t>(t.data()));
    }
    if (low == UINTPTR_MAX) return;
    base = reinterpret_cast<uint8_t*>(low);
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].nbytes() > 0) offsets[i] = reinterpret_cast<uintptr_t>(tensors[i].data()) - low;
    }
  }
};

// A list collective whose staging buffer would outgrow the scratch cache
// runs as several calls of the same op, each over one slice of every block
// (slice k of a balanced partition of each block into n, chunking.h),
// through a staging buffer of at most about this size that the cache keeps:
// a fresh 256 MiB buffer per call cost more in page faults than the
// collective itself (a 4-rank list all_gather of 64 MiB blocks: 392 ms
// against 47 into one tensor, 2026-11-29, the 2-vCPU VM). The slices must
// be the same on every rank, so this is only for ops whose block sizes are
// the same on every rank (all_gather).
constexpr size_t kStagingSliceBytes = size_t{16} << 20;

size_t slices_for(size_t total) {
  return std::max<size_t>(1, (total + kStagingSliceBytes - 1) / kStagingSliceBytes);
}

std::vector<size_t> offsets_of(const std::vector<size_t>& bytes) {
  std::vector<size_t> offsets(bytes.size(), 0);
  for (size_t i = 1; i < bytes.size(); ++i) offsets[i] = offsets[i - 1] + bytes[i - 1];
  return offsets;
}

// forced_algos_'s bit of each op.
template <typename Algo>
constexpr uint32_t forced_bit() {
  using std::is_same_v;
  if constexpr (is_same_v<Algo, algo::AllReduceAlgo>) return 1U << 0;
  if constexpr (is_same_v<Algo, algo::BroadcastAlgo>) return 1U << 1;
  if constexpr (is_same_v<Algo, algo::ReduceAlgo>) return 1U << 2;
  if constexpr (is_same_v<Algo, algo::AllGatherAlgo>) return 1U << 3;
  if constexpr (is_same_v<Algo, algo::GatherAlgo>) return 1U << 4;
  if constexpr (is_same_v<Algo, algo::ScatterAlgo>) return 1U << 5;
  if constexpr (is_same_v<Algo, algo::ReduceScatterAlgo>) return 1U << 6;
  if constexpr (is_same_v<Algo, algo::AllToAllAlgo>) return 1U << 7;
  if constexpr (is_same_v<Algo, algo::BarrierAlgo>) return 1U << 8;
  return 0;
}

// forced_bit<Algo>() if TDIST_ALGO_<OP> forces a TCP algorithm. An invalid
// name counts as forced: the TCP path then raises the error naming it, at
// the call, as before the variables were read once per group.
template <typename Algo>
uint32_t forced_if_set() {
  try {
    return algo::env_algo<Algo>() ? forced_bit<Algo>() : 0;
  } catch (const DistInvalidArgument&) {
    return forced_bit<Algo>();
  }
}

uint32_t forced_algorithms() {
  return forced_if_set<algo::AllReduceAlgo>() | forced_if_set<algo::BroadcastAlgo>() |
         forced_if_set<algo::ReduceAlgo>() | forced_if_set<algo::AllGatherAlgo>() |
         forced_if_set<algo::GatherAlgo>() | forced_if_set<algo::ScatterAlgo>() |
         forced_if_set<algo::ReduceScatterAlgo>() | forced_if_set<algo::AllToAllAlgo>() |
         forced_if_set<algo::BarrierAlgo>();
}

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

}  // namespace

// The notes of the group's calls (algo::CallNotes) in its store: the reason
// of the first failure that is not a network failure or a timeout (every
// rank times out on its own) under "tdist/failure", and the signature of
// each rank's last call that waited long under "tdist/arrived/<rank>".
// Only failing and slow calls write, so the store sees nothing on the fast
// path. The store may be gone with the rank that hosts it: the notes are
// best effort.
class ProcessGroupTdist::Notes final : public algo::CallNotes {
 public:
  Notes(std::shared_ptr<Store> store, int rank, int size)
      : store_(std::move(store)), rank_(rank), size_(size) {}
  void failed(const std::exception_ptr& error) noexcept override {
    if (error_kind(error) != ErrorKind::kOther) return;
    bounded(
        [&] { store_->compare_set(kFailureKey, {}, to_bytes(exception_text(error))); });  // the first stays
  }
  /// The reason a peer left with failed(), if any.
  std::optional<std::string> failure() noexcept override {
    std::optional<std::string> out;
    bounded([&] {
      if (store_->check({kFailureKey})) out = to_string(store_->get(kFailureKey));
    });
    return out;
  }
  void arrived(const sig::CallSignature& mine) noexcept override {
    uint64_t words[4];
    std::memcpy(words, &mine, sizeof(words));
    std::string value;
    for (uint64_t w : words) value += std::to_string(w) + " ";
    bounded([&] { store_->set(arrived_key(rank_), value); });
  }
  std::vector<int> missing(uint64_t seq) noexcept override {
    std::vector<int> out;
    const bool read = bounded([&] {
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        const auto theirs = read_arrived(r);
        if (!theirs || theirs->seq < seq) out.push_back(r);
      }
    });
    return read ? out : std::vector<int>{};
  }
  std::optional<std::pair<int, sig::CallSignature>> differing(
      const sig::CallSignature& mine) noexcept override {
    std::optional<std::pair<int, sig::CallSignature>> out;
    bounded([&] {
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        const auto theirs = read_arrived(r);
        if (theirs && theirs->seq == mine.seq && !theirs->empty() && !(*theirs == mine)) {
          out = std::make_pair(r, *theirs);
          return;
        }
      }
    });
    return out;
  }

 private:
  // The notes are diagnostics: each use of the store gets at most kCap (a
  // live store answers in microseconds, a loaded one in milliseconds), so
  // that a store that does not answer (its host stopped, its link cut) never
  // holds a call past its deadline nor stalls its waiting for data; after
  // one such failure the notes rest for kRest, so that a waiting call's
  // polls do not each spend kCap. False if the store failed (or rests).
  static constexpr auto kCap = std::chrono::seconds(1);
  static constexpr auto kRest = std::chrono::seconds(2);
  template <typename Fn>
  bool bounded(Fn&& fn) noexcept {
    const auto now = std::chrono::steady_clock::now();
    if (now < resting_until_.load()) return false;
    try {
      const detail::StoreDeadlineScope cap(now + kCap);
      fn();
      return true;
    } catch (...) {
      resting_until_.store(std::chrono::steady_clock::now() + kRest);
      return false;
    }
  }
  static constexpr const char* kFailureKey = "tdist/failure";
  static std::string arrived_key(int r) { return "tdist/arrived/" + std::to_string(r); }
  // What rank r left: the signature of the last long call it was in.
  std::optional<sig::CallSignature> read_arrived(int r) {
    if (!store_->check({arrived_key(r)})) return std::nullopt;
    std::istringstream in(to_string(store_->get(arrived_key(r))));
    uint64_t words[4];
    for (uint64_t& w : words) {
      if (!(in >> w)) return std::nullopt;
    }
    sig::CallSignature out;
    std::memcpy(&out, words, sizeof(out));
    return out;
  }
  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  std::atomic<std::chrono::steady_clock::time_point> resting_until_{};
};

// By value: the signature every backend factory has (see process_group.cc).
// NOLINTNEXTLINE(performance-unnecessary-value-param)
Group make_tdist_process_group(std::shared_ptr<Store> store, int rank, int size,
                               const ProcessGroupOptions& options) {
  return std::make_shared<ProcessGroupTdist>(std::move(store), rank, size, options);
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
  forced_algos_ = forced_algorithms();
  // Before the connect, whose last step is the barrier after which rank 0
  // may leave (connect_generation).
  comm_name_ = agree_on_comm_name(*store, rank);
  connect_generation();
  worker_ = std::thread([this] { run(); });
}

void ProcessGroupTdist::startup_barrier() {
  algo::CallContext ctx{.transport = *transport_, .op = "connect", .seq = algo::CallContext::kStartupSeq};
  ctx.timeout = options().timeout;
  ctx.deadline = algo::Clock::now() + ctx.timeout;
  try {
    algo::barrier(ctx);
  } catch (const DistError&) {
    // Crashes do not break the transport yet and nothing here aborts it: a
    // broken transport means a peer's abort notice, and a peer that could
    // abort the group had passed this barrier, so every rank had reached
    // it. The group is made; its first call raises that abort.
    if (!transport_->abort_reason()) throw;
  }
  // From now on a peer that goes without a goodbye has crashed: every call
  // fails at once, naming it.
  transport_->set_crash_breaks_group(true);
}

void ProcessGroupTdist::connect(const std::shared_ptr<Store>& store) {
  notes_ = std::make_unique<Notes>(store, rank(), size());
  transport::TcpOptions tcp;
  tcp.timeout = options().timeout;
  tcp.reach_host = options().master_host;
  // Until the start-up barrier has passed, a peer that closes its
  // connections may just have finished its own connect and exited (a job
  // that starts and ends at once): only what involves it fails, not the
  // group (startup_barrier turns crashes back into group failures).
  tcp.crash_breaks_group = false;
  // Made aside, without links_mutex_ (the rendezvous may take the group's
  // timeout, and an abort must not wait for it), then put in place under it.
  auto transport = transport::connect_tcp(*store, rank(), size(), tcp);
  auto domains = connect_collective_domains(*store, *transport, options().timeout);
  {
    std::lock_guard<std::mutex> lock(links_mutex_);
    transport_ = std::move(transport);
    domains_ = std::move(domains);
    p2p_transport_.store(transport_.get(), std::memory_order_release);
    shm_ = domains_.shm.get();
    all_on_shared_memory_ = shm_ != nullptr && forced_algos_ == 0;
    if (domains_.local) cross_worker_ = std::make_unique<detail::WorkerThread>();
  }
  trace_register(*store);
  TDIST_LOG(DEBUG) << "tdist group of " << size() << " ranks: collectives over "
                   << (shm_             ? "shared memory"
                       : domains_.local ? "shared memory inside hosts, TCP across"
                                        : "TCP");
}

void ProcessGroupTdist::connect_generation() {
  // This rank's k-th connect of the group is generation k, counted in the
  // group's store: the survivors' reinit and a replacement's first connect
  // (a new process with the same rank and store) both land on the dead
  // rank's count + 1, and so meet.
  const int64_t generation = store_->add(generation_key(rank()), 1);
  {
    // shrink and agree count their rounds from 0 in each generation, as a
    // replacement (a new process) does.
    std::lock_guard<std::mutex> lock(mutex_);
    generation_ = generation;
    ft_rounds_ = 0;
  }
  try {
    connect(std::make_shared<PrefixStore>(generation_prefix(generation), store_));
    startup_barrier();
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
    shm = group_.shm_;
    local = group_.domains_.local.get();
    transport = group_.transport_.get();
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

 private:
  const ProcessGroupTdist& group_;
  const ProcessGroupTdist* previous_;
};

void ProcessGroupTdist::disconnect() {
  recorder_.forget_group(trace_group_);
  std::unique_ptr<detail::WorkerThread> cross_worker;
  CollectiveDomains domains;
  std::unique_ptr<transport::Transport> transport;
  {
    std::unique_lock<std::mutex> lock(links_mutex_);
    // Point-to-point calls (the plugin makes some from the transport's own
    // callbacks, as the old transport shuts down) find no transport from
    // here on, and raise, instead of reaching one being destroyed.
    p2p_transport_.store(nullptr, std::memory_order_release);
    cross_worker = std::move(cross_worker_);
    domains = std::move(domains_);
    domains_ = CollectiveDomains{};
    transport = std::move(transport_);
    shm_ = nullptr;
    all_on_shared_memory_ = false;
    // An abort or peer_crashed on another thread may be using them: new
    // ones cannot start on them (the members are empty), running ones end.
    links_cv_.wait(lock, [&] { return links_pins_ == 0; });
  }
  // Destroyed outside the lock (their threads' callbacks may call
  // peer_crashed), in the order the members' comments ask for: the
  // pipeline's worker first, then the domains that point into the transport.
  cross_worker.reset();
  domains = CollectiveDomains{};
  transport.reset();
}

void ProcessGroupTdist::check_usable(std::string_view op) const {
  if (unusable_.load(std::memory_order_acquire))
    throw DistBackendError(std::string(op) + ": " + unusable_text());
}

std::string ProcessGroupTdist::unusable_text() const {
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
  const auto& global = global_ranks();
  std::string why = "the group was aborted by rank " + std::to_string(rank());
  if (global[static_cast<size_t>(rank())] != rank()) {
    why += " (global rank " + std::to_string(global[static_cast<size_t>(rank())]) + ")";
  }
  why += ": " + (reason.empty() ? std::string("abort() was called") : reason);
  std::deque<Task> unstarted;
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
    // Queued operations never start; the one running fails below.
    unstarted.swap(queue_);
    state_.fetch_sub(2 * unstarted.size());
    idle_cv_.notify_all();
  }
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
  if (links.transport != nullptr) links.transport->abort(std::make_exception_ptr(DistBackendError(why)));
}

void ProcessGroupTdist::reinit(bool rebuild_links) {
  if (shut_down_.load()) {
    throw DistBackendError(
        "reinit_process_group: the process group was shut down (destroy_process_group); "
        "make a new one");
  }
  if (detail::CompletionThreadScope::current() != nullptr || pinning_thread_group == this) {
    // That thread must finish the group's operations (or is the transport's
    // own): waiting there for the group to be idle would never end.
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
  {
    // Claims the group once every queued operation has run (async ones
    // may still be queued: they are the members' earlier calls).
    std::unique_lock<std::mutex> lock(mutex_);
    // Sequentially consistent with the releases' fetch_sub and load (run,
    // run_inline): whoever makes the group idle after this failed to claim
    // it sees the waiter and wakes it.
    idle_waiters_.fetch_add(1);
    idle_cv_.wait(lock, [&] {
      uint64_t idle = 0;
      return stopping_ || state_.compare_exchange_strong(idle, 1);
    });
    idle_waiters_.fetch_sub(1);
    if (stopping_) throw DistError("reinit_process_group: the process group is being destroyed");
  }
  struct Release {
    ProcessGroupTdist& group;
    ~Release() {
      group.state_.fetch_sub(1);  // seq_cst: see run_inline
      std::lock_guard<std::mutex> lock(group.mutex_);
      group.cv_.notify_one();
      group.idle_cv_.notify_all();  // another reinit may wait for the group
    }
  } release{*this};
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
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable() && worker_.get_id() != std::this_thread::get_id()) worker_.join();
  // Queued work that never ran fails; so does anything still in flight.
  std::deque<Task> left;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    left.swap(queue_);
  }
  for (auto& task : left) {
    task.work->finish(std::make_exception_ptr(
        DistError(task.op + ": the process group was " + why + " before the operation ran")));
  }
}

void ProcessGroupTdist::shutdown() {
  if (shut_down_.exchange(true)) return;
  // The worker finishes what is queued (it leaves once the queue is empty).
  stop_worker("shut down");
  set_unusable("the process group was shut down (destroy_process_group)");
  disconnect();
}

ProcessGroupTdist::~ProcessGroupTdist() {
  recorder_.forget_group(trace_group_);
  stop_worker("destroyed");
}

std::vector<Tensor> ProcessGroupTdist::Outputs::get() const {
  if (list != nullptr) return *list;
  if (one != nullptr) return {*one};
  return {};
}

bool ProcessGroupTdist::claim_inline() {
  // Only the call the functional API made on this very group (not a call
  // that some other backend makes on it from inside that one), and never on
  // a thread that completes operations (a callback): it would hold up the
  // operations that thread must finish meanwhile.
  if (!detail::BlockingCallScope::take(static_cast<const ProcessGroup*>(this)) ||
      detail::CompletionThreadScope::current() != nullptr)
    return false;
  uint64_t idle = 0;
  // Acquire: what the previous operation did to the group's state (shared
  // memory rounds, transport) happened before this one starts.
  return state_.compare_exchange_strong(idle, 1, std::memory_order_acquire, std::memory_order_relaxed);
}

void ProcessGroupTdist::run_inline(std::string_view op, const Signature& sig,
                                   std::chrono::milliseconds timeout, BodyRef body) {
  struct Release {
    ProcessGroupTdist& group;
    ~Release() {
      // Work queued meanwhile by other threads waits for this call: wake the
      // worker only then (a needless wake-up costs a futex call per op).
      // Sequentially consistent, as reinit's counterparts: a reinit that
      // found the group busy is then always seen waiting (on x86 no dearer
      // than acq_rel).
      if (group.state_.fetch_sub(1) != 1) {
        std::lock_guard<std::mutex> lock(group.mutex_);
        group.cv_.notify_one();
      } else if (group.idle_waiters_.load() != 0) {
        std::lock_guard<std::mutex> lock(group.mutex_);
        group.idle_cv_.notify_all();
      }
    }
  } release{*this};
  const uint64_t seq = take_seq();
  const algo::CallContext ctx = start_call(op, sig, seq, timeout);
  const uint64_t trace_id = trace_begin(op, ctx.sig, static_cast<int64_t>(seq), detail::TraceState::kStarted,
                                        -1, 0, ctx.entered_at);
  try {
    // Only calls that may wait on TCP need it (see transport.h).
    std::optional<transport::CallScope> call;
    if (!all_on_shared_memory_) call.emplace(*transport_);
    run_checked(ctx, body);
  } catch (const std::exception& e) {
    TDIST_LOG(DEBUG) << op << " (call #" << seq << ") failed: " << e.what();
    auto error = explain(std::current_exception(), op, seq);
    trace_end(trace_id, error);
    std::rethrow_exception(error);
  }
  trace_end(trace_id, nullptr);
}

WorkPtr ProcessGroupTdist::enqueue(std::string_view op, const Signature& sig,
                                   std::chrono::milliseconds timeout, std::vector<Tensor> outputs,
                                   Body body) {
  auto work = std::make_shared<Work>(std::string(op), std::move(outputs), this);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw DistError(std::string(op) + ": the process group is being destroyed");
    queue_.push_back(Task{std::string(op), sig, 0, work, std::move(body),
                          trace_begin(op, sig, -1, detail::TraceState::kQueued), timeout});
    // Counted once queued (a failed push leaves no trace); nobody takes the
    // task before this lock is released.
    state_.fetch_add(2, std::memory_order_relaxed);
  }
  cv_.notify_one();
  return work;
}

bool ProcessGroupTdist::idle() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const WorkPtr latest = latest_work_.lock();  // held by its task while it runs
  return queue_.empty() && (!latest || latest->is_completed());
}

void ProcessGroupTdist::run() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      auto inline_running = [&] { return (state_.load(std::memory_order_acquire) & 1) != 0; };
      cv_.wait(lock, [&] { return stopping_ || (!queue_.empty() && !inline_running()); });
      if (queue_.empty() || inline_running()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      latest_work_ = task.work;
    }
    // Numbered when it runs: operations run one at a time in call order, so
    // the numbers follow the order in which they run on every rank.
    task.seq = take_seq();
    execute(task);
    if (state_.fetch_sub(2) == 2 && idle_waiters_.load() != 0) {  // seq_cst: see run_inline
      std::lock_guard<std::mutex> lock(mutex_);
      idle_cv_.notify_all();
    }
  }
}

void ProcessGroupTdist::execute(Task& task) {
  if (!transport_) {
    // Queued (by another thread) while a rebuild that then failed held the group.
    auto error = std::make_exception_ptr(DistBackendError(task.op + ": " + unusable_text()));
    trace_end(task.trace_id, error);
    task.work->finish(error);
    return;
  }
  const algo::CallContext ctx = start_call(task.op, task.sig, task.seq, task.timeout);
  recorder_.started(task.trace_id, static_cast<int64_t>(task.seq), ctx.entered_at);
  std::exception_ptr error;
  try {
    transport::CallScope call(*transport_);
    run_checked(ctx, task.body);
  } catch (...) {
    error = explain(std::current_exception(), task.op, task.seq);
    try {
      throw;
    } catch (const std::exception& e) {
      TDIST_LOG(DEBUG) << task.op << " (call #" << task.seq << ") failed: " << e.what();
    }
  }
  trace_end(task.trace_id, error);
  // Callbacks run inside finish(), here: a blocking wait in one of them must
  // raise (the next operation cannot start until this one returns).
  detail::CompletionThreadScope completing(this);
  task.work->finish(error);
}

std::exception_ptr ProcessGroupTdist::explain(const std::exception_ptr& error, std::string_view op,
                                              uint64_t seq) const {
  if (error_kind(error) != ErrorKind::kNetwork) return error;
  const auto reason = notes_->failure();
  if (!reason) return error;
  return std::make_exception_ptr(DistBackendError(std::string(op) + " (call #" + std::to_string(seq) +
                                                  " in this group): a peer aborted the group: " + *reason));
}

template <typename Algo>
transport::shm::ShmGroup* ProcessGroupTdist::shm_for() const {
  if (!shm_ || (forced_algos_ & forced_bit<Algo>()) != 0) return nullptr;
  return shm_;
}

template <typename Algo>
bool ProcessGroupTdist::hierarchy_for() const {
  return domains_.local != nullptr && (forced_algos_ & forced_bit<Algo>()) == 0;
}

algo::CallContext ProcessGroupTdist::start_call(std::string_view op, const Signature& sig, uint64_t seq,
                                                std::chrono::milliseconds timeout) {
  algo::CallContext ctx{
      *transport_, op,        seq,          transport::coarse_now() + timeout,        timeout,
      sig,         last_sig_, notes_.get(), record_calls_ ? detail::trace_ticks() : 0};
  ctx.sig.seq = seq;
  last_sig_ = ctx.sig;
  return ctx;
}

namespace {
// How call `trace_id` ended; after a failure the recorder is also dumped
// (TDIST_TRACE_DIR). `algorithm`: what the selector chose, for collectives.
void end_trace(detail::FlightRecorder& recorder, uint64_t trace_id, const std::exception_ptr& error,
               const char* algorithm = nullptr) {
  if (trace_id == 0) return;
  if (!error) {
    recorder.completed(trace_id, algorithm);
    return;
  }
  const std::string text = exception_text(error);
  recorder.failed(trace_id, text);
  recorder.dump_if_configured("a call failed: " + text);
}
}  // namespace

void ProcessGroupTdist::trace_end(uint64_t trace_id, const std::exception_ptr& error) const {
  // Taken whether recorded or not, so that no later call finds it.
  end_trace(recorder_, trace_id, error, algo::take_chosen_algorithm());
}

void ProcessGroupTdist::trace_register(Store& store) {
  detail::TraceGroupInfo info;
  info.rank = rank();
  info.size = size();
  info.global_ranks = global_ranks();
  info.transport = shm_ != nullptr ? "shared memory" : domains_.local ? "shared memory + tcp" : "tcp";
  if (record_calls_ && shm_ == nullptr) {
    // Ranks on other hosts than rank 0 put their times on its clock.
    const auto clock = detail::clock_offset_to_rank0(store, rank(), size());
    info.clock_offset_ns = clock.offset_ns;
    info.clock_uncertainty_ns = clock.uncertainty_ns;
  }
  if (shm_ != nullptr) {
    // Records exist only on shared memory (the ranks of a hierarchical
    // group's own host would be a subset: left out).
    auto* shm = shm_;
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

void ProcessGroupTdist::run_checked(const algo::CallContext& ctx, BodyRef body) const {
  if (all_on_shared_memory_) return body(ctx);
  record_call(ctx);
  algo::detail::check_unmatched(ctx);
  body(ctx);
  // A peer's message of an earlier call that this rank never received (its
  // broadcast root sent and returned) has arrived by now if this call
  // received anything from that peer: connections keep order.
  algo::detail::check_unmatched(ctx);
}

void ProcessGroupTdist::record_call(const algo::CallContext& ctx) const {
  auto* group = shm_ != nullptr ? shm_ : domains_.local.get();
  if (group == nullptr || ctx.sig.empty()) return;
  group->begin_call(ctx.sig, ctx.entered_at);
  group->flush_record();
}

bool ProcessGroupTdist::empty_call(const algo::CallContext& ctx, size_t total_bytes) const {
  if (total_bytes != 0 || ctx.size() == 1) return false;
  // On shared memory too: a call that meets nobody would let a rank run any
  // number of calls ahead, past the ring of call records its peers read.
  if (shm_ != nullptr && (forced_algos_ & forced_bit<algo::BarrierAlgo>()) == 0) {
    algo::shm::barrier(ctx, *shm_);
  } else {
    algo::barrier(ctx);
  }
  return true;
}

void ProcessGroupTdist::all_gather_bytes(const algo::CallContext& ctx, const void* in, void* out,
                                         const std::vector<size_t>& bytes) const {
  if (empty_call(ctx, std::accumulate(bytes.begin(), bytes.end(), size_t{0}))) return;
  if (auto* shm = shm_for<algo::AllGatherAlgo>()) return algo::shm::all_gather(ctx, *shm, in, out, bytes);
  if (hierarchy_for<algo::AllGatherAlgo>()) {
    return algo::shm::hierarchical_all_gather(
        ctx, *domains_.local, *domains_.local_ranks, *domains_.cross_ranks, *cross_worker_,
        domains_.hierarchy_chunk_bytes, domains_.by_host, in, out, bytes);
  }
  algo::all_gather(ctx, in, out, bytes);
}

void ProcessGroupTdist::reduce_scatter_elements(const algo::CallContext& ctx, const void* in,
                                                const Tensor& output, const std::vector<size_t>& counts,
                                                const ReduceOp& op) const {
  if (empty_call(ctx, std::accumulate(counts.begin(), counts.end(), size_t{0}))) return;
  if (auto* shm = shm_for<algo::ReduceScatterAlgo>())
    return algo::shm::reduce_scatter(ctx, *shm, in, output.data(), counts, output.dtype(), op);
  if (hierarchy_for<algo::ReduceScatterAlgo>()) {
    return algo::shm::hierarchical_reduce_scatter(
        ctx, *domains_.local, *domains_.local_ranks, *domains_.cross_ranks, *cross_worker_,
        domains_.hierarchy_chunk_bytes, domains_.by_host, in, output.data(), counts, output.dtype(), op);
  }
  algo::reduce_scatter(ctx, in, output.data(), counts, output.dtype(), op);
}

void ProcessGroupTdist::all_to_all_bytes(const algo::CallContext& ctx, const void* in,
                                         const std::vector<size_t>& send_bytes, void* out,
                                         const std::vector<size_t>& recv_bytes) const {
  all_to_all_bytes(ctx, in, send_bytes, offsets_of(send_bytes), out, recv_bytes, offsets_of(recv_bytes));
}

void ProcessGroupTdist::all_to_all_bytes(const algo::CallContext& ctx, const void* in,
                                         const std::vector<size_t>& send_bytes,
                                         const std::vector<size_t>& send_offsets, void* out,
                                         const std::vector<size_t>& recv_bytes,
                                         const std::vector<size_t>& recv_offsets) const {
  if (auto* shm = shm_for<algo::AllToAllAlgo>()) {
    return algo::shm::all_to_all(ctx, *shm, in, send_bytes, send_offsets, out, recv_bytes, recv_offsets);
  }
  if (hierarchy_for<algo::AllToAllAlgo>()) {
    return algo::shm::hierarchical_all_to_all(ctx, *domains_.local, *domains_.local_ranks, *cross_worker_,
                                              domains_.by_host, in, send_bytes, send_offsets, out, recv_bytes,
                                              recv_offsets);
  }
  algo::all_to_all(ctx, in, send_bytes, send_offsets, out, recv_bytes, recv_offsets);
}

void ProcessGroupTdist::run_broadcast(const algo::CallContext& ctx, const Tensor& tensor, int root) {
  if (empty_call(ctx, tensor.nbytes())) return;
  if (auto* shm = shm_for<algo::BroadcastAlgo>())
    return algo::shm::broadcast(ctx, *shm, tensor.data(), tensor.nbytes(), root);
  if (hierarchy_for<algo::BroadcastAlgo>()) {
    return algo::shm::hierarchical_broadcast(
        ctx, *domains_.local, *domains_.local_ranks, *domains_.cross_ranks, *cross_worker_,
        domains_.hierarchy_chunk_bytes, domains_.by_host, tensor.data(), tensor.nbytes(), root);
  }
  algo::broadcast(ctx, tensor.data(), tensor.nbytes(), root);
}

WorkPtr ProcessGroupTdist::broadcast(const Tensor& tensor, int root) {
  validate::rank_in_group("broadcast", "src", root, size());
  return submit("broadcast",
                sig::collective_signature(CallKind::kBroadcast, tensor.dtype(), count_of(tensor), root),
                {.one = &tensor}, &ProcessGroupTdist::run_broadcast, tensor, root);
}

void ProcessGroupTdist::run_all_reduce(const algo::CallContext& ctx, const Tensor& tensor,
                                       const ReduceOp& op) {
  if (empty_call(ctx, tensor.nbytes())) return;
  if (auto* shm = shm_for<algo::AllReduceAlgo>())
    return algo::shm::all_reduce(ctx, *shm, tensor.data(), to_size(tensor.numel()), tensor.dtype(), op);
  if (hierarchy_for<algo::AllReduceAlgo>()) {
    return algo::shm::hierarchical_all_reduce(
        ctx, *domains_.local, *domains_.local_ranks, *domains_.cross_ranks, *cross_worker_,
        domains_.hierarchy_chunk_bytes, tensor.data(), to_size(tensor.numel()), tensor.dtype(), op);
  }
  algo::all_reduce(ctx, tensor.data(), to_size(tensor.numel()), tensor.dtype(), op);
}

WorkPtr ProcessGroupTdist::all_reduce(const Tensor& tensor, const ReduceOp& op) {
  validate::reduce_op("all_reduce", tensor, op);
  return submit("all_reduce",
                sig::collective_signature(CallKind::kAllReduce, tensor.dtype(), count_of(tensor), -1, &op),
                {.one = &tensor}, &ProcessGroupTdist::run_all_reduce, tensor, op);
}

void ProcessGroupTdist::run_reduce(const algo::CallContext& ctx, const Tensor& tensor, int root,
                                   const ReduceOp& op) {
  if (empty_call(ctx, tensor.nbytes())) return;
  const size_t count = to_size(tensor.numel());
  // The shared-memory reduce never writes a non-root rank's input.
  if (auto* shm = shm_for<algo::ReduceAlgo>())
    return algo::shm::reduce(ctx, *shm, tensor.data(), count, tensor.dtype(), op, root);
  if (ctx.rank() == root) return algo::reduce(ctx, tensor.data(), count, tensor.dtype(), op, root);
  // The message-passing one uses its buffer as scratch: non-root ranks
  // keep their input intact by lending it a (recycled) copy.
  detail::Scratch copy(tensor.nbytes());
  if (tensor.nbytes() > 0) std::memcpy(copy.get(), tensor.data(), tensor.nbytes());
  algo::reduce(ctx, copy.get(), count, tensor.dtype(), op, root);
}

WorkPtr ProcessGroupTdist::reduce(const Tensor& tensor, int root, const ReduceOp& op) {
  validate::rank_in_group("reduce", "dst", root, size());
  validate::reduce_op("reduce", tensor, op);
  return submit("reduce",
                sig::collective_signature(CallKind::kReduce, tensor.dtype(), count_of(tensor), root, &op),
                {.one = &tensor}, &ProcessGroupTdist::run_reduce, tensor, root, op);
}

void ProcessGroupTdist::run_all_gather(const algo::CallContext& ctx, const std::vector<Tensor>& outputs,
                                       const Tensor& input) {
  const auto bytes = nbytes_of(outputs);
  const size_t total = std::accumulate(bytes.begin(), bytes.end(), size_t{0});
  if (empty_call(ctx, total)) return;
  auto* shm = shm_for<algo::AllGatherAlgo>();
  if (shm != nullptr && !back_to_back(outputs)) {
    // Shared memory writes every block where its tensor lies: no staging
    // buffer to fault in and copy out of.
    std::vector<std::vector<algo::shm::OutputSegment>> blocks(outputs.size());
    for (size_t r = 0; r < outputs.size(); ++r) blocks[r].push_back({outputs[r].data(), bytes[r]});
    return algo::shm::all_gather_segments(ctx, *shm, input.data(), blocks);
  }
  const size_t slices = slices_for(total);
  if (slices == 1 || back_to_back(outputs)) {
    Blocks blocks(outputs);
    all_gather_bytes(ctx, input.data(), blocks.base, bytes);
    blocks.copy_out();
    return;
  }
  size_t widest = 0;  // slice 0: the first slices are the longest
  for (size_t b : bytes) widest += patterns::chunk_elements(b, static_cast<int>(slices), 0).length;
  detail::Scratch staging(widest);
  const auto* in = static_cast<const uint8_t*>(input.data());
  const size_t me = to_size(ctx.rank());
  std::vector<size_t> begin(bytes.size()), piece(bytes.size());
  for (size_t k = 0; k < slices; ++k) {
    for (size_t r = 0; r < bytes.size(); ++r) {
      const auto slice = patterns::chunk_elements(bytes[r], static_cast<int>(slices), static_cast<int>(k));
      begin[r] = slice.offset;
      piece[r] = slice.length;
    }
    all_gather_bytes(ctx, in + begin[me], staging.get(), piece);
    size_t at = 0;
    for (size_t r = 0; r < bytes.size(); ++r) {
      if (piece[r] > 0)
        std::memcpy(static_cast<uint8_t*>(outputs[r].data()) + begin[r], staging.get() + at, piece[r]);
      at += piece[r];
    }
  }
}

WorkPtr ProcessGroupTdist::all_gather(const std::vector<Tensor>& outputs, const Tensor& input) {
  validate::list_length("all_gather", "tensor_list", outputs.size(), size());
  for (size_t r = 0; r < outputs.size(); ++r) {
    validate::same_dtype("all_gather", "tensor_list entry", outputs[r], input.dtype());
    validate::no_overlap("all_gather", "tensor_list entry", outputs[r], "tensor", input);
  }
  validate::numel_equals("all_gather", "this rank's tensor_list entry", outputs[to_size(rank())],
                         input.numel());
  const auto bytes = nbytes_of(outputs);
  return submit("all_gather",
                sig::collective_signature(CallKind::kAllGather, input.dtype(), total_count(outputs), -1,
                                          nullptr, sig::layout_of(bytes)),
                {.list = &outputs}, &ProcessGroupTdist::run_all_gather, outputs, input);
}

void ProcessGroupTdist::run_all_gather_into_tensor(const algo::CallContext& ctx, const Tensor& output,
                                                   const Tensor& input, size_t block) {
  all_gather_bytes(ctx, input.data(), output.data(), std::vector<size_t>(to_size(ctx.size()), block));
}

WorkPtr ProcessGroupTdist::all_gather_into_tensor(const Tensor& output, const Tensor& input) {
  validate::gathered_shape("all_gather_into_tensor", "output_tensor", output, "input_tensor", input, size());
  size_t block = input.nbytes();
  const auto* slot = static_cast<const uint8_t*>(output.data()) + block * to_size(rank());
  bool in_place = block > 0 && input.data() == slot;
  if (!in_place)
    validate::no_overlap("all_gather_into_tensor", "output_tensor", output, "input_tensor", input);
  return submit("all_gather_into_tensor",
                sig::collective_signature(CallKind::kAllGatherIntoTensor, input.dtype(), count_of(input)),
                {.one = &output}, &ProcessGroupTdist::run_all_gather_into_tensor, output, input, block);
}

void ProcessGroupTdist::run_all_gather_into_tensor_uneven(const algo::CallContext& ctx, const Tensor& output,
                                                          const Tensor& input,
                                                          const std::vector<size_t>& bytes) {
  all_gather_bytes(ctx, input.data(), output.data(), bytes);
}

WorkPtr ProcessGroupTdist::all_gather_into_tensor_uneven(const Tensor& output, const Tensor& input,
                                                         const std::vector<int64_t>& split_sizes) {
  const char* op = "all_gather_into_tensor_uneven";
  validate::same_dtype(op, "output", output, input.dtype());
  int64_t row = validate::row_elements(op, "output", output);
  const std::vector<int64_t> output_split_sizes =
      split_sizes.empty() ? validate::even_splits(op, "output", output.shape()[0], size()) : split_sizes;
  validate::split_sizes(op, "output_split_sizes", output_split_sizes, size(), output.shape()[0]);
  validate::numel_equals(op, "input (output_split_sizes[rank] rows)", input,
                         output_split_sizes[to_size(rank())] * row);
  std::vector<size_t> bytes;
  bytes.reserve(output_split_sizes.size());
  for (int64_t rows : output_split_sizes) bytes.push_back(to_size(rows * row) * output.element_size());
  const auto* slot = static_cast<const uint8_t*>(output.data()) + offsets_of(bytes)[to_size(rank())];
  if (!(input.nbytes() > 0 && input.data() == slot))
    validate::no_overlap(op, "output", output, "input", input);
  uint64_t total = 0;
  for (int64_t rows : output_split_sizes) total += static_cast<uint64_t>(rows * row);
  return submit(op,
                sig::collective_signature(CallKind::kAllGatherIntoTensorUneven, input.dtype(), total, -1,
                                          nullptr, sig::layout_of(bytes)),
                {.one = &output}, &ProcessGroupTdist::run_all_gather_into_tensor_uneven, output, input,
                bytes);
}

void ProcessGroupTdist::run_gather(const algo::CallContext& ctx, const std::vector<Tensor>& outputs,
                                   const Tensor& input, const std::vector<size_t>& bytes, int root) {
  if (empty_call(ctx, input.nbytes())) return;
  auto* shm = shm_for<algo::GatherAlgo>();
  if (ctx.rank() != root) {
    if (shm) return algo::shm::gather(ctx, *shm, input.data(), nullptr, bytes, root);
    algo::gather(ctx, input.data(), nullptr, bytes, root);
    return;
  }
  Blocks blocks(outputs);
  if (shm) {
    algo::shm::gather(ctx, *shm, input.data(), blocks.base, bytes, root);
  } else {
    algo::gather(ctx, input.data(), blocks.base, bytes, root);
  }
  blocks.copy_out();
}

WorkPtr ProcessGroupTdist::gather(const std::vector<Tensor>& outputs, const Tensor& input, int root) {
  validate::rank_in_group("gather", "dst", root, size());
  if (rank() == root) {
    validate::list_length("gather", "gather_list", outputs.size(), size());
    for (const auto& t : outputs) {
      validate::same_dtype("gather", "gather_list entry", t, input.dtype());
      validate::numel_equals("gather", "gather_list entry", t, input.numel());
      validate::no_overlap("gather", "gather_list entry", t, "tensor", input);
    }
  } else if (!outputs.empty()) {
    throw DistInvalidArgument("gather: gather_list must be empty on ranks other than dst " +
                              std::to_string(root) + " (got " + std::to_string(outputs.size()) +
                              " tensors on rank " + std::to_string(rank()) + ")");
  }
  std::vector<size_t> bytes(to_size(size()), input.nbytes());
  return submit("gather", sig::collective_signature(CallKind::kGather, input.dtype(), count_of(input), root),
                {.list = &outputs}, &ProcessGroupTdist::run_gather, outputs, input, bytes, root);
}

void ProcessGroupTdist::run_scatter(const algo::CallContext& ctx, const Tensor& output,
                                    const std::vector<Tensor>& inputs, const std::vector<size_t>& bytes,
                                    int root) {
  if (empty_call(ctx, output.nbytes())) return;
  auto* shm = shm_for<algo::ScatterAlgo>();
  if (ctx.rank() != root) {
    if (shm) return algo::shm::scatter(ctx, *shm, nullptr, output.data(), bytes, root);
    algo::scatter(ctx, nullptr, output.data(), bytes, root);
    return;
  }
  Blocks blocks(inputs);
  blocks.copy_in();
  if (shm) return algo::shm::scatter(ctx, *shm, blocks.base, output.data(), bytes, root);
  algo::scatter(ctx, blocks.base, output.data(), bytes, root);
}

WorkPtr ProcessGroupTdist::scatter(const Tensor& output, const std::vector<Tensor>& inputs, int root) {
  validate::rank_in_group("scatter", "src", root, size());
  if (rank() == root) {
    validate::list_length("scatter", "scatter_list", inputs.size(), size());
    for (const auto& t : inputs) {
      validate::same_dtype("scatter", "scatter_list entry", t, output.dtype());
      validate::numel_equals("scatter", "scatter_list entry", t, output.numel());
      validate::no_overlap("scatter", "scatter_list entry", t, "tensor", output);
    }
  } else if (!inputs.empty()) {
    throw DistInvalidArgument("scatter: scatter_list must be empty on ranks other than src " +
                              std::to_string(root) + " (got " + std::to_string(inputs.size()) +
                              " tensors on rank " + std::to_string(rank()) + ")");
  }
  std::vector<size_t> bytes(to_size(size()), output.nbytes());
  return submit("scatter",
                sig::collective_signature(CallKind::kScatter, output.dtype(), count_of(output), root),
                {.one = &output}, &ProcessGroupTdist::run_scatter, output, inputs, bytes, root);
}

void ProcessGroupTdist::run_reduce_scatter(const algo::CallContext& ctx, const Tensor& output,
                                           const std::vector<Tensor>& inputs,
                                           const std::vector<size_t>& counts, const ReduceOp& op) {
  auto* shm = shm_for<algo::ReduceScatterAlgo>();
  if (shm != nullptr && !back_to_back(inputs)) {
    // Shared memory reads every block where its tensor lies, as run_all_gather
    // writes them.
    if (empty_call(ctx, std::accumulate(counts.begin(), counts.end(), size_t{0}))) return;
    std::vector<std::vector<algo::shm::InputSegment>> blocks(inputs.size());
    for (size_t j = 0; j < inputs.size(); ++j) blocks[j].push_back({inputs[j].data(), counts[j]});
    return algo::shm::reduce_scatter_segments(ctx, *shm, blocks, output.data(), counts, output.dtype(), op);
  }
  Blocks blocks(inputs);
  blocks.copy_in();
  reduce_scatter_elements(ctx, blocks.base, output, counts, op);
}

WorkPtr ProcessGroupTdist::reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                          const ReduceOp& op) {
  validate::list_length("reduce_scatter", "input_list", inputs.size(), size());
  validate::reduce_op("reduce_scatter", output, op);
  for (const auto& t : inputs) {
    validate::same_dtype("reduce_scatter", "input_list entry", t, output.dtype());
    validate::no_overlap("reduce_scatter", "input_list entry", t, "output", output);
  }
  validate::numel_equals("reduce_scatter", "output (this rank's input_list entry)", output,
                         inputs[to_size(rank())].numel());
  std::vector<size_t> counts;
  counts.reserve(inputs.size());
  for (const auto& t : inputs) counts.push_back(to_size(t.numel()));
  return submit("reduce_scatter",
                sig::collective_signature(CallKind::kReduceScatter, output.dtype(), total_count(inputs), -1,
                                          &op, sig::layout_of(counts)),
                {.one = &output}, &ProcessGroupTdist::run_reduce_scatter, output, inputs, counts, op);
}

void ProcessGroupTdist::run_reduce_scatter_tensor(const algo::CallContext& ctx, const Tensor& output,
                                                  const Tensor& input, const std::vector<size_t>& counts,
                                                  const ReduceOp& op) {
  reduce_scatter_elements(ctx, input.data(), output, counts, op);
}

WorkPtr ProcessGroupTdist::reduce_scatter_tensor(const Tensor& output, const Tensor& input,
                                                 const ReduceOp& op) {
  validate::gathered_shape("reduce_scatter_tensor", "input", input, "output", output, size());
  validate::reduce_op("reduce_scatter_tensor", output, op);
  validate::no_overlap("reduce_scatter_tensor", "input", input, "output", output);
  std::vector<size_t> counts(to_size(size()), to_size(output.numel()));
  return submit(
      "reduce_scatter_tensor",
      sig::collective_signature(CallKind::kReduceScatterTensor, output.dtype(), count_of(output), -1, &op),
      {.one = &output}, &ProcessGroupTdist::run_reduce_scatter_tensor, output, input, counts, op);
}

void ProcessGroupTdist::run_reduce_scatter_tensor_uneven(const algo::CallContext& ctx, const Tensor& output,
                                                         const Tensor& input,
                                                         const std::vector<size_t>& counts,
                                                         const ReduceOp& op) {
  reduce_scatter_elements(ctx, input.data(), output, counts, op);
}

WorkPtr ProcessGroupTdist::reduce_scatter_tensor_uneven(const Tensor& output, const Tensor& input,
                                                        const std::vector<int64_t>& split_sizes,
                                                        const ReduceOp& op) {
  const char* name = "reduce_scatter_tensor_uneven";
  validate::same_dtype(name, "output", output, input.dtype());
  validate::reduce_op(name, output, op);
  int64_t row = validate::row_elements(name, "input", input);
  const std::vector<int64_t> input_split_sizes =
      split_sizes.empty() ? validate::even_splits(name, "input", input.shape()[0], size()) : split_sizes;
  validate::split_sizes(name, "input_split_sizes", input_split_sizes, size(), input.shape()[0]);
  validate::numel_equals(name, "output (input_split_sizes[rank] rows)", output,
                         input_split_sizes[to_size(rank())] * row);
  validate::no_overlap(name, "input", input, "output", output);
  std::vector<size_t> counts;
  counts.reserve(input_split_sizes.size());
  for (int64_t rows : input_split_sizes) counts.push_back(to_size(rows * row));
  return submit(name,
                sig::collective_signature(CallKind::kReduceScatterTensorUneven, output.dtype(),
                                          count_of(input), -1, &op, sig::layout_of(counts)),
                {.one = &output}, &ProcessGroupTdist::run_reduce_scatter_tensor_uneven, output, input, counts,
                op);
}

void ProcessGroupTdist::run_all_to_all(const algo::CallContext& ctx, const std::vector<Tensor>& outputs,
                                       const std::vector<Tensor>& inputs) {
  const Scattered in(inputs);
  const Scattered out(outputs);
  const auto send_bytes = nbytes_of(inputs);
  const auto recv_bytes = nbytes_of(outputs);
  all_to_all_bytes(ctx, in.base, send_bytes, in.offsets, out.base, recv_bytes, out.offsets);
}

WorkPtr ProcessGroupTdist::all_to_all(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs) {
  validate::list_length("all_to_all", "output_tensor_list", outputs.size(), size());
  validate::list_length("all_to_all", "input_tensor_list", inputs.size(), size());
  for (size_t r = 0; r < inputs.size(); ++r) {
    validate::same_dtype("all_to_all", "input_tensor_list entry", inputs[r], inputs[0].dtype());
    validate::same_dtype("all_to_all", "output_tensor_list entry", outputs[r], inputs[0].dtype());
    for (const auto& out : outputs)
      validate::no_overlap("all_to_all", "an output", out, "an input", inputs[r]);
  }
  return submit(
      "all_to_all",
      sig::collective_signature(CallKind::kAllToAll, inputs.empty() ? DType::kFloat32 : inputs[0].dtype(), 0),
      {.list = &outputs}, &ProcessGroupTdist::run_all_to_all, outputs, inputs);
}

void ProcessGroupTdist::run_all_to_all_single(const algo::CallContext& ctx, const Tensor& output,
                                              const Tensor& input, const std::vector<size_t>& send_bytes,
                                              const std::vector<size_t>& recv_bytes) {
  all_to_all_bytes(ctx, input.data(), send_bytes, output.data(), recv_bytes);
}

WorkPtr ProcessGroupTdist::all_to_all_single(const Tensor& output, const Tensor& input,
                                             const std::vector<int64_t>& output_split_sizes,
                                             const std::vector<int64_t>& input_split_sizes) {
  const char* op = "all_to_all_single";
  validate::same_dtype(op, "output", output, input.dtype());
  validate::no_overlap(op, "output", output, "input", input);
  auto splits_to_bytes = [&](const Tensor& t, const std::vector<int64_t>& splits, const char* what) {
    std::vector<size_t> bytes;
    if (t.numel() == 0 && splits.empty()) return std::vector<size_t>(to_size(size()), 0);
    int64_t row = validate::row_elements(op, what, t);
    if (splits.empty()) {
      if (t.shape()[0] % size() != 0) {
        throw DistInvalidArgument(std::string(op) + ": " + what + " has " + std::to_string(t.shape()[0]) +
                                  " rows, not divisible by the group size " + std::to_string(size()) +
                                  "; pass split sizes");
      }
      return std::vector<size_t>(to_size(size()), to_size(t.shape()[0] / size() * row) * t.element_size());
    }
    validate::split_sizes(op, what, splits, size(), t.shape()[0]);
    bytes.reserve(splits.size());
    for (int64_t rows : splits) bytes.push_back(to_size(rows * row) * t.element_size());
    return bytes;
  };
  auto send_bytes = splits_to_bytes(input, input_split_sizes, "input_split_sizes");
  auto recv_bytes = splits_to_bytes(output, output_split_sizes, "output_split_sizes");
  return submit(op, sig::collective_signature(CallKind::kAllToAllSingle, input.dtype(), 0), {.one = &output},
                &ProcessGroupTdist::run_all_to_all_single, output, input, send_bytes, recv_bytes);
}

void ProcessGroupTdist::run_barrier(const algo::CallContext& ctx) {
  if (auto* shm = shm_for<algo::BarrierAlgo>()) return algo::shm::barrier(ctx, *shm);
  algo::barrier(ctx);
}

WorkPtr ProcessGroupTdist::barrier() {
  return submit("barrier", sig::collective_signature(CallKind::kBarrier, DType::kUInt8, 0), {},
                &ProcessGroupTdist::run_barrier);
}

void ProcessGroupTdist::drive_on_wait(Work& work, const transport::RequestPtr& request,
                                      transport::Transport* transport) {
  work.get_future()->set_progress([transport, request](std::chrono::steady_clock::time_point deadline) {
    // The transport runs the request's callbacks (which finish the work):
    // this thread once it lets go, if it drove, else the loop thread.
    try {
      transport->wait(request, deadline);
    } catch (...) {
      // The request's error reaches the work through its callback.
    }
  });
}

transport::Transport& ProcessGroupTdist::p2p_transport(const char* op, int tag) const {
  check_usable(op);
  transport::Transport* transport = p2p_transport_.load(std::memory_order_acquire);
  if (transport == nullptr) {
    check_usable(op);  // a rebuild that failed meanwhile says why
    throw DistBackendError(std::string(op) +
                           ": the group's connections are being rebuilt "
                           "(reinit_process_group); no message can start meanwhile");
  }
  // A receiver that refused an earlier send of this rank says why at the
  // user's next send or recv (tdist's own messages, on negative tags, leave
  // it for the user's).
  if (tag >= 0) {
    if (auto refused = transport->take_rejection()) std::rethrow_exception(refused);
  }
  return *transport;
}

WorkPtr ProcessGroupTdist::send(const Tensor& tensor, int dst, int tag) {
  validate::rank_in_group("send", "dst", dst, size());
  if (dst == rank()) {
    throw DistInvalidArgument("send: dst " + std::to_string(dst) +
                              " is this rank; a rank cannot send to itself");
  }
  transport::Transport& transport = p2p_transport("send", tag);
  auto work = std::make_shared<Work>("send", std::vector<Tensor>{tensor}, &transport);
  const auto signature = sig::p2p_signature(tensor.dtype(), count_of(tensor));
  const uint64_t trace_id = trace_begin("send", signature, -1, detail::TraceState::kStarted, dst, tag);
  auto request = transport.isend(dst, p2p_tag(tag), tensor.data(), tensor.nbytes(), signature);
  // The callback keeps the tensor (and so the bytes being sent) alive.
  request->on_complete([recorder = &recorder_, work, tensor, trace_id](transport::Request& r) {
    end_trace(*recorder, trace_id, r.error());
    work->finish(r.error());
  });
  drive_on_wait(*work, request, &transport);
  return work;
}

WorkPtr ProcessGroupTdist::recv(const Tensor& tensor, int src, int tag) {
  if (src != transport::kAnySource) validate::rank_in_group("recv", "src", src, size());
  if (src == rank()) {
    // Nothing could ever arrive: fail now, as torch does, instead of waiting
    // out the group's timeout.
    throw DistInvalidArgument("recv: src " + std::to_string(src) +
                              " is this rank; a rank cannot receive from itself");
  }
  transport::Transport& transport = p2p_transport("recv", tag);
  auto work = std::make_shared<Work>("recv", std::vector<Tensor>{tensor}, &transport);
  const auto signature = sig::p2p_signature(tensor.dtype(), count_of(tensor));
  const uint64_t trace_id = trace_begin("recv", signature, -1, detail::TraceState::kStarted, src, tag);
  auto request = transport.irecv(src, p2p_tag(tag), tensor.data(), tensor.nbytes(), signature);
  size_t expected = tensor.nbytes();
  request->on_complete([recorder = &recorder_, work, tensor, expected, trace_id](transport::Request& r) {
    std::exception_ptr error = r.error();
    if (!error && r.received_bytes() != expected) {
      error = std::make_exception_ptr(DistInvalidArgument("recv: the tensor has " + std::to_string(expected) +
                                                          " bytes but rank " + std::to_string(r.source()) +
                                                          " sent " + std::to_string(r.received_bytes()) +
                                                          " (send and recv tensors must match)"));
    }
    end_trace(*recorder, trace_id, error);
    work->finish(error, error ? -1 : r.source());
  });
  drive_on_wait(*work, request, &transport);
  return work;
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

}  // namespace tdist
