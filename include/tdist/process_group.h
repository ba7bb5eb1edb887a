#pragma once

/// @file process_group.h
/// ProcessGroup: a set of ranks that run collectives together, the seam
/// between the functional API (distributed.h) and a backend. Ranks here are
/// group ranks, 0..size()-1. Every operation of the base class fails with
/// "backend X does not support Y", so a backend implements what it supports,
/// honestly. tdist's own backend is registered as "tdist".

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tdist/reduce_op.h"
#include "tdist/store.h"
#include "tdist/tensor.h"
#include "tdist/work.h"

namespace tdist {

/// Options of a process group.
struct ProcessGroupOptions {
  /// Deadline of every operation; the spec's default for CPU backends is 30 minutes.
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  /// The global ranks of the members, in group-rank order (empty: 0..size-1).
  std::vector<int> global_ranks;
  /// A host every rank can reach (the store's master), so transports can pick
  /// the interface that reaches it; empty when unknown.
  std::string master_host;
};

/// Bounds each collective this thread starts, on any group, while the scope
/// lives: by `timeout` instead of the group's timeout (torch's per-call
/// `opts.timeout`, which the torch plugin passes here). The deadline counts
/// from when the operation starts to run, as the group's does; an operation
/// that fails by it fails as one that ran out the group's timeout (a
/// DistTimeoutError naming the op and the ranks it waited for). Scopes nest:
/// the innermost counts. A timeout of 0 or less leaves the group's.
/// Point-to-point operations keep the group's timeout.
class ScopedCallTimeout {
 public:
  explicit ScopedCallTimeout(std::chrono::milliseconds timeout);
  ~ScopedCallTimeout();
  ScopedCallTimeout(const ScopedCallTimeout&) = delete;
  ScopedCallTimeout& operator=(const ScopedCallTimeout&) = delete;
  /// The innermost scope's timeout on this thread, or 0 when there is none.
  static std::chrono::milliseconds current();

 private:
  std::chrono::milliseconds previous_;
};

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size, ProcessGroupOptions options);
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  /// This process's rank in the group.
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// The registered name of the backend ("tdist").
  virtual std::string backend_name() const = 0;
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  /// Global rank of each group rank.
  const std::vector<int>& global_ranks() const { return options_.global_ranks; }
  const ProcessGroupOptions& options() const { return options_; }
  /// True once destroy_process_group() destroyed this group (distributed.h);
  /// the functional API then refuses every call on it.
  bool destroyed() const { return destroyed_.load(std::memory_order_acquire); }
  /// True in a child forked after this group was made: the group's threads,
  /// connections and shared memory are the parent's, and it refuses calls.
  bool forked_copy() const;
  /// The pid of the process that made the group.
  int owner_pid() const { return owner_pid_; }
  void mark_destroyed() { destroyed_.store(true, std::memory_order_release); }
  /// Calls of the functional API (distributed.h) running on this group now
  /// through a handle of it, blocked ones included (those on the default
  /// group given none are counted apart): destroy_process_group() aborts a
  /// group that has any, so that they raise instead of waiting on a group
  /// nobody will use.
  int calls_in_progress() const { return calls_in_progress_.load(std::memory_order_acquire); }
  void enter_call() { calls_in_progress_.fetch_add(1, std::memory_order_acq_rel); }
  void leave_call() { calls_in_progress_.fetch_sub(1, std::memory_order_acq_rel); }
  /// True when no operation of the group is queued or running (async ones
  /// included). Backends without a queue are always idle.
  virtual bool idle() const { return true; }
  /// Lets the queued operations finish, then stops the group's threads and
  /// closes its connections, here and now rather than whenever the last
  /// reference goes (a torch group lives on in the DDP model that holds it,
  /// and its threads must not outlive the interpreter); every later call
  /// raises DistBackendError. torch's destroy_process_group() calls it
  /// through the plugin. Idempotent; a no-op for backends without threads.
  virtual void shutdown() {}
  /// How many collectives this group has started (point-to-point operations
  /// are not counted): the sequence number the next collective will carry,
  /// alike on every rank that made the same calls. 0 for backends that do
  /// not count.
  virtual uint64_t sequence_number() const { return 0; }
  /// The group's communicator name (torch_npu's get_hccl_comm_name): unique
  /// in the job, equal on every member, the same for the group's whole life
  /// (reinit included). Raises "backend X does not support comm_name" for
  /// backends that have none.
  virtual std::string comm_name() const;
  /// torch_npu's reinit_process_group for this group; every member calls it
  /// at the same point of its calls, and no other thread uses the group
  /// meanwhile. Operations queued before it finish first. With
  /// `rebuild_links` the group's connections (sockets, shared memory) are
  /// closed and made anew through the group's store, and its calls are
  /// counted from 0 again, as in a new group; without, the connections stay
  /// and a barrier over them checks that every member is there.
  virtual void reinit(bool rebuild_links);
  /// Aborts the group: its running operation fails on every rank that can
  /// be reached, with a DistBackendError naming this rank and `reason`; its
  /// queued operations fail without starting; every later call raises
  /// until reinit(true) rebuilds the group on every member. Callable from
  /// any thread, also while another is blocked in a call of the group.
  virtual void abort(const std::string& reason);

  // Collectives. Outputs are written through the tensors' shared storage.
  virtual WorkPtr broadcast(const Tensor& tensor, int root);
  virtual WorkPtr all_reduce(const Tensor& tensor, const ReduceOp& op);
  virtual WorkPtr reduce(const Tensor& tensor, int root, const ReduceOp& op);
  virtual WorkPtr all_gather(const std::vector<Tensor>& outputs, const Tensor& input);
  /// `output` holds size() * input.numel() elements: concatenated along the
  /// first dimension, or stacked with a new first dimension of size().
  virtual WorkPtr all_gather_into_tensor(const Tensor& output, const Tensor& input);
  /// Rank r contributes output_split_sizes[r] rows (first dimension); empty
  /// split sizes mean equal ones (torch_npu's None), which must divide.
  virtual WorkPtr all_gather_into_tensor_uneven(const Tensor& output, const Tensor& input,
                                                const std::vector<int64_t>& output_split_sizes);
  virtual WorkPtr gather(const std::vector<Tensor>& outputs, const Tensor& input, int root);
  virtual WorkPtr scatter(const Tensor& output, const std::vector<Tensor>& inputs, int root);
  virtual WorkPtr reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, const ReduceOp& op);
  virtual WorkPtr reduce_scatter_tensor(const Tensor& output, const Tensor& input, const ReduceOp& op);
  /// Rank r receives input_split_sizes[r] rows (first dimension); empty
  /// split sizes mean equal ones (torch_npu's None), which must divide.
  virtual WorkPtr reduce_scatter_tensor_uneven(const Tensor& output, const Tensor& input,
                                               const std::vector<int64_t>& input_split_sizes,
                                               const ReduceOp& op);
  virtual WorkPtr all_to_all(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs);
  /// Empty split sizes mean equal splits along the first dimension.
  virtual WorkPtr all_to_all_single(const Tensor& output, const Tensor& input,
                                    const std::vector<int64_t>& output_split_sizes,
                                    const std::vector<int64_t>& input_split_sizes);
  virtual WorkPtr barrier();

  // Point to point. `src` may be -1 (any source) for recv.
  virtual WorkPtr send(const Tensor& tensor, int dst, int tag);
  virtual WorkPtr recv(const Tensor& tensor, int src, int tag);
  /// Blocking point to point (the functional send, recv and sendrecv):
  /// sends `*send_tensor` to `dst` if `send_tensor` is not null while it
  /// receives into `*recv_tensor` from `src` (-1: any source) if
  /// `recv_tensor` is not null, as MPI_Sendrecv does, and returns once both
  /// are done: the receive's source (-1 without a receive). If one part
  /// fails, the other is still waited for, then the first error raises.
  /// The base posts send() and recv() and waits for their works; tdist
  /// moves a small message that can go at once without making either.
  virtual int sendrecv(const Tensor* send_tensor, int dst, const Tensor* recv_tensor, int src, int tag);

 protected:
  /// Raises DistBackendError "backend X does not support Y".
  [[noreturn]] void unsupported(const char* op) const;

 private:
  int rank_;
  int size_;
  ProcessGroupOptions options_;
  std::atomic<bool> destroyed_{false};
  std::atomic<int> calls_in_progress_{0};
  int owner_pid_;  // the process that made the group (forked_copy)
};

using Group = std::shared_ptr<ProcessGroup>;

/// Creates a backend's process group: (store, rank, size, options).
using BackendFactory = std::function<Group(std::shared_ptr<Store> store, int rank, int size,
                                           const ProcessGroupOptions& options)>;

/// Registers a backend under `name` (compared case-insensitively), as the
/// spec's Backend.register_backend. Raises DistInvalidArgument if the name is
/// taken.
void register_backend(const std::string& name, BackendFactory factory);
/// The canonical (lower-case) name of a registered backend; raises
/// DistInvalidArgument listing the registered ones otherwise.
std::string backend_name(const std::string& name);
/// Names of the registered backends.
std::vector<std::string> registered_backends();
/// Creates a process group with a registered backend.
Group create_process_group(const std::string& backend, std::shared_ptr<Store> store, int rank, int size,
                           const ProcessGroupOptions& options);

}  // namespace tdist
