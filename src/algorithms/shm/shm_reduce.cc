// The reducing collectives on shared memory (DeepSpeed's and vLLM's CPU
// all-reduce; see docs/design.md):
//  - payload: up to kPayloadBytes ride in the flag line; every rank reduces
//    all of them in rank order (one cache-line transfer per peer);
//  - one-shot: every rank copies its data into its buffer, then every rank
//    reduces all buffers in rank order; for small messages, where the second
//    synchronisation of two-shot would cost more than the extra reading;
//  - two-shot: each round covers one buffer of the message, cut into p
//    pieces; rank j reduces piece j of every rank (its own straight from its
//    data), publishes the result in its buffer, and everyone copies the
//    pieces back (a reduce-scatter then an all-gather). reduce and
//    reduce_scatter are its first half plus a copy to where the result goes.
// PREMUL_SUM's factor is applied by each rank to its own contribution on the
// way in (two-shot: to the pieces it copies in, and to its own piece when
// it reduces it); AVG divides once, by the owner of each piece.

#include <cstring>
#include <numeric>
#include <vector>

#include "algorithms/shm/shm_collectives.h"
#include "algorithms/shm/shm_common.h"
#include "common/reduce_kernels.h"
#include "common/stream_copy.h"

namespace tdist::algorithms::shm {
namespace {

using namespace detail;  // NOLINT(google-build-using-namespace): this file's own building blocks
using algorithms::detail::make_scratch;

// Copies `bytes` of a contribution into shared memory, premultiplied for
// PREMUL_SUM; with streaming stores if `streaming` (Handoff, shm_handoff.h;
// a premultiplied one always goes through the cache).
void contribute(void* dst, const void* src, size_t count, DType dtype, const ReduceOp& op,
                bool streaming = false) {
  if (op.kind == ReduceOp::PREMUL_SUM) {
    premultiply_into(dst, src, count, dtype, op);
  } else if (count > 0 && streaming) {
    tdist::detail::stream_copy(dst, src, count * element_size(dtype));
  } else if (count > 0) {
    std::memcpy(dst, src, count * element_size(dtype));
  }
}

// Payload and one-shot: every rank's whole contribution is in shared memory
// (the flag payload or buffer k); reduce all of them in rank order into dst.
// Only `root` (or everyone, root < 0) reduces.
void reduce_everything(Call& call, void* data, size_t count, DType dtype, const ReduceOp& op, int root) {
  const size_t nbytes = count * element_size(dtype);
  const bool payload = shm_round_in_flag_line(nbytes);
  uint64_t k = call.begin_round();
  void* mine = payload ? static_cast<void*>(call.group.arrive(call.rank(), k).payload)
                       : static_cast<void*>(call.group.buffer(call.rank(), k));
  contribute(mine, data, count, dtype, op);
  call.group.publish_arrive(k);
  if (root >= 0 && root != call.rank()) return;
  Sources srcs(call.size());
  for (int r = 0; r < call.size(); ++r) {
    if (r != call.rank()) call.wait_arrive(r, k);
    srcs[static_cast<size_t>(r)] = payload ? static_cast<const void*>(call.group.arrive(r, k).payload)
                                           : static_cast<const void*>(call.group.buffer(r, k));
  }
  reduce_sources(data, srcs.data(), call.size(), count, dtype, op, call.size());
}

// A reduce of at most kPayloadBytes, eagerly (as a small broadcast, see
// shm_move.cc): every rank writes its contribution into its slot of the
// eager ring and only the root waits, for all of them, so the other ranks
// run on. Open MPI's reduce runs ahead the same way; with rounds every
// rank waited for every other (docs/tuning.md has the figures).
void eager_reduce(Call& call, void* data, size_t count, DType dtype, const ReduceOp& op, int root) {
  const uint64_t n = call.begin_eager();
  FlagLine& mine = call.group.eager_slot(call.rank(), n);
  contribute(mine.payload, data, count, dtype, op);
  call.group.publish_stamped(mine, n + 1);
  if (call.rank() == root) {
    Sources srcs(call.size());
    for (int r = 0; r < call.size(); ++r) {
      FlagLine& theirs = call.group.eager_slot(r, n);
      if (r != call.rank()) call.wait(theirs, n + 1, r, "its contribution", Call::Counts::kEagerOps);
      srcs[static_cast<size_t>(r)] = theirs.payload;
    }
    reduce_sources(data, srcs.data(), call.size(), count, dtype, op, call.size());
  }
  call.end_eager(n);
}

// Two-shot, with one meeting per round instead of two: a rank's arrive(k)
// says that it copied round k in, reduced its piece of round k - 1 and
// copied round k - 2 back, so the wait that opens round k + 1
// (begin_round) is the one every step needs. The step that opens round k
// copies round k - 2 back, reduces round k - 1, then copies round k in;
// the last round ends with the `reduced` meeting. Buffers alternate
// (k % 2): a rank copies round k into its buffer only after every rank
// published arrive(k - 1), that is, reduced round k - 2, the previous user
// of those slots (peers may still copy round k - 2's result out of the
// rank's own slot, which the copy-in never touches: see `slot`), and
// writes its result of round k - 1 at the same time, after every rank
// copied round k - 3 back, the previous user of that slot. Inside the call
// arrive(k) thus promises less than ShmGroup's rule (finished round k - 1).
// The end of the call makes up for it: nobody reads the buffers of the
// round before last once a rank returns (ranks that keep the result wait
// for every rank's `reduced`, a reduce's other ranks for the root's, the
// only rank that copies back), so the next call's rounds are safe. One
// meeting a round instead of two saved about 6% at 4 ranks on 2 cores.
// `root` < 0: every rank keeps the result (all_reduce); else only the
// root copies it back (reduce).
struct TwoShotRound {
  uint64_t k = 0;
  uint8_t* data = nullptr;  // this round's part of the caller's tensor
  size_t count = 0;
  size_t section = 0;  // elements per piece
};

void reduce_two_shot(Call& call, uint8_t* data, size_t count, DType dtype, const ReduceOp& op, int root) {
  const size_t eb = element_size(dtype);
  const int p = call.size();
  const int me = call.rank();
  const bool keep = root < 0 || root == me;
  const bool premul = op.kind == ReduceOp::PREMUL_SUM;
  size_t full_section = section_bytes(call.group, p, eb) / eb;  // elements per piece
  if (call.group.oversubscribed()) {
    full_section = two_shot_section(kOversubscribedRoundBytes / eb, p, eb, full_section);
  }
  const size_t chunk = full_section * static_cast<size_t>(p);  // elements per round
  Sources srcs(p);
  // Piece j sits at the same place in a buffer in every round, however
  // long the round: a rank copies a round's pieces in while its peers may
  // still copy the result of the round before last out of its own piece.
  auto slot = [&](int r, uint64_t k, int j) {
    return call.group.buffer(r, k) + static_cast<size_t>(j) * full_section * eb;
  };
  // Our piece of every rank's round, reduced into our buffer (for the
  // others) and, tile by tile while in L1, into our data if we keep it.
  // A round not yet begun (round.data null) has nothing to do.
  auto reduce_piece = [&](const TwoShotRound& round) {
    if (round.data == nullptr) return;
    const Piece own = piece_of(round.count, round.section, static_cast<size_t>(me));
    uint8_t* result = slot(me, round.k, me);
    for (int r = 0; r < p; ++r) {
      srcs[static_cast<size_t>(r)] = r == me ? round.data + own.begin * eb : slot(r, round.k, me);
    }
    if (premul) {
      // Our own contribution is premultiplied where the result goes (the
      // reduction supports a result that is one of its sources).
      contribute(result, round.data + own.begin * eb, own.length, dtype, op);
      srcs[static_cast<size_t>(me)] = result;
    }
    reduce_sources(result, srcs.data(), p, own.length, dtype, op, p,
                   keep ? round.data + own.begin * eb : nullptr);
  };
  auto copy_back = [&](const TwoShotRound& round) {
    if (!keep || round.data == nullptr) return;
    for (int i = 1; i < p; ++i) {
      const int r = (me + i) % p;  // start at different owners so ranks do not all read one line
      const Piece piece = piece_of(round.count, round.section, static_cast<size_t>(r));
      if (piece.length > 0) {
        std::memcpy(round.data + piece.begin * eb, slot(r, round.k, r), piece.length * eb);
      }
    }
  };
  // Every rank reduces a piece of every other's round: all read all. A
  // premultiplied contribution is computed, not copied: no probes.
  const Handoff handoff(call, -1, Handoff::Use::kReduce);
  auto reduce_timed = [&](const TwoShotRound& round) {
    if (round.data == nullptr) return;
    const size_t handed = piece_of(round.count, round.section, static_cast<size_t>(me)).length * eb *
                          static_cast<size_t>(p - 1);
    if (premul) return reduce_piece(round);
    handoff.read_with(round.k, handed, [&] { reduce_piece(round); });
  };
  TwoShotRound to_reduce;     // copied in by every rank, not yet reduced
  TwoShotRound to_copy_back;  // reduced by every rank, not yet copied back
  for (size_t start = 0; start < count; start += chunk) {
    TwoShotRound round;
    round.count = std::min(chunk, count - start);
    round.section = two_shot_section(round.count, p, eb, full_section);
    round.data = data + start * eb;
    round.k = call.begin_round();  // every rank copied in to_reduce and reduced to_copy_back
    // Their arrivals of the round before were of this call: check them
    // before reading what they copied in.
    if (to_reduce.data != nullptr) {
      for (int r = 0; r < p; ++r) {
        if (r != me) call.verify(r, call.group.arrive(r, round.k - 1));
      }
    }
    copy_back(to_copy_back);
    reduce_timed(to_reduce);
    // Copy in every piece but our own, which reduce_piece takes from `data`.
    auto copy_in = [&](bool streaming) {
      for (int j = 0; j < p; ++j) {
        if (j == me) continue;
        const Piece piece = piece_of(round.count, round.section, static_cast<size_t>(j));
        contribute(slot(me, round.k, j), round.data + piece.begin * eb, piece.length, dtype, op, streaming);
      }
    };
    if (premul) {
      copy_in(false);
    } else {
      handoff.fill_with(
          round.k, (round.count - piece_of(round.count, round.section, static_cast<size_t>(me)).length) * eb,
          copy_in);
    }
    call.group.publish_arrive(round.k);
    to_copy_back = to_reduce;
    to_reduce = round;
  }
  // The last round: every rank copied it in and reduced the one before.
  for (int r = 0; r < p; ++r) {
    if (r != me) call.wait_arrive(r, to_reduce.k);
  }
  const bool two_in_flight = to_copy_back.data != nullptr;
  copy_back(to_copy_back);
  reduce_timed(to_reduce);
  call.group.publish_reduced(to_reduce.k);
  if (!keep) {
    // The next call's first round reuses the buffers of our round before
    // last, which the root may still be copying back: its reduced line
    // says when it is done (the ranks that keep the result wait for every
    // rank's below, which says the same).
    if (two_in_flight) call.wait_reduced(root, to_reduce.k);
    return;
  }
  for (int r = 0; r < p; ++r) {
    if (r != me) call.wait_reduced(r, to_reduce.k);
  }
  copy_back(to_reduce);
}

// Single copy, with a core per rank: the owner of piece j reads piece j of
// every peer's tensor straight from its memory (process_vm_readv) tile by
// tile, reduces it with its own in rank order, and writes the result into
// every peer's tensor (process_vm_writev; for reduce only into the root's).
// Every byte of every tensor is read once and written once, no shared
// buffer is touched, and the ranks meet twice per call instead of twice per
// round. Past the caches two-shot wins again: its copies back stream past
// them where the kernel's copy cannot (the window ends at 32 MiB,
// algorithms/tuning/single_copy_windows.cc). Not for PREMUL_SUM,
// whose factor would have to be applied to the peers' contributions and to
// our own tensor.
void single_copy_reduce(Call& call, uint8_t* data, size_t count, DType dtype, const ReduceOp& op, int root) {
  const size_t eb = element_size(dtype);
  const int p = call.size();
  const int me = call.rank();
  const Piece own = piece_of(count, single_copy_piece(count, p, eb), static_cast<size_t>(me));
  const bool keep = root < 0 || root == me;
  const uint64_t k = call.begin_round();
  call.publish_address(k, data);
  call.group.publish_arrive(k);
  std::vector<uint8_t*> peers(static_cast<size_t>(p), nullptr);
  for (int r = 0; r < p; ++r) {
    if (r == me) continue;
    call.wait_arrive(r, k);
    peers[static_cast<size_t>(r)] = static_cast<uint8_t*>(const_cast<void*>(call.address_of(r, k)));
  }
  if (own.length > 0) {
    // A tile of every peer's piece (and of the result, if it is not ours to
    // keep) stays in L2 between reading, reducing and writing.
    const size_t tile = single_copy_tile_bytes(p) / eb;
    auto scratch = make_scratch(tile * eb * static_cast<size_t>(keep ? p - 1 : p));
    Sources srcs(p);
    for (size_t b = 0; b < own.length; b += tile) {
      const size_t len = std::min(tile, own.length - b);
      const size_t off = (own.begin + b) * eb;
      uint8_t* next = scratch.get();
      for (int r = 0; r < p; ++r) {
        if (r == me) {
          srcs[static_cast<size_t>(r)] = data + off;
          continue;
        }
        call.read_from(r, next, peers[static_cast<size_t>(r)] + off, len * eb);
        srcs[static_cast<size_t>(r)] = next;
        next += tile * eb;
      }
      uint8_t* result = keep ? data + off : next;
      reduce_sources(result, srcs.data(), p, len, dtype, op, p);
      for (int r = 0; r < p; ++r) {
        if (r != me && (root < 0 || r == root))
          call.write_to(r, peers[static_cast<size_t>(r)] + off, result, len * eb);
      }
    }
  }
  // Every peer must be done reading our tensor and writing into it.
  call.group.publish_reduced(k);
  for (int r = 0; r < p; ++r) {
    if (r != me) call.wait_copied(r, k);
  }
}

void reduce_impl(Call& call, void* data, size_t count, DType dtype, const ReduceOp& op, int root) {
  const size_t nbytes = count * element_size(dtype);
  if (count == 0) return;
  if (call.size() == 1) {
    reduce_sources(data, &data, 1, count, dtype, op, 1);
    if (op.kind == ReduceOp::PREMUL_SUM) premultiply(data, count, dtype, op);
    return;
  }
  // The choice (algorithms/tuning/tuning.h) is named for the flight recorder.
  const ShmAlgo algo = choose_shm_reduce(nbytes, root >= 0, op.kind == ReduceOp::PREMUL_SUM, call.facts());
  note_chosen_algorithm(shm_algo_name(algo));
  switch (algo) {
    case ShmAlgo::kEager:
      return eager_reduce(call, data, count, dtype, op, root);
    case ShmAlgo::kOneShot:
      return reduce_everything(call, data, count, dtype, op, root);
    case ShmAlgo::kSingleCopy:
      return single_copy_reduce(call, static_cast<uint8_t*>(data), count, dtype, op, root);
    default:
      return reduce_two_shot(call, static_cast<uint8_t*>(data), count, dtype, op, root);
  }
}

}  // namespace

void all_reduce(const CallContext& ctx, ShmGroup& group, void* data, size_t count, DType dtype,
                const ReduceOp& op) {
  run_guarded(ctx, group, [&](Call call) { reduce_impl(call, data, count, dtype, op, -1); });
}

void reduce(const CallContext& ctx, ShmGroup& group, void* data, size_t count, DType dtype,
            const ReduceOp& op, int root) {
  run_guarded(ctx, group, [&](Call call) { reduce_impl(call, data, count, dtype, op, root); });
}

namespace {

// Where each block of a reduce_scatter's input lies: one after another in
// one input (on one host), or, for the hierarchy, in segments per block.
class BlockSource {
 public:
  BlockSource(const void* input, const std::vector<size_t>& counts, DType dtype)
      : input_(static_cast<const uint8_t*>(input)), offsets_(counts.size(), 0), eb_(element_size(dtype)) {
    for (size_t r = 1; r < counts.size(); ++r) offsets_[r] = offsets_[r - 1] + counts[r - 1];
  }
  BlockSource(const std::vector<std::vector<InputSegment>>& blocks, DType dtype)
      : segments_(&blocks), eb_(element_size(dtype)) {}

  // Block j's first element if the block lies in one piece, else null.
  const uint8_t* in_one_piece(size_t j) const {
    if (segments_ == nullptr) return input_ + offsets_[j] * eb_;
    const auto& block = (*segments_)[j];
    return block.size() == 1 ? static_cast<const uint8_t*>(block[0].data) : nullptr;
  }

  // Copies elements [begin, begin + length) of block j into `dst`
  // (contribute(): premultiplied for PREMUL_SUM).
  void contribute_range(uint8_t* dst, size_t j, size_t begin, size_t length, DType dtype, const ReduceOp& op,
                        bool streaming) const {
    if (segments_ == nullptr) {
      contribute(dst, input_ + (offsets_[j] + begin) * eb_, length, dtype, op, streaming);
      return;
    }
    for_each_piece((*segments_)[j], [](const InputSegment& s) { return s.count; }, begin, length,
                   [&](const InputSegment& s, size_t offset, size_t from, size_t n) {
                     contribute(dst + from * eb_, static_cast<const uint8_t*>(s.data) + offset * eb_, n,
                                dtype, op, streaming);
                   });
  }

 private:
  const uint8_t* input_ = nullptr;
  std::vector<size_t> offsets_;
  const std::vector<std::vector<InputSegment>>* segments_ = nullptr;
  size_t eb_;
};

void reduce_scatter_impl(const CallContext& ctx, ShmGroup& group, const BlockSource& blocks, void* out,
                         const std::vector<size_t>& counts, DType dtype, const ReduceOp& op);

}  // namespace

void reduce_scatter(const CallContext& ctx, ShmGroup& group, const void* in, void* out,
                    const std::vector<size_t>& counts, DType dtype, const ReduceOp& op) {
  reduce_scatter_impl(ctx, group, BlockSource(in, counts, dtype), out, counts, dtype, op);
}

void reduce_scatter_segments(const CallContext& ctx, ShmGroup& group,
                             const std::vector<std::vector<InputSegment>>& blocks, void* out,
                             const std::vector<size_t>& counts, DType dtype, const ReduceOp& op) {
  reduce_scatter_impl(ctx, group, BlockSource(blocks, dtype), out, counts, dtype, op);
}

namespace {

void reduce_scatter_impl(const CallContext& ctx, ShmGroup& group, const BlockSource& blocks, void* out,
                         const std::vector<size_t>& counts, DType dtype, const ReduceOp& op) {
  run_guarded(ctx, group, [&](Call call) {
    const size_t eb = element_size(dtype);
    const int p = call.size();
    const int me = call.rank();
    const bool premul = op.kind == ReduceOp::PREMUL_SUM;
    auto* output = static_cast<uint8_t*>(out);
    if (p == 1) {
      if (counts[0] > 0)
        blocks.contribute_range(output, 0, 0, counts[0], dtype, ReduceOp(ReduceOp::SUM), false);
      if (premul) premultiply(output, counts[0], dtype, op);
      return;
    }
    size_t largest = 0;
    for (size_t c : counts) largest = std::max(largest, c);
    if (largest == 0) return;
    note_chosen_algorithm(shm_algo_name(ShmAlgo::kRounds));
    // This rank's own block is read in place when it lies in one piece of
    // memory; otherwise it is copied in like the others'.
    const uint8_t* own_block = premul ? nullptr : blocks.in_one_piece(static_cast<size_t>(me));
    // Each round carries `section` elements of every block; rank j reduces
    // block j's section of every rank into its output. When every block
    // fits, the sections ride in the flag line: one cache line per peer.
    const bool payload = shm_round_in_flag_line(static_cast<size_t>(p) * largest * eb);
    const size_t section = payload ? largest : section_bytes(call.group, p, eb) / eb;
    const size_t rounds = ceil_div(largest, section);
    Sources srcs(p);
    auto area = [&](int r, uint64_t k) -> uint8_t* {
      return payload ? call.group.arrive(r, k).payload : call.group.buffer(r, k);
    };
    // Chunks in the buffers (not the flag lines), copied rather than
    // premultiplied, are handed over with the stores measured best.
    const bool measured = !payload && !premul;
    const Handoff handoff(call, -1, Handoff::Use::kReduce);
    for (size_t i = 0; i < rounds; ++i) {
      uint64_t k = call.begin_round();
      uint8_t* mine = area(me, k);
      size_t handed = 0;  // bytes of this round copied in for the others
      for (int j = 0; j < p; ++j) {
        if (j != me) handed += piece_of(counts[static_cast<size_t>(j)], section, i).length * eb;
      }
      auto copy_in = [&](bool streaming) {
        for (int j = 0; j < p; ++j) {
          if (j == me && own_block != nullptr) continue;
          Piece piece = piece_of(counts[static_cast<size_t>(j)], section, i);
          blocks.contribute_range(mine + static_cast<size_t>(j) * section * eb, static_cast<size_t>(j),
                                  piece.begin, piece.length, dtype, op, streaming);
        }
      };
      if (measured) {
        handoff.fill_with(k, handed, copy_in);
      } else {
        copy_in(false);
      }
      call.group.publish_arrive(k);
      Piece own = piece_of(counts[static_cast<size_t>(me)], section, i);
      for (int r = 0; r < p; ++r) {
        if (r != me) call.wait_arrive(r, k);
        srcs[static_cast<size_t>(r)] = (r == me && own_block != nullptr)
                                           ? own_block + own.begin * eb
                                           : area(r, k) + static_cast<size_t>(me) * section * eb;
      }
      if (own.length == 0) continue;
      auto reduce_own = [&] {
        reduce_sources(output + own.begin * eb, srcs.data(), p, own.length, dtype, op, p);
      };
      if (measured) {
        handoff.read_with(k, own.length * eb * static_cast<size_t>(p - 1), reduce_own);
      } else {
        reduce_own();
      }
    }
  });
}

}  // namespace

}  // namespace tdist::algorithms::shm
