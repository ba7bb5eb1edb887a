#include "transport/shm/shm_group.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <new>
#include <random>
#include <set>
#include <sstream>

#include "common/cpus.h"
#include "common/env.h"
#include "tdist/errors.h"
#include "transport/shm/shm_single_copy.h"

namespace tdist::transport::shm {

struct ShmGroup::RankArea {
  FlagLine arrive[2];
  FlagLine reduced;
  FlagLine writing;                            // odd while this rank writes into a peer's memory
  FlagLine aborted;                            // seq != 0: this rank aborted; payload[0]: its AbortKind
  FlagLine any_aborted;                        // rank 0's only: seq != 0 once any rank aborted
  FlagLine eager_done;                         // eager operations this rank has finished
  HandoffLine handoff;                         // what this rank measured handing chunks over
  FlagLine eager[ShmGroup::kEagerSlots];       // what this rank writes in eager operations
  CallRecord records[ShmGroup::kCallRecords];  // call n's signature at n % kCallRecords
  char reason[1024];                           // why, NUL-terminated
  // Written once at connect, for single copy: the process to read from, and
  // a word (probe_value itself, at this rank's address) peers read and write
  // back to probe that they can.
  uint64_t pid;
  uint64_t probe_address;
  uint64_t probe_value;
};

namespace {

constexpr size_t kPage = 4096;

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

size_t control_bytes(int size) {
  return round_up(sizeof(ShmGroup::RankArea) * static_cast<size_t>(size), kPage);
}

size_t configured_buffer_bytes() {
  auto v = env_int("TDIST_SHM_BUFFER_BYTES", 4096, int64_t{1} << 30);
  if (!v) return kDefaultBufferBytes;
  if (*v % 4096 != 0) {
    throw DistInvalidArgument("TDIST_SHM_BUFFER_BYTES must be a multiple of 4096, got " + std::to_string(*v));
  }
  return static_cast<size_t>(*v);
}

// TDIST_SHM_RING_BYTES: rank 0's replaces the thresholds of the rings of
// slots (algorithms/shm/shm_move.cc) for the whole group.
std::optional<size_t> configured_ring_bytes() {
  auto v = env_int("TDIST_SHM_RING_BYTES", 1, int64_t{1} << 50);
  return v ? std::optional<size_t>(static_cast<size_t>(*v)) : std::nullopt;
}

// TDIST_SHM_HANDOFF: auto (or unset), cached or streamed.
HandoffMode configured_handoff() {
  const auto value = env_string("TDIST_SHM_HANDOFF");
  if (!value || value->empty() || *value == "auto") return HandoffMode::kAuto;
  if (*value == "cached") return HandoffMode::kCached;
  if (*value == "streamed") return HandoffMode::kStreamed;
  throw DistInvalidArgument("TDIST_SHM_HANDOFF must be auto, cached or streamed, got '" + *value + "'");
}

const char* handoff_text(HandoffMode mode) {
  switch (mode) {
    case HandoffMode::kCached:
      return "cached";
    case HandoffMode::kStreamed:
      return "streamed";
    case HandoffMode::kAuto:
      break;
  }
  return "auto";
}

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

size_t segment_bytes(int size, size_t buffer_bytes) {
  return control_bytes(size) + static_cast<size_t>(size) * 2 * buffer_bytes;
}

std::string host_identity() {
  if (auto id = env_string("TDIST_HOST_ID")) return "override:" + *id;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  struct stat st {};
  std::string shm_id = stat("/dev/shm", &st) == 0
                           ? std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino)
                           : std::string("none");
  return std::string(host) + "/" + read_first_line("/proc/sys/kernel/random/boot_id") + "/" + shm_id;
}

namespace {

// "0,1,5": CPU numbers as the connect keys carry them.
std::string cpu_list(const std::vector<int>& cpus) {
  std::string text;
  for (int cpu : cpus) text += (text.empty() ? "" : ",") + std::to_string(cpu);
  return text;
}

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> cpus;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) cpus.push_back(std::stoi(item));
  }
  return cpus;
}

// Rank 0's record of the segment: its name, the buffer size, rank 0's
// single-copy window overrides ("-" when unset), whether the kernel's copy
// is slow on rank 0 (1 or 0) and its ring threshold override ("-" when
// unset), which every rank uses: ranks that chose different paths for one
// call would wait for each other forever.
std::string optional_text(const std::optional<size_t>& v) {
  return v ? std::to_string(*v) : std::string("-");
}

std::optional<size_t> parse_optional(const std::string& text, const char* what) {
  if (text == "-") return std::nullopt;
  return static_cast<size_t>(parse_int(text, what, 0));
}

}  // namespace

std::unique_ptr<ShmGroup> ShmGroup::connect(Store& store, int rank, int size,
                                            std::chrono::milliseconds timeout, const std::string& prefix,
                                            std::vector<int> group_ranks) {
  Segment segment;
  size_t buffer_bytes = 0;
  std::optional<size_t> ring_bytes;
  SingleCopySettings single_copy;
  HandoffMode handoff = HandoffMode::kAuto;
  // A segment record that starts with this holds rank 0's reason for failing.
  const std::string failed_mark = "!failed ";
  if (rank == 0) {
    try {
      handoff = configured_handoff();
      buffer_bytes = configured_buffer_bytes();
      ring_bytes = configured_ring_bytes();
      single_copy.read_window_overrides();
      single_copy.slow_kernel_copy = size > 1 && single_copy_allowed() && kernel_copy_is_slow();
      segment = Segment::create(segment_bytes(size, buffer_bytes));
    } catch (const std::exception& e) {
      // The other ranks wait for the record: give them the reason (best
      // effort: the store may be failing too).
      try {
        store.set(prefix + "segment", to_bytes(failed_mark + e.what()));
      } catch (...) {
      }
      throw;
    }
    store.set(prefix + "segment",
              to_bytes(segment.name() + " " + std::to_string(buffer_bytes) + " " +
                       optional_text(single_copy.min_bytes) + " " + optional_text(single_copy.max_bytes) +
                       (single_copy.slow_kernel_copy ? " 1 " : " 0 ") + optional_text(ring_bytes) + " " +
                       handoff_text(handoff)));
  } else {
    // Every rank checks its own settings, also those only rank 0's count
    // for: with a bad value on every rank, each raises the real reason at
    // once instead of waiting for a rank 0 that failed (and may be gone
    // with the store).
    (void)configured_handoff();
    (void)configured_buffer_bytes();
    (void)configured_ring_bytes();
    SingleCopySettings{}.read_window_overrides();
    const std::string value = to_string(store.get(prefix + "segment"));
    if (value.starts_with(failed_mark)) {
      const int leader = group_ranks.empty() ? 0 : group_ranks[0];
      throw DistBackendError("shared memory: rank " + std::to_string(leader) +
                             " aborted the group while setting it up: " + value.substr(failed_mark.size()));
    }
    std::istringstream fields(value);
    std::string name, buffer, min, max, slow, ring, mode;
    if (!(fields >> name >> buffer >> min >> max >> slow >> ring >> mode) || (slow != "0" && slow != "1") ||
        (mode != "auto" && mode != "cached" && mode != "streamed"))
      throw DistBackendError("shared memory: bad segment record '" + value + "'");
    handoff = mode == "cached"     ? HandoffMode::kCached
              : mode == "streamed" ? HandoffMode::kStreamed
                                   : HandoffMode::kAuto;
    single_copy.slow_kernel_copy = slow == "1";
    buffer_bytes = static_cast<size_t>(parse_int(buffer, "shm/segment buffer size", 1));
    ring_bytes = parse_optional(ring, "shm/segment ring threshold");
    single_copy.min_bytes = parse_optional(min, "shm/segment single-copy minimum");
    single_copy.max_bytes = parse_optional(max, "shm/segment single-copy maximum");
    segment = Segment::open(name, segment_bytes(size, buffer_bytes));
  }
  auto* areas = reinterpret_cast<RankArea*>(segment.data());
  // The probe word is this rank's own field in the segment, at the address
  // this process maps it: peers read it through process_vm_readv and write
  // the same value back. It lives as long as this rank maps the segment;
  // once unmapped (connect failed), a late probe fails instead of writing
  // into memory reused for something else.
  areas[rank].pid = static_cast<uint64_t>(getpid());
  areas[rank].probe_value = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  areas[rank].probe_address = reinterpret_cast<uintptr_t>(&areas[rank].probe_value);
  store.set(prefix + "mapped/" + std::to_string(rank), to_bytes("1"));
  // Single copy: can this rank read and write every other rank's memory? Every rank
  // must (and allow it), else nobody uses it. Whether ranks outnumber cores
  // changes the windows, so that too is agreed: one rank's affinity must
  // not make it take another path than its peers.
  bool can_access = single_copy_allowed();
  if (can_access && size > 1) {
    std::vector<std::string> mapped;
    mapped.reserve(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) mapped.push_back(prefix + "mapped/" + std::to_string(r));
    store.wait(mapped, timeout);
    for (int r = 0; r < size && can_access; ++r) {
      if (r == rank) continue;
      const RankArea& theirs = areas[r];
      can_access = can_access_peer_memory(
          static_cast<pid_t>(theirs.pid),
          reinterpret_cast<void*>(static_cast<uintptr_t>(theirs.probe_address)), theirs.probe_value);
    }
  }
  // Each rank says whether it can reach its peers' memory and which CPUs it
  // may run on: the ranks outnumber their CPUs if the group is larger than
  // the union of those sets. Counting only one's own CPUs would call ranks
  // that a launcher pinned one to a core (tdistrun --bind-to core)
  // oversubscribed, each having a single CPU.
  store.set(prefix + "single_copy/" + std::to_string(rank),
            to_bytes(std::string(can_access ? "1" : "0") + cpu_list(detail::allowed_cpus())));
  std::vector<std::string> keys;
  keys.reserve(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) keys.push_back(prefix + "single_copy/" + std::to_string(r));
  store.wait(keys, timeout);
  single_copy.enabled = true;
  std::set<int> cpus;
  for (const auto& key : keys) {
    const std::string v = to_string(store.get(key));
    single_copy.enabled = single_copy.enabled && !v.empty() && v[0] == '1';
    for (int cpu : parse_cpu_list(v.empty() ? v : v.substr(1))) cpus.insert(cpu);
  }
  single_copy.oversubscribed = detail::outnumber_cpus(static_cast<size_t>(size), cpus.size());
  if (rank == 0) {
    // Every rank has mapped it (it wrote its key after mapping): drop the
    // name, so the memory goes with the last process that maps it, however
    // it ends.
    segment.unlink();
  }
  auto group = std::unique_ptr<ShmGroup>(new ShmGroup(std::move(segment), rank, size, buffer_bytes));
  group->single_copy_ = single_copy;
  group->ring_bytes_ = ring_bytes;
  group->handoff_mode_ = handoff;
  group->policy_ = WaitPolicy::for_oversubscription(single_copy.oversubscribed);
  group->group_ranks_ = std::move(group_ranks);
  return group;
}

pid_t ShmGroup::pid(int r) const {
  return static_cast<pid_t>(area(r).pid);
}

ShmGroup::ShmGroup(Segment segment, int rank, int size, size_t buffer_bytes)
    : segment_(std::move(segment)),
      rank_(rank),
      size_(size),
      buffer_bytes_(buffer_bytes),
      data_offset_(control_bytes(size)) {}

ShmGroup::~ShmGroup() = default;

ShmGroup::RankArea& ShmGroup::area(int r) const {
  return reinterpret_cast<RankArea*>(segment_.data())[r];
}

uint8_t* ShmGroup::buffer(int r, uint64_t k) const {
  return segment_.data() + data_offset_ + (static_cast<size_t>(r) * 2 + (k & 1)) * buffer_bytes_;
}

FlagLine& ShmGroup::arrive(int r, uint64_t k) const {
  return area(r).arrive[k & 1];
}

FlagLine& ShmGroup::reduced(int r) const {
  return area(r).reduced;
}

FlagLine& ShmGroup::writing(int r) const {
  return area(r).writing;
}

HandoffLine& ShmGroup::handoff(int r) const {
  return area(r).handoff;
}

FlagLine& ShmGroup::eager_slot(int writer, uint64_t n) const {
  return area(writer).eager[n % kEagerSlots];
}

uint64_t ShmGroup::last_arrival(int r) const {
  return std::max(area(r).arrive[0].seq.load(std::memory_order_acquire),
                  area(r).arrive[1].seq.load(std::memory_order_acquire));
}

FlagLine& ShmGroup::eager_done(int r) const {
  return area(r).eager_done;
}

uint64_t ShmGroup::begin_round(
    detail::FunctionRef<void(int peer, const FlagLine& line, uint64_t target)> check) {
  uint64_t k = ++round_;
  if (k >= 2) {
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const FlagLine& line = arrive(r, k - 1);
      wait_at_least(line, k - 1, policy_, [&] { check(r, line, k - 1); });
    }
  }
  return k;
}

void ShmGroup::begin_call(const tdist::detail::CallSignature& sig, int64_t entered_at) {
  // A hierarchical call runs several steps here under one signature: the
  // history moves on once per call.
  if (!pending_.sig.empty() && pending_.sig.seq == sig.seq) return;
  const uint64_t before = history_;
  const auto stamped = tdist::detail::stamp_call(sig, before);
  history_ = stamped.history;
  stamp_ = stamped.stamp;
  pending_ = Recorded{sig, before, entered_at};
  record_pending_ = true;
}

void ShmGroup::write_record() {
  record_pending_ = false;
  CallRecord& record = area(rank_).records[pending_.sig.seq % kCallRecords];
  // A seqlock: 0 while the words change, so that a reader that overlaps a
  // rewrite of the slot sees the mark move and ignores what it read.
  record.mark.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  uint64_t words[4];
  static_assert(sizeof(words) == sizeof(pending_.sig));
  std::memcpy(words, &pending_.sig, sizeof(words));
  for (size_t i = 0; i < 4; ++i) record.words[i].store(words[i], std::memory_order_relaxed);
  record.history.store(pending_.history, std::memory_order_relaxed);
  record.entered_at.store(pending_.entered_at, std::memory_order_relaxed);
  record.mark.store(pending_.sig.seq + 1, std::memory_order_release);
}

std::optional<ShmGroup::Recorded> ShmGroup::signature_of(int r, uint64_t seq) const {
  const CallRecord& record = area(r).records[seq % kCallRecords];
  if (record.mark.load(std::memory_order_acquire) != seq + 1) return std::nullopt;
  uint64_t words[4];
  for (size_t i = 0; i < 4; ++i) words[i] = record.words[i].load(std::memory_order_relaxed);
  Recorded out{};
  std::memcpy(&out.sig, words, sizeof(out.sig));
  out.history = record.history.load(std::memory_order_relaxed);
  out.entered_at = record.entered_at.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (record.mark.load(std::memory_order_relaxed) != seq + 1) return std::nullopt;
  return out;
}

uint64_t ShmGroup::calls_begun(int r) const {
  // The newest record's mark (only failures ask: no line of its own to
  // write on every call).
  uint64_t newest = 0;
  for (const auto& record : area(r).records)
    newest = std::max(newest, record.mark.load(std::memory_order_acquire));
  return newest;
}

void ShmGroup::abort(const std::string& reason, AbortKind kind) noexcept {
  RankArea& mine = area(rank_);
  if (aborted_rank() < 0) {  // the first to abort gives the reason
    size_t n = std::min(reason.size(), sizeof(mine.reason) - 1);
    std::memcpy(mine.reason, reason.data(), n);
    mine.reason[n] = 0;
    mine.aborted.payload[0] = static_cast<uint8_t>(kind);
    mine.aborted.seq.store(1, std::memory_order_release);
    area(0).any_aborted.seq.store(1, std::memory_order_release);
  }
  // Sleepers wait on other lines; wake them all so they see the abort.
  for (int r = 0; r < size_; ++r) {
    wake_all(area(r).arrive[0]);
    wake_all(area(r).arrive[1]);
    wake_all(area(r).reduced);
    wake_all(area(r).eager_done);
    for (auto& slot : area(r).eager) wake_all(slot);
  }
}

int ShmGroup::aborted_rank() const {
  // One line to read on every call; the scan only once something failed.
  if (area(0).any_aborted.seq.load(std::memory_order_acquire) == 0) return -1;
  for (int r = 0; r < size_; ++r) {
    if (area(r).aborted.seq.load(std::memory_order_acquire) != 0) return r;
  }
  return -1;
}

void ShmGroup::check_aborted(std::string_view op) const {
  int r = aborted_rank();
  if (r < 0) return;
  const RankArea& a = area(r);
  std::string what = std::string(op) + ": rank " + std::to_string(group_rank(r)) +
                     " aborted the group: " + std::string(a.reason, strnlen(a.reason, sizeof(a.reason)));
  switch (static_cast<AbortKind>(a.aborted.payload[0])) {
    case AbortKind::kTimeout:
      throw DistTimeoutError(what);
    case AbortKind::kNetwork:
      throw DistNetworkError(what);
    default:
      throw DistBackendError(what);
  }
}

}  // namespace tdist::transport::shm
