// Gather and scatter of blocks of any (per-rank) size: binomial trees
// (Thakur, Rabenseifner & Gropp 2005, sections 4.2-4.3) and the linear
// algorithms, where the root talks to every rank at once.
//
// In the trees, a non-root node stages its subtree's blocks in relative-rank
// order (binomial_tree.h). The root's buffer is in real-rank order, so a
// subtree that wraps past rank p - 1 is two ranges there: a node whose
// parent is the root sends (gather) or receives (scatter) it as two
// messages, which both sides cut the same way. Each parent-child link
// carries one direction of one call only, so one tag serves every message.

#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/patterns/binomial_tree.h"
#include "algorithms/tuning/tcp_model.h"
#include "tdist/errors.h"

namespace tdist::algorithms {
namespace {

using detail::Bounds;
using patterns::ChunkRange;

void check_blocks(const CallContext& ctx, const std::vector<size_t>& bytes) {
  if (bytes.size() != static_cast<size_t>(ctx.size())) {
    throw DistInvalidArgument(std::string(ctx.op) + ": expected " + std::to_string(ctx.size()) +
                              " block sizes, got " + std::to_string(bytes.size()));
  }
}

void copy(void* dst, const void* src, size_t n) {
  if (n > 0 && dst != src) std::memcpy(dst, src, n);
}

// Byte offsets of the blocks in both orders.
struct Layout {
  Bounds real;      // real-rank order (the root's buffer)
  Bounds relative;  // relative-rank order (a node's staging)

  Layout(const std::vector<size_t>& bytes, int root) : real(detail::prefix_bounds(bytes)) {
    const int p = static_cast<int>(bytes.size());
    relative.assign(bytes.size() + 1, 0);
    for (int i = 0; i < p; ++i) {
      relative[static_cast<size_t>(i) + 1] =
          relative[static_cast<size_t>(i)] + bytes[static_cast<size_t>(patterns::absolute_rank(i, root, p))];
    }
  }
  static size_t span(const Bounds& b, ChunkRange c) {
    return b[static_cast<size_t>(c.end())] - b[static_cast<size_t>(c.first)];
  }
};

// The pieces of a subtree's blocks as the root's buffer holds them:
// (offset in the root's buffer, offset in the subtree's staging, bytes).
struct Piece {
  size_t root_offset;
  size_t staging_offset;
  size_t bytes;
};

std::vector<Piece> root_pieces(const Layout& layout, ChunkRange subtree, int root, int p) {
  std::vector<Piece> pieces;
  size_t staged = 0;
  for (const ChunkRange part : patterns::binomial_absolute_chunks(subtree, root, p)) {
    const size_t n = Layout::span(layout.real, part);
    if (n > 0) pieces.push_back({layout.real[static_cast<size_t>(part.first)], staged, n});
    staged += n;
  }
  return pieces;
}

void binomial_gather(const CallContext& ctx, const uint8_t* in, uint8_t* out,
                     const std::vector<size_t>& bytes, int root) {
  const int p = ctx.size();
  const int rank = ctx.rank();
  const uint64_t tag = ctx.tag(0);
  const Layout layout(bytes, root);
  const std::vector<patterns::TreeChild> children = patterns::binomial_children(rank, root, p);
  const size_t own = bytes[static_cast<size_t>(rank)];
  std::vector<RequestPtr> requests;
  if (rank == root) {
    copy(out + layout.real[static_cast<size_t>(rank)], in, own);
    for (const patterns::TreeChild& child : children) {
      for (const Piece& piece : root_pieces(layout, child.subtree, root, p)) {
        requests.push_back(detail::post_recv(ctx, child.rank, tag, out + piece.root_offset, piece.bytes));
      }
    }
    wait_all(ctx, requests);
    return;
  }
  const ChunkRange subtree = patterns::binomial_subtree(rank, root, p);
  const size_t base = layout.relative[static_cast<size_t>(subtree.first)];
  detail::Scratch staging;
  const uint8_t* payload = in;  // a leaf sends its block as it is
  if (!children.empty()) {
    staging = detail::make_scratch(Layout::span(layout.relative, subtree));
    copy(staging.get(), in, own);
    for (const patterns::TreeChild& child : children) {
      requests.push_back(
          detail::post_recv(ctx, child.rank, tag,
                            staging.get() + layout.relative[static_cast<size_t>(child.subtree.first)] - base,
                            Layout::span(layout.relative, child.subtree)));
    }
    wait_all(ctx, requests);
    requests.clear();
    payload = staging.get();
  }
  const int parent = patterns::binomial_parent(rank, root, p);
  if (parent == root) {
    for (const Piece& piece : root_pieces(layout, subtree, root, p)) {
      requests.push_back(detail::post_send(ctx, parent, tag, payload + piece.staging_offset, piece.bytes));
    }
  } else {
    requests.push_back(detail::post_send(ctx, parent, tag, payload, Layout::span(layout.relative, subtree)));
  }
  wait_all(ctx, requests);
}

void binomial_scatter(const CallContext& ctx, const uint8_t* in, uint8_t* out,
                      const std::vector<size_t>& bytes, int root) {
  const int p = ctx.size();
  const int rank = ctx.rank();
  const uint64_t tag = ctx.tag(0);
  const Layout layout(bytes, root);
  const std::vector<patterns::TreeChild> children = patterns::binomial_children(rank, root, p);
  const size_t own = bytes[static_cast<size_t>(rank)];
  std::vector<RequestPtr> requests;
  if (rank == root) {
    for (const patterns::TreeChild& child : children) {
      for (const Piece& piece : root_pieces(layout, child.subtree, root, p)) {
        requests.push_back(detail::post_send(ctx, child.rank, tag, in + piece.root_offset, piece.bytes));
      }
    }
    copy(out, in + layout.real[static_cast<size_t>(rank)], own);
    wait_all(ctx, requests);
    return;
  }
  const ChunkRange subtree = patterns::binomial_subtree(rank, root, p);
  const size_t base = layout.relative[static_cast<size_t>(subtree.first)];
  detail::Scratch staging;
  uint8_t* landing = out;  // a leaf receives its block in place
  if (!children.empty()) {
    staging = detail::make_scratch(Layout::span(layout.relative, subtree));
    landing = staging.get();
  }
  const int parent = patterns::binomial_parent(rank, root, p);
  if (parent == root) {
    for (const Piece& piece : root_pieces(layout, subtree, root, p)) {
      requests.push_back(detail::post_recv(ctx, parent, tag, landing + piece.staging_offset, piece.bytes));
    }
  } else {
    requests.push_back(detail::post_recv(ctx, parent, tag, landing, Layout::span(layout.relative, subtree)));
  }
  wait_all(ctx, requests);
  if (children.empty()) return;
  requests.clear();
  for (const patterns::TreeChild& child : children) {
    requests.push_back(
        detail::post_send(ctx, child.rank, tag,
                          staging.get() + layout.relative[static_cast<size_t>(child.subtree.first)] - base,
                          Layout::span(layout.relative, child.subtree)));
  }
  copy(out, staging.get(), own);
  wait_all(ctx, requests);
}

void linear_gather(const CallContext& ctx, const uint8_t* in, uint8_t* out, const std::vector<size_t>& bytes,
                   int root) {
  const int p = ctx.size();
  const int rank = ctx.rank();
  const uint64_t tag = ctx.tag(0);
  if (rank != root) {
    wait_all(ctx, {detail::post_send(ctx, root, tag, in, bytes[static_cast<size_t>(rank)])});
    return;
  }
  const Bounds bounds = detail::prefix_bounds(bytes);
  std::vector<RequestPtr> requests;
  for (int i = 1; i < p; ++i) {
    const int src = (rank + i) % p;
    requests.push_back(detail::post_recv(ctx, src, tag, out + bounds[static_cast<size_t>(src)],
                                         bytes[static_cast<size_t>(src)]));
  }
  copy(out + bounds[static_cast<size_t>(rank)], in, bytes[static_cast<size_t>(rank)]);
  wait_all(ctx, requests);
}

void linear_scatter(const CallContext& ctx, const uint8_t* in, uint8_t* out, const std::vector<size_t>& bytes,
                    int root) {
  const int p = ctx.size();
  const int rank = ctx.rank();
  const uint64_t tag = ctx.tag(0);
  if (rank != root) {
    wait_all(ctx, {detail::post_recv(ctx, root, tag, out, bytes[static_cast<size_t>(rank)])});
    return;
  }
  const Bounds bounds = detail::prefix_bounds(bytes);
  std::vector<RequestPtr> requests;
  for (int i = 1; i < p; ++i) {
    const int dst = (rank + i) % p;
    requests.push_back(detail::post_send(ctx, dst, tag, in + bounds[static_cast<size_t>(dst)],
                                         bytes[static_cast<size_t>(dst)]));
  }
  copy(out, in + bounds[static_cast<size_t>(rank)], bytes[static_cast<size_t>(rank)]);
  wait_all(ctx, requests);
}

size_t total_of(const std::vector<size_t>& bytes) {
  size_t total = 0;
  for (size_t b : bytes) total += b;
  return total;
}

}  // namespace

void gather(const CallContext& ctx, const void* in, void* out, const std::vector<size_t>& bytes, int root,
            GatherAlgo algo) {
  check_blocks(ctx, bytes);
  const size_t total = total_of(bytes);
  algo = resolve_algo(algo, total, ctx.size());
  const auto* in8 = static_cast<const uint8_t*>(in);
  auto* out8 = static_cast<uint8_t*>(out);
  if (ctx.size() == 1) {
    copy(out8, in8, bytes[0]);
    return;
  }
  if (total == 0) return;
  detail::guarded(ctx, [&] {
    if (algo == GatherAlgo::kLinear) {
      linear_gather(ctx, in8, out8, bytes, root);
    } else {
      binomial_gather(ctx, in8, out8, bytes, root);
    }
  });
}

void scatter(const CallContext& ctx, const void* in, void* out, const std::vector<size_t>& bytes, int root,
             ScatterAlgo algo) {
  check_blocks(ctx, bytes);
  const size_t total = total_of(bytes);
  algo = resolve_algo(algo, total, ctx.size());
  const auto* in8 = static_cast<const uint8_t*>(in);
  auto* out8 = static_cast<uint8_t*>(out);
  if (ctx.size() == 1) {
    copy(out8, in8, bytes[0]);
    return;
  }
  if (total == 0) return;
  detail::guarded(ctx, [&] {
    if (algo == ScatterAlgo::kLinear) {
      linear_scatter(ctx, in8, out8, bytes, root);
    } else {
      binomial_scatter(ctx, in8, out8, bytes, root);
    }
  });
}

}  // namespace tdist::algorithms
