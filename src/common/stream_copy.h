#pragma once

// Copies with non-temporal ("streaming") stores: the destination lines are
// written straight to memory instead of being read into the cache first
// (read-for-ownership) and written back later. For outputs larger than the
// caches, which nobody reads back soon, that is a third less memory
// traffic: a 64 MiB copy ran at 13.2 GB/s against memcpy's 11.1, 128 MiB at
// 9.5 against 7.2 (2026-11-25, Xeon VM, one thread; glibc's memcpy does
// this itself only above a threshold it derives from the L3 size, which
// that VM reports as 480 MiB). For anything the caches hold, memcpy is as
// fast or faster, and the data stays cached for its next reader; so is a
// destination the call has just read (all_reduce writes its result over
// its input, still cached from the same round: streaming made a 64 MiB
// all_reduce 40% slower).

#include <cstddef>

namespace tdist::detail {

/// memcpy(dst, src, n) with non-temporal stores where the CPU has them
/// (x86-64: SSE2, always present), else memcpy. Ranges must not overlap.
void stream_copy(void* dst, const void* src, size_t n);

/// Outputs of at least this many bytes in one call are written with
/// stream_copy by the shared-memory collectives. TDIST_SHM_STREAMING_BYTES
/// overrides it (read once per process; 0 turns streaming off).
size_t streaming_threshold();

}  // namespace tdist::detail
