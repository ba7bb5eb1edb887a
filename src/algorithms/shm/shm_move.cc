// The collectives that only move bytes, on shared memory. Each round a
// writer copies at most one buffer into its own shared buffer (or, for at
// most kPayloadBytes, into its flag line) and publishes; readers copy from
// there straight into their outputs, so a slow reader only delays the
// writer two rounds later. Large broadcasts and gathers go through a ring
// of slots instead (SlotRing, shm_handoff.h), where a writer runs up to a
// ring ahead; blocks in single copy's windows move straight between the
// ranks' memories.
//
// One file of about 610 lines on purpose: broadcast, the gathers, scatter,
// all_to_all and barrier share the round, ring and single-copy helpers
// above them here (and their static thresholds); split, each part would
// need them in a header of their own.

#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/shm/shm_collectives.h"
#include "algorithms/shm/shm_common.h"
#include "common/stream_copy.h"
#include "tdist/errors.h"
#include "transport/shm/shm_single_copy.h"

namespace tdist::algorithms::shm {
namespace {

using namespace detail;  // NOLINT(google-build-using-namespace): this file's own building blocks
using transport::shm::kPayloadBytes;

void copy(void* dst, const void* src, size_t n) {
  if (n > 0 && dst != src) std::memcpy(dst, src, n);
}

size_t total(const std::vector<size_t>& bytes) {
  size_t sum = 0;
  for (size_t b : bytes) sum += b;
  return sum;
}

std::vector<size_t> offsets_of(const std::vector<size_t>& bytes) {
  std::vector<size_t> offsets(bytes.size(), 0);
  for (size_t i = 1; i < bytes.size(); ++i) offsets[i] = offsets[i - 1] + bytes[i - 1];
  return offsets;
}

size_t largest(const std::vector<size_t>& bytes) {
  size_t m = 0;
  for (size_t b : bytes) m = std::max(m, b);
  return m;
}

// all_to_all's first round: every rank's send sizes and offsets (where each
// block starts in its input, for single copy), then (when they fit) one
// section per destination for the blocks themselves.
struct OneRoundLayout {
  bool sizes_fit;      // the sizes and offsets fit in a buffer
  size_t data_offset;  // where the sections start: after them, on a cache line
  size_t section;      // bytes per destination; 0 when nothing fits
};
OneRoundLayout one_round_layout(const ShmGroup& group, int p) {
  const size_t sizes = 2 * static_cast<size_t>(p) * sizeof(uint64_t);
  const size_t data_offset = (sizes + 63) / 64 * 64;
  if (data_offset > group.buffer_bytes())
    return OneRoundLayout{sizes <= group.buffer_bytes(), data_offset, 0};
  const size_t room = group.buffer_bytes() - data_offset;
  return OneRoundLayout{true, data_offset, room / static_cast<size_t>(p) / 64 * 64};
}

// all_to_all's first round in the flag line alone, for tiny blocks: the
// largest block (8 bytes), a flag, the send sizes (a byte each), then one
// section per destination. Saves the peers a second cache line per call.
struct TinyLayout {
  static constexpr size_t kFlag = 8;
  static constexpr size_t kSizes = 9;
  // A rank that is not tiny puts its input's address here (single copy).
  static constexpr size_t kAddress = 16;
  size_t data_offset;  // on 8 bytes
  size_t section;      // bytes per destination; 0 when nothing fits
};
TinyLayout tiny_layout(int p) {
  const size_t data_offset = (TinyLayout::kSizes + static_cast<size_t>(p) + 7) / 8 * 8;
  const size_t section =
      data_offset < kPayloadBytes ? (kPayloadBytes - data_offset) / static_cast<size_t>(p) : 0;
  return TinyLayout{data_offset, std::min<size_t>(section, 255)};
}

// Where rank r's data of round k lives: its flag payload for tiny rounds.
uint8_t* slot(const Call& call, int r, uint64_t k, bool payload) {
  return payload ? call.group.arrive(r, k).payload : call.group.buffer(r, k);
}

// gather by single copy: every rank writes its block straight into the
// root's output (process_vm_writev), all at once, instead of the root
// reading the blocks one after the other while the others wait; the root
// returns once every block has landed.
void push_to_root(Call& call, const void* in, uint8_t* output, const std::vector<size_t>& bytes,
                  const std::vector<size_t>& offsets, int root) {
  const int me = call.rank();
  const uint64_t k = call.begin_round();
  if (me == root) {
    call.publish_address(k, output);
    call.group.publish_arrive(k);
    copy(output + offsets[static_cast<size_t>(me)], in, bytes[static_cast<size_t>(me)]);
    for (int r = 0; r < call.size(); ++r) {
      if (r != me && bytes[static_cast<size_t>(r)] > 0) call.wait_copied(r, k);
    }
    return;
  }
  call.group.publish_arrive(k);
  if (bytes[static_cast<size_t>(me)] > 0) {
    call.wait_arrive(root, k);
    auto* theirs = static_cast<uint8_t*>(const_cast<void*>(call.address_of(root, k)));
    call.write_to(root, theirs + offsets[static_cast<size_t>(me)], in, bytes[static_cast<size_t>(me)]);
  }
  call.group.publish_reduced(k);
}

// Where all_gather and gather put rank r's block: at offsets[r] in one
// output buffer, or (all_gather_segments) in pieces, each where it lies.
class BlockOutput {
 public:
  BlockOutput(uint8_t* output, const std::vector<size_t>& offsets) : output_(output), offsets_(&offsets) {}
  explicit BlockOutput(const std::vector<std::vector<OutputSegment>>& segments) : segments_(&segments) {}

  // The output buffer (nullptr for segments).
  uint8_t* buffer() const { return output_; }
  // Calls place(dst, from, n) for every piece of bytes [begin, begin +
  // length) of block r: n bytes, `from` bytes past begin, go to dst.
  template <typename Fn>
  void each(int r, size_t begin, size_t length, Fn&& place) const {
    if (length == 0) return;
    const auto block = static_cast<size_t>(r);
    if (segments_ == nullptr) {
      place(output_ + (*offsets_)[block] + begin, size_t{0}, length);
      return;
    }
    for_each_piece((*segments_)[block], [](const OutputSegment& s) { return s.bytes; }, begin, length,
                   [&](const OutputSegment& s, size_t offset, size_t from, size_t n) {
                     place(static_cast<uint8_t*>(s.data) + offset, from, n);
                   });
  }

 private:
  uint8_t* output_ = nullptr;
  const std::vector<size_t>* offsets_ = nullptr;
  const std::vector<std::vector<OutputSegment>>* segments_ = nullptr;
};

// Copies bytes [begin, begin + n) of block r from src to their places.
void copy_block(const BlockOutput& out, int r, size_t begin, const uint8_t* src, size_t n, bool streaming) {
  out.each(r, begin, n,
           [&](uint8_t* dst, size_t from, size_t len) { copy_out(dst, src + from, len, streaming); });
}

// all_gather and gather through a SlotRing: each rank copies chunk j of its
// block into its slot and, if it reads, its own chunk j into its output
// while the chunk is still in its cache (every input is read from memory
// once, not twice: at 2 ranks a quarter less memory traffic than copying
// the whole block out first), then every other rank's chunk j. gather's
// root writes no slot.
void ring_gather(Call& call, const uint8_t* input, const BlockOutput& output,
                 const std::vector<size_t>& bytes, int root, bool streaming) {
  const int p = call.size();
  const int me = call.rank();
  const auto m = static_cast<size_t>(me);
  SlotRing ring(call, largest(bytes), kGatherSlotBytes, root);
  const size_t piece = ring.slot_bytes();
  for (size_t j = 0; j < ring.chunks(); ++j) {
    Piece mine = piece_of(bytes[m], piece, j);
    if (root != me) {
      ring.fill(j, input + mine.begin, mine.length);
      if (root >= 0) continue;
    }
    copy_block(output, me, mine.begin, input + mine.begin, mine.length, streaming);
    for (int step = 1; step < p; ++step) {
      const int r = (me + step) % p;
      Piece theirs = piece_of(bytes[static_cast<size_t>(r)], piece, j);
      if (theirs.length == 0) continue;
      ring.read_with(r, j, theirs.length, [&](const uint8_t* src) {
        copy_block(output, r, theirs.begin, src, theirs.length, streaming);
      });
    }
    ring.release(j);
  }
  ring.finish();
}

// all_gather and gather: every rank publishes piece i of its block each
// round; readers (everyone, or only root) copy all pieces out.
void gather_impl(Call& call, const void* in, const BlockOutput& output, const std::vector<size_t>& bytes,
                 int root) {
  const int p = call.size();
  const int me = call.rank();
  const auto* input = static_cast<const uint8_t*>(in);
  const bool reader = root < 0 || root == me;
  const bool streaming = total(bytes) >= tdist::detail::streaming_threshold();
  const size_t max_block = largest(bytes);
  const ShmAlgo algo = p > 1 ? choose_shm_gather(max_block, call.facts()) : ShmAlgo::kRounds;
  note_chosen_algorithm(shm_algo_name(algo));
  const bool direct = algo == ShmAlgo::kSingleCopy;
  const bool push = direct && root >= 0;
  // (Pushing, the root copies its own block while the others write theirs.)
  const bool ring = algo == ShmAlgo::kRing;
  if (ring) return ring_gather(call, input, output, bytes, root, streaming);
  if (reader && !push) copy_block(output, me, 0, input, bytes[static_cast<size_t>(me)], streaming);
  if (p == 1 || max_block == 0) return;
  if (push) return push_to_root(call, in, output.buffer(), bytes, offsets_of(bytes), root);
  if (direct) {
    const uint64_t k = call.begin_round();
    // Readers copy every block straight from its owner's input; an owner
    // returns once its readers have (its input must not change before).
    call.publish_address(k, in);
    call.group.publish_arrive(k);
    if (reader) {
      for (int step = 1; step < p; ++step) {
        int r = (me + step) % p;
        if (bytes[static_cast<size_t>(r)] == 0) continue;
        call.wait_arrive(r, k);
        const auto* theirs = static_cast<const uint8_t*>(call.address_of(r, k));
        output.each(r, 0, bytes[static_cast<size_t>(r)],
                    [&](uint8_t* dst, size_t from, size_t n) { call.read_from(r, dst, theirs + from, n); });
      }
    }
    call.group.publish_reduced(k);
    if (bytes[static_cast<size_t>(me)] == 0) return;
    for (int r = 0; r < p; ++r) {
      if (r != me && (root < 0 || r == root)) call.wait_copied(r, k);
    }
    return;
  }
  const bool payload = shm_round_in_flag_line(max_block);
  const size_t piece = payload ? kPayloadBytes : std::min(call.group.buffer_bytes(), kCopyRoundBytes);
  const size_t rounds = ceil_div(max_block, piece);
  const Handoff handoff(call, root);
  for (size_t i = 0; i < rounds; ++i) {
    uint64_t k = call.begin_round();
    Piece mine = piece_of(bytes[static_cast<size_t>(me)], piece, i);
    handoff.fill(k, slot(call, me, k, payload), input + mine.begin, mine.length);
    call.group.publish_arrive(k);
    if (!reader) continue;
    for (int step = 1; step < p; ++step) {
      int r = (me + step) % p;
      Piece theirs = piece_of(bytes[static_cast<size_t>(r)], piece, i);
      if (theirs.length == 0) continue;
      call.wait_arrive(r, k);
      const uint8_t* src = slot(call, r, k, payload);
      handoff.read_with(k, theirs.length,
                        [&] { copy_block(output, r, theirs.begin, src, theirs.length, streaming); });
    }
  }
}

}  // namespace

void barrier(const CallContext& ctx, ShmGroup& group) {
  run_guarded(ctx, group, [&](Call call) {
    note_chosen_algorithm(shm_algo_name(ShmAlgo::kRounds));
    uint64_t k = call.begin_round();
    call.group.publish_arrive(k);
    for (int r = 0; r < call.size(); ++r) {
      if (r != call.rank()) call.wait_arrive(r, k);
    }
  });
}

// A broadcast of at most kPayloadBytes, eagerly (see ShmGroup::next_eager):
// the root does not wait for the readers, so back-to-back small broadcasts
// cost the root one flag write each, not a round trip: on ranks that share
// cores, rounds cost a wake-up of every rank per call. Open MPI's
// broadcast runs ahead the same way.
void eager_broadcast(Call& call, void* data, size_t nbytes, int root) {
  const uint64_t n = call.begin_eager();
  FlagLine& slot = call.group.eager_slot(root, n);
  if (call.rank() == root) {
    std::memcpy(slot.payload, data, nbytes);
    call.group.publish_stamped(slot, n + 1);
  } else {
    call.wait(slot, n + 1, root, "its broadcast", Call::Counts::kEagerOps);
    std::memcpy(data, slot.payload, nbytes);
  }
  call.end_eager(n);
}

// The root and the readers share the copying (broadcast_pushed_bytes): the
// root writes the front of every reader's tensor while each reader reads
// the rest straight from the root's. Every rank returns once nobody copies
// from or into its tensor any more: the root once every reader has read,
// a reader once the root has written. Shared, every rank copies about
// (p - 1) / p of the message instead of the readers all of it.
void single_copy_broadcast(Call& call, void* data, size_t nbytes, int root) {
  const uint64_t k = call.begin_round();
  const int p = call.size();
  const size_t pushed = broadcast_pushed_bytes(nbytes, p);
  call.publish_address(k, data);
  call.group.publish_arrive(k);
  if (call.rank() == root) {
    for (int step = 1; step < p && pushed > 0; ++step) {
      const int r = (root + step) % p;
      call.wait_arrive(r, k);
      call.write_to(r, const_cast<void*>(call.address_of(r, k)), data, pushed);
    }
    call.group.publish_reduced(k);
    for (int r = 0; r < p; ++r) {
      if (r != root) call.wait_copied(r, k);
    }
    return;
  }
  call.wait_arrive(root, k);
  call.read_from(root, static_cast<uint8_t*>(data) + pushed,
                 static_cast<const uint8_t*>(call.address_of(root, k)) + pushed, nbytes - pushed);
  call.group.publish_reduced(k);
  if (pushed > 0) call.wait_copied(root, k);
}

void ring_broadcast(Call& call, uint8_t* data, size_t nbytes, int root) {
  const bool streaming = nbytes >= tdist::detail::streaming_threshold();
  SlotRing ring(call, nbytes, kBroadcastSlotBytes, -1);
  for (size_t j = 0; j < ring.chunks(); ++j) {
    Piece part = piece_of(nbytes, ring.slot_bytes(), j);
    if (call.rank() == root) {
      ring.fill(j, data + part.begin, part.length);
    } else {
      ring.read(root, j, data + part.begin, part.length, streaming);
      ring.release(j);
    }
  }
  ring.finish();
}

void broadcast(const CallContext& ctx, ShmGroup& group, void* data, size_t nbytes, int root) {
  run_guarded(ctx, group, [&](Call call) {
    if (call.size() == 1 || nbytes == 0) return;
    // The choice (algorithms/tuning/tuning.h) is named for the flight recorder.
    const ShmAlgo algo = choose_shm_broadcast(nbytes, call.facts());
    note_chosen_algorithm(shm_algo_name(algo));
    if (algo == ShmAlgo::kEager) return eager_broadcast(call, data, nbytes, root);
    if (algo == ShmAlgo::kSingleCopy) return single_copy_broadcast(call, data, nbytes, root);
    if (algo == ShmAlgo::kRing) return ring_broadcast(call, static_cast<uint8_t*>(data), nbytes, root);
    const size_t piece = std::min(call.group.buffer_bytes(), kCopyRoundBytes);
    const bool streaming = nbytes >= tdist::detail::streaming_threshold();
    auto* bytes = static_cast<uint8_t*>(data);
    const Handoff handoff(call, -1);
    for (size_t i = 0, rounds = ceil_div(nbytes, piece); i < rounds; ++i) {
      Piece part = piece_of(nbytes, piece, i);
      uint64_t k = call.begin_round();
      if (call.rank() == root) {
        handoff.fill(k, call.group.buffer(root, k), bytes + part.begin, part.length);
        call.group.publish_arrive(k);
      } else {
        call.group.publish_arrive(k);
        call.wait_arrive(root, k);
        handoff.read(k, bytes + part.begin, call.group.buffer(root, k), part.length, streaming);
      }
    }
  });
}

void all_gather(const CallContext& ctx, ShmGroup& group, const void* in, void* out,
                const std::vector<size_t>& bytes) {
  const auto offsets = offsets_of(bytes);
  run_guarded(ctx, group, [&](Call call) {
    gather_impl(call, in, BlockOutput(static_cast<uint8_t*>(out), offsets), bytes, -1);
  });
}

void all_gather_segments(const CallContext& ctx, ShmGroup& group, const void* in,
                         const std::vector<std::vector<OutputSegment>>& blocks) {
  std::vector<size_t> bytes(blocks.size(), 0);
  for (size_t r = 0; r < blocks.size(); ++r) {
    for (const OutputSegment& segment : blocks[r]) bytes[r] += segment.bytes;
  }
  run_guarded(ctx, group, [&](Call call) { gather_impl(call, in, BlockOutput(blocks), bytes, -1); });
}

void gather(const CallContext& ctx, ShmGroup& group, const void* in, void* out,
            const std::vector<size_t>& bytes, int root) {
  const auto offsets = offsets_of(bytes);
  run_guarded(ctx, group, [&](Call call) {
    gather_impl(call, in, BlockOutput(static_cast<uint8_t*>(out), offsets), bytes, root);
  });
}

void scatter(const CallContext& ctx, ShmGroup& group, const void* in, void* out,
             const std::vector<size_t>& bytes, int root) {
  run_guarded(ctx, group, [&](Call call) {
    const int p = call.size();
    const int me = call.rank();
    const auto offsets = offsets_of(bytes);
    const auto* input = static_cast<const uint8_t*>(in);
    const size_t max_block = largest(bytes);
    const ShmAlgo algo = p > 1 ? choose_shm_scatter(max_block, call.facts()) : ShmAlgo::kRounds;
    note_chosen_algorithm(shm_algo_name(algo));
    const bool direct = algo == ShmAlgo::kSingleCopy;
    auto copy_own = [&] {
      if (me == root) copy(out, input + offsets[static_cast<size_t>(me)], bytes[static_cast<size_t>(me)]);
    };
    if (!direct) copy_own();
    if (p == 1 || max_block == 0) return;
    if (direct) {
      // Every rank copies its block straight from root's input, the root
      // its own while the others do.
      const uint64_t k = call.begin_round();
      if (me == root) {
        call.publish_address(k, input);
        call.group.publish_arrive(k);
        copy_own();
        for (int r = 0; r < p; ++r) {
          if (r != me && bytes[static_cast<size_t>(r)] > 0) call.wait_copied(r, k);
        }
        return;
      }
      call.group.publish_arrive(k);
      if (bytes[static_cast<size_t>(me)] > 0) {
        call.wait_arrive(root, k);
        call.read_from(
            root, out,
            static_cast<const uint8_t*>(call.address_of(root, k)) + offsets[static_cast<size_t>(me)],
            bytes[static_cast<size_t>(me)]);
      }
      call.group.publish_reduced(k);
      return;
    }
    // Root's buffer holds one section per rank each round.
    const size_t section = section_bytes(call.group, p, 1);
    for (size_t i = 0, rounds = ceil_div(max_block, section); i < rounds; ++i) {
      uint64_t k = call.begin_round();
      if (me == root) {
        uint8_t* mine = call.group.buffer(me, k);
        for (int r = 0; r < p; ++r) {
          if (r == me) continue;
          Piece part = piece_of(bytes[static_cast<size_t>(r)], section, i);
          copy(mine + static_cast<size_t>(r) * section, input + offsets[static_cast<size_t>(r)] + part.begin,
               part.length);
        }
        call.group.publish_arrive(k);
      } else {
        call.group.publish_arrive(k);
        Piece part = piece_of(bytes[static_cast<size_t>(me)], section, i);
        if (part.length == 0) continue;
        call.wait_arrive(root, k);
        copy(static_cast<uint8_t*>(out) + part.begin,
             call.group.buffer(root, k) + static_cast<size_t>(me) * section, part.length);
      }
    }
  });
}

void all_to_all(const CallContext& ctx, ShmGroup& group, const void* in,
                const std::vector<size_t>& send_bytes, const std::vector<size_t>& send_offsets, void* out,
                const std::vector<size_t>& recv_bytes, const std::vector<size_t>& recv_offsets) {
  algorithms::detail::check_own_block(ctx, send_bytes, recv_bytes);
  run_guarded(ctx, group, [&](Call call) {
    const int p = call.size();
    const int me = call.rank();
    const auto* input = static_cast<const uint8_t*>(in);
    auto* output = static_cast<uint8_t*>(out);
    const auto m = static_cast<size_t>(me);
    const bool streaming = total(recv_bytes) >= tdist::detail::streaming_threshold();
    copy_out(output + recv_offsets[m], input + send_offsets[m], send_bytes[m], streaming);
    if (p == 1) return;
    // Only the sizes of this rank's own blocks are known here, so the ranks
    // first agree on the largest block (in the flag payload): it fixes how
    // many rounds everyone runs.
    // The same round carries every rank's send sizes (at the start of its
    // buffer), so a receiver can check them against the sizes it expects, as
    // the TCP algorithm does with the sizes that arrive: reading a shorter
    // block than expected would hand back bytes nobody wrote.
    // Small blocks ride along in the same round (after the sizes), so that a
    // small all_to_all costs one flag round, not two. A sender adds them when
    // its own blocks fit; receivers read them when everyone's did (the
    // largest block agreed on fits), which needs no flag of its own.
    // Tiny blocks (a few bytes each) travel in the flag line itself, sizes
    // included; a receiver reads each sender's flag to know which it did.
    uint64_t k = call.begin_round();
    const uint64_t my_max = std::max(largest(send_bytes), largest(recv_bytes));
    uint8_t* my_line = call.group.arrive(me, k).payload;
    std::memcpy(my_line, &my_max, sizeof(my_max));
    const TinyLayout tiny = tiny_layout(p);
    const bool i_am_tiny = tiny.section > 0 && largest(send_bytes) <= tiny.section;
    my_line[TinyLayout::kFlag] = i_am_tiny ? 1 : 0;
    const OneRoundLayout first = one_round_layout(call.group, p);
    // Single copy fetches blocks in its window, and any that a one-round
    // buffer would have carried once the agreed largest block reaches the
    // window: a sender whose own blocks reach it need not fill its sections
    // (the agreed largest is at least its own; tuning.h's
    // all_to_all_skips_sections and choose_shm_all_to_all). See `direct`.
    if (i_am_tiny) {
      for (int d = 0; d < p; ++d) {
        const size_t n = send_bytes[static_cast<size_t>(d)];
        my_line[TinyLayout::kSizes + static_cast<size_t>(d)] = static_cast<uint8_t>(n);
        if (d != me) {
          copy(my_line + tiny.data_offset + static_cast<size_t>(d) * tiny.section,
               input + send_offsets[static_cast<size_t>(d)], n);
        }
      }
    } else if (first.sizes_fit) {
      call.publish_address(k, input, TinyLayout::kAddress);
      uint8_t* my_first = call.group.buffer(me, k);
      for (int d = 0; d < p; ++d) {
        const uint64_t n = send_bytes[static_cast<size_t>(d)];
        const uint64_t at = send_offsets[static_cast<size_t>(d)];
        std::memcpy(my_first + static_cast<size_t>(d) * sizeof(uint64_t), &n, sizeof(n));
        std::memcpy(my_first + static_cast<size_t>(p + d) * sizeof(uint64_t), &at, sizeof(at));
      }
      // Blocks that single copy will fetch need no copy here: the agreed
      // largest block is then at least ours (see `direct` below).
      const bool fetched = all_to_all_skips_sections(largest(send_bytes), call.facts());
      if (largest(send_bytes) <= first.section && !fetched) {
        for (int d = 0; d < p; ++d) {
          if (d == me) continue;
          copy(my_first + first.data_offset + static_cast<size_t>(d) * first.section,
               input + send_offsets[static_cast<size_t>(d)], send_bytes[static_cast<size_t>(d)]);
        }
      }
    }
    call.group.publish_arrive(k);
    uint64_t max_block = my_max;
    for (int r = 0; r < p; ++r) {
      if (r == me) continue;
      call.wait_arrive(r, k);
      const uint8_t* line = call.group.arrive(r, k).payload;
      uint64_t theirs = 0;
      std::memcpy(&theirs, line, sizeof(theirs));
      max_block = std::max(max_block, theirs);
      uint64_t sent = 0;
      if (line[TinyLayout::kFlag] != 0) {
        sent = line[TinyLayout::kSizes + m];
      } else if (first.sizes_fit) {
        std::memcpy(&sent, call.group.buffer(r, k) + m * sizeof(uint64_t), sizeof(sent));
      } else {
        continue;
      }
      if (sent != recv_bytes[static_cast<size_t>(r)]) {
        throw DistBackendError(std::string(call.ctx.op) + ": rank " +
                               std::to_string(call.group.group_rank(me)) + " expected " +
                               std::to_string(recv_bytes[static_cast<size_t>(r)]) + " bytes from rank " +
                               std::to_string(call.group.group_rank(r)) + " but it sent " +
                               std::to_string(sent) + " (do the ranks' split sizes agree?)");
      }
    }
    if (max_block == 0) return;
    // Single copy from each sender's input, for blocks in its range, and for
    // every size a one-round buffer would have carried (a sender that
    // expected single copy did not fill its sections).
    const ShmAlgo algo = choose_shm_all_to_all(max_block, first.sizes_fit, first.section, call.facts());
    const bool direct = algo == ShmAlgo::kSingleCopy;
    note_chosen_algorithm(shm_algo_name(algo));
    if (direct) {
      for (int step = 1; step < p; ++step) {
        int s = (me + step) % p;
        const uint8_t* line = call.group.arrive(s, k).payload;
        if (line[TinyLayout::kFlag] != 0) {
          copy(output + recv_offsets[static_cast<size_t>(s)], line + tiny.data_offset + m * tiny.section,
               recv_bytes[static_cast<size_t>(s)]);
          continue;
        }
        uint64_t at = 0;
        std::memcpy(&at, call.group.buffer(s, k) + (static_cast<size_t>(p) + m) * sizeof(uint64_t),
                    sizeof(at));
        call.read_from(s, output + recv_offsets[static_cast<size_t>(s)],
                       static_cast<const uint8_t*>(call.address_of(s, k, TinyLayout::kAddress)) + at,
                       recv_bytes[static_cast<size_t>(s)]);
      }
      call.group.publish_reduced(k);
      // Our input must not change before every reader has copied from it.
      if (!i_am_tiny) {
        for (int r = 0; r < p; ++r) {
          if (r != me) call.wait_copied(r, k);
        }
      }
      return;
    }
    if (first.sizes_fit && max_block <= first.section) {
      // One round: each sender's blocks are in its flag line (tiny) or its buffer.
      for (int step = 1; step < p; ++step) {
        int s = (me + step) % p;
        const uint8_t* line = call.group.arrive(s, k).payload;
        const uint8_t* from = line[TinyLayout::kFlag] != 0
                                  ? line + tiny.data_offset + m * tiny.section
                                  : call.group.buffer(s, k) + first.data_offset + m * first.section;
        copy(output + recv_offsets[static_cast<size_t>(s)], from, recv_bytes[static_cast<size_t>(s)]);
      }
      return;
    }
    const size_t section = section_bytes(call.group, p, 1);
    // Each section has one reader: its hand-over is measured on its own.
    const Handoff from_anyone(call, -1);
    for (size_t i = 0, rounds = ceil_div(max_block, section); i < rounds; ++i) {
      k = call.begin_round();
      uint8_t* mine = call.group.buffer(me, k);
      for (int d = 0; d < p; ++d) {
        if (d == me) continue;
        Piece part = piece_of(send_bytes[static_cast<size_t>(d)], section, i);
        Handoff(call, d).fill(k, mine + static_cast<size_t>(d) * section,
                              input + send_offsets[static_cast<size_t>(d)] + part.begin, part.length);
      }
      call.group.publish_arrive(k);
      for (int step = 1; step < p; ++step) {
        int s = (me + step) % p;
        Piece part = piece_of(recv_bytes[static_cast<size_t>(s)], section, i);
        if (part.length == 0) continue;
        call.wait_arrive(s, k);
        from_anyone.read(k, output + recv_offsets[static_cast<size_t>(s)] + part.begin,
                         call.group.buffer(s, k) + m * section, part.length, streaming);
      }
    }
  });
}

}  // namespace tdist::algorithms::shm
