// Single copy's windows (tuning.h): the block sizes with which each shape
// of operation copies straight between the ranks' memories rather than
// through the shared buffers. docs/tuning.md has the figures behind them.

#include <algorithm>
#include <cstdint>

#include "algorithms/tuning/tuning.h"

namespace tdist::algorithms {
namespace {

using Window = SingleCopyWindow;
constexpr Window kNever{SIZE_MAX, 0};
constexpr size_t KiB = 1024;
constexpr size_t MiB = 1024 * KiB;

// Ranks with a core each gain from single copy for mid-size blocks whose
// source sits in the caches; for large ones memory bandwidth decides and
// the kernel's copy (no streaming stores, pages pinned in batches) loses.
// Ranks that outnumber cores pay a wake-up per reader's "copied"
// handshake: only all_to_all still gains, and over a narrower range.
Window default_window(SingleCopyShape shape, bool oversubscribed) {
  switch (shape) {
    case SingleCopyShape::kOneSource:
      return oversubscribed ? kNever : Window{16 * KiB, 1 * MiB};
    case SingleCopyShape::kShared:
      return oversubscribed ? kNever : Window{16 * KiB, SIZE_MAX};
    case SingleCopyShape::kReduce:
      return oversubscribed ? kNever : Window{32 * KiB, 32 * MiB};
    case SingleCopyShape::kGather:
      return oversubscribed ? kNever : Window{8 * KiB, 8 * MiB};
    case SingleCopyShape::kAllToAll:
      return oversubscribed ? Window{64 * KiB, 4 * MiB} : Window{8 * KiB, 8 * MiB};
  }
  return kNever;
}

// Where the kernel's copy runs at under 40% of memcpy's rate: reductions
// never gain; the gathers and all_to_all only for blocks of 32-128 KiB
// (with a core per rank); broadcast below the ring of slots, which is
// faster than single copy from there. TDIST_SHM_RING_BYTES does not move
// that limit.
Window narrowed_for_slow_kernel_copy(SingleCopyShape shape, Window window, bool oversubscribed) {
  switch (shape) {
    case SingleCopyShape::kReduce:
      return kNever;
    case SingleCopyShape::kShared:
      return Window{window.min, std::min(window.max, kDefaultRingBytes - 1)};
    case SingleCopyShape::kGather:
    case SingleCopyShape::kAllToAll:
      if (oversubscribed) return kNever;
      return Window{std::max(window.min, 32 * KiB), std::min(window.max, 128 * KiB)};
    default:
      return window;
  }
}

}  // namespace

SingleCopyWindow single_copy_window(SingleCopyShape shape,
                                    const transport::shm::SingleCopySettings& settings) {
  if (!settings.enabled) return kNever;
  if (settings.min_bytes || settings.max_bytes)
    return Window{settings.min_bytes.value_or(0), settings.max_bytes.value_or(SIZE_MAX)};
  const Window window = default_window(shape, settings.oversubscribed);
  return settings.slow_kernel_copy ? narrowed_for_slow_kernel_copy(shape, window, settings.oversubscribed)
                                   : window;
}

}  // namespace tdist::algorithms
