#include "flight_recorder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/env.h"
#include "common/error_text.h"
#include "tdist/dtype.h"
#include "tdist/errors.h"
#include "tdist/logging.h"
#include "tdist/reduce_op.h"
#include "tdist/store.h"
#include "tdist/trace.h"

namespace tdist::detail {

struct FlightRecorder::Slot {
  std::atomic<uint64_t> version{0};  // odd while a writer holds the slot
  std::atomic<uint64_t> id{0};       // 0: never used
  std::atomic<uint64_t> group{0};
  std::atomic<int64_t> seq{-1};
  std::atomic<uint64_t> sig[4] = {};
  std::atomic<uint64_t> name[4] = {};  // the op's name, NUL-padded, at most 31 bytes
  std::atomic<int64_t> peer{-1};
  std::atomic<int64_t> tag{0};
  std::atomic<uint64_t> state{0};
  std::atomic<int64_t> queued_at{0};
  std::atomic<int64_t> started_at{0};
  std::atomic<int64_t> done_at{0};
  std::atomic<uint64_t> algorithm{0};  // a const char* to a static name, or 0
  // queued_at, started_at, done_at: trace_ticks(), converted when dumped.
};

namespace {

constexpr size_t kDefaultCapacity = 2000;
constexpr size_t kKeptErrors = 32;

size_t capacity_from_env() {
  // 0 turns the recorder off; a bad value raises, naming the variable.
  const auto value = env_int("TDIST_TRACE_BUFFER_SIZE", 0, int64_t{1} << 24);
  return value ? static_cast<size_t>(*value) : kDefaultCapacity;
}

// A plain copy of a slot, taken by a reader.
struct Copy {
  uint64_t id = 0;
  uint32_t group = 0;
  int64_t seq = -1;
  CallSignature sig{};
  char name[33] = {};
  int64_t peer = -1;
  int64_t tag = 0;
  TraceState state = TraceState::kQueued;
  int64_t queued_ns = 0, started_ns = 0, done_ns = 0;
  const char* algorithm = nullptr;
};

std::string dtype_text(uint8_t dtype) {
  try {
    return std::string(dtype_name(static_cast<DType>(dtype)));
  } catch (...) {
    return "dtype " + std::to_string(dtype);
  }
}

}  // namespace

const char* trace_state_name(TraceState state) {
  switch (state) {
    case TraceState::kQueued:
      return "queued";
    case TraceState::kStarted:
      return "started";
    case TraceState::kCompleted:
      return "completed";
    case TraceState::kFailed:
      return "failed";
  }
  return "?";
}

int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

namespace {

// The TSC is one clock for the whole host only when it is invariant and
// synchronized across CPUs; the kernel checks both before it runs its own
// clock on it, so its choice decides.
bool tsc_is_the_clock() {
#if defined(__x86_64__)
  std::ifstream in("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string source;
  return static_cast<bool>(in >> source) && source == "tsc";
#else
  return false;
#endif
}

int64_t raw_ticks(bool tsc) {
#if defined(__x86_64__)
  if (tsc) return static_cast<int64_t>(__rdtsc());
#endif
  (void)tsc;
  return monotonic_ns();
}

struct TickOrigin {
  bool tsc = tsc_is_the_clock();
  int64_t ticks = raw_ticks(tsc);
  int64_t ns = monotonic_ns();
};

const TickOrigin& origin() {
  static const TickOrigin o;
  return o;
}

// Read once, before any recorder exists (instance() reads origin()).
const bool g_tsc = origin().tsc;

}  // namespace

int64_t trace_ticks() {
  return raw_ticks(g_tsc);
}

TickConverter::TickConverter() : ticks0_(origin().ticks), ns0_(origin().ns) {
  if (!origin().tsc) return;
  const int64_t ticks = raw_ticks(true);
  const int64_t ns = monotonic_ns();
  if (ticks > ticks0_ && ns > ns0_)
    ns_per_tick_ = static_cast<double>(ns - ns0_) / static_cast<double>(ticks - ticks0_);
}

int64_t TickConverter::to_ns(int64_t ticks) const {
  if (!origin().tsc || ticks == 0) return ticks;
  return ns0_ + static_cast<int64_t>(static_cast<double>(ticks - ticks0_) * ns_per_tick_);
}

FlightRecorder& FlightRecorder::instance() {
  // Never destroyed: groups and the signal thread may use it during exit.
  static auto* recorder = (origin(), new FlightRecorder(capacity_from_env()));
  return *recorder;
}

FlightRecorder::FlightRecorder(size_t capacity)
    : capacity_(capacity), slots_(capacity > 0 ? std::make_unique<Slot[]>(capacity) : nullptr) {}

FlightRecorder::~FlightRecorder() = default;

void FlightRecorder::set_component(std::string name) {
  std::lock_guard<std::mutex> lock(groups_mutex_);
  component_ = std::move(name);
}

uint32_t FlightRecorder::add_group(TraceGroupInfo info) {
  if (info.global_ranks.empty()) {
    for (int r = 0; r < info.size; ++r) info.global_ranks.push_back(r);
  }
  std::lock_guard<std::mutex> lock(groups_mutex_);
  if (process_rank_ < 0) process_rank_ = info.global_ranks[static_cast<size_t>(info.rank)];
  groups_.push_back(std::move(info));
  return static_cast<uint32_t>(groups_.size() - 1);
}

void FlightRecorder::forget_group(uint32_t group) {
  std::lock_guard<std::mutex> lock(groups_mutex_);
  if (group >= groups_.size()) return;
  groups_[group].peer_entered = nullptr;
  groups_[group].peer_last_call = nullptr;
}

FlightRecorder::Slot* FlightRecorder::lock(uint64_t id, bool claim) const {
  if (capacity_ == 0 || id == 0) return nullptr;
  Slot& slot = slots_[id % capacity_];
  for (int spins = 0;; ++spins) {
    uint64_t v = slot.version.load(std::memory_order_relaxed);
    if ((v & 1) == 0 &&
        slot.version.compare_exchange_weak(v, v + 1, std::memory_order_acquire, std::memory_order_relaxed)) {
      // Readers that see any store below also see the odd version.
      std::atomic_thread_fence(std::memory_order_release);
      if (!claim && slot.id.load(std::memory_order_relaxed) != id) {
        unlock(slot);  // overwritten by a newer call: that one's entry stays
        return nullptr;
      }
      return &slot;
    }
    // Another writer holds it for a few stores (a call 2000 calls later
    // claiming the slot of one still queued): let it finish.
    if (spins > 64) std::this_thread::yield();
  }
}

void FlightRecorder::unlock(Slot& slot) {
  // Only the holder writes the version now: a store, not a read-modify-write.
  slot.version.store(slot.version.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

uint64_t FlightRecorder::begin(uint32_t group, std::string_view op, const CallSignature& sig, int64_t seq,
                               TraceState state, int peer, int64_t tag, int64_t now) {
  if (capacity_ == 0) return 0;
  const uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
  if (now == 0) now = trace_ticks();
  Slot* slot = lock(id, /*claim=*/true);
  uint64_t words[4];
  std::memcpy(words, &sig, sizeof(words));
  char name[32] = {};
  std::memcpy(name, op.data(), std::min(op.size(), sizeof(name) - 1));
  uint64_t name_words[4];
  std::memcpy(name_words, name, sizeof(name_words));
  slot->id.store(id, std::memory_order_relaxed);
  slot->group.store(group, std::memory_order_relaxed);
  slot->seq.store(seq, std::memory_order_relaxed);
  for (size_t i = 0; i < 4; ++i) {
    slot->sig[i].store(words[i], std::memory_order_relaxed);
    slot->name[i].store(name_words[i], std::memory_order_relaxed);
  }
  slot->peer.store(peer, std::memory_order_relaxed);
  slot->tag.store(tag, std::memory_order_relaxed);
  slot->state.store(static_cast<uint64_t>(state), std::memory_order_relaxed);
  slot->queued_at.store(now, std::memory_order_relaxed);
  slot->started_at.store(state == TraceState::kQueued ? 0 : now, std::memory_order_relaxed);
  slot->done_at.store(state == TraceState::kCompleted ? now : 0, std::memory_order_relaxed);
  slot->algorithm.store(0, std::memory_order_relaxed);
  unlock(*slot);
  return id;
}

void FlightRecorder::started(uint64_t id, int64_t seq, int64_t entered_at) {
  Slot* slot = lock(id, false);
  if (slot == nullptr) return;
  slot->seq.store(seq, std::memory_order_relaxed);
  slot->state.store(static_cast<uint64_t>(TraceState::kStarted), std::memory_order_relaxed);
  slot->started_at.store(entered_at, std::memory_order_relaxed);
  unlock(*slot);
}

void FlightRecorder::completed(uint64_t id, const char* algorithm) {
  if (id == 0) return;
  const int64_t now = trace_ticks();
  Slot* slot = lock(id, false);
  if (slot == nullptr) return;
  slot->state.store(static_cast<uint64_t>(TraceState::kCompleted), std::memory_order_relaxed);
  slot->done_at.store(now, std::memory_order_relaxed);
  slot->algorithm.store(reinterpret_cast<uint64_t>(algorithm), std::memory_order_relaxed);
  unlock(*slot);
}

void FlightRecorder::failed(uint64_t id, const std::string& error) {
  if (id == 0) return;
  const int64_t now = trace_ticks();
  if (Slot* slot = lock(id, false)) {
    slot->state.store(static_cast<uint64_t>(TraceState::kFailed), std::memory_order_relaxed);
    slot->done_at.store(now, std::memory_order_relaxed);
    unlock(*slot);
  }
  std::lock_guard<std::mutex> lock(groups_mutex_);
  if (errors_.size() == kKeptErrors) errors_.erase(errors_.begin());
  errors_.emplace_back(id, error.substr(0, 2000));
}

namespace {

// A consistent copy of `slot`, or nothing if it is unused or keeps changing.
std::optional<Copy> read_slot(const FlightRecorder::Slot& slot) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const uint64_t v1 = slot.version.load(std::memory_order_acquire);
    if ((v1 & 1) != 0) {
      std::this_thread::yield();
      continue;
    }
    Copy c;
    c.id = slot.id.load(std::memory_order_relaxed);
    c.group = static_cast<uint32_t>(slot.group.load(std::memory_order_relaxed));
    c.seq = slot.seq.load(std::memory_order_relaxed);
    uint64_t words[4];
    uint64_t name_words[4];
    for (size_t i = 0; i < 4; ++i) {
      words[i] = slot.sig[i].load(std::memory_order_relaxed);
      name_words[i] = slot.name[i].load(std::memory_order_relaxed);
    }
    c.peer = slot.peer.load(std::memory_order_relaxed);
    c.tag = slot.tag.load(std::memory_order_relaxed);
    c.state = static_cast<TraceState>(slot.state.load(std::memory_order_relaxed));
    c.queued_ns = slot.queued_at.load(std::memory_order_relaxed);
    c.started_ns = slot.started_at.load(std::memory_order_relaxed);
    c.done_ns = slot.done_at.load(std::memory_order_relaxed);
    c.algorithm = reinterpret_cast<const char*>(slot.algorithm.load(std::memory_order_relaxed));
    std::atomic_thread_fence(std::memory_order_acquire);
    if (slot.version.load(std::memory_order_relaxed) != v1) continue;
    if (c.id == 0) return std::nullopt;
    std::memcpy(&c.sig, words, sizeof(words));
    std::memcpy(c.name, name_words, sizeof(name_words));
    return c;
  }
  return std::nullopt;
}

nlohmann::json signature_json(const CallSignature& sig) {
  nlohmann::json out;
  if (sig.empty()) return out;
  out["dtype"] = dtype_text(sig.dtype);
  out["count"] = sig.count;
  if (sig.root >= 0) out["root"] = sig.root;
  if (sig.reduce != 0xff) out["reduce_op"] = reduce_op_name(static_cast<ReduceOp::Kind>(sig.reduce));
  return out;
}

// When each rank entered call `seq` of a group, from the peers' records on
// this host: the last to arrive and by how much, and who has not arrived.
nlohmann::json arrival_json(const TraceGroupInfo& g, const Copy& c, const TickConverter& clock) {
  nlohmann::json out;
  if (!g.peer_entered || c.seq < 0 || c.started_ns == 0) return out;
  int last = g.rank;
  int64_t last_ns = c.started_ns;
  int64_t first_ns = c.started_ns;
  std::vector<int> missing;
  for (int r = 0; r < g.size; ++r) {
    if (r == g.rank) continue;
    auto entered = g.peer_entered(r, static_cast<uint64_t>(c.seq));
    if (entered) entered = clock.to_ns(*entered);
    if (!entered) {
      missing.push_back(r);
      continue;
    }
    if (*entered > last_ns) {
      last = r;
      last_ns = *entered;
    }
    first_ns = std::min(first_ns, *entered);
  }
  // A finished call whose peers' records were overwritten tells nothing.
  if (c.state == TraceState::kCompleted && !missing.empty()) return out;
  if (!missing.empty()) out["not_arrived"] = missing;
  out["last_rank"] = last;
  out["last_entered_ns"] = last_ns;
  out["late_by_us"] = static_cast<double>(last_ns - c.started_ns) / 1000.0;
  out["spread_us"] = static_cast<double>(last_ns - first_ns) / 1000.0;
  return out;
}

}  // namespace

std::string FlightRecorder::to_json(std::string_view reason) const {
  nlohmann::json doc;
  doc["version"] = 1;
  doc["reason"] = std::string(reason);
  doc["pid"] = static_cast<int64_t>(getpid());
  doc["capacity"] = capacity_;
  const TickConverter clock;
  doc["monotonic_ns"] = monotonic_ns();
  doc["unix_time_ns"] = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  // Held throughout: a group's callbacks read its shared memory, which
  // forget_group (before the group goes) waits for.
  std::lock_guard<std::mutex> lock(groups_mutex_);
  const auto& groups = groups_;
  const auto& errors = errors_;
  doc["rank"] = process_rank_;
  doc["component"] = component_.empty() ? "tdist" : component_;
  nlohmann::json jgroups = nlohmann::json::array();
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& g = groups[i];
    nlohmann::json jg{{"id", i},
                      {"rank", g.rank},
                      {"size", g.size},
                      {"transport", g.transport},
                      {"clock_offset_ns", g.clock_offset_ns},
                      {"clock_uncertainty_ns", g.clock_uncertainty_ns}};
    jg["global_ranks"] = g.global_ranks;
    if (g.peer_last_call) {
      nlohmann::json peers = nlohmann::json::object();
      for (int r = 0; r < g.size; ++r) {
        if (r == g.rank) continue;
        if (const auto last = g.peer_last_call(r)) {
          nlohmann::json p = signature_json(*last);
          p["seq"] = last->seq;
          p["op"] = call_kind_name(last->kind);
          peers[std::to_string(r)] = p;
        }
      }
      jg["peers_last_call"] = peers;
    }
    jgroups.push_back(jg);
  }
  doc["groups"] = jgroups;
  nlohmann::json entries = nlohmann::json::array();
  const uint64_t end = next_id_.load(std::memory_order_relaxed);
  const uint64_t begin = end > capacity_ ? end - capacity_ : 1;
  for (uint64_t id = begin; id < end && capacity_ > 0; ++id) {
    auto c = read_slot(slots_[id % capacity_]);
    if (!c || c->id != id) continue;
    c->queued_ns = clock.to_ns(c->queued_ns);
    c->started_ns = clock.to_ns(c->started_ns);
    c->done_ns = clock.to_ns(c->done_ns);
    nlohmann::json e{
        {"id", c->id}, {"group", c->group}, {"op", c->name}, {"state", trace_state_name(c->state)}};
    if (c->seq >= 0) e["seq"] = c->seq;
    e.update(signature_json(c->sig));
    if (c->peer >= 0) {
      e["peer"] = c->peer;
      e["tag"] = c->tag;
    }
    e["queued_ns"] = c->queued_ns;
    if (c->started_ns != 0) e["started_ns"] = c->started_ns;
    if (c->done_ns != 0) e["finished_ns"] = c->done_ns;
    if (c->algorithm != nullptr) e["algorithm"] = c->algorithm;
    for (const auto& [eid, text] : errors)
      if (eid == id) e["error"] = text;
    if (c->group < groups.size()) {
      auto arrival = arrival_json(groups[c->group], *c, clock);
      if (!arrival.empty()) e["arrival"] = arrival;
    }
    entries.push_back(std::move(e));
  }
  doc["entries"] = entries;
  return doc.dump(1);
}

std::string FlightRecorder::dump(std::string_view reason, const std::string& path) const {
  if (!path.empty()) return write_dump(reason, path);
  const auto dir = env_string("TDIST_TRACE_DIR");
  if (!dir || dir->empty()) throw DistError("dump_trace: no file given and TDIST_TRACE_DIR is not set");
  return dump_to_dir(reason, *dir);
}

std::string FlightRecorder::dump_to_dir(std::string_view reason, const std::string& dir) const {
  std::string component;
  int rank = 0;
  {
    std::lock_guard<std::mutex> lock(groups_mutex_);
    component = component_;
    rank = std::max(process_rank_, 0);
  }
  ::mkdir(dir.c_str(), 0777);  // may exist; the open below reports real failures
  return write_dump(
      reason, dir + "/rank" + std::to_string(rank) + (component.empty() ? "" : "." + component) + ".json");
}

std::string FlightRecorder::write_dump(std::string_view reason, const std::string& target) const {
  const std::string text = to_json(reason);
  // Written aside and renamed, so a reader never sees half a dump.
  const std::string tmp = target + ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text << '\n';
    out.close();
    if (!out) throw DistError("dump_trace: cannot write " + tmp + ": " + errno_text(errno));
  }
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    throw DistError("dump_trace: cannot rename " + tmp + " to " + target + ": " + errno_text(errno));
  }
  return target;
}

void FlightRecorder::dump_if_configured(std::string_view reason) const noexcept {
  if (capacity_ == 0) return;
  try {
    const auto dir = env_string("TDIST_TRACE_DIR");
    if (dir && !dir->empty()) dump(reason);
  } catch (...) {
    // Best effort: the call's own error is what the caller raises.
  }
}

}  // namespace tdist::detail

namespace tdist {

std::string dump_trace(const std::string& path) {
  return detail::FlightRecorder::instance().dump("dump_trace()", path);
}

void handle_sigusr1() {
  detail::install_trace_signal_handler();
}

std::string trace_json() {
  return detail::FlightRecorder::instance().to_json("trace_json()");
}

void set_trace_component(const std::string& name) {
  detail::FlightRecorder::instance().set_component(name);
}

}  // namespace tdist

namespace tdist::detail {

void write_job_trace(Store& store, int rank, int size, std::chrono::milliseconds timeout) noexcept {
  const auto path = env_string("TDIST_TRACE");
  if (!path || path->empty() || !FlightRecorder::instance().enabled()) return;
  try {
    store.set("tdist/trace/" + std::to_string(rank), trace_json());
    if (rank != 0) return;
    std::vector<std::string> keys;
    keys.reserve(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) keys.push_back("tdist/trace/" + std::to_string(r));
    store.wait(keys, timeout);
    std::vector<std::string> dumps;
    dumps.reserve(keys.size());
    for (const auto& key : keys) dumps.push_back(to_string(store.get(key)));
    std::ofstream out(*path, std::ios::trunc);
    out << chrome_trace(dumps) << '\n';
    if (!out) throw DistError("cannot write " + *path);
    TDIST_LOG(INFO) << "TDIST_TRACE: the calls of " << size << " ranks written to " << *path;
  } catch (const std::exception& e) {
    TDIST_LOG(WARNING) << "TDIST_TRACE: no trace written: " << e.what();
  }
}

}  // namespace tdist::detail
