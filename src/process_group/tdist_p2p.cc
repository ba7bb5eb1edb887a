// ProcessGroupTdist (tdist_backend.h): send and recv, straight on the
// group's transport (no executor: they may overlap each other and the
// collectives), and the end of their uses when the transports go.

#include "common/completion_thread.h"
#include "p2p_lease.h"
#include "tdist/errors.h"
#include "tdist/logging.h"
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

// A work's list of outputs: its one tensor.
std::vector<Tensor> one_tensor(const Tensor& tensor) {
  std::vector<Tensor> tensors;
  tensors.reserve(1);
  tensors.push_back(tensor);
  return tensors;
}

// A send's or a receive's work, with its transport request inside it:
// one allocation for the work, its future and its request, and no
// callback (the request's finished() finishes the work). The transport
// holds the request through a pointer that shares the work's ownership,
// so the work, and the tensor whose bytes are being sent, live until the
// transport lets go of it. A message of 8 B costs a few hundred
// nanoseconds of such bookkeeping (docs/performance.md). A thread waiting
// on the work moves the transport along itself, through the group's lease
// (p2p_lease.h), as the work may outlive the transport.
class P2PWork final : public Work {
 public:
  P2PWork(const char* op, const Tensor& tensor, transport::Request::Kind kind, int peer, uint64_t tag,
          transport::Transport* transport, detail::FlightRecorder* recorder,
          std::shared_ptr<detail::P2pLease> lease, uint64_t generation, uint64_t trace_id)
      : Work(op, one_tensor(tensor), transport),
        request_(*this, kind, peer, tag, tensor.nbytes()),
        transport_(transport),
        recorder_(recorder),
        lease_(std::move(lease)),
        generation_(generation),
        trace_id_(trace_id) {
    future().set_progress(&P2PWork::drive, this);
  }

  /// The request as the transport takes it: sharing the work's ownership.
  transport::RequestPtr request() { return {shared_from_this(), &request_}; }

 private:
  class WorkRequest final : public transport::Request {
   public:
    WorkRequest(P2PWork& work, Kind kind, int peer, uint64_t tag, size_t nbytes)
        : Request(kind, peer, tag, nbytes, /*notify=*/true), work_(work) {}

   private:
    void finished() override { work_.completed(*this); }
    P2PWork& work_;
  };

  // Future::set_progress: the waiting thread drives the transport, which
  // finishes the work on this thread once it lets go, if it drove, else on
  // the transport's own thread. If the transport is closed or closing, the
  // thread waits for that instead (Future::wait_for).
  static void drive(void* context, std::chrono::steady_clock::time_point deadline) {
    auto* work = static_cast<P2PWork*>(context);
    const detail::P2pLease::Entry inside(*work->lease_, work->generation_);
    if (!inside) return;
    try {
      work->transport_->wait(work->request(), deadline);
    } catch (const std::exception& error) {
      // Only the request's outcome finishes the work: until the transport
      // completes or fails it, the tensor is the transport's to fill, and
      // the caller must not be told it may reuse it. The request's own
      // error finishes the work through finished(); the wait goes on in
      // Future::wait_for, bounded by the caller's deadline.
      TDIST_LOG(DEBUG) << work->op() << ": the transport's wait raised: " << error.what();
    } catch (...) {
      TDIST_LOG(DEBUG) << work->op() << ": the transport's wait raised";
    }
  }

  void completed(transport::Request& r) {
    const bool receive = r.kind() == transport::Request::Kind::kRecv;
    std::exception_ptr error = r.error();
    // A receive's capacity is its tensor's size, which the message must have.
    if (!error && receive && r.received_bytes() != r.nbytes()) {
      error = std::make_exception_ptr(
          DistInvalidArgument("recv: the tensor has " + std::to_string(r.nbytes()) + " bytes but rank " +
                              std::to_string(r.source()) + " sent " + std::to_string(r.received_bytes()) +
                              " (send and recv tensors must match)"));
    }
    detail::end_trace(*recorder_, trace_id_, error);
    finish(error, receive && !error ? r.source() : -1);
  }

  WorkRequest request_;
  transport::Transport* const transport_;
  detail::FlightRecorder* const recorder_;
  const std::shared_ptr<detail::P2pLease> lease_;
  const uint64_t generation_;
  const uint64_t trace_id_;
};

}  // namespace

void ProcessGroupTdist::throw_links_closed(const char* op) const {
  check_usable(op);  // a shutdown or an abort says so
  throw DistBackendError(std::string(op) +
                         ": the group's connections are being rebuilt (reinit_process_group) or closed; "
                         "no message can start meanwhile");
}

transport::Transport& ProcessGroupTdist::p2p_transport(const char* op, int tag) const {
  // The caller holds the lease of the generation it read (p2p_lease.h), so
  // the pointer loaded now is that generation's transport, and nothing
  // destroys it while the caller uses it.
  transport::Transport* transport = p2p_transport_.load(std::memory_order_acquire);
  if (transport == nullptr) throw_links_closed(op);
  // A receiver that refused an earlier send of this rank says why at the
  // user's next send or recv (tdist's own messages, on negative tags, leave
  // it for the user's).
  if (tag >= 0) {
    if (auto refused = transport->take_rejection()) std::rethrow_exception(refused);
  }
  return *transport;
}

WorkPtr ProcessGroupTdist::finished_p2p(const char* op, const Tensor& tensor,
                                        const transport::Transport* transport, const Signature& sig, int peer,
                                        int tag, int source) {
  auto work = Work::finished(op, one_tensor(tensor), transport, source);
  trace_begin(op, sig, -1, detail::TraceState::kCompleted, peer, tag);
  return work;
}

WorkPtr ProcessGroupTdist::post_p2p(bool send, const Tensor& tensor, int peer, int tag) {
  const char* op = send ? "send" : "recv";
  check_usable(op);
  // The lease before the transport (p2p_lease.h): a concurrent close waits
  // for this post instead of freeing the transport under it.
  const uint64_t generation = p2p_lease_->generation();
  const detail::P2pLease::Entry posting(*p2p_lease_, generation);
  if (!posting) throw_links_closed(op);
  const auto signature = sig::p2p_signature(tensor.dtype(), count_of(tensor));
  // A small message that can move at once does, with no request, and its
  // work is handed back finished (traced once): a send into a ring with
  // room, a receive of a message that is here. A receive looks before the
  // refusals (p2p_transport): one that is on its way is raised at the next
  // call, as one that comes a moment later would be.
  if (!send && peer != transport::kAnySource) {
    transport::Transport* now = p2p_transport_.load(std::memory_order_acquire);
    if (now != nullptr && now->try_recv_now(peer, p2p_tag(tag), tensor.data(), tensor.nbytes(), signature)) {
      return finished_p2p(op, tensor, now, signature, peer, tag, peer);
    }
  }
  transport::Transport& transport = p2p_transport(op, tag);
  if (send && transport.try_send_now(peer, p2p_tag(tag), tensor.data(), tensor.nbytes(), signature)) {
    return finished_p2p(op, tensor, &transport, signature, peer, tag, -1);
  }
  const auto kind = send ? transport::Request::Kind::kSend : transport::Request::Kind::kRecv;
  // Traced before it is posted: the message may complete inside the post.
  const uint64_t trace_id = trace_begin(op, signature, -1, detail::TraceState::kStarted, peer, tag);
  std::shared_ptr<P2PWork> work;
  try {
    work = std::make_shared<P2PWork>(op, tensor, kind, peer, p2p_tag(tag), &transport, &recorder_, p2p_lease_,
                                     generation, trace_id);
    if (send) {
      transport.isend_into(work->request(), tensor.data(), signature);
    } else {
      transport.irecv_into(work->request(), tensor.data(), signature);
    }
  } catch (...) {
    detail::end_trace(recorder_, trace_id, std::current_exception());
    throw;
  }
  return work;
}

void ProcessGroupTdist::check_send_peer(const char* op, int dst) const {
  validate::rank_in_group(op, "dst", dst, size());
  if (dst == rank()) {
    throw DistInvalidArgument(std::string(op) + ": dst " + std::to_string(dst) +
                              " is this rank; a rank cannot send to itself");
  }
}

void ProcessGroupTdist::check_recv_peer(const char* op, int src) const {
  if (src != transport::kAnySource) validate::rank_in_group(op, "src", src, size());
  if (src == rank()) {
    // Nothing could ever arrive: fail now, as torch does, instead of waiting
    // out the group's timeout.
    throw DistInvalidArgument(std::string(op) + ": src " + std::to_string(src) +
                              " is this rank; a rank cannot receive from itself");
  }
}

WorkPtr ProcessGroupTdist::send(const Tensor& tensor, int dst, int tag) {
  check_send_peer("send", dst);
  return post_p2p(true, tensor, dst, tag);
}

WorkPtr ProcessGroupTdist::recv(const Tensor& tensor, int src, int tag) {
  check_recv_peer("recv", src);
  return post_p2p(false, tensor, src, tag);
}

ProcessGroupTdist::AtOnce ProcessGroupTdist::sendrecv_now(const char* op, const Tensor* send_tensor, int dst,
                                                          const Tensor* recv_tensor, int src, int tag) {
  check_usable(op);
  const uint64_t generation = p2p_lease_->generation();
  const detail::P2pLease::Entry posting(*p2p_lease_, generation);
  if (!posting) throw_links_closed(op);
  transport::Transport& transport = p2p_transport(op, tag);
  AtOnce done;
  Signature send_sig;
  Signature recv_sig;
  if (send_tensor != nullptr) {
    send_sig = sig::p2p_signature(send_tensor->dtype(), count_of(*send_tensor));
    done.sent =
        transport.try_send_now(dst, p2p_tag(tag), send_tensor->data(), send_tensor->nbytes(), send_sig);
    if (!done.sent) return done;
  }
  // Only once the send went: a receive that spun while this rank's own
  // message waited to be posted could keep the peer from sending its own.
  if (recv_tensor != nullptr && src != transport::kAnySource) {
    recv_sig = sig::p2p_signature(recv_tensor->dtype(), count_of(*recv_tensor));
    done.got =
        transport.try_recv_soon(src, p2p_tag(tag), recv_tensor->data(), recv_tensor->nbytes(), recv_sig);
  }
  // One entry of the flight recorder for what moved: the whole call, or
  // its send when the receive goes the usual way (which records it).
  const bool whole = done.got || recv_tensor == nullptr;
  if (whole || done.sent) {
    trace_begin(whole ? op : "send", done.got ? recv_sig : send_sig, -1, detail::TraceState::kCompleted,
                send_tensor != nullptr ? dst : src, tag);
  }
  return done;
}

int ProcessGroupTdist::sendrecv(const Tensor* send_tensor, int dst, const Tensor* recv_tensor, int src,
                                int tag) {
  const char* op = send_tensor == nullptr ? "recv" : recv_tensor == nullptr ? "send" : "sendrecv";
  if (send_tensor != nullptr) check_send_peer(op, dst);
  if (recv_tensor != nullptr) check_recv_peer(op, src);
  // A blocking call needs no work for what moves at once: an 8 B exchange
  // then costs about what its two messages do (docs/performance.md).
  const AtOnce done = sendrecv_now(op, send_tensor, dst, recv_tensor, src, tag);
  if (done.sent) send_tensor = nullptr;
  if (done.got) recv_tensor = nullptr;
  if (send_tensor == nullptr && recv_tensor == nullptr) return done.got ? src : -1;
  return ProcessGroup::sendrecv(send_tensor, dst, recv_tensor, src, tag);
}

bool ProcessGroupTdist::end_p2p_uses(const char* how) {
  // A thread posting a send or receive, or waiting on one's work, drives
  // the transport: it must leave before the transport goes.
  // destroy_process_group() aborted the group already if one was waiting
  // (idle()); else the abort here ends the wait.
  if (p2p_lease_->close()) {
    abort_links(std::string("the group's connections were ") + how +
                " while a thread posted or waited for a send or receive on them");
  }
  // Bounded as destroy_process_group's wait for calls: a thread held in a
  // callback (a Python one waiting for the interpreter lock this thread
  // holds) may never leave.
  const auto limit = std::min(timeout(), std::chrono::milliseconds(30000));
  if (p2p_lease_->drain_for(limit)) return true;
  TDIST_LOG(WARNING) << "process group " << how << ": a thread still posted or waited on its point-to-point "
                     << "connections " << limit.count()
                     << " ms after their abort; they are kept open (leaked)";
  return false;
}

bool ProcessGroupTdist::on_p2p_transport_thread() const {
  if (p2p_lease_->held_here()) return true;
  const void* completing = detail::CompletionThreadScope::current();
  if (completing == nullptr) return false;
  const std::lock_guard<std::mutex> lock(links_mutex_);
  return completing == static_cast<const void*>(transport_.get()) ||
         completing == static_cast<const void*>(shm_p2p_.get());
}

void ProcessGroupTdist::keep_for_good(std::unique_ptr<transport::Transport> shm_p2p,
                                      std::unique_ptr<transport::Transport> transport) {
  try {
    static auto* kept = new std::vector<std::unique_ptr<transport::Transport>>;  // never freed
    static std::mutex kept_mutex;
    const std::lock_guard<std::mutex> lock(kept_mutex);
    kept->push_back(std::move(shm_p2p));
    kept->push_back(std::move(transport));
  } catch (...) {  // out of memory: kept unreachable instead
    (void)shm_p2p.release();
    (void)transport.release();
  }
}

}  // namespace tdist
