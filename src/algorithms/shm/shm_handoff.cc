#include "algorithms/shm/shm_handoff.h"

#include <atomic>
#include <chrono>
#include <cstdint>

#include "common/stream_copy.h"

namespace tdist::algorithms::shm::detail {

SlotRing::SlotRing(Call& call, size_t bytes, size_t slot_bytes, int only_reader)
    : call_(call),
      handoff_(call, only_reader),
      slot_bytes_(std::min(slot_bytes, call.group.buffer_bytes())),
      chunks_(ceil_div(bytes, slot_bytes_)),
      slots_per_buffer_(call.group.buffer_bytes() / slot_bytes_),
      first_(call.begin_round()),
      end_(call.group.skip_rounds(chunks_ + 1)) {
  // begin_round let us write the buffer of round first_ (its last round,
  // first_ - 2, is done everywhere); the other buffer waits for every
  // rank's arrive(first_), which says it is done with round first_ - 1.
  // Every rank, not only the ring's readers: in the round before, any rank
  // may have been reading our buffer (a gather's other ranks too).
  call.group.publish_arrive(first_);
}

uint8_t* SlotRing::slot(int r, size_t j) const {
  const size_t s = j % (2 * slots_per_buffer_);
  return call_.group.buffer(r, first_ + s / slots_per_buffer_) + s % slots_per_buffer_ * slot_bytes_;
}

uint8_t* SlotRing::claim(size_t j) {
  const int me = call_.rank();
  const size_t ring = 2 * slots_per_buffer_;
  for (int r = 0; r < call_.size(); ++r) {
    if (r == me) continue;
    if (j >= ring) {
      if (reads_from(r, me))
        call_.wait(call_.group.reduced(r), round_of(j - ring), r, "its release of our slot");
    } else if (j >= slots_per_buffer_) {
      call_.wait(call_.group.arrive(r, first_), first_, r, "its entry into the ring");
    }
  }
  return slot(me, j);
}

const uint8_t* SlotRing::await(int r, size_t j) const {
  call_.wait(call_.group.arrive(r, round_of(j)), round_of(j), r, "its data");
  return slot(r, j);
}

void copy_out(void* dst, const void* src, size_t n, bool streaming) {
  if (n == 0 || dst == src) return;
  if (streaming) {
    tdist::detail::stream_copy(dst, src, n);
  } else {
    std::memcpy(dst, src, n);
  }
}

HandoffProbe handoff_probe(uint64_t round) {
  if (round < kHandoffFirstProbes) return round % 2 == 1 ? HandoffProbe::kCached : HandoffProbe::kStreamed;
  // The cached probe's place in each period moves by 37 (prime to the
  // period) from one period to the next; the streamed one is half a
  // period after it.
  const uint64_t place = round / kHandoffProbeRounds * 37 % kHandoffProbeRounds;
  const uint64_t at = round % kHandoffProbeRounds;
  if (at == place) return HandoffProbe::kCached;
  if (at == (place + kHandoffProbeRounds / 2) % kHandoffProbeRounds) return HandoffProbe::kStreamed;
  return HandoffProbe::kNone;
}

size_t handoff_place(uint64_t round) {
  return (round < kHandoffFirstProbes ? round / 2 : round / kHandoffProbeRounds) % 2;
}

uint32_t best_probe(uint32_t a, uint32_t b) {
  if (a == 0) return b;
  return b == 0 ? a : std::min(a, b);
}

bool handoff_prefers_streaming(HandoffCost cached, HandoffCost streamed) {
  if (cached.fill == 0 || cached.read == 0 || streamed.fill == 0 || streamed.read == 0) return false;
  // Streaming must win by a quarter: on one core the two kinds are within
  // 10-20% of each other (a MiB in 55 against 60-68 us), and one slow
  // ordinary fill (a preemption, a cache miss) must not tip the verdict; on
  // two cores streaming wins by 2-8x.
  return 4 * (uint64_t{streamed.fill} + streamed.read) < 3 * (uint64_t{cached.fill} + cached.read);
}

uint32_t ns_per_mib(uint64_t ns, size_t bytes) {
  const uint64_t scaled = bytes == 0 ? UINT32_MAX : ns * (uint64_t{1} << 20) / bytes;
  return static_cast<uint32_t>(std::clamp<uint64_t>(scaled, 1, UINT32_MAX));
}

namespace {

uint32_t best_of(const std::atomic<uint32_t> (&ns)[2]) {
  return best_probe(ns[0].load(std::memory_order_relaxed), ns[1].load(std::memory_order_relaxed));
}

using Clock = std::chrono::steady_clock;

uint64_t ns_since(Clock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
}

}  // namespace

HandoffProbe Handoff::probe_of(uint64_t k) const {
  return call_.group.handoff_mode() == transport::shm::HandoffMode::kAuto ? handoff_probe(k)
                                                                          : HandoffProbe::kNone;
}

bool Handoff::measured_streaming() const {
  const int me = call_.rank();
  const transport::shm::HandoffLine& mine = call_.group.handoff(me);
  HandoffCost kind[2];
  for (size_t k = 0; k < 2; ++k) {
    kind[k].fill = best_of(mine.fill_ns[use_][k]);
    uint32_t slowest = 0;
    bool all_measured = true;  // else the kind counts as unmeasured
    for (int r = 0; r < call_.size(); ++r) {
      if (!reads_from(r, me)) continue;
      const uint32_t read = best_of(call_.group.handoff(r).read_ns[use_][k]);
      all_measured = all_measured && read != 0;
      slowest = std::max(slowest, read);
    }
    kind[k].read = all_measured ? slowest : 0;
  }
  return handoff_prefers_streaming(kind[0], kind[1]);
}

// In a probe round every writer uses the probe's stores, whatever the size
// of its chunks, so that a reader's label (from the round) is always right;
// only chunks of kHandoffMinBytes or more are timed.
void Handoff::fill_with(uint64_t k, size_t n,
                        tdist::detail::FunctionRef<void(bool streaming)> copy_in) const {
  if (n == 0) return;
  switch (call_.group.handoff_mode()) {
    case transport::shm::HandoffMode::kCached:
      return copy_in(false);
    case transport::shm::HandoffMode::kStreamed:
      return copy_in(true);
    case transport::shm::HandoffMode::kAuto:
      break;
  }
  const HandoffProbe probe = probe_of(k);
  if (probe == HandoffProbe::kNone) return copy_in(n >= kHandoffMinBytes && measured_streaming());
  if (n < kHandoffMinBytes) return copy_in(probe == HandoffProbe::kStreamed);
  const Clock::time_point start = Clock::now();
  copy_in(probe == HandoffProbe::kStreamed);
  record(true, probe, k, ns_since(start), n);
}

void Handoff::read_with(uint64_t k, size_t n, tdist::detail::FunctionRef<void()> work) const {
  const HandoffProbe probe = probe_of(k);
  if (probe == HandoffProbe::kNone || n < kHandoffMinBytes) return work();
  const Clock::time_point start = Clock::now();
  work();
  record(false, probe, k, ns_since(start), n);
}

void Handoff::fill(uint64_t k, uint8_t* dst, const uint8_t* src, size_t n) const {
  fill_with(k, n, [&](bool streaming) { copy_out(dst, src, n, streaming); });
}

void Handoff::read(uint64_t k, uint8_t* dst, const uint8_t* src, size_t n, bool streaming) const {
  if (n == 0 || dst == src) return;
  read_with(k, n, [&] { copy_out(dst, src, n, streaming); });
}

// Into this rank's HandoffLine, in the probe's place (the older time of its
// kind: probe periods alternate between the two places).
void Handoff::record(bool fill, HandoffProbe probe, uint64_t k, uint64_t ns, size_t n) const {
  transport::shm::HandoffLine& line = call_.group.handoff(call_.rank());
  const size_t kind = probe == HandoffProbe::kStreamed ? 1 : 0;
  (fill ? line.fill_ns : line.read_ns)[use_][kind][handoff_place(k)].store(ns_per_mib(ns, n),
                                                                           std::memory_order_relaxed);
}

void SlotRing::fill(size_t j, const uint8_t* src, size_t n) {
  handoff_.fill(round_of(j), claim(j), src, n);
  publish(j);
}

void SlotRing::read(int r, size_t j, uint8_t* dst, size_t n, bool streaming) {
  handoff_.read(round_of(j), dst, await(r, j), n, streaming);
}

void SlotRing::read_with(int r, size_t j, size_t n,
                         tdist::detail::FunctionRef<void(const uint8_t* src)> copy) {
  const uint8_t* src = await(r, j);
  handoff_.read_with(round_of(j), n, [&] { copy(src); });
}
}  // namespace tdist::algorithms::shm::detail
