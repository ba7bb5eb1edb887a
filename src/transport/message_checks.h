#pragma once

// What every transport checks when a message meets a receive, and the
// errors it raises, so that TCP and shared memory match and word them
// alike (transport.h, "Matching"): which receive takes a message, a
// receive of another call's signature, a message longer than the receive's
// buffer, and the refusal a sender is told of.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

#include "common/call_signature.h"
#include "tdist/errors.h"
#include "transport/transport.h"

namespace tdist::transport {

/// A receive posted for (want_src, want_tag) takes a message from `src` with `tag`.
inline bool receive_matches(int want_src, uint64_t want_tag, int src, uint64_t tag) {
  return (want_src == kAnySource || want_src == src) && want_tag == tag;
}

/// A receive with a signature takes only a message with the same one (a
/// message without one, from a caller that checks nothing, passes).
inline bool signatures_differ(const tdist::detail::CallSignature& mine,
                              const tdist::detail::CallSignature& theirs) {
  return !mine.empty() && !theirs.empty() && !(mine == theirs);
}

/// Rank `rank`'s receive (from `src`, with `tag` and signature `mine`) met
/// a message of signature `theirs`.
inline std::exception_ptr mismatch_error(int rank, int src, uint64_t tag,
                                         const tdist::detail::CallSignature& mine,
                                         const tdist::detail::CallSignature& theirs) {
  std::string what;
  if (mine.kind == tdist::detail::CallKind::kPointToPoint) {
    what = "recv from rank " + std::to_string(src) + " (tag " + std::to_string(tag & 0xffffffffU) + ")";
  } else {
    what = tdist::detail::call_kind_name(mine.kind);
  }
  return std::make_exception_ptr(
      DistBackendError("rank " + std::to_string(rank) + ": " +
                       tdist::detail::mismatch_message(what, mine, rank, theirs, src)));
}

/// A message of `size` bytes met a receive buffer of `capacity`.
inline std::exception_ptr too_big_error(int rank, int src, uint64_t tag, size_t size, size_t capacity) {
  return std::make_exception_ptr(
      DistBackendError("rank " + std::to_string(rank) + ": receive from rank " + std::to_string(src) +
                       " (tag " + std::to_string(tag) + "): the message has " + std::to_string(size) +
                       " bytes but the receive buffer holds only " + std::to_string(capacity) +
                       " (do the ranks pass tensors of different sizes?)"));
}

/// What the sender `rank` raises once a receiver's refusal (`reason`) reaches it.
inline std::exception_ptr refused_send_error(int rank, const std::string& reason) {
  return std::make_exception_ptr(DistBackendError("rank " + std::to_string(rank) + ": a send of rank " +
                                                  std::to_string(rank) + " was refused: " + reason));
}

}  // namespace tdist::transport
