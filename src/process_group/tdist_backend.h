#pragma once

// tdist's own backend: a TCP transport plus, when the ranks share hosts,
// shared memory; each collective runs in the domain domain_for() picks
// (algorithms/collective_domain.h), in call order, on the group's executor
// (call_executor.h: a worker thread, so that async_op=true returns at once,
// or the caller's thread for a blocking call with nothing before it).
// Point-to-point operations go straight to the transport. Every argument is
// checked on the caller's thread first.
//
// The class is defined in five files, one per concern:
//   tdist_backend.cc  creation, the links (connect, rebuild, abort), shutdown
//   tdist_calls.cc    how a call runs: inline or queued, its context, its
//                     checks and trace, the domain it runs in
//   tdist_ops.cc      the collectives: argument checks, signature, body
//   tdist_p2p.cc      send and recv
//   call_notes.cc     the notes calls leave in the store (StoreCallNotes),
//                     through the thread of notes_worker.cc

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>

#include "algorithms/algorithms.h"
#include "algorithms/collective_domain.h"
#include "call_executor.h"
#include "call_notes.h"
#include "common/function_ref.h"
#include "common/owned_by_process.h"
#include "flight_recorder.h"
#include "forced_algorithms.h"
#include "p2p_lease.h"
#include "tdist/process_group.h"
#include "transport/shm/shm_group.h"
#include "transport/transport.h"
#include "transport_choice.h"

namespace tdist {

namespace detail {
/// Tells `recorder` how call `trace_id` ended (0: unrecorded); after a
/// failure also dumps it when TDIST_TRACE_DIR is set. `algorithm`: what the
/// call ran (algorithms/tuning/tuning.h names every choice), for collectives.
void end_trace(FlightRecorder& recorder, uint64_t trace_id, const std::exception_ptr& error,
               const char* algorithm = nullptr);
}  // namespace detail

class ProcessGroupTdist final : public ProcessGroup {
 public:
  ProcessGroupTdist(const std::shared_ptr<Store>& store, int rank, int size,
                    const ProcessGroupOptions& options);
  ~ProcessGroupTdist() override;

  std::string backend_name() const override { return "tdist"; }
  /// True if the collectives run on shared memory (every rank on this host).
  bool collectives_on_shared_memory() const { return shm() != nullptr; }
  /// True if collectives on shared memory may copy straight from a peer's
  /// tensor (the group's probe found that every rank can read its peers).
  bool single_copy() const { return shm() != nullptr && shm()->single_copy(); }
  /// True if all_reduce runs hierarchically (shared memory inside hosts, TCP across).
  bool hierarchical() const { return domains_.local != nullptr; }
  uint64_t sequence_number() const override { return next_seq_.load(std::memory_order_relaxed); }
  /// Nothing queued, the worker's latest operation (if any) finished, and
  /// no thread waits on a send's or receive's work.
  bool idle() const override;
  void shutdown() override;
  /// Group rank 0's "<host>-<pid>-<n>" (n counts that process's groups),
  /// handed to the others through the store at creation.
  std::string comm_name() const override { return comm_name_; }
  /// The store the group was created with: revoke, shrink and agree
  /// (fault_tolerance.h) meet there when the group's connections are broken.
  const std::shared_ptr<Store>& store() const { return store_; }
  /// True if group rank `peer` is known to have died: its connection broke
  /// without a goodbye (Transport::peer_crashed) or, with every rank on this
  /// host, its process is gone. Unlike a failed connection, false for a live
  /// peer after an abort. Any thread may call it, also while reinit() runs
  /// (false while the group has no connections).
  bool peer_crashed(int peer) const;
  /// The key prefix of this rank's next shrink or agree round on the group
  /// (fault_tolerance.h): "tdist/gen/<k>/ft/<n>/", k the group's generation
  /// (connect_generation) and n counting the rounds since it connected, so
  /// that survivors that rebuilt the group and a replacement that created
  /// it anew count alike.
  std::string next_round_prefix();
  /// Fails the running operation of the group on every rank that can be
  /// reached (shared-memory waiters wake, TCP peers get an abort notice),
  /// fails the queued ones without starting them, and makes every later
  /// call raise until reinit() rebuilds the group. Any thread may call it,
  /// also while another is blocked in a call of the group or in reinit();
  /// only the first call counts (until a rebuild).
  void abort(const std::string& reason) override;
  /// Waits for the queued operations, then (rebuild_links) closes the
  /// connections and makes new ones as the group's next generation
  /// (connect_generation), or (!rebuild_links) runs a barrier. Raises what the
  /// rendezvous or the barrier raises; a group whose rebuild failed raises
  /// that error at every later call. An abort() that comes once the rebuild
  /// has begun is not lost: it reaches the new connections, the group stays
  /// unusable and reinit raises it (DistBackendError).
  void reinit(bool rebuild_links) override;

  WorkPtr broadcast(const Tensor& tensor, int root) override;
  WorkPtr all_reduce(const Tensor& tensor, const ReduceOp& op) override;
  WorkPtr reduce(const Tensor& tensor, int root, const ReduceOp& op) override;
  WorkPtr all_gather(const std::vector<Tensor>& outputs, const Tensor& input) override;
  WorkPtr all_gather_into_tensor(const Tensor& output, const Tensor& input) override;
  WorkPtr all_gather_into_tensor_uneven(const Tensor& output, const Tensor& input,
                                        const std::vector<int64_t>& output_split_sizes) override;
  WorkPtr gather(const std::vector<Tensor>& outputs, const Tensor& input, int root) override;
  WorkPtr scatter(const Tensor& output, const std::vector<Tensor>& inputs, int root) override;
  WorkPtr reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                         const ReduceOp& op) override;
  WorkPtr reduce_scatter_tensor(const Tensor& output, const Tensor& input, const ReduceOp& op) override;
  WorkPtr reduce_scatter_tensor_uneven(const Tensor& output, const Tensor& input,
                                       const std::vector<int64_t>& input_split_sizes,
                                       const ReduceOp& op) override;
  WorkPtr all_to_all(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs) override;
  WorkPtr all_to_all_single(const Tensor& output, const Tensor& input,
                            const std::vector<int64_t>& output_split_sizes,
                            const std::vector<int64_t>& input_split_sizes) override;
  WorkPtr barrier() override;
  WorkPtr send(const Tensor& tensor, int dst, int tag) override;
  WorkPtr recv(const Tensor& tensor, int src, int tag) override;
  int sendrecv(const Tensor* send_tensor, int dst, const Tensor* recv_tensor, int src, int tag) override;

 private:
  // ---- Creation and links (tdist_backend.cc) ----
  /// The shared-memory group when every rank is on this host, else null.
  transport::shm::ShmGroup* shm() const { return domains_.shm.get(); }
  /// Makes the transport, the collective domains and the call notes over
  /// `store` (the constructor's and reinit's rendezvous), within `timeout`;
  /// `while_waiting` (TcpOptions::while_waiting) may give it up.
  void connect(const std::shared_ptr<Store>& store, std::chrono::milliseconds timeout,
               std::function<void()> while_waiting);
  /// connect() as the group's next generation, which its members agree on
  /// in the group's store: generation k is their k-th connect together and
  /// meets under "tdist/gen/<k>/"; "tdist/generation/<rank>" holds the
  /// latest generation each rank entered. A rank enters the generation
  /// after its own latest, or the latest one begun if that is higher. The
  /// survivors' reinit() and a replacement's constructor (a new process
  /// with the same rank and store) thus both land on the generation after
  /// the dead rank's. A rank that waits in a generation that a later one
  /// has superseded (a member died during the connect, and its replacement
  /// began the next one) moves on to that, and one whose connect failed
  /// waits for a later one; all within the group's timeout. A connect that
  /// fails names the ranks at other generations.
  void connect_generation();
  /// Returns once every rank of the group has made the last store read of
  /// its creation: the store's host (rank 0 of a job, which may exit as
  /// soon as its own init returns) then never goes while a peer still
  /// reads from it. A barrier over TCP, outside the calls' sequence,
  /// within `left` (what the connect left of the group's timeout).
  void startup_barrier(std::chrono::milliseconds left);
  /// "rank 2 is at generation 1, ..." for the members whose count differs
  /// from this rank's; empty if none does (or the store is gone).
  std::string other_generations() const;
  /// Closes what connect() made, failing pending point-to-point requests.
  /// Waits for the abort() and peer_crashed() calls that use the old
  /// connections (LinksPin) to end first.
  void disconnect();
  /// Closes the point-to-point lease (p2p_lease.h) and ends what is inside
  /// it: aborts the links if a post or a wait is, then waits for it to
  /// leave (up to the group's timeout, at most 30 s). `how` says what
  /// closes them, for that abort's error. False if a thread stayed inside:
  /// the caller must then keep the transports (keep_for_good).
  bool end_p2p_uses(const char* how);
  /// True on a thread that runs inside one of the group's point-to-point
  /// transports (its own thread, or one driving it from a wait or a post):
  /// closing them there would wait for that thread.
  bool on_p2p_transport_thread() const;
  /// Keeps transports that a thread may still be inside alive for the rest
  /// of the process: a leak, never a use after free.
  static void keep_for_good(std::unique_ptr<transport::Transport> shm_p2p,
                            std::unique_ptr<transport::Transport> transport);
  // Stops the executor once its queue is empty (now, if a call runs
  // inline) and fails what is left queued, saying the group was `why`.
  void stop_worker(const char* why);
  /// Pins the group's connections, so that disconnect() does not destroy
  /// them while a thread other than the group's owner uses them (abort,
  /// peer_crashed); defined in the .cc.
  class LinksPin;
  /// Aborts the connections (shared memory, TCP) with `why`.
  void abort_links(const std::string& why);
  /// Raises why the group cannot run calls (aborted, or a failed rebuild).
  void check_usable(std::string_view op) const;
  std::string unusable_text() const;
  void set_unusable(std::string reason);
  /// Registers the group with the flight recorder (its peers' call records
  /// on shared memory name who arrived last).
  void trace_register(Store& store);

  // ---- How a call runs (tdist_calls.cc) ----
  using Body = std::function<void(const algorithms::CallContext&)>;
  using Signature = tdist::detail::CallSignature;
  /// The tensors a queued operation's future completes with: one, a list,
  /// or none. Copied only when the operation is queued.
  struct Outputs {
    const Tensor* one = nullptr;
    const std::vector<Tensor>* list = nullptr;
    std::vector<Tensor> get() const;
  };
  using BodyRef = detail::FunctionRef<void(const algorithms::CallContext&)>;
  /// Runs (this->*body)(ctx, args...) as operation `op`. A blocking call of
  /// the functional API with nothing queued or running before it runs here,
  /// on the caller's thread, and returns null (done; its error propagates);
  /// anything else is queued for the worker, with copies of `args`, and
  /// returns its work. Sequence numbers are taken as operations start, in
  /// the order they run.
  /// `sig` is what this rank passes (CallSignature): peers compare theirs
  /// with it before they use any of its data.
  template <typename... Params, typename... Args>
  WorkPtr submit(std::string_view op, const Signature& sig, Outputs outputs,
                 void (ProcessGroupTdist::*body)(const algorithms::CallContext&, Params...),
                 const Args&... args) {
    check_usable(op);
    const Signature& checked = check_calls_ ? sig : Signature{};
    const auto timeout = call_timeout();
    if (claim_inline()) {
      run_inline(op, checked, timeout,
                 [&](const algorithms::CallContext& ctx) { (this->*body)(ctx, args...); });
      return nullptr;
    }
    return enqueue(
        op, checked, timeout, outputs.get(),
        [this, body, args...](const algorithms::CallContext& ctx) { (this->*body)(ctx, args...); });
  }
  /// True if this call may run on the calling thread now; it then owns the
  /// group until run_inline() returns.
  bool claim_inline();
  void run_inline(std::string_view op, const Signature& sig, std::chrono::milliseconds timeout, BodyRef body);
  /// Queues a collective for the worker.
  WorkPtr enqueue(std::string_view op, const Signature& sig, std::chrono::milliseconds timeout,
                  std::vector<Tensor> outputs, Body body);
  /// Runs one queued call on the worker and finishes its work.
  void execute(detail::QueuedCall& call);
  /// The deadline of a collective started now: the caller's
  /// ScopedCallTimeout, else the group's timeout.
  std::chrono::milliseconds call_timeout() const {
    const auto scoped = ScopedCallTimeout::current();
    return scoped.count() > 0 ? scoped : timeout();
  }
  /// The context of the operation about to run as call `seq` (the thread
  /// that owns the group calls it: it also keeps last_sig_).
  algorithms::CallContext start_call(std::string_view op, const Signature& sig, uint64_t seq,
                                     std::chrono::milliseconds timeout);
  /// Runs `body`, and for groups whose calls may cross TCP records the
  /// call (record_call) and looks for unreceived messages of other calls
  /// before and after it (check_unmatched).
  void run_checked(const algorithms::CallContext& ctx, BodyRef body) const;
  /// Groups whose calls do not all run on shared memory (hierarchical
  /// ones, ops forced to TCP) record every call in their shared-memory
  /// domain anyway, so that a peer there names the call a rank made
  /// elsewhere instead of finding no record of it (ShmGroup::begin_call).
  void record_call(const algorithms::CallContext& ctx) const;
  /// If `error` is a broken connection and a peer left the reason it
  /// aborted the group in the store (StoreCallNotes::failed), that reason
  /// as a DistBackendError; else `error`.
  std::exception_ptr explain(const std::exception_ptr& error, std::string_view op, uint64_t seq) const;
  /// Tells the flight recorder how call `trace_id` ended; after a failure
  /// also dumps it when TDIST_TRACE_DIR is set.
  void trace_end(uint64_t trace_id, const std::exception_ptr& error) const;
  /// A new flight recorder entry of this group (FlightRecorder::begin), or
  /// 0 when the group records nothing.
  uint64_t trace_begin(std::string_view op, const Signature& sig, int64_t seq, detail::TraceState state,
                       int peer = -1, int64_t tag = 0, int64_t now_ns = 0) {
    return record_calls_ ? recorder_.begin(trace_group_, op, sig, seq, state, peer, tag, now_ns) : 0;
  }
  /// The next sequence number; only the thread that owns the group calls it
  /// (a plain load and store: nobody else writes).
  uint64_t take_seq() {
    const uint64_t seq = next_seq_.load(std::memory_order_relaxed);
    next_seq_.store(seq + 1, std::memory_order_relaxed);
    return seq;
  }
  /// Where the collective whose TCP algorithms are `Algo` runs: the TCP
  /// domain when TDIST_ALGO_<OP> forces one of them (so the variable also
  /// leaves shared memory for that op: docs/environment.md), else the
  /// group's domain (shared memory, the hierarchy, or TCP). The one place
  /// that chooses.
  template <typename Algo>
  algorithms::CollectiveDomain& domain_for() const {
    if ((forced_algos_ & detail::forced_bit<Algo>()) != 0) return algorithms::tcp_domain();
    return domains_.collectives();
  }
  /// A call that moves no bytes on any rank (by this rank's arguments)
  /// runs a barrier instead, so that a peer that passed more still meets
  /// this rank's signature and fails, instead of waiting out its timeout
  /// for messages that never come, and so that no rank runs ahead of its
  /// peers by more calls than they keep records of. True if it did.
  bool empty_call(const algorithms::CallContext& ctx, size_t total_bytes) const;

  // ---- The collectives' bodies, run inline or on the worker (tdist_ops.cc) ----
  void run_broadcast(const algorithms::CallContext& ctx, const Tensor& tensor, int root);
  void run_all_reduce(const algorithms::CallContext& ctx, const Tensor& tensor, const ReduceOp& op);
  void run_reduce(const algorithms::CallContext& ctx, const Tensor& tensor, int root, const ReduceOp& op);
  void run_all_gather(const algorithms::CallContext& ctx, const std::vector<Tensor>& outputs,
                      const Tensor& input);
  void run_all_gather_into_tensor(const algorithms::CallContext& ctx, const Tensor& output,
                                  const Tensor& input, size_t block);
  void run_all_gather_into_tensor_uneven(const algorithms::CallContext& ctx, const Tensor& output,
                                         const Tensor& input, const std::vector<size_t>& bytes);
  void run_gather(const algorithms::CallContext& ctx, const std::vector<Tensor>& outputs, const Tensor& input,
                  const std::vector<size_t>& bytes, int root);
  void run_scatter(const algorithms::CallContext& ctx, const Tensor& output,
                   const std::vector<Tensor>& inputs, const std::vector<size_t>& bytes, int root);
  void run_reduce_scatter(const algorithms::CallContext& ctx, const Tensor& output,
                          const std::vector<Tensor>& inputs, const std::vector<size_t>& counts,
                          const ReduceOp& op);
  void run_reduce_scatter_tensor(const algorithms::CallContext& ctx, const Tensor& output,
                                 const Tensor& input, const std::vector<size_t>& counts, const ReduceOp& op);
  void run_reduce_scatter_tensor_uneven(const algorithms::CallContext& ctx, const Tensor& output,
                                        const Tensor& input, const std::vector<size_t>& counts,
                                        const ReduceOp& op);
  void run_all_to_all(const algorithms::CallContext& ctx, const std::vector<Tensor>& outputs,
                      const std::vector<Tensor>& inputs);
  void run_all_to_all_single(const algorithms::CallContext& ctx, const Tensor& output, const Tensor& input,
                             const std::vector<size_t>& send_bytes, const std::vector<size_t>& recv_bytes);
  void run_barrier(const algorithms::CallContext& ctx);
  // The bodies shared by several ops.
  void all_gather_bytes(const algorithms::CallContext& ctx, const void* in, void* out,
                        const std::vector<size_t>& bytes) const;
  void reduce_scatter_elements(const algorithms::CallContext& ctx, const void* in, const Tensor& output,
                               const std::vector<size_t>& counts, const ReduceOp& op) const;

  // ---- Point-to-point (tdist_p2p.cc) ----
  /// The transport a send or recv starts on; raises while a rebuild has
  /// none, and (tag >= 0) what a receiver that refused an earlier send of
  /// this rank sent back (Transport::take_rejection).
  /// The caller holds the lease (p2p_lease.h) of the generation it posts on.
  transport::Transport& p2p_transport(const char* op, int tag) const;
  /// Posts a validated send (`send`) or recv of `tensor` with `peer`.
  WorkPtr post_p2p(bool send, const Tensor& tensor, int peer, int tag);
  /// The finished work of a send or receive that moved inside its post
  /// (Transport::try_send_now, try_recv_now); `source` is the sender's rank
  /// for a receive, -1 for a send.
  WorkPtr finished_p2p(const char* op, const Tensor& tensor, const transport::Transport* transport,
                       const Signature& sig, int peer, int tag, int source);
  /// Raises DistInvalidArgument unless `dst` may be sent to / `src`
  /// received from (-1: any source) by this rank of the group.
  void check_send_peer(const char* op, int dst) const;
  void check_recv_peer(const char* op, int src) const;
  /// sendrecv's parts that moved at once: a small send into a ring with
  /// room, then (only if the send went) a receive from `src` of a small
  /// message that is here or comes within a few microseconds.
  struct AtOnce {
    bool sent = false;
    bool got = false;
  };
  AtOnce sendrecv_now(const char* op, const Tensor* send_tensor, int dst, const Tensor* recv_tensor, int src,
                      int tag);
  /// Raises why no send or recv can start: the connections are gone or going.
  [[noreturn]] void throw_links_closed(const char* op) const;

  // ---- State ----
  /// The group's call notes in its store (call_notes.h).
  std::unique_ptr<detail::StoreCallNotes> notes_;
  // The store the group was created with (reinit rendezvouses under a prefix of it).
  std::shared_ptr<Store> store_;
  std::string comm_name_;
  // connect_generation's generation and the shrink/agree rounds counted
  // since (next_round_prefix); guarded by mutex_.
  int64_t generation_ = 0;
  uint64_t ft_rounds_ = 0;
  // Between reinit's disconnect and its end (guarded by mutex_): an abort
  // meanwhile is kept in abort_in_rebuild_ for reinit to apply to the new
  // connections, instead of being erased when the rebuild ends.
  bool rebuilding_ = false;
  std::optional<std::string> abort_in_rebuild_;
  // Guards the swap of the connections below (transport_, shm_p2p_,
  // domains_, p2p_transport_) against abort() and peer_crashed() on other threads;
  // links_pins_ counts those using them (LinksPin). Held only for the swap,
  // not for the rendezvous, so an abort never waits for a rebuild.
  mutable std::mutex links_mutex_;
  mutable std::condition_variable links_cv_;
  mutable int links_pins_ = 0;
  // Set while the group cannot run calls (abort(), a failed rebuild);
  // unusable_reason_ (guarded by mutex_) says why.
  std::atomic<bool> unusable_{false};
  std::string unusable_reason_;
  std::unique_ptr<transport::Transport> transport_;
  // Point-to-point messages over shared memory when every rank shares this
  // host (null otherwise: they go over transport_). It watches transport_
  // for dead peers, so it is destroyed first.
  std::unique_ptr<transport::Transport> shm_p2p_;
  // shm_p2p_ or transport_ as point-to-point calls read it: they may come from any
  // thread, even the old transport's loop while a rebuild destroys it.
  std::atomic<transport::Transport*> p2p_transport_{nullptr};
  // The waits of send and receive works that drive p2p_transport_
  // (p2p_lease.h): disconnect() ends them before it destroys it.
  const std::shared_ptr<detail::P2pLease> p2p_lease_ = std::make_shared<detail::P2pLease>();
  // Destroyed before transport_, which the subset transports point into.
  CollectiveDomains domains_;
  // Ops whose TCP algorithm TDIST_ALGO_<OP> forces (read once, at creation),
  // bit i for the i-th Algo enum of algorithms.h.
  uint32_t forced_algos_ = 0;
  // Every collective runs on shared memory: none needs a TCP CallScope.
  bool all_on_shared_memory_ = false;
  // Guards the fields above that say so.
  mutable std::mutex mutex_;
  std::atomic<bool> shut_down_{false};  // shutdown() ran: the worker is gone for good
  // The next operation's sequence number, taken when it starts to run, by
  // the thread that owns the group then (the executor orders them); atomic
  // only so that sequence_number() may read it from any thread.
  std::atomic<uint64_t> next_seq_{0};
  // The signature of the last operation run (CallContext::previous), kept
  // by the thread that owns the group, like next_seq_.
  Signature last_sig_{};
  // False only under TDIST_TESTONLY_UNCHECKED_CALLS=1, which measures what
  // the checks cost (docs/performance.md): calls then carry no signature.
  bool check_calls_ = true;
  detail::FlightRecorder& recorder_ = detail::FlightRecorder::instance();
  uint32_t trace_group_ = 0;  // this group's id in the recorder
  // False when the recorder is off, or under TDIST_TESTONLY_UNRECORDED_CALLS=1,
  // which measures what recording costs (docs/performance.md).
  bool record_calls_ = true;
  // Runs the calls one at a time; stopped (stop_worker) before the members
  // above that its calls use are destroyed.
  detail::CallExecutor executor_{[this](detail::QueuedCall& call) { execute(call); }};
};

}  // namespace tdist
