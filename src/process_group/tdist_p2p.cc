// ProcessGroupTdist (tdist_backend.h): send and recv, straight on the
// group's transport (no executor: they may overlap each other and the
// collectives).

#include "tdist/errors.h"
#include "tdist_backend.h"
#include "tensor_lists.h"
#include "validate.h"

namespace tdist {
namespace {

namespace sig = tdist::detail;
using detail::count_of;

// Point-to-point tags have the top bit set; collective tags never do.
uint64_t p2p_tag(int tag) {
  return (uint64_t{1} << 63) | static_cast<uint32_t>(tag);
}

}  // namespace

void ProcessGroupTdist::drive_on_wait(Work& work, const transport::RequestPtr& request,
                                      transport::Transport* transport) {
  work.get_future()->set_progress([transport, request](std::chrono::steady_clock::time_point deadline) {
    // The transport runs the request's callbacks (which finish the work):
    // this thread once it lets go, if it drove, else the loop thread.
    try {
      transport->wait(request, deadline);
    } catch (...) {
      // The request's error reaches the work through its callback.
    }
  });
}

transport::Transport& ProcessGroupTdist::p2p_transport(const char* op, int tag) const {
  check_usable(op);
  transport::Transport* transport = p2p_transport_.load(std::memory_order_acquire);
  if (transport == nullptr) {
    check_usable(op);  // a rebuild that failed meanwhile says why
    throw DistBackendError(std::string(op) +
                           ": the group's connections are being rebuilt "
                           "(reinit_process_group); no message can start meanwhile");
  }
  // A receiver that refused an earlier send of this rank says why at the
  // user's next send or recv (tdist's own messages, on negative tags, leave
  // it for the user's).
  if (tag >= 0) {
    if (auto refused = transport->take_rejection()) std::rethrow_exception(refused);
  }
  return *transport;
}

WorkPtr ProcessGroupTdist::send(const Tensor& tensor, int dst, int tag) {
  validate::rank_in_group("send", "dst", dst, size());
  if (dst == rank()) {
    throw DistInvalidArgument("send: dst " + std::to_string(dst) +
                              " is this rank; a rank cannot send to itself");
  }
  transport::Transport& transport = p2p_transport("send", tag);
  auto work = std::make_shared<Work>("send", std::vector<Tensor>{tensor}, &transport);
  const auto signature = sig::p2p_signature(tensor.dtype(), count_of(tensor));
  const uint64_t trace_id = trace_begin("send", signature, -1, detail::TraceState::kStarted, dst, tag);
  auto request = transport.isend(dst, p2p_tag(tag), tensor.data(), tensor.nbytes(), signature);
  // The callback keeps the work, and so its tensor (the bytes being sent),
  // alive until the transport is done with them.
  request->on_complete([recorder = &recorder_, work, trace_id](transport::Request& r) {
    detail::end_trace(*recorder, trace_id, r.error());
    work->finish(r.error());
  });
  drive_on_wait(*work, request, &transport);
  return work;
}

WorkPtr ProcessGroupTdist::recv(const Tensor& tensor, int src, int tag) {
  if (src != transport::kAnySource) validate::rank_in_group("recv", "src", src, size());
  if (src == rank()) {
    // Nothing could ever arrive: fail now, as torch does, instead of waiting
    // out the group's timeout.
    throw DistInvalidArgument("recv: src " + std::to_string(src) +
                              " is this rank; a rank cannot receive from itself");
  }
  transport::Transport& transport = p2p_transport("recv", tag);
  auto work = std::make_shared<Work>("recv", std::vector<Tensor>{tensor}, &transport);
  const auto signature = sig::p2p_signature(tensor.dtype(), count_of(tensor));
  const uint64_t trace_id = trace_begin("recv", signature, -1, detail::TraceState::kStarted, src, tag);
  auto request = transport.irecv(src, p2p_tag(tag), tensor.data(), tensor.nbytes(), signature);
  size_t expected = tensor.nbytes();
  request->on_complete([recorder = &recorder_, work, expected, trace_id](transport::Request& r) {
    std::exception_ptr error = r.error();
    if (!error && r.received_bytes() != expected) {
      error = std::make_exception_ptr(DistInvalidArgument("recv: the tensor has " + std::to_string(expected) +
                                                          " bytes but rank " + std::to_string(r.source()) +
                                                          " sent " + std::to_string(r.received_bytes()) +
                                                          " (send and recv tensors must match)"));
    }
    detail::end_trace(*recorder, trace_id, error);
    work->finish(error, error ? -1 : r.source());
  });
  drive_on_wait(*work, request, &transport);
  return work;
}

}  // namespace tdist
