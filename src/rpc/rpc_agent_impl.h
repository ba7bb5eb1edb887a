#pragma once

// The RPC agent (include/tdist/rpc.h, docs/rpc.md): one TCP transport among
// the workers, whose event-loop thread receives every request and response
// header (any-source receives on two tags, reposted as each completes) and
// then each tensor straight into the buffer allocated for it -- or, from a
// worker of this host, copies it out of that worker's memory (rpc_direct.h);
// a serving pool runs the functions; a watchdog thread fails calls whose
// deadline passed or whose callee died.
//
// The agent is defined in four files, one per concern:
//   rpc_agent.cc     creation, calling, the workers' names, shutdown, dumps
//   rpc_serve.cc     receiving requests and responses, and serving them
//   rpc_offers.cc    direct reads between workers of one host (rpc_direct.h)
//   rpc_watchdog.cc  pending calls, the watchdog, graceful shutdown's rounds

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <thread>

#include "common/completion_thread.h"
#include "common/env.h"
#include "common/error_text.h"
#include "common/owned_by_process.h"
#include "common/signal_dump.h"
#include "common/socket.h"
#include "rpc/rpc_buffers.h"
#include "rpc/rpc_direct.h"
#include "rpc/rpc_future.h"
#include "rpc/rpc_pool.h"
#include "rpc/rpc_registry.h"
#include "rpc/rpc_spin.h"
#include "rpc/rpc_wire.h"
#include "tdist/logging.h"
#include "tdist/rpc.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/tcp_wire.h"

namespace tdist::rpc::detail {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

// The deadline of the call this thread serves, if any: calls it makes
// inherit what is left of it.
extern thread_local const Clock::time_point* t_serving_deadline;

// Sets t_serving_deadline while a function runs.
class ServingDeadline {
 public:
  explicit ServingDeadline(const Clock::time_point& deadline) : outer_(t_serving_deadline) {
    t_serving_deadline = &deadline;
  }
  ~ServingDeadline() { t_serving_deadline = outer_; }
  ServingDeadline(const ServingDeadline&) = delete;
  ServingDeadline& operator=(const ServingDeadline&) = delete;

 private:
  const Clock::time_point* outer_;
};

// How often the watchdog looks for callees that died, when no deadline is
// nearer: a caller learns of a dead callee within this.
inline constexpr milliseconds kWatchdogPeriod{100};
// Slices in which a graceful shutdown waits for the store, looking for
// workers that died in between.
inline constexpr milliseconds kShutdownSlice{200};
// Timeouts dump the pending calls at most this often (a burst of them dumps once).
inline constexpr milliseconds kDumpInterval{1000};

// "std::out_of_range" for an exception of that type.
std::string type_name(const std::exception& e);
// "12 ms".
std::string ms_text(Clock::duration d);
// Allocates the tensors a header describes.
std::vector<Tensor> allocate(const std::vector<wire::TensorMeta>& metas);

// A call this worker made that has no answer yet.
struct Pending {
  int callee = -1;
  std::string function;
  Clock::time_point start;
  Clock::time_point deadline;
  std::shared_ptr<detail::FutureState> state;
};

// A tensor offered to a peer for a direct read, kept until it has read it.
struct Offer {
  Tensor tensor;
  detail::Hold hold;
};

// Whose offers: the peer, the call and whether they are its answer's.
using OfferKey = std::tuple<int, uint64_t, bool>;

class AgentImpl final : public Agent {
 public:
  AgentImpl(const std::string& name, int rank, int world_size, std::shared_ptr<Store> store,
            const AgentOptions& options);

  ~AgentImpl() override { shutdown(false); }

  Future call_async(const std::string& to, const std::string& function, Message args, milliseconds timeout,
                    const std::string& label) override;

  void shutdown(bool graceful) override;

  const WorkerInfo& current_worker_info() const override { return me(); }

  const WorkerInfo& worker_info(const std::string& name) const override;

  const WorkerInfo& worker_info(int id) const override;

  std::vector<WorkerInfo> all_worker_infos() const override { return infos_; }

  std::vector<std::string> pending_calls() const override;

 private:
  const WorkerInfo& me() const { return infos_[static_cast<size_t>(rank_)]; }

  const std::string& name_of(int id) const { return infos_[static_cast<size_t>(id)].name; }

  std::string describe_call(uint64_t id, const Pending& p, Clock::time_point now,
                            const std::string& state) const;

  // The flight recorder's counterpart for calls: every call this worker
  // waits for, to the log and, with TDIST_TRACE_DIR set, to
  // rpc<rank>.txt there; `also` are calls that just failed.
  void dump_pending(const std::string& reason, const std::vector<std::string>& also) const noexcept;

  std::string names() const;

  // The first address the worker's transport advertised.
  void address_of(int r, WorkerInfo& info);

  void check_names_unique() const;

  DistTimeoutError timeout_error(int callee, const std::string& function, Clock::time_point start,
                                 Clock::time_point deadline) const;

  // --- receiving (rpc_serve.cc) ---------------------------------------------

  // An any-source receive on `tag`, reposted as each message completes it
  // -- after the message is dispatched: a receive posted first could take
  // the next message at once, on this thread, and dispatch it first (calls
  // would be served out of order). Messages already here are taken in a
  // loop, not by callbacks calling this again (which would nest as deep as
  // the backlog). It stops when the transport is destroyed (shutdown).
  void receive(uint64_t tag);

  // Hands a received header on; false if the receive failed (shutdown).
  bool dispatch(uint64_t tag, transport::Request& r, const std::vector<uint8_t>& bytes);

  // Receives the tensors of a header from `source` on `tag` into `tensors`
  // (those `metas` does not offer for a direct read), then runs done(error)
  // once (error: the first receive that failed).
  void receive_tensors(int source, uint64_t tag, const std::vector<wire::TensorMeta>& metas,
                       const std::shared_ptr<std::vector<Tensor>>& tensors,
                       std::function<void(std::exception_ptr)> done);

  void on_request(int source, wire::Request request);

  void serve(int source, const wire::Request& request, std::vector<Tensor> tensors,
             Clock::time_point deadline);

  void answer_error(int to, uint64_t id, const std::string& type, const std::string& message,
                    const std::string& traceback);

  void answer(int to, wire::Response& response, std::vector<Tensor> tensors);

  void on_response(int source, wire::Response response);

  // --- direct reads between workers of one host (rpc_offers.cc) ------------

  // Every worker probes which others it can read and publishes the answer;
  // this worker offers tensors to those that can read it.
  void probe_direct_reads();

  // The descriptions of `tensors` going to `peer` with call `id`: those
  // the peer can read directly are offered (and kept until it has).
  std::vector<wire::TensorMeta> describe(int peer, uint64_t id, bool response,
                                         const std::vector<Tensor>& tensors);

  // Copies the tensors `metas` offers for a direct read out of `source`.
  void read_direct(int source, const std::vector<wire::TensorMeta>& metas, std::vector<Tensor>& tensors);

  // Tells `source` this worker is done with what it offered for call `id`.
  void release_offers(int source, uint64_t id, bool response, const std::vector<wire::TensorMeta>& metas);

  // Lets go of the offers of one call's request or answer.
  void drop_offer(const OfferKey& key);

  // Lets go of the offers `which` picks (a dead peer's, or all at shutdown).
  void drop_offers(const std::function<bool(const OfferKey&)>& which);

  // --- pending calls (rpc_watchdog.cc) ---------------------------------------

  bool is_pending(uint64_t id) const;

  std::optional<Pending> take(uint64_t id);

  void fail(uint64_t id, const std::exception_ptr& error);

  void fail_all(const std::exception_ptr& error);

  // Fails calls whose deadline passed, and calls to workers that died.
  void watch();

  // --- graceful shutdown (rpc_watchdog.cc) -----------------------------------

  // Two rounds through the store. Round 1: every worker has called shutdown
  // (so no caller starts new calls) -- meanwhile all keep serving. Then each
  // waits until its own calls are answered and its pool is idle; round 2:
  // every worker is there, so no call is in flight anywhere and closing
  // cannot cut one off. Workers that died are named and not waited for.
  void quiesce();

  void arrive_and_wait(const std::string& round);

  const int rank_;
  const AgentOptions options_;
  std::shared_ptr<Store> store_;
  std::unique_ptr<transport::Transport> transport_;  // owns it; reset under use_mutex_ at shutdown
  // The same transport as a pointer that never changes, for the loop
  // thread's callbacks (they end inside the transport's destructor), the
  // serving pool and the watchdog (both joined before it goes): they must
  // not read transport_ while shutdown resets it.
  transport::Transport* net_ = nullptr;
  std::vector<WorkerInfo> infos_;
  std::map<std::string, int> by_name_;
  // Direct reads: the workers' processes, and whom this worker offers
  // tensors to (empty: nobody).
  size_t direct_min_bytes_ = 0;  // 0: no direct reads
  std::vector<pid_t> pids_;
  std::vector<bool> offer_to_;
  std::mutex offers_mutex_;
  std::map<OfferKey, std::vector<Offer>> offers_;
  std::unique_ptr<detail::ServingPool> pool_;
  std::mutex serving_mutex_;
  bool serving_ = true;
  // Held while a caller's thread sends (shared) and while the transport is
  // destroyed (exclusive).
  std::shared_mutex use_mutex_;
  std::atomic<bool> closing_{false};

  mutable std::mutex mutex_;
  std::condition_variable watch_cv_;
  Clock::time_point watch_wake_ = Clock::time_point::min();  // when the sleeping watchdog wakes
  std::condition_variable idle_cv_;
  std::map<uint64_t, Pending> pending_;
  bool stopping_ = false;
  std::thread watchdog_;
  Clock::time_point last_dump_{};  // the watchdog's last dump of pending calls
  uint64_t signal_dump_ = 0;       // its SIGUSR1 registration (0: none)
  std::atomic<uint64_t> next_id_{0};
  std::atomic<bool> closed_{false};

  std::mutex shutdown_mutex_;
  bool shut_down_ = false;
  const int owner_pid_ = tdist::detail::this_process_id();  // a forked child's copy refuses calls
};

}  // namespace tdist::rpc::detail
