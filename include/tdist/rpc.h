#pragma once

/// @file rpc.h
/// Remote calls between named workers (the model of torch.distributed.rpc
/// and paddle.distributed.rpc): every worker starts an Agent with a unique
/// name; any worker calls functions registered by name on any other, with
/// bytes and tensors as arguments and results, synchronously (call_sync) or
/// through a Future (call_async). docs/rpc.md describes the protocol.
///
/// - Requests are served by a bounded pool of threads with a bounded queue;
///   a request that finds both full is answered with an error at once.
/// - An exception a function throws comes back to the caller as RpcError,
///   with its type, message and the worker that raised it.
/// - Every call has a deadline (its timeout, else the agent's default); a
///   call made while serving another inherits what is left of that one's.
/// - A worker that dies fails every call waiting on it, naming it.
/// - shutdown(graceful) waits until no worker has work outstanding, then
///   closes; a worker that died is named and the others still close.

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tdist/errors.h"
#include "tdist/store.h"
#include "tdist/tensor.h"

namespace tdist::rpc {

using Clock = std::chrono::steady_clock;

/// An RPC's arguments or result: opaque bytes (a pickle, in Python) and
/// tensors, which travel as separate messages received straight into
/// their final buffers.
struct Message {
  std::vector<uint8_t> payload;
  std::vector<Tensor> tensors;
};

/// A worker as the other workers know it.
struct WorkerInfo {
  std::string name;
  int id = -1;  ///< its rank
  std::string ip;
  int port = 0;
};

/// A function raised on the worker that ran it. what() names the worker,
/// the function, the exception's type and its message.
class RpcError : public virtual DistError {
 public:
  RpcError(const std::string& what, std::string worker, std::string type, std::string message,
           std::string remote_traceback)
      : DistError(what),
        worker_(std::move(worker)),
        type_(std::move(type)),
        message_(std::move(message)),
        traceback_(std::move(remote_traceback)) {}
  const std::string& worker() const { return worker_; }
  /// The exception's type as the callee named it ("std::out_of_range",
  /// "ValueError", ...).
  const std::string& type() const { return type_; }
  const std::string& message() const { return message_; }
  /// The callee's traceback, if its language has one (Python's).
  const std::string& remote_traceback() const { return traceback_; }

 private:
  std::string worker_, type_, message_, traceback_;
};

class Agent;

/// What a function sees of the call it serves.
struct CallInfo {
  WorkerInfo caller;
  std::string function;
  Clock::time_point deadline;
  /// The agent serving it, for calls of its own (which inherit `deadline`).
  Agent* agent = nullptr;
};

/// A function that may be called remotely. It may throw: a
/// RemoteException keeps its type name and traceback; any other exception
/// is reported with its C++ type.
using Function = std::function<Message(Message args, const CallInfo& call)>;

/// An exception to throw from a Function when the type name (and a
/// traceback) of a foreign language's exception must reach the caller.
class RemoteException : public std::runtime_error {
 public:
  RemoteException(std::string type, const std::string& message, std::string traceback = {})
      : std::runtime_error(message), type_(std::move(type)), traceback_(std::move(traceback)) {}
  const std::string& type() const { return type_; }
  const std::string& traceback() const { return traceback_; }

 private:
  std::string type_, traceback_;
};

/// A copy of `t`, in a buffer the RPC layer may take from the cache it
/// keeps of large receive buffers. The tensors of a call (and of a
/// function's result) are read after call_async (or the function) has
/// returned, until the call completes: a caller that changes a tensor
/// before then sends snapshot(t) instead. tdist.rpc does so for
/// rpc_async's arguments and for every result.
Tensor snapshot(const Tensor& t);

/// Registers `fn` under `name` in this process, for every agent in it
/// (`register` is a C++ keyword). Raises DistInvalidArgument if the name is
/// empty or taken.
void register_function(const std::string& name, Function fn);
/// Removes a registration; true if there was one.
bool unregister_function(const std::string& name);

namespace detail {
struct FutureState;
}

/// The result of an asynchronous call. Copies share one state.
class Future {
 public:
  Future();
  explicit Future(std::shared_ptr<detail::FutureState> state) : state_(std::move(state)) {}

  /// Waits for the result and returns it, or rethrows the call's error.
  Message wait() const;
  /// True once the result or the error is there.
  bool done() const;
  /// The error the call failed with once done (null if it succeeded).
  std::exception_ptr error() const;
  /// A future of fn(this future), run once this one is done (on the thread
  /// that completes it, or at once if it is done); an exception fn throws
  /// fails the returned future.
  Future then(std::function<Message(const Future&)> fn) const;

  /// Completing a future made with Future() (for callers that chain their
  /// own work): exactly one of them, once.
  void set_result(Message result) const;
  void set_error(std::exception_ptr error) const;

 private:
  std::shared_ptr<detail::FutureState> state_;
};

struct AgentOptions {
  /// The default deadline of a call (torch's rpc_timeout: 60 s).
  std::chrono::milliseconds rpc_timeout{std::chrono::seconds(60)};
  /// Threads serving requests (torch's num_worker_threads: 16).
  int num_worker_threads = 16;
  /// Requests that may wait for a thread; one more is refused with an error.
  int max_queued_requests = 1024;
  /// Bound on init (the rendezvous of every worker) and on each phase of a
  /// graceful shutdown.
  std::chrono::milliseconds init_timeout{std::chrono::minutes(5)};
  /// A host every worker can reach (the store's): the address this worker
  /// advertises is the one that reaches it (TcpOptions::reach_host). Empty:
  /// TDIST_SOCKET_IFNAME's, else loopback.
  std::string reach_host;
  /// Tensors of at least this many bytes going to a worker of this host
  /// that may read this process's memory are offered for it to copy
  /// directly (one copy instead of two through sockets); 0: never.
  /// TDIST_RPC_DIRECT_MIN_BYTES replaces it, TDIST_SHM_SINGLE_COPY=0 turns
  /// it off.
  size_t direct_read_min_bytes = size_t{64} << 10;
};

class Agent {
 public:
  /// Joins the `world_size` workers meeting in `store` (keys under "rpc/"):
  /// publishes this worker's name, connects to every other worker and starts
  /// serving. Raises DistInvalidArgument for a name another rank took (both
  /// named) or an empty one, and the store's or the network's errors.
  static std::shared_ptr<Agent> start(const std::string& name, int rank, int world_size,
                                      std::shared_ptr<Store> store, const AgentOptions& options = {});
  virtual ~Agent() = default;

  /// Calls `function` on worker `to` (a name). timeout: zero means the
  /// agent's default, shortened to what a call being served has left.
  /// `label` names the call in errors and pending_calls() instead of
  /// `function` (tdist.rpc: the Python function behind "tdist.python").
  virtual Future call_async(const std::string& to, const std::string& function, Message args,
                            std::chrono::milliseconds timeout = std::chrono::milliseconds::zero(),
                            const std::string& label = {}) = 0;
  Message call_sync(const std::string& to, const std::string& function, Message args,
                    std::chrono::milliseconds timeout = std::chrono::milliseconds::zero()) {
    return call_async(to, function, std::move(args), timeout).wait();
  }

  /// graceful: waits until every worker has called shutdown and no call of
  /// any worker is outstanding, then closes the connections; workers that
  /// died meanwhile are named in a warning and not waited for; each wait is
  /// bounded by init_timeout (DistTimeoutError). Otherwise fails this
  /// worker's outstanding calls, drops requests not yet started, waits only
  /// for functions already running, and closes. Idempotent.
  virtual void shutdown(bool graceful = true) = 0;

  virtual const WorkerInfo& current_worker_info() const = 0;
  /// Raises DistInvalidArgument naming the workers there are, for an
  /// unknown name or id.
  virtual const WorkerInfo& worker_info(const std::string& name) const = 0;
  virtual const WorkerInfo& worker_info(int id) const = 0;
  virtual std::vector<WorkerInfo> all_worker_infos() const = 0;

  /// The calls this worker made that have no answer yet, one line each:
  /// callee, function, age.
  virtual std::vector<std::string> pending_calls() const = 0;
};

}  // namespace tdist::rpc
