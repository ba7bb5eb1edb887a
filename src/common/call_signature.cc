#include "common/call_signature.h"

#include <cstring>

namespace tdist::detail {
namespace {

constexpr uint8_t kNoReduce = 0xff;

uint64_t fnv1a(const void* data, size_t n, uint64_t hash = 14695981039346656037ULL) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    hash ^= bytes[i];
    hash *= 1099511628211ULL;
  }
  return hash;
}

std::string elements(uint64_t count, uint8_t dtype) {
  return std::to_string(count) + " " + dtype_name(static_cast<DType>(dtype)) +
         (count == 1 ? " element" : " elements");
}

// What the root is called in the op's arguments, as torch names it.
const char* root_name(CallKind kind) {
  switch (kind) {
    case CallKind::kReduce:
    case CallKind::kGather:
      return "dst";
    default:
      return "src";
  }
}

// What the op's per-rank sizes are called, as torch names its arguments.
const char* layout_name(CallKind kind) {
  switch (kind) {
    case CallKind::kAllGather:
      return "tensor_list sizes";
    case CallKind::kAllGatherIntoTensorUneven:
      return "output_split_sizes";
    case CallKind::kReduceScatter:
      return "input_list sizes";
    case CallKind::kReduceScatterTensorUneven:
      return "input_split_sizes";
    default:
      return "sizes";
  }
}

std::string reduce_text(uint8_t reduce) {
  return reduce == kNoReduce ? std::string("none") : reduce_op_name(static_cast<ReduceOp::Kind>(reduce));
}

bool has_count(CallKind kind) {
  return kind != CallKind::kBarrier && kind != CallKind::kAllToAll && kind != CallKind::kAllToAllSingle;
}

}  // namespace

const char* call_kind_name(CallKind kind) {
  switch (kind) {
    case CallKind::kNone:
      return "(unchecked)";
    case CallKind::kBroadcast:
      return "broadcast";
    case CallKind::kAllReduce:
      return "all_reduce";
    case CallKind::kReduce:
      return "reduce";
    case CallKind::kAllGather:
      return "all_gather";
    case CallKind::kAllGatherIntoTensor:
      return "all_gather_into_tensor";
    case CallKind::kAllGatherIntoTensorUneven:
      return "all_gather_into_tensor_uneven";
    case CallKind::kGather:
      return "gather";
    case CallKind::kScatter:
      return "scatter";
    case CallKind::kReduceScatter:
      return "reduce_scatter";
    case CallKind::kReduceScatterTensor:
      return "reduce_scatter_tensor";
    case CallKind::kReduceScatterTensorUneven:
      return "reduce_scatter_tensor_uneven";
    case CallKind::kAllToAll:
      return "all_to_all";
    case CallKind::kAllToAllSingle:
      return "all_to_all_single";
    case CallKind::kBarrier:
      return "barrier";
    case CallKind::kPointToPoint:
      return "send/recv";
  }
  return "unknown op";
}

CallSignature collective_signature(CallKind kind, DType dtype, uint64_t count, int root,
                                   const ReduceOp* reduce, uint64_t layout) {
  CallSignature sig;
  sig.kind = kind;
  sig.dtype = static_cast<uint8_t>(dtype);
  sig.count = count;
  sig.root = root;
  sig.reduce = reduce ? static_cast<uint8_t>(reduce->kind) : kNoReduce;
  sig.layout = layout;
  return sig;
}

CallSignature p2p_signature(DType dtype, uint64_t count) {
  return collective_signature(CallKind::kPointToPoint, dtype, count);
}

uint64_t layout_of(const std::vector<size_t>& sizes) {
  // Once per uneven call, over its sizes: a byte loop is cheap enough.
  uint64_t hash = fnv1a(sizes.data(), sizes.size() * sizeof(size_t));
  return hash == 0 ? 1 : hash;
}

CallStamp stamp_call(const CallSignature& sig, uint64_t history) {
  // Every call pays this (2 ranks, 8 B all_reduce: 0.17 us in all), so a
  // few independent multiplies, not a hash loop or a finalizer (one took
  // 15 ns a call): odd multipliers keep each word's differences, the fold
  // brings the high half's down, and the count is added, not hashed, so that
  // counts that differ always show. The history is folded the same way.
  uint64_t w[4];
  static_assert(sizeof(w) == sizeof(sig));
  std::memcpy(w, &sig, sizeof(w));  // seq, count, layout, kind..root
  const uint64_t h =
      w[0] * 0x9e3779b97f4a7c15ULL + w[2] * 0xc2b2ae3d27d4eb4fULL + w[3] * 0x165667b19e3779f9ULL;
  const uint64_t mixed = h ^ history;
  auto stamp = static_cast<uint32_t>((mixed ^ (mixed >> 32)) + sig.count);
  if (stamp == 0) stamp = 1;
  return CallStamp{stamp, (history ^ h ^ sig.count) * 0xff51afd7ed558ccdULL + 0x27d4eb2f165667c5ULL};
}

std::string describe(const CallSignature& sig) {
  std::string text = call_kind_name(sig.kind);
  if (sig.kind == CallKind::kBarrier) return text;
  if (has_count(sig.kind)) {
    text += " of " + elements(sig.count, sig.dtype) + (sig.layout != 0 ? " in all" : "");
  } else {
    text += std::string(" of ") + dtype_name(static_cast<DType>(sig.dtype));
  }
  if (sig.reduce != kNoReduce) text += " (" + reduce_text(sig.reduce) + ")";
  if (sig.root >= 0) {
    const bool to = sig.kind == CallKind::kReduce || sig.kind == CallKind::kGather;
    text += std::string(to ? " to " : " from ") + root_name(sig.kind) + " " + std::to_string(sig.root);
  }
  return text;
}

std::string mismatch_message(std::string_view op, const CallSignature& mine, int my_rank,
                             const CallSignature& theirs, int their_rank) {
  // Lower rank first, so that every rank of the call prints the same text.
  const bool mine_first = my_rank < their_rank;
  const CallSignature& a = mine_first ? mine : theirs;
  const CallSignature& b = mine_first ? theirs : mine;
  const std::string ra = "rank " + std::to_string(mine_first ? my_rank : their_rank);
  const std::string rb = "rank " + std::to_string(mine_first ? their_rank : my_rank);
  std::string what;
  if (a.kind == CallKind::kPointToPoint && b.kind == CallKind::kPointToPoint) {
    // op names the receive; the sender is `theirs`.
    return std::string(op) + ": rank " + std::to_string(their_rank) + " sent " +
           elements(theirs.count, theirs.dtype) + " but rank " + std::to_string(my_rank) + " receives " +
           elements(mine.count, mine.dtype) +
           " (send and recv must pass the same dtype and number of elements)";
  }
  if (a.kind != b.kind) {
    what = ra + " called " + describe(a) + ", " + rb + " called " + describe(b);
  } else {
    std::vector<std::string> parts;
    if (a.count != b.count || a.dtype != b.dtype) {
      if (has_count(a.kind)) {
        const char* all = a.layout != 0 ? " in all" : "";
        parts.push_back(ra + " passed " + elements(a.count, a.dtype) + all + ", " + rb + " passed " +
                        elements(b.count, b.dtype) + all);
      } else {
        parts.push_back(ra + " passed " + dtype_name(static_cast<DType>(a.dtype)) + ", " + rb + " passed " +
                        dtype_name(static_cast<DType>(b.dtype)));
      }
    }
    if (a.root != b.root) {
      parts.push_back(ra + " passed " + root_name(a.kind) + " " + std::to_string(a.root) + ", " + rb +
                      " passed " + root_name(b.kind) + " " + std::to_string(b.root));
    }
    if (a.reduce != b.reduce) {
      parts.push_back(ra + " passed op " + reduce_text(a.reduce) + ", " + rb + " passed op " +
                      reduce_text(b.reduce));
    }
    if (a.layout != b.layout && a.count == b.count) {
      parts.push_back(ra + " and " + rb + " passed different " + layout_name(a.kind));
    }
    for (const auto& part : parts) what += (what.empty() ? "" : "; ") + part;
    if (what.empty()) what = ra + " and " + rb + " passed different arguments";
  }
  return calls_differ_message(op, mine.seq, what);
}

std::string calls_differ_message(std::string_view op, uint64_t seq, const std::string& what) {
  return std::string(op) + " (call #" + std::to_string(seq) + " in this group): " + what +
         " (every rank must make the same calls in the same order, with matching arguments)";
}

std::string earlier_mismatch_message(std::string_view op, uint64_t seq, const CallSignature& mine,
                                     int my_rank, const CallSignature& theirs, int their_rank) {
  return std::string(op) + " (call #" + std::to_string(seq) + " in this group): an earlier call differed: " +
         mismatch_message(call_kind_name(mine.kind), mine, my_rank, theirs, their_rank);
}

}  // namespace tdist::detail
