// Waiting for requests with the call's deadline, and the pipelined reducing
// exchange that every reducing algorithm is built from.

#include <algorithm>
#include <cstring>
#include <set>
#include <string>

#include "algorithms/algorithms.h"
#include "algorithms/patterns/chunking.h"
#include "common/error_text.h"
#include "common/reduce_kernels.h"
#include "tdist/errors.h"

namespace tdist::algorithms {
namespace {

using patterns::kNoPeer;

// While waiting on one request, how often the others are checked for an
// error: a failed send to a dead peer must not wait behind a receive from a
// live one until the deadline. Completions still wake the waiter at once.
constexpr auto kErrorPollInterval = std::chrono::milliseconds(50);

// The peers of the requests still pending (kAnySource for an any-source receive).
std::vector<int> pending_peers(const std::vector<RequestPtr>& requests) {
  std::set<int> peers;
  for (const auto& request : requests) {
    if (request && !request->done()) peers.insert(request->peer());
  }
  return {peers.begin(), peers.end()};
}

std::string ranks_text(const std::vector<int>& ranks) {
  if (std::find(ranks.begin(), ranks.end(), transport::kAnySource) != ranks.end()) return "any rank";
  std::string who = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) who += (i > 0 ? ", " : "") + std::to_string(ranks[i]);
  return who;
}

// Whether group rank r said through the transport that it waits in this
// call, or sent this rank a message of it: either way it reached the call.
bool reached_by_transport(const CallContext& ctx, transport::Transport& group, int r) {
  const auto waiting = group.waiting_in(r);
  if (waiting && *waiting >= ctx.seq) return true;
  const auto last = group.last_call_from(r);
  return last && last->seq >= ctx.seq;
}

// This rank's number in the group: `my_rank` when the caller knows it, else
// the group transport's (a crossing's own transport numbers a subset).
int caller_rank(const CallContext& ctx, int my_rank) {
  return my_rank >= 0 ? my_rank : ctx.transport.whole().rank();
}

// The group ranks that never said they reached the call (see timeout_text).
// A crossing of the hierarchy runs on a subset of the group's ranks, but
// the rank it waits for may be blocked behind one outside the subset: the
// question is asked of the whole group.
std::vector<int> missing_ranks(const CallContext& ctx, bool transport_knows) {
  if (ctx.notes == nullptr) return {};
  transport::Transport& group = ctx.transport.whole();
  const bool told = transport_knows && group.tells_waiting();
  std::optional<std::vector<int>> missing = ctx.notes->missing(ctx.seq, Clock::now() + kLateNotes);
  // After the store, which may take half a second not to answer: the
  // notices that came meanwhile count too.
  if (told) group.take_in();
  if (!missing) {
    if (!told) return {};
    // The store does not answer (its host may be the rank that stopped):
    // the transport alone tells.
    missing.emplace();
    for (int r = 0; r < group.size(); ++r) {
      if (r != group.rank()) missing->push_back(r);
    }
  }
  if (told) std::erase_if(*missing, [&](int r) { return reached_by_transport(ctx, group, r); });
  return *missing;
}

}  // namespace

namespace detail {

std::string timeout_text(const CallContext& ctx, const std::vector<int>& waited, const std::string& details,
                         bool transport_knows) {
  const std::string head =
      ctx.label() + ": Timed out after " + std::to_string(ctx.timeout.count()) + " ms waiting for ";
  const std::vector<int> missing = missing_ranks(ctx, transport_knows);
  if (missing.empty()) return head + ranks_text(waited) + details;
  const std::string tail = "; " + ranks_text(missing) +
                           (missing.size() == 1 ? " never said it" : " never said they") +
                           " reached this call (behind, stopped or dead)";
  const bool all_missing = std::all_of(waited.begin(), waited.end(), [&](int r) {
    return std::find(missing.begin(), missing.end(), r) != missing.end();
  });
  // A rank waited for that reached the call waits in turn: it is not the
  // one to name.
  if (!all_missing) return head + ranks_text(missing) + tail;
  return head + ranks_text(waited) + details + tail;
}

void throw_if_unmatched(const CallContext& ctx, int my_rank) {
  if (ctx.sig.empty()) return;
  const int me = caller_rank(ctx, my_rank);
  const auto conflict = ctx.transport.conflicting_message(ctx.sig);
  if (!conflict) return;
  const auto& [peer, theirs] = *conflict;
  if (theirs.seq == ctx.sig.seq)
    throw DistBackendError(tdist::detail::mismatch_message(ctx.op, ctx.sig, me, theirs, peer));
  if (!ctx.previous.empty() && theirs.seq == ctx.previous.seq && !(theirs == ctx.previous)) {
    throw DistBackendError(
        tdist::detail::earlier_mismatch_message(ctx.op, ctx.sig.seq, ctx.previous, me, theirs, peer));
  }
  throw DistBackendError(tdist::detail::calls_differ_message(
      ctx.op, ctx.sig.seq,
      "rank " + std::to_string(peer) + " sent rank " + std::to_string(me) + " data of call #" +
          std::to_string(theirs.seq) + " (" + tdist::detail::describe(theirs) + ") that no call of rank " +
          std::to_string(me) + " received, so their calls differed"));
}

}  // namespace detail

void LongWait::poll(const CallContext& ctx, int my_rank) {
  if (ctx.notes == nullptr) return;
  const auto now = Clock::now();
  if (!noted) {
    const auto started = ctx.deadline - ctx.timeout;
    if (now - started < std::min<Clock::duration>(std::chrono::seconds(1), ctx.timeout / 2)) return;
    noted = true;
    tdist::detail::CallSignature sig = ctx.sig;
    sig.seq = ctx.seq;
    // The transport first: the store may take its whole budget to fail.
    ctx.transport.announce_waiting(sig);
    ctx.notes->arrived(sig, ctx.deadline);
  }
  if (now < next_compare) return;
  next_compare = now + std::chrono::milliseconds(200);
  if (!ctx.sig.empty()) {
    if (const auto other = ctx.notes->differing(ctx.sig, ctx.deadline)) {
      throw DistBackendError(tdist::detail::mismatch_message(ctx.op, ctx.sig, caller_rank(ctx, my_rank),
                                                             other->second, other->first));
    }
  }
  if (const auto reason = ctx.notes->failure(ctx.deadline)) throw DistBackendError(*reason);
}

namespace detail {

void check_unmatched(const CallContext& ctx) {
  try {
    throw_if_unmatched(ctx);
  } catch (...) {
    abort_call(ctx, std::current_exception());
    throw;
  }
}

}  // namespace detail

void wait_all(const CallContext& ctx, const std::vector<RequestPtr>& requests) {
  try {
    size_t next = 0;
    LongWait long_wait;
    while (next < requests.size()) {
      const RequestPtr& request = requests[next];
      if (!request) {
        ++next;
        continue;
      }
      const auto until = std::min(ctx.deadline, Clock::now() + kErrorPollInterval);
      if (ctx.transport.wait(request, until)) {  // rethrows the request's error
        ++next;
        continue;
      }
      for (size_t i = next + 1; i < requests.size(); ++i) {
        if (requests[i] && requests[i]->done() && requests[i]->error()) {
          std::rethrow_exception(requests[i]->error());
        }
      }
      // A peer in another op (or with other arguments) at this call may
      // never send what we wait for; what it did send tells.
      detail::throw_if_unmatched(ctx);
      long_wait.poll(ctx, -1);
      // A request that finished just now (a peer's abort notice failing it)
      // goes round once more: its own error says more than a timeout.
      if (Clock::now() >= ctx.deadline) {
        // Name the peers before the last look: a peer's abort that fails
        // the requests now would otherwise leave none to name.
        std::string message = detail::timeout_text(ctx, pending_peers(requests), "", true);
        if (!request->done()) throw DistTimeoutError(message);
      }
    }
  } catch (...) {
    // The transport's error names the peer; the call's context names the op.
    std::exception_ptr error = with_context(std::current_exception(), ctx.label() + ": ");
    detail::abort_call(ctx, error);
    std::rethrow_exception(error);
  }
}

namespace detail {

void wait_one(const CallContext& ctx, const RequestPtr& request) {
  wait_all(ctx, std::vector<RequestPtr>{request});
}

void abort_call(const CallContext& ctx, std::exception_ptr error) noexcept {
  if (ctx.notes != nullptr) ctx.notes->failed(error);
  try {
    ctx.transport.abort(std::move(error));
  } catch (...) {
    // Aborting is best effort; the original error is what matters.
  }
}

void Combiner::combine(uint8_t* local, uint8_t* received, size_t count, bool received_first) const {
  // reduce_into keeps the operand order whatever aliases (dst == b still
  // computes a op b), so both orders reduce straight into `local`.
  if (received_first) {
    reduce_into(local, received, local, count, dtype, op);
  } else {
    reduce_into(local, local, received, count, dtype, op);
  }
}

void Combiner::finalize(uint8_t* data, size_t count) const {
  finalize_reduce(data, count, dtype, op, world_size);
}

void reduce_exchange(const CallContext& ctx, uint32_t step, int to, const uint8_t* send, size_t send_count,
                     int from, uint8_t* acc, size_t recv_count, bool received_first,
                     const Combiner& combiner) {
  const size_t seg = segment_elements(combiner.element_bytes);
  const size_t eb = combiner.element_bytes;
  const uint64_t tag = ctx.tag(step);
  const patterns::ElementRange send_range{0, send_count};
  const patterns::ElementRange recv_range{0, recv_count};
  const size_t num_sends = to == kNoPeer ? 0 : patterns::segment_count(send_count, seg);
  const size_t num_recvs = from == kNoPeer ? 0 : patterns::segment_count(recv_count, seg);
  // Recursive doubling sends the very range it reduces into.
  const bool same_range = num_sends > 0 && num_recvs > 0 && send == acc;

  std::vector<RequestPtr> sends(num_sends);
  std::vector<RequestPtr> recvs(num_recvs);
  // Slots only as large as the data, so small exchanges stay cheap.
  const size_t slot_bytes = std::min(seg, recv_count) * eb;
  const Scratch slots = make_scratch(std::min(num_recvs, kPipelineDepth) * slot_bytes);
  size_t sends_posted = 0;
  size_t recvs_posted = 0;
  auto post_sends = [&](size_t upto) {
    for (; sends_posted < std::min(upto, num_sends); ++sends_posted) {
      const auto s = patterns::segment_of(send_range, seg, sends_posted);
      sends[sends_posted] = ctx.isend(to, tag, send + s.offset * eb, s.length * eb);
    }
  };
  auto slot = [&](size_t k) { return slots.get() + (k % kPipelineDepth) * slot_bytes; };
  auto post_recvs = [&](size_t upto) {
    for (; recvs_posted < std::min(upto, num_recvs); ++recvs_posted) {
      const auto s = patterns::segment_of(recv_range, seg, recvs_posted);
      recvs[recvs_posted] = ctx.irecv(from, tag, slot(recvs_posted), s.length * eb);
    }
  };

  if (num_recvs == 0) post_sends(num_sends);
  for (size_t k = 0; k < num_recvs; ++k) {
    // Segment k - 1's slot is free again: post up to k + depth - 1, so the
    // next segments arrive while this one is reduced. Sends run as far ahead,
    // which keeps both directions of an exchange moving together.
    post_recvs(k + kPipelineDepth);
    post_sends(k + kPipelineDepth);
    wait_one(ctx, recvs[k]);
    if (same_range) wait_one(ctx, sends[k]);
    const auto s = patterns::segment_of(recv_range, seg, k);
    combiner.combine(acc + s.offset * eb, slot(k), s.length, received_first);
  }
  post_sends(num_sends);
  wait_all(ctx, sends);
}

Bounds balanced_bounds(size_t count, int parts) {
  Bounds bounds(static_cast<size_t>(parts) + 1);
  for (int i = 0; i <= parts; ++i) bounds[static_cast<size_t>(i)] = patterns::chunk_offset(count, parts, i);
  return bounds;
}

Bounds prefix_bounds(const std::vector<size_t>& sizes) {
  Bounds bounds(sizes.size() + 1, 0);
  for (size_t i = 0; i < sizes.size(); ++i) bounds[i + 1] = bounds[i] + sizes[i];
  return bounds;
}

}  // namespace detail
}  // namespace tdist::algorithms
