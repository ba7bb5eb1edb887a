#pragma once

// The flight recorder: every process keeps a ring of its last calls (every
// group's collectives and point-to-point operations) with their signature,
// state and timestamps, cheap enough to leave on (docs/performance.md), and
// writes it as JSON when asked (tdist::dump_trace), when a call fails or
// times out and on SIGUSR1 (both only with TDIST_TRACE_DIR set). Merged
// across ranks by tools/trace (tdist-trace) it names the rank that is
// behind, the first call where ranks disagree, and who arrived last at each
// call. PyTorch has the idea for NCCL only (its "flight recorder"); the
// layout here is tdist's own.
//
// Writers never lock: each entry is a seqlock (`version` odd while it
// changes), claimed and updated with one compare-and-swap, so the hot path
// costs a few stores and two clock reads; readers (a dump) copy an entry
// and keep it only if its version did not move.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/call_signature.h"
#include "tdist/store.h"

namespace tdist::detail {

/// Where a call is: queued behind others, started, or finished.
enum class TraceState : uint8_t { kQueued = 0, kStarted = 1, kCompleted = 2, kFailed = 3 };
const char* trace_state_name(TraceState state);

/// CLOCK_MONOTONIC in nanoseconds: what dumps show.
int64_t monotonic_ns();

/// The recorder's timestamps: the CPU's time-stamp counter where the
/// kernel keeps its own clock on it (then every process of the host shares
/// it, and reading it costs a third of clock_gettime), else CLOCK_MONOTONIC
/// nanoseconds. Dumps convert them to CLOCK_MONOTONIC nanoseconds.
int64_t trace_ticks();

/// Converts trace_ticks() values to CLOCK_MONOTONIC nanoseconds: a line
/// through (ticks, ns) read when the process started recording and when
/// the converter was made, so the longer the process ran the better.
class TickConverter {
 public:
  TickConverter();
  int64_t to_ns(int64_t ticks) const;

 private:
  double ns_per_tick_ = 1;
  int64_t ticks0_ = 0;
  int64_t ns0_ = 0;
};

/// What a group tells the recorder about itself once, at creation.
struct TraceGroupInfo {
  int rank = 0;
  int size = 1;
  std::vector<int> global_ranks;  // empty: 0..size-1 (add_group fills it in)
  std::string transport;          // "shared memory", "tcp", "shared memory + tcp"
  /// Added to this process's clock to get group rank 0's (0 on rank 0's
  /// host), and its uncertainty (clock_offset_to_rank0).
  int64_t clock_offset_ns = 0;
  int64_t clock_uncertainty_ns = 0;
  /// What peer r has recorded of call `seq` (its shared-memory call record):
  /// when it entered the call, in trace_ticks(); null if unknown.
  std::function<std::optional<int64_t>(int r, uint64_t seq)> peer_entered;
  /// The last call peer r began: its signature; null if unknown.
  std::function<std::optional<CallSignature>(int r)> peer_last_call;
};

class FlightRecorder {
 public:
  /// The process's recorder, sized by TDIST_TRACE_BUFFER_SIZE (default
  /// 2000; 0 records nothing).
  static FlightRecorder& instance();
  explicit FlightRecorder(size_t capacity);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  bool enabled() const { return capacity_ > 0; }
  size_t capacity() const { return capacity_; }

  /// Registers a group; the id names it in entries. The group calls
  /// forget_group before it goes (its callbacks are dropped, its entries stay).
  uint32_t add_group(TraceGroupInfo info);
  void forget_group(uint32_t group);

  /// A new entry (0 when disabled). `seq` is the group's call number (-1
  /// for point-to-point, whose `peer` and `tag` are set instead). An entry
  /// begun kCompleted (a send that went out at once) is done when it starts.
  uint64_t begin(uint32_t group, std::string_view op, const CallSignature& sig, int64_t seq, TraceState state,
                 int peer = -1, int64_t tag = 0, int64_t now = 0);
  /// The queued entry `id` starts as call `seq`.
  void started(uint64_t id, int64_t seq, int64_t entered_at);
  /// The entry finished; a failure keeps (the start of) its message.
  void completed(uint64_t id, const char* algorithm = nullptr);
  void failed(uint64_t id, const std::string& error);

  /// Everything recorded, oldest first, as JSON (docs/debugging.md).
  std::string to_json(std::string_view reason) const;
  /// Writes to_json() to `path`, or to TDIST_TRACE_DIR/rank<R>[.<component>].json
  /// when `path` is empty; returns the file written. Raises DistError
  /// when neither is set or the file cannot be written.
  std::string dump(std::string_view reason, const std::string& path = {}) const;
  /// True once a group of this copy of tdist has been recorded (the file
  /// name's rank is known).
  bool has_rank() const {
    std::lock_guard<std::mutex> lock(groups_mutex_);
    return process_rank_ >= 0;
  }
  /// Writes to_json() to `dir`/rank<R>[.<component>].json (made if missing).
  std::string dump_to_dir(std::string_view reason, const std::string& dir) const;
  /// dump() if TDIST_TRACE_DIR is set (after an error: never throws).
  void dump_if_configured(std::string_view reason) const noexcept;
  /// Names this copy of tdist in file names ("torch" for the plugin, whose
  /// process may also hold the Python package's copy).
  void set_component(std::string name);

  struct Slot;

 private:
  // Writes to_json() to `target` (aside, then renamed).
  std::string write_dump(std::string_view reason, const std::string& target) const;
  // Locks slot `id % capacity` (odd version) if it still holds `id` (or,
  // `claim`, whatever it holds); returns it, else null.
  Slot* lock(uint64_t id, bool claim) const;
  static void unlock(Slot& slot);

  size_t capacity_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<uint64_t> next_id_{1};
  mutable std::mutex groups_mutex_;  // groups and failures: rare
  std::vector<TraceGroupInfo> groups_;
  std::vector<std::pair<uint64_t, std::string>> errors_;  // the last few failures' messages
  std::string component_;
  int process_rank_ = -1;  // global rank of the first group's member: names the file
};

/// Group rank 0's CLOCK_MONOTONIC minus this rank's, measured through the
/// group's store at creation when this rank is on another host than rank 0
/// (else 0), and how far off it may be (half the shortest round trip).
struct ClockOffset {
  int64_t offset_ns = 0;
  int64_t uncertainty_ns = 0;
};
/// Every rank of the group calls it (rank 0 answers the others).
ClockOffset clock_offset_to_rank0(Store& store, int rank, int size);

/// TDIST_TRACE=path: every rank of the job leaves its recorder in `store`
/// and rank 0 writes the Chrome trace of them all (tdist::chrome_trace) to
/// path. destroy_process_group() of the default group calls it on every
/// rank. Best effort: a failure is logged, never raised.
void write_job_trace(Store& store, int rank, int size, std::chrono::milliseconds timeout) noexcept;

/// Installs the SIGUSR1 handler (once per process) that dumps every recorder
/// in the process from a thread of its own, into sigusr1_dump_dir().
void install_trace_signal_handler();

}  // namespace tdist::detail
