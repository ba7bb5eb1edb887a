#include "transport/shm/shm_sync.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <ctime>

#include "common/env.h"

namespace tdist::transport::shm {
namespace {

// The futex word is the low half of the 64-bit sequence number (x86-64 and
// aarch64 are little-endian); a sleeper passes the low half it saw, so a
// publish between its check and its sleep makes FUTEX_WAIT return at once.
uint32_t* futex_word(const FlagLine& line) {
  return reinterpret_cast<uint32_t*>(const_cast<std::atomic<uint64_t>*>(&line.seq));
}

// Between failure checks a sleeper wakes at least this often.
constexpr long kSleepSliceNs = 2'000'000;

}  // namespace

void publish(FlagLine& line, uint64_t value) {
  // seq_cst store and load pair with the sleeper's seq_cst increment and
  // re-check: either the sleeper sees the new value or we see the sleeper.
  line.seq.store(value, std::memory_order_seq_cst);
  if (line.sleepers.load(std::memory_order_seq_cst) != 0) wake_all(line);
}

void wake_all(FlagLine& line) {
  syscall(SYS_futex, futex_word(line), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void ring_bell(FlagLine& line) {
  // As publish: the seq_cst add and load pair with the sleeper's.
  line.seq.fetch_add(1, std::memory_order_seq_cst);
  if (line.sleepers.load(std::memory_order_seq_cst) != 0) wake_all(line);
}

void sleep_while_unchanged(const FlagLine& line, uint64_t seen, std::chrono::nanoseconds timeout) {
  auto& sleepers = const_cast<std::atomic<uint32_t>&>(line.sleepers);
  sleepers.fetch_add(1, std::memory_order_seq_cst);
  if (line.seq.load(std::memory_order_seq_cst) == seen) {
    const auto ns = timeout.count();
    timespec slice{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    syscall(SYS_futex, futex_word(line), FUTEX_WAIT, static_cast<uint32_t>(seen), &slice, nullptr, 0);
  }
  sleepers.fetch_sub(1, std::memory_order_relaxed);
}

WaitPolicy WaitPolicy::for_oversubscription(bool oversubscribed) {
  WaitPolicy policy{32, 64};
  // With a core per rank the peer is probably running: spin a while before
  // giving up the core, for a time rather than a count of polls. The count
  // used before, 4000 polls, lasted about 44 us on a 2-vCPU Xeon VM
  // (a poll, a load and a pause took 10.9 ns there, 2026-11-25),
  // but a pause alone takes up to 40 ns on other CPUs and a few on some.
  // A wait just longer than the spin pays a futex wake-up (a 2-rank 1 MiB
  // broadcast whose copy took 45-50 us ran at 52-125 us). Longer spins
  // (20000, 50000 polls) changed no op measurably on the Xeon once that
  // broadcast shared its copying (2026-11-25). Shorter spins (800 polls,
  // 9 us) fell into a pattern where every 8 B all_reduce paid a futex
  // wake-up (44-68 us instead of 0.9 us, measured 2026-11-23 on 2 vCPUs).
  // Oversubscribed, the peer may need our core: hand it over almost at once. Either way, sleep
  // soon: a sleeper woken by the futex is scheduled ahead of busy
  // processes, a yielder waits behind them.
  if (!oversubscribed) policy = WaitPolicy{0, 16, kSpinTime};
  if (auto spins = env_int("TDIST_SHM_SPINS", 0, 1 << 30)) {
    policy.spins = static_cast<int>(*spins);
    policy.spin_time = std::chrono::nanoseconds(0);
  }
  if (auto yields = env_int("TDIST_SHM_YIELDS", 0, 1 << 30)) policy.yields = static_cast<int>(*yields);
  return policy;
}

WaitEnd wait_at_least(const FlagLine& line, uint64_t target, const WaitPolicy& policy,
                      FailureCheck failure_check) {
  WaitEnd end;
  // A failure seen while waiting counts only if the flag is still not
  // there: a peer that published it and then left (it finished the call and
  // destroyed the group, closing its connections) is not a failure, and the
  // flag may have arrived between our last look and the check.
  auto check = [&] {
    try {
      failure_check();
    } catch (...) {
      if (!reached(line, target)) throw;
    }
  };
  // A yield that kept us off the core for long gave it to a thread that
  // needed it; if the flag has not come meanwhile, that thread was not the
  // peer we wait for but a computation sharing our core (the caller's
  // backward pass beside an asynchronous collective, a torch intra-op pool,
  // another job). Each further yield would take the core from it for a
  // scheduler slice and give it back a slice later (milliseconds under
  // EEVDF and CFS alike), so sleep instead: the peer's publish wakes us.
  using Clock = std::chrono::steady_clock;
  Clock::time_point yielded_until{};  // when the last yield returned (the spin's clock too)
  auto yield_gave_core_away = [&] {
    const auto before = Clock::now();
    sched_yield();
    ++end.yields;
    yielded_until = Clock::now();
    end.gave_core_away = yielded_until - before >= kYieldGaveCoreAway && !reached(line, target);
    return end.gave_core_away;
  };
  const bool timed = policy.spin_time.count() > 0;
  Clock::time_point spin_end{};
  for (int64_t i = 0; timed || i < policy.spins; ++i) {
    if (reached(line, target)) return end;
    cpu_relax();
    if ((i & 255) != 255) continue;
    // Now and then let a runnable peer on this core have it: right after
    // start-up the scheduler often puts two ranks on one core (for the first
    // ~10 ms, measured: 90 us per 8 B op instead of 1-4 us), and one that
    // only spins burns the slice its peer needs. With the core to itself, a
    // yield returns at once.
    if (yield_gave_core_away()) break;
    if (timed) {
      if (i == 255) {
        spin_end = yielded_until + policy.spin_time;
      } else if (yielded_until >= spin_end) {
        break;
      }
    }
  }
  for (int i = 0; !end.gave_core_away && i < policy.yields; ++i) {
    if (reached(line, target)) return end;
    if (yield_gave_core_away()) break;
    if ((i & 31) == 31) check();
  }
  auto& sleepers = const_cast<std::atomic<uint32_t>&>(line.sleepers);
  for (;;) {
    check();
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    uint64_t seen = line.seq.load(std::memory_order_seq_cst);
    if (seen >= target) {
      sleepers.fetch_sub(1, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      return end;
    }
    end.slept = true;
    timespec slice{0, kSleepSliceNs};
    syscall(SYS_futex, futex_word(line), FUTEX_WAIT, static_cast<uint32_t>(seen), &slice, nullptr, 0);
    sleepers.fetch_sub(1, std::memory_order_relaxed);
    if (reached(line, target)) return end;
  }
}

}  // namespace tdist::transport::shm
