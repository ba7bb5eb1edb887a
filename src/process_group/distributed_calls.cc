// The functional API (tdist/distributed.h): point-to-point, the
// collectives and the object collectives on the groups distributed.cc makes.

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "distributed_state.h"
#include "group_resolve.h"
#include "object_codec.h"
#include "tdist/blocking_call.h"
#include "tdist/errors.h"
#include "validate.h"

namespace tdist {
namespace {

using detail::api::bytes_tensor;
using detail::api::check_user_tag;
using detail::api::finish;
using detail::api::GroupCall;
using detail::api::remember_locked;
using detail::api::resolve;
using detail::api::state;
using detail::api::to_group_rank;

}  // namespace

// ---- Point to point ----

namespace {

// A send or receive posted on `g` under the name of the call the user made
// ("send", "irecv", ...); null for a non-member.
WorkPtr post_send(ProcessGroup& g, const char* op, const Tensor& tensor, int dst, int tag) {
  if (g.rank() < 0) return nullptr;
  return g.send(tensor, to_group_rank(g, dst, op, "dst"), tag);
}

WorkPtr post_recv(ProcessGroup& g, const char* op, const Tensor& tensor, std::optional<int> src, int tag) {
  if (g.rank() < 0) return nullptr;
  return g.recv(tensor, src ? to_group_rank(g, *src, op, "src") : -1, tag);
}

// isend/irecv: GroupCall rather than resolve(), no lock and no reference
// count on the way to an 8 B message; the call ends once posted.
WorkPtr start_send(const char* op, const Tensor& tensor, int dst, const Group& group, int tag) {
  const GroupCall call(group, op);
  return post_send(*call, op, tensor, dst, tag);
}

WorkPtr start_recv(const char* op, const Tensor& tensor, std::optional<int> src, const Group& group,
                   int tag) {
  const GroupCall call(group, op);
  return post_recv(*call, op, tensor, src, tag);
}

}  // namespace

WorkPtr isend(const Tensor& tensor, int dst, const Group& group, int tag) {
  check_user_tag("isend", tag);
  return start_send("isend", tensor, dst, group, tag);
}

WorkPtr irecv(const Tensor& tensor, std::optional<int> src, const Group& group, int tag) {
  check_user_tag("irecv", tag);
  return start_recv("irecv", tensor, src, group, tag);
}

// The blocking ones are a call until their wait ends, as the blocking
// collectives are: destroy_process_group() meanwhile aborts the group
// (the wait raises) and waits for them, instead of freeing the transport
// their wait is driving. They make no work for a message that moves at
// once (ProcessGroup::sendrecv).
namespace {

// send, recv and sendrecv (either tensor may be null): global ranks in
// and out, -1 for a non-member or without a receive.
int blocking_p2p(const char* op, const Tensor* send_tensor, int dst, const Tensor* recv_tensor,
                 std::optional<int> src, const Group& group, int tag) {
  check_user_tag(op, tag);
  const GroupCall call(group, op);
  ProcessGroup& g = *call;
  if (g.rank() < 0) return -1;
  const int to = send_tensor != nullptr ? to_group_rank(g, dst, op, "dst") : -1;
  const int from =
      g.sendrecv(send_tensor, to, recv_tensor, src ? to_group_rank(g, *src, op, "src") : -1, tag);
  return from < 0 ? -1 : g.global_ranks().at(static_cast<size_t>(from));
}

}  // namespace

void send(const Tensor& tensor, int dst, const Group& group, int tag) {
  (void)blocking_p2p("send", &tensor, dst, nullptr, std::nullopt, group, tag);
}

int recv(const Tensor& tensor, std::optional<int> src, const Group& group, int tag) {
  return blocking_p2p("recv", nullptr, -1, &tensor, src, group, tag);
}

int sendrecv(const Tensor& send_tensor, int dst, const Tensor& recv_tensor, std::optional<int> src,
             const Group& group, int tag) {
  return blocking_p2p("sendrecv", &send_tensor, dst, &recv_tensor, src, group, tag);
}

namespace detail {

Group resolve_group(const Group& group, const char* op) {
  return resolve(group, op);
}

void remember_group(const Group& group) {
  std::lock_guard<std::mutex> lock(state().mutex);
  remember_locked(group);
}

WorkPtr isend_reserved_tag(const Tensor& tensor, int dst, const Group& group, int tag) {
  return start_send("isend", tensor, dst, group, tag);
}

WorkPtr irecv_reserved_tag(const Tensor& tensor, std::optional<int> src, const Group& group, int tag) {
  return start_recv("irecv", tensor, src, group, tag);
}

}  // namespace detail

std::vector<WorkPtr> batch_isend_irecv(const std::vector<P2POp>& p2p_op_list) {
  // Every operation is checked before the first is posted.
  for (const auto& op : p2p_op_list) check_user_tag("batch_isend_irecv", op.tag);
  // The sends first, then the receives, each in the list's order; the
  // works come back in the list's order. A small send goes out inside its
  // post, and a receive posted after the peer's send of the same batch has
  // come finishes inside its own (tdist_p2p.cc), where one posted first
  // waits with a request. Messages are matched per sender, receiver and
  // tag, so no send of a rank pairs with its own receive: the order
  // between the two kinds changes no pairing.
  std::vector<WorkPtr> works(p2p_op_list.size());
  for (size_t i = 0; i < p2p_op_list.size(); ++i) {
    const auto& op = p2p_op_list[i];
    if (op.op == P2POp::Kind::kIsend) works[i] = isend(op.tensor, op.peer, op.group, op.tag);
  }
  for (size_t i = 0; i < p2p_op_list.size(); ++i) {
    const auto& op = p2p_op_list[i];
    if (op.op != P2POp::Kind::kIsend) works[i] = irecv(op.tensor, op.peer, op.group, op.tag);
  }
  return works;
}

// ---- Collectives ----

WorkPtr broadcast(const Tensor& tensor, int src, const Group& group, bool async_op) {
  const GroupCall call(group, "broadcast");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.broadcast(tensor, to_group_rank(g, src, "broadcast", "src")), async_op);
}

WorkPtr all_reduce(const Tensor& tensor, const ReduceOp& op, const Group& group, bool async_op) {
  const GroupCall call(group, "all_reduce");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.all_reduce(tensor, op), async_op);
}

WorkPtr reduce(const Tensor& tensor, int dst, const ReduceOp& op, const Group& group, bool async_op) {
  const GroupCall call(group, "reduce");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.reduce(tensor, to_group_rank(g, dst, "reduce", "dst"), op), async_op);
}

WorkPtr all_gather(const std::vector<Tensor>& tensor_list, const Tensor& tensor, const Group& group,
                   bool async_op) {
  const GroupCall call(group, "all_gather");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.all_gather(tensor_list, tensor), async_op);
}

WorkPtr all_gather_into_tensor(const Tensor& output_tensor, const Tensor& input_tensor, const Group& group,
                               bool async_op) {
  const GroupCall call(group, "all_gather_into_tensor");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.all_gather_into_tensor(output_tensor, input_tensor), async_op);
}

WorkPtr all_gather_into_tensor_uneven(const Tensor& output, const Tensor& input,
                                      const std::vector<int64_t>& output_split_sizes, const Group& group,
                                      bool async_op) {
  const GroupCall call(group, "all_gather_into_tensor_uneven");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.all_gather_into_tensor_uneven(output, input, output_split_sizes), async_op);
}

WorkPtr gather(const Tensor& tensor, const std::vector<Tensor>& gather_list, int dst, const Group& group,
               bool async_op) {
  const GroupCall call(group, "gather");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.gather(gather_list, tensor, to_group_rank(g, dst, "gather", "dst")), async_op);
}

WorkPtr scatter(const Tensor& tensor, const std::vector<Tensor>& scatter_list, int src, const Group& group,
                bool async_op) {
  const GroupCall call(group, "scatter");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.scatter(tensor, scatter_list, to_group_rank(g, src, "scatter", "src")), async_op);
}

WorkPtr reduce_scatter(const Tensor& output, const std::vector<Tensor>& input_list, const ReduceOp& op,
                       const Group& group, bool async_op) {
  const GroupCall call(group, "reduce_scatter");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.reduce_scatter(output, input_list, op), async_op);
}

WorkPtr reduce_scatter_tensor(const Tensor& output, const Tensor& input, const ReduceOp& op,
                              const Group& group, bool async_op) {
  const GroupCall call(group, "reduce_scatter_tensor");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.reduce_scatter_tensor(output, input, op), async_op);
}

WorkPtr reduce_scatter_tensor_uneven(const Tensor& output, const Tensor& input,
                                     const std::vector<int64_t>& input_split_sizes, const ReduceOp& op,
                                     const Group& group, bool async_op) {
  const GroupCall call(group, "reduce_scatter_tensor_uneven");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.reduce_scatter_tensor_uneven(output, input, input_split_sizes, op), async_op);
}

WorkPtr all_to_all(const std::vector<Tensor>& output_tensor_list,
                   const std::vector<Tensor>& input_tensor_list, const Group& group, bool async_op) {
  const GroupCall call(group, "all_to_all");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.all_to_all(output_tensor_list, input_tensor_list), async_op);
}

WorkPtr all_to_all_single(const Tensor& output, const Tensor& input,
                          const std::vector<int64_t>& output_split_sizes,
                          const std::vector<int64_t>& input_split_sizes, const Group& group, bool async_op) {
  const GroupCall call(group, "all_to_all_single");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.all_to_all_single(output, input, output_split_sizes, input_split_sizes), async_op);
}

WorkPtr barrier(const Group& group, bool async_op) {
  const GroupCall call(group, "barrier");
  ProcessGroup& g = *call;
  if (g.rank() < 0) return nullptr;
  detail::BlockingCallScope blocking(&g, !async_op);
  return finish(g.barrier(), async_op);
}

// ---- Object collectives ----
// Objects travel as bytes: first their sizes, then the bytes themselves,
// padded to the largest where the underlying collective needs equal blocks.
// What peers send is decoded by object_codec.h, checked and fuzzed.

void broadcast_object_list(std::vector<Bytes>& object_list, int src, const Group& group) {
  Group g = resolve(group, "broadcast_object_list");
  if (g->rank() < 0) return;
  std::vector<int64_t> sizes(object_list.size(), 0);
  bool is_src = get_global_rank(g, g->rank()) == src;
  if (is_src) {
    for (size_t i = 0; i < object_list.size(); ++i) sizes[i] = static_cast<int64_t>(object_list[i].size());
  }
  broadcast(Tensor::wrap(sizes), src, g);
  std::vector<uint8_t> data(detail::object_bytes(sizes, "broadcast_object_list"));
  if (is_src) {
    size_t offset = 0;
    for (const auto& obj : object_list) {
      if (!obj.empty()) std::memcpy(data.data() + offset, obj.data(), obj.size());
      offset += obj.size();
    }
  }
  broadcast(bytes_tensor(data), src, g);
  if (!is_src) object_list = detail::split_objects(sizes, data, "broadcast_object_list");
}

void all_gather_object(std::vector<Bytes>& object_list, const Bytes& obj, const Group& group) {
  Group g = resolve(group, "all_gather_object");
  if (g->rank() < 0) return;
  int n = g->size();
  std::vector<int64_t> sizes(static_cast<size_t>(n), 0);
  std::vector<int64_t> mine{static_cast<int64_t>(obj.size())};
  all_gather_into_tensor(Tensor::wrap(sizes), Tensor::wrap(mine), g);
  std::vector<uint8_t> data(detail::object_bytes(sizes, "all_gather_object"));
  std::vector<uint8_t> input(obj.begin(), obj.end());
  all_gather_into_tensor_uneven(bytes_tensor(data), bytes_tensor(input), sizes, g);
  object_list = detail::split_objects(sizes, data, "all_gather_object");
}

void gather_object(const Bytes& obj, std::vector<Bytes>* object_gather_list, int dst, const Group& group) {
  Group g = resolve(group, "gather_object");
  if (g->rank() < 0) return;
  bool is_dst = get_global_rank(g, g->rank()) == dst;
  if (is_dst && object_gather_list == nullptr) {
    throw DistInvalidArgument("gather_object: object_gather_list is required on dst " + std::to_string(dst));
  }
  if (!is_dst && object_gather_list != nullptr) {
    throw DistInvalidArgument("gather_object: object_gather_list must be null on ranks other than dst " +
                              std::to_string(dst));
  }
  int n = g->size();
  std::vector<int64_t> sizes(static_cast<size_t>(n), 0);
  std::vector<int64_t> mine{static_cast<int64_t>(obj.size())};
  all_gather_into_tensor(Tensor::wrap(sizes), Tensor::wrap(mine), g);
  detail::object_bytes(sizes, "gather_object");
  int64_t largest = *std::max_element(sizes.begin(), sizes.end());
  std::vector<uint8_t> input(static_cast<size_t>(largest), 0);
  if (!obj.empty()) std::memcpy(input.data(), obj.data(), obj.size());
  std::vector<std::vector<uint8_t>> blocks;
  std::vector<Tensor> gather_list;
  if (is_dst) {
    blocks.assign(static_cast<size_t>(n), std::vector<uint8_t>(static_cast<size_t>(largest)));
    for (auto& b : blocks) gather_list.push_back(bytes_tensor(b));
  }
  gather(bytes_tensor(input), gather_list, dst, g);
  if (is_dst) {
    object_gather_list->assign(static_cast<size_t>(n), Bytes{});
    for (int r = 0; r < n; ++r) {
      auto& b = blocks[static_cast<size_t>(r)];
      (*object_gather_list)[static_cast<size_t>(r)].assign(
          b.begin(), b.begin() + static_cast<std::ptrdiff_t>(sizes[static_cast<size_t>(r)]));
    }
  }
}

void scatter_object_list(std::vector<Bytes>& scatter_object_output_list,
                         const std::vector<Bytes>& scatter_object_input_list, int src, const Group& group) {
  Group g = resolve(group, "scatter_object_list");
  if (g->rank() < 0) return;
  int n = g->size();
  bool is_src = get_global_rank(g, g->rank()) == src;
  if (is_src && scatter_object_input_list.size() != static_cast<size_t>(n)) {
    throw DistInvalidArgument("scatter_object_list: scatter_object_input_list has " +
                              std::to_string(scatter_object_input_list.size()) +
                              " objects but the group has " + std::to_string(n) + " ranks");
  }
  std::vector<int64_t> sizes(static_cast<size_t>(n), 0);
  if (is_src) {
    for (int r = 0; r < n; ++r) {
      sizes[static_cast<size_t>(r)] =
          static_cast<int64_t>(scatter_object_input_list[static_cast<size_t>(r)].size());
    }
  }
  broadcast(Tensor::wrap(sizes), src, g);
  detail::object_bytes(sizes, "scatter_object_list");
  int64_t largest = *std::max_element(sizes.begin(), sizes.end());
  std::vector<std::vector<uint8_t>> blocks;
  std::vector<Tensor> scatter_list;
  if (is_src) {
    for (const auto& obj : scatter_object_input_list) {
      blocks.emplace_back(static_cast<size_t>(largest), 0);
      if (!obj.empty()) std::memcpy(blocks.back().data(), obj.data(), obj.size());
    }
    for (auto& b : blocks) scatter_list.push_back(bytes_tensor(b));
  }
  std::vector<uint8_t> output(static_cast<size_t>(largest));
  scatter(bytes_tensor(output), scatter_list, src, g);
  auto mine = static_cast<size_t>(sizes[static_cast<size_t>(g->rank())]);
  scatter_object_output_list.assign(
      1, Bytes(output.begin(), output.begin() + static_cast<std::ptrdiff_t>(mine)));
}

}  // namespace tdist
