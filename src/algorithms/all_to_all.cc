// All-to-all with blocks of any size: linear (every transfer posted at once)
// for small blocks, pairwise exchange for large ones (Thakur, Rabenseifner &
// Gropp 2005, section 4.6).
//
// Both send every block, even an empty one, as one message under the same
// tag, so ranks that chose differently (their totals differ) still match,
// and a size that disagrees between sender and receiver is reported rather
// than hanging.

#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/patterns/pairwise.h"
#include "algorithms/tuning/tcp_model.h"
#include "tdist/errors.h"

namespace tdist::algorithms {
namespace {

// Pairwise steps in flight: each step is a permutation, so overlapping a few
// hides one step's latency behind the next without flooding any receiver.
constexpr int kPairwiseWindow = 2;

struct Blocks {
  const uint8_t* in;
  const std::vector<size_t>& send_bytes;
  const std::vector<size_t>& send_offsets;
  uint8_t* out;
  const std::vector<size_t>& recv_bytes;
  const std::vector<size_t>& recv_offsets;
};

RequestPtr post_send_to(const CallContext& ctx, const Blocks& b, int dst) {
  const auto d = static_cast<size_t>(dst);
  return ctx.isend(dst, ctx.tag(0), b.in + b.send_offsets[d], b.send_bytes[d]);
}

RequestPtr post_recv_from(const CallContext& ctx, const Blocks& b, int src) {
  const auto s = static_cast<size_t>(src);
  return ctx.irecv(src, ctx.tag(0), b.out + b.recv_offsets[s], b.recv_bytes[s]);
}

void check_received(const CallContext& ctx, const Blocks& b, const RequestPtr& recv) {
  const size_t expected = b.recv_bytes[static_cast<size_t>(recv->peer())];
  if (recv->received_bytes() != expected) {
    throw DistBackendError(std::string(ctx.op) + ": rank " + std::to_string(ctx.rank()) + " expected " +
                           std::to_string(expected) + " bytes from rank " + std::to_string(recv->peer()) +
                           " but it sent " + std::to_string(recv->received_bytes()) +
                           " (do the ranks' split sizes agree?)");
  }
}

void linear(const CallContext& ctx, const Blocks& b) {
  const int p = ctx.size();
  const int rank = ctx.rank();
  std::vector<RequestPtr> recvs;
  std::vector<RequestPtr> sends;
  for (int i = 1; i < p; ++i) recvs.push_back(post_recv_from(ctx, b, (rank - i + p) % p));
  // Everyone starts with its right neighbour, so no rank is hit by all at once.
  for (int i = 1; i < p; ++i) sends.push_back(post_send_to(ctx, b, (rank + i) % p));
  wait_all(ctx, recvs);
  for (const RequestPtr& recv : recvs) check_received(ctx, b, recv);
  wait_all(ctx, sends);
}

void pairwise(const CallContext& ctx, const Blocks& b) {
  const int p = ctx.size();
  const int rank = ctx.rank();
  const int num_steps = patterns::pairwise_num_steps(p);
  std::vector<RequestPtr> recvs(static_cast<size_t>(num_steps));
  std::vector<RequestPtr> sends(static_cast<size_t>(num_steps));
  int posted = 0;
  for (int s = 0; s < num_steps; ++s) {
    for (; posted < std::min(s + kPairwiseWindow, num_steps); ++posted) {
      const patterns::Step step = patterns::pairwise_step(rank, p, posted);
      recvs[static_cast<size_t>(posted)] = post_recv_from(ctx, b, step.recv_from);
      sends[static_cast<size_t>(posted)] = post_send_to(ctx, b, step.send_to);
    }
    // The receive first: a size error is the cause, and a peer that went
    // on and left can fail the send meanwhile.
    detail::wait_one(ctx, recvs[static_cast<size_t>(s)]);
    check_received(ctx, b, recvs[static_cast<size_t>(s)]);
    detail::wait_one(ctx, sends[static_cast<size_t>(s)]);
  }
}

}  // namespace

void detail::check_own_block(const CallContext& ctx, const std::vector<size_t>& send_bytes,
                             const std::vector<size_t>& recv_bytes) {
  const auto me = static_cast<size_t>(ctx.rank());
  if (send_bytes.at(me) != recv_bytes.at(me)) {
    throw DistInvalidArgument(std::string(ctx.op) + ": rank " + std::to_string(ctx.rank()) +
                              " sends itself " + std::to_string(send_bytes[me]) + " bytes but expects " +
                              std::to_string(recv_bytes[me]));
  }
}

void all_to_all(const CallContext& ctx, const void* in, const std::vector<size_t>& send_bytes,
                const std::vector<size_t>& send_offsets, void* out, const std::vector<size_t>& recv_bytes,
                const std::vector<size_t>& recv_offsets, AllToAllAlgo algo) {
  const int p = ctx.size();
  const auto n = static_cast<size_t>(p);
  if (send_bytes.size() != n || send_offsets.size() != n || recv_bytes.size() != n ||
      recv_offsets.size() != n) {
    throw DistInvalidArgument(std::string(ctx.op) + ": expected " + std::to_string(p) +
                              " sizes and offsets for sending and receiving");
  }
  detail::check_own_block(ctx, send_bytes, recv_bytes);
  const auto me = static_cast<size_t>(ctx.rank());
  size_t total = 0;
  for (size_t b : send_bytes) total += b;
  algo = resolve_algo(algo, total, p);
  const Blocks blocks{static_cast<const uint8_t*>(in), send_bytes, send_offsets,
                      static_cast<uint8_t*>(out),      recv_bytes, recv_offsets};
  if (send_bytes[me] > 0) {
    std::memcpy(blocks.out + recv_offsets[me], blocks.in + send_offsets[me], send_bytes[me]);
  }
  if (p == 1) return;
  detail::guarded(ctx, [&] {
    if (algo == AllToAllAlgo::kPairwise) {
      pairwise(ctx, blocks);
    } else {
      linear(ctx, blocks);
    }
  });
}

}  // namespace tdist::algorithms
