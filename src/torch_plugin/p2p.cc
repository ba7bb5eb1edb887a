// Point-to-point operations and the monitored barrier of ProcessGroupTdist.
//
// Wire format of one send: a header of four int64 words {magic, dtype, number
// of elements, sequence number} on the caller's tag, then the payload on a
// tag private to that message (derived from the sequence number). Headers
// follow tdist's matching rules (oldest posted receive for the source and
// tag, any-source included); once a receive has its header it knows the
// sender, so it posts the payload receive for that exact message. Two
// receives can therefore never swap payloads, whatever order they complete
// in, and concurrent senders cannot interleave a header with another's
// payload.
//
// Tags: user tags are 0..2^31-1. Payload tags use [-2^31, -2^30) and
// monitored-barrier tags [-2^30, 0), so neither can meet a user message.

#include <chrono>
#include <string>

#include "conversions.h"
#include "process_group_tdist.h"
#include "tdist/distributed.h"
#include "tdist/errors.h"
#include "work_tdist.h"

namespace tdist::torch_plugin {
namespace {

using WorkHandle = c10::intrusive_ptr<c10d::Work>;

constexpr int64_t kHeaderMagic = 0x7464697374703270;  // "tdistp2p"
constexpr int64_t kHeaderWords = 4;

int payload_tag(uint32_t seq) {
  return static_cast<int>(0x80000000u | (seq & 0x3fffffffu));
}

void check_tag(int tag, const char* op) {
  if (tag < 0) {
    fail(std::string(op) + ": tag " + std::to_string(tag) +
         " is negative; the tdist backend reserves negative tags for its own messages");
  }
}

void check_peer(int peer, int rank, int size, const char* op, const char* what) {
  check_group_rank(peer, size, op, what);
  if (peer == rank) {
    fail(std::string(op) + ": " + what + " " + std::to_string(peer) + " is this rank; a rank cannot " +
         (std::string(op) == "send" ? "send to" : "receive from") + " itself");
  }
}

std::string describe(DType dtype, int64_t numel) {
  return std::string(dtype_name(dtype)) + "[" + std::to_string(numel) + "]";
}

// Second half of a receive, run once the header has arrived (on the thread
// that completed it): post the payload receive for that message and finish
// `work` when it lands, converting the dtype if the sender's differs.
void receive_payload(const c10::intrusive_ptr<WorkTdist>& work, tdist::ProcessGroup& pg, const Tensor& header,
                     int source, const Tensor& target, const at::Tensor& out) {
  const int64_t* words = header.data<int64_t>();
  const std::string& op = work->op();
  if (words[0] != kHeaderMagic) {
    throw DistBackendError(op + ": rank " + rank_name(pg, source) +
                           " sent a message that is not a tdist torch-plugin tensor header (was it sent by "
                           "another program on the same tag?)");
  }
  if (words[1] < 0 || words[1] >= static_cast<int64_t>(kAllDTypes.size()) || words[2] < 0) {
    throw DistBackendError(op + ": rank " + rank_name(pg, source) + " sent a corrupt header (dtype code " +
                           std::to_string(words[1]) + ", " + std::to_string(words[2]) + " elements)");
  }
  auto sent_dtype = static_cast<DType>(words[1]);
  int64_t sent_numel = words[2];
  int tag = payload_tag(static_cast<uint32_t>(words[3]));
  if (sent_dtype == target.dtype() && sent_numel == target.numel()) {
    WorkPtr payload = pg.recv(target, source, tag);
    work->drive_through(payload);
    payload->get_future()->then([work, source](Future& done) -> std::vector<Tensor> {
      work->complete(done.error(), source);
      return {};
    });
    return;
  }
  // The payload is received whole even when it cannot be used, so that the
  // sender completes and the next message on this pair is unaffected.
  Tensor scratch = Tensor::empty(sent_dtype, {sent_numel});
  std::string sender = rank_name(pg, source);
  WorkPtr payload = pg.recv(scratch, source, tag);
  work->drive_through(payload);
  payload->get_future()->then([work, source, sender, scratch, out, target, sent_dtype,
                               sent_numel](Future& done) -> std::vector<Tensor> {
    std::exception_ptr error = done.error();
    if (!error && sent_numel != target.numel()) {
      error = std::make_exception_ptr(
          DistInvalidArgument(work->op() + ": rank " + sender + " sent " + describe(sent_dtype, sent_numel) +
                              " but the receiving tensor is " + target.describe() +
                              "; send and recv tensors must have the same number of elements"));
    }
    if (!error && sent_numel > 0) {
      // Different dtypes, same count: convert as Tensor.copy_ does.
      try {
        at::Tensor sent = at::from_blob(scratch.data(), {sent_numel},
                                        at::TensorOptions().dtype(to_torch_dtype(sent_dtype)));
        out.view({-1}).copy_(sent);
      } catch (...) {
        error = std::current_exception();
      }
    }
    work->complete(error, source);
    return {};
  });
}

}  // namespace

WorkHandle ProcessGroupTdist::send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) {
  const char* op = "send";
  return translate_errors([&]() -> WorkHandle {
    const at::Tensor& t = single_entry(tensors, op, "tensor");
    check_tag(tag, op);
    check_peer(dst_rank, getRank(), getSize(), op, "dst");
    auto comms = record_comms({op, t.numel(), t.numel(), t.scalar_type()});
    Tensor payload = to_tdist(t, op, "tensor");
    uint32_t seq = send_seq_[static_cast<size_t>(dst_rank)].fetch_add(1);
    Tensor header = Tensor::from_vector<int64_t>(
        {kHeaderMagic, static_cast<int64_t>(payload.dtype()), payload.numel(), static_cast<int64_t>(seq)});
    auto work = make_work(c10d::OpType::SEND, op, {}, {t}, {t});
    // tdist's send keeps `header` (owned memory) alive until it is on the wire.
    auto header_sent = pg_->send(header, dst_rank, tag);
    auto payload_sent = pg_->send(payload, dst_rank, payload_tag(seq));
    work->drive_through(header_sent);
    work->drive_through(payload_sent);
    complete_when_done(work, {header_sent, payload_sent});
    return work;
  });
}

WorkHandle ProcessGroupTdist::recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) {
  const char* op = "recv";
  if (src_rank != -1) translate_errors([&] { check_peer(src_rank, getRank(), getSize(), op, "src"); });
  return receive(tensors, src_rank, tag, op, c10d::OpType::RECV);
}

WorkHandle ProcessGroupTdist::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  return receive(tensors, -1, tag, "recv", c10d::OpType::RECVANYSOURCE);
}

WorkHandle ProcessGroupTdist::receive(std::vector<at::Tensor>& tensors, int src_rank, int tag, const char* op,
                                      c10d::OpType type) {
  return translate_errors([&]() -> WorkHandle {
    const at::Tensor& out = single_entry(tensors, op, "tensor");
    check_tag(tag, op);
    const bool any = type == c10d::OpType::RECVANYSOURCE;
    auto comms = record_comms({any ? "recv_any_source" : op, out.numel(), out.numel(), out.scalar_type()});
    Tensor target = to_tdist(out, op, "tensor");
    // As gloo's, the event shows the receiving tensor.
    auto work = make_work(type, op, {out}, {}, {out}, any ? "recv_any_source" : nullptr);
    Tensor header = Tensor::zeros(DType::kInt64, {kHeaderWords});
    WorkPtr header_work = pg_->recv(header, src_rank, tag);
    work->drive_through(header_work);
    // Weak: a receive that never matches must not keep the group alive; the
    // group's destructor fails it instead.
    std::weak_ptr<tdist::ProcessGroup> weak_pg = pg_;
    header_work->get_future()->then(
        [work, header, target, out, weak_pg, header_work](Future& done) -> std::vector<Tensor> {
          try {
            if (done.error()) std::rethrow_exception(done.error());
            auto pg = weak_pg.lock();
            if (!pg) throw DistError(work->op() + ": the process group was destroyed during the receive");
            receive_payload(work, *pg, header, header_work->source_rank(), target, out);
          } catch (...) {
            work->complete(std::current_exception());
          }
          return {};
        });
    return work;
  });
}

void ProcessGroupTdist::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  // No Work to carry the event: it spans the call, which blocks.
  RECORD_USER_SCOPE("tdist:monitored_barrier");
  auto comms = record_comms({"monitored_barrier"});
  // tdist's own (distributed.h), so torch programs get the same report
  // and gloo's wording ("Rank 1 failed to pass monitoredBarrier in ...").
  translate_errors([&] {
    const auto timeout = opts.timeout == c10d::kUnsetTimeout ? timeout_ : opts.timeout;
    tdist::monitored_barrier(pg_, std::chrono::duration_cast<std::chrono::milliseconds>(timeout),
                             wait_all_ranks);
  });
}

}  // namespace tdist::torch_plugin
