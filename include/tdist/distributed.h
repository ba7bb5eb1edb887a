#pragma once

/// @file distributed.h
/// The functional API, shaped like the spec's torch.distributed module:
/// init_process_group, groups, and every operation as a free function with an
/// optional group (nullptr: the default group) and async_op. Ranks passed to
/// these functions (src, dst, peers) are global ranks, as in torch.
///
/// A rank that is not a member of `group` gets what the spec says: get_rank
/// and get_world_size return -1, operations do nothing and return no work
/// handle (nullptr).
///
/// With async_op=false an operation returns once complete, and returns
/// nullptr; with async_op=true it returns a Work handle at once.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tdist/process_group.h"
#include "tdist/reduce_op.h"
#include "tdist/store.h"
#include "tdist/tensor.h"
#include "tdist/work.h"

namespace tdist {

/// The spec's default timeout of process groups of CPU backends.
constexpr std::chrono::milliseconds kDefaultPgTimeout = std::chrono::minutes(30);

/// Arguments of init_process_group, named as in the spec.
struct InitProcessGroupOptions {
  std::string backend = "tdist";
  /// URL (env://, tcp://, file://); empty: env:// unless `store` is given.
  std::string init_method;
  /// An explicit store (with rank and world_size); excludes init_method.
  std::shared_ptr<Store> store;
  int world_size = -1;
  int rank = -1;
  std::chrono::milliseconds timeout = kDefaultPgTimeout;
  std::string group_name;
};

/// Initializes the default process group. Raises DistError if it already
/// is; DistInvalidArgument for a timeout that is not positive (zero is not
/// "no timeout"), a rank below -1 or a world_size of 0 or below -1 (-1 means
/// "not given": from init_method or the environment).
void init_process_group(const InitProcessGroupOptions& options = {});
/// With nullptr (or the default group), destroys the default group and every
/// group new_group made since init_process_group, and drops the library's
/// references to them and the store. Any other group: destroys that group
/// only. A destroyed group's memory goes with its last handle, but every
/// call of this API on a handle kept of it raises DistError ("the process
/// group was destroyed"), as do calls with the default group until the next
/// init_process_group. Raises DistError when there is nothing to destroy:
/// the default group before init_process_group or twice, another group
/// twice (torch 1.13 raises AssertionError and RuntimeError("Invalid process
/// group specified") there). Other threads may be inside calls on the
/// destroyed groups meanwhile: a group with a call in progress or an
/// operation queued is aborted (ProcessGroup::abort), so those calls raise
/// DistBackendError naming destroy_process_group, and the default group is
/// freed only once every call on it has returned.
///
/// The store that init_process_group made (env://, tcp://) is left last:
/// every rank but 0 says it leaves it. Rank 0, which hosts it, returns at
/// once but keeps the store serving, so that ranks still making a group of
/// their own keep it: at exit (std::atexit, registered by the first
/// init_process_group, which also destroys a default group still there),
/// or at its next init_process_group, it waits until every other rank has
/// left the store or is gone (its connection closed), at most the group's
/// timeout and 60 s, and closes it.
void destroy_process_group(const Group& group = nullptr);
bool is_initialized();
/// This process's rank in `group`; -1 if it is not a member.
int get_rank(const Group& group = nullptr);
/// The size of `group`; -1 if this process is not a member.
int get_world_size(const Group& group = nullptr);
/// The backend name of `group` ("tdist").
std::string get_backend(const Group& group = nullptr);
/// The default group (the spec's group.WORLD).
Group default_group();

/// Creates a group of the given global ranks (all ranks when empty). Every
/// rank of the default group must call it, in the same order, unless
/// use_local_synchronization is true (then only members call it). A
/// non-member gets a group handle for which it is not a member. A timeout
/// must be positive (default: the default group's).
Group new_group(const std::vector<int>& ranks = {},
                std::optional<std::chrono::milliseconds> timeout = std::nullopt,
                const std::string& backend = "", bool use_local_synchronization = false);
/// Translates a global rank to its rank in `group` (-1 if not a member) and back.
int get_group_rank(const Group& group, int global_rank);
int get_global_rank(const Group& group, int group_rank);
std::vector<int> get_process_group_ranks(const Group& group);
/// True if this process is a member of `group`.
bool is_member(const Group& group);

// ---- Point to point ----
// Tags are user tags: 0 to 2^31-1. A negative tag raises DistInvalidArgument
// naming the call and the tag before anything is sent (as torch's Gloo, which
// says "Tag must be nonnegative"); negative tags are tdist's own.
void send(const Tensor& tensor, int dst, const Group& group = nullptr, int tag = 0);
/// Receives into `tensor` from `src` (nullopt: any source); returns the
/// sender's global rank (-1 for a non-member).
int recv(const Tensor& tensor, std::optional<int> src = std::nullopt, const Group& group = nullptr,
         int tag = 0);
/// Sends `send_tensor` to `dst` while receiving into `recv_tensor` from
/// `src` (nullopt: any source), as MPI_Sendrecv; returns once both are
/// done, with the sender's global rank (-1 for a non-member). Both use
/// `tag`. A ring of ranks that each send to the next and receive from the
/// previous cannot deadlock, whatever the sizes.
int sendrecv(const Tensor& send_tensor, int dst, const Tensor& recv_tensor,
             std::optional<int> src = std::nullopt, const Group& group = nullptr, int tag = 0);
WorkPtr isend(const Tensor& tensor, int dst, const Group& group = nullptr, int tag = 0);
WorkPtr irecv(const Tensor& tensor, std::optional<int> src = std::nullopt, const Group& group = nullptr,
              int tag = 0);

/// One operation of batch_isend_irecv.
struct P2POp {
  enum class Kind { kIsend, kIrecv };
  Kind op;
  Tensor tensor;
  int peer;  // global rank
  Group group = nullptr;
  int tag = 0;
};
/// Posts every operation, the sends first and then the receives, and
/// returns their work handles in the list's order (every tag is checked
/// before the first is posted). Messages match per sender, receiver and
/// tag, so posting a batch's sends first pairs nothing differently; a small
/// receive posted after its peer's send has come finishes inside its post.
std::vector<WorkPtr> batch_isend_irecv(const std::vector<P2POp>& p2p_op_list);

namespace detail {
/// isend/irecv that take tdist's own negative tags (monitored_barrier's);
/// not for users, whose tags are >= 0.
WorkPtr isend_reserved_tag(const Tensor& tensor, int dst, const Group& group, int tag);
WorkPtr irecv_reserved_tag(const Tensor& tensor, std::optional<int> src, const Group& group, int tag);
}  // namespace detail

// ---- Collectives ----
WorkPtr broadcast(const Tensor& tensor, int src, const Group& group = nullptr, bool async_op = false);
WorkPtr all_reduce(const Tensor& tensor, const ReduceOp& op = ReduceOp::SUM, const Group& group = nullptr,
                   bool async_op = false);
WorkPtr reduce(const Tensor& tensor, int dst, const ReduceOp& op = ReduceOp::SUM,
               const Group& group = nullptr, bool async_op = false);
WorkPtr all_gather(const std::vector<Tensor>& tensor_list, const Tensor& tensor, const Group& group = nullptr,
                   bool async_op = false);
WorkPtr all_gather_into_tensor(const Tensor& output_tensor, const Tensor& input_tensor,
                               const Group& group = nullptr, bool async_op = false);
/// Empty split sizes: equal ones (torch_npu's None).
WorkPtr all_gather_into_tensor_uneven(const Tensor& output, const Tensor& input,
                                      const std::vector<int64_t>& output_split_sizes = {},
                                      const Group& group = nullptr, bool async_op = false);
/// gather_list must be given (size = group size) on dst only.
WorkPtr gather(const Tensor& tensor, const std::vector<Tensor>& gather_list = {}, int dst = 0,
               const Group& group = nullptr, bool async_op = false);
/// scatter_list must be given (size = group size) on src only.
WorkPtr scatter(const Tensor& tensor, const std::vector<Tensor>& scatter_list = {}, int src = 0,
                const Group& group = nullptr, bool async_op = false);
WorkPtr reduce_scatter(const Tensor& output, const std::vector<Tensor>& input_list,
                       const ReduceOp& op = ReduceOp::SUM, const Group& group = nullptr,
                       bool async_op = false);
WorkPtr reduce_scatter_tensor(const Tensor& output, const Tensor& input, const ReduceOp& op = ReduceOp::SUM,
                              const Group& group = nullptr, bool async_op = false);
/// Empty split sizes: equal ones (torch_npu's None).
WorkPtr reduce_scatter_tensor_uneven(const Tensor& output, const Tensor& input,
                                     const std::vector<int64_t>& input_split_sizes = {},
                                     const ReduceOp& op = ReduceOp::SUM, const Group& group = nullptr,
                                     bool async_op = false);
WorkPtr all_to_all(const std::vector<Tensor>& output_tensor_list,
                   const std::vector<Tensor>& input_tensor_list, const Group& group = nullptr,
                   bool async_op = false);
WorkPtr all_to_all_single(const Tensor& output, const Tensor& input,
                          const std::vector<int64_t>& output_split_sizes = {},
                          const std::vector<int64_t>& input_split_sizes = {}, const Group& group = nullptr,
                          bool async_op = false);
WorkPtr barrier(const Group& group = nullptr, bool async_op = false);

// ---- Debugging ----
/// A barrier that names the ranks that did not arrive, instead of hanging
/// (the spec's monitored_barrier). Every other rank sends group rank 0 a
/// message and waits for its answer; rank 0 waits up to `timeout` (default:
/// the group's) for all of them and then releases them. If some did not
/// arrive in time, rank 0 raises DistTimeoutError "monitored_barrier: Rank 1
/// failed to pass monitoredBarrier in 2000 ms ..." naming the first such
/// group rank in rank order, or with `wait_all_ranks` all of them ("Ranks 1,
/// 2 failed to pass monitoredBarrier ..."); the ranks that did arrive raise
/// the same report at once. A rank whose connection failed before it
/// arrived is named the same way, with the network error (DistNetworkError).
/// Ranks other than 0 wait up to the longer of `timeout` and the group's
/// timeout for rank 0 (rank 0 may enter later than they do). Built on
/// point-to-point messages with tags of its own (a count of the group's
/// monitored barriers), so a late message of a failed barrier never
/// satisfies a later one. For debugging: 2 messages per rank, through rank 0.
/// Raises DistInvalidArgument for a timeout that is not positive.
void monitored_barrier(const Group& group = nullptr,
                       std::optional<std::chrono::milliseconds> timeout = std::nullopt,
                       bool wait_all_ranks = false);

// ---- torch_npu's additions ----
/// Rebuilds `group`'s connections in place (torch_npu's
/// reinit_process_group): every member calls it at the same point of its
/// calls, with no other thread using the group meanwhile. Operations queued
/// before it finish first. `rebuild_link`: close the sockets and shared
/// memory and connect anew through the group's store; the group then counts
/// its calls from 0 again, like a new group, and keeps its comm name.
/// Otherwise the connections stay and a barrier checks that every member is
/// there. A non-member returns at once. If the rendezvous fails (a member
/// never comes: DistStoreTimeoutError after the group's timeout), the group
/// has no connections and every later call on it raises DistBackendError.
void reinit_process_group(const Group& group = nullptr, bool rebuild_link = true);
/// Aborts `group` (ProcessGroup::abort): its running operation fails on
/// every rank that can be reached, its queued ones without starting, and
/// every later call raises until reinit_process_group(group) rebuilds it on
/// every member. Any thread may call it, also while another is blocked in a
/// call of the group. A non-member returns at once.
void abort_process_group(const Group& group = nullptr, const std::string& reason = "");
/// The group's communicator name (torch_npu's get_hccl_comm_name): unique
/// in the job, equal on every member, stable for the group's life; empty on
/// a non-member.
std::string get_comm_name(const Group& group = nullptr);

// ---- Continuing without a dead rank (ULFM's revoke, shrink, agree) ----
// docs/fault-tolerance.md compares them with MPIX_Comm_revoke,
// MPIX_Comm_shrink and MPIX_Comm_agree. shrink and agree meet in the
// group's store, so they work when the group's connections are broken (a
// peer died, the group was revoked or aborted); every survivor makes its
// shrink and agree calls on a group in the same order. A rank counts as
// failed once this group's transport saw it die (its connection broke
// without a goodbye, or its process is gone) or once it has not come
// within `timeout` (default: the group's timeout). These raise
// DistInvalidArgument on a process that is not a member and
// DistBackendError on a group of another backend.

/// Revokes `group`: not collective, any member may call it, from any
/// thread. Every pending and later operation of the group fails on every
/// member that can be reached (an abort: abort_process_group), those not in
/// a call at their next one; only shrink, agree and destroy_process_group
/// remain meant for it.
void revoke(const Group& group = nullptr);
/// Called by every survivor of `group`: returns a new group of the
/// survivors, renumbered 0..n-1 in the order of their ranks in `group`, the
/// same membership on every survivor. Ranks that died are left out, also
/// those that die during the call if their death is known when the
/// survivors decide (one that dies after that makes the new group's
/// connection fail, after a timeout, on the others: shrink again). A
/// survivor that comes after the others decided without it raises
/// DistBackendError. The new group has the old one's backend and timeout,
/// and is destroyed with the default group.
Group shrink(const Group& group = nullptr, std::optional<std::chrono::milliseconds> timeout = std::nullopt);
/// Called by every survivor of `group`: returns the bitwise AND of the
/// flags of the survivors that took part, the same value on every survivor
/// that returns, even if ranks die during the call (a rank that joined and
/// then died is left out if its death is known when the survivors decide).
/// A survivor that comes after the others decided raises DistBackendError.
int64_t agree(int64_t flag, const Group& group = nullptr,
              std::optional<std::chrono::milliseconds> timeout = std::nullopt);

// ---- Object collectives on byte strings (the Python layer pickles) ----
/// On src, object_list holds the objects; elsewhere it is resized and filled.
void broadcast_object_list(std::vector<Bytes>& object_list, int src = 0, const Group& group = nullptr);
/// object_list is resized to the group size and filled with every rank's obj.
void all_gather_object(std::vector<Bytes>& object_list, const Bytes& obj, const Group& group = nullptr);
/// On dst, *object_gather_list is resized and filled; elsewhere it must be null.
void gather_object(const Bytes& obj, std::vector<Bytes>* object_gather_list, int dst = 0,
                   const Group& group = nullptr);
/// On src, scatter_object_input_list has one object per rank; every rank's
/// scatter_object_output_list gets its one object (resized to 1).
void scatter_object_list(std::vector<Bytes>& scatter_object_output_list,
                         const std::vector<Bytes>& scatter_object_input_list, int src = 0,
                         const Group& group = nullptr);

}  // namespace tdist
