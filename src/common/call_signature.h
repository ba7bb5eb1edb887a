#pragma once

// What one rank passed to one call, in 32 bytes, so that ranks can compare
// their calls before they touch each other's data (docs/design.md, "Every
// call is matched across ranks"). Every collective carries its group's
// sequence number, the op, the dtype, the element count, the root, the
// reduce op and a digest of the per-rank sizes that must agree (uneven and
// list ops); a point-to-point message carries its dtype and count. Over TCP
// every message header holds the sender's signature and a receive accepts
// only its own; over shared memory every flag a rank publishes holds a
// 32-bit stamp of it, and a peer's full signature sits in a ring beside its
// flags for the message.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tdist/dtype.h"
#include "tdist/reduce_op.h"

namespace tdist::detail {

/// The operations, as signatures name them. 0 means "no signature": a
/// message or receive without one is not checked (internal messages).
enum class CallKind : uint8_t {
  kNone = 0,
  kBroadcast,
  kAllReduce,
  kReduce,
  kAllGather,
  kAllGatherIntoTensor,
  kAllGatherIntoTensorUneven,
  kGather,
  kScatter,
  kReduceScatter,
  kReduceScatterTensor,
  kReduceScatterTensorUneven,
  kAllToAll,
  kAllToAllSingle,
  kBarrier,
  kPointToPoint,
};

/// The name users call the op by ("all_reduce"), "send/recv" for p2p.
const char* call_kind_name(CallKind kind);

struct CallSignature {
  /// The call's sequence number in its group (0 for point-to-point).
  uint64_t seq = 0;
  /// Elements this rank passed (its own block for gathers, its output for
  /// scatters, the tensor for the rest); for point-to-point, the message's.
  uint64_t count = 0;
  /// Digest of per-rank sizes that every rank must pass alike (layout_of);
  /// 0 when the op has none.
  uint64_t layout = 0;
  CallKind kind = CallKind::kNone;
  uint8_t dtype = 0;      // DType
  uint8_t reduce = 0xff;  // ReduceOp::Kind, 0xff: none
  uint8_t reserved = 0;
  int32_t root = -1;  // -1: none

  bool empty() const { return kind == CallKind::kNone; }
  friend bool operator==(const CallSignature&, const CallSignature&) = default;
};
static_assert(sizeof(CallSignature) == 32);

/// A collective's signature (seq is filled in when the call starts to run).
CallSignature collective_signature(CallKind kind, DType dtype, uint64_t count, int root = -1,
                                   const ReduceOp* reduce = nullptr, uint64_t layout = 0);
/// A point-to-point message's.
CallSignature p2p_signature(DType dtype, uint64_t count);

/// Digest of a list of sizes (FNV-1a over their bytes, never 0), for
/// CallSignature::layout.
uint64_t layout_of(const std::vector<size_t>& sizes);

/// What a call publishes over shared memory: 32 bits of `sig` and of the
/// calls before it (`history`) for its flags, and the history including it.
/// The stamp is the count added to a hash of the rest, so that two calls
/// differing only in their counts (by less than 2^32 elements) always
/// differ here; other differences do but for one chance in 2^32. A call
/// that no peer checked (a small broadcast's root waits for nobody) still
/// changes the stamps of every call after it. Never 0 (0 marks a flag
/// published by no call).
struct CallStamp {
  uint32_t stamp;
  uint64_t history;
};
CallStamp stamp_call(const CallSignature& sig, uint64_t history);

/// "all_reduce of 10 float32 elements (sum)", for messages.
std::string describe(const CallSignature& sig);

/// "<op> (call #<seq> in this group): <what> (every rank must make the same
/// calls in the same order, with matching arguments)": the text of every
/// error about calls that differ across ranks.
std::string calls_differ_message(std::string_view op, uint64_t seq, const std::string& what);

/// The error every rank of a mismatched call raises:
/// "all_reduce (call #7 in this group): rank 0 passed 10 float32 elements,
/// rank 1 passed 20 float32 elements; ..."; names what differs first.
std::string mismatch_message(std::string_view op, const CallSignature& mine, int my_rank,
                             const CallSignature& theirs, int their_rank);
/// A mismatch of an earlier call (`mine`, `theirs`), found in call `seq` of
/// `op`: "<op> (call #<seq> in this group): an earlier call differed: " and
/// that call's mismatch_message.
std::string earlier_mismatch_message(std::string_view op, uint64_t seq, const CallSignature& mine,
                                     int my_rank, const CallSignature& theirs, int their_rank);

}  // namespace tdist::detail
