#pragma once

// What the profiler learns about each operation, beyond its "tdist:<op>"
// event (which c10d::Work's constructor records: see WorkTdist).
//
// ParamCommsRecord is the event torch's own backends record for every
// collective ("record_param_comms", torch's RECORD_PARAM_COMMS): torch 2's
// ParamCommsDebugInfo carries the group's name and description, the rank,
// op, element counts in and out, dtype, split sizes, the members' global
// ranks (start and stride) and the group size, which profilers with Kineto
// read into their traces; the event's inputs are the same values in the
// order RECORD_PARAM_COMMS passes them: {sequence number, (group name,
// description), rank, op, input split sizes, output split sizes, global rank
// start, global rank stride, group size, async}. Nothing is built unless an
// observer is active.
//
// ParamCommsObserver is a RecordFunction observer that keeps what it sees of
// those events: the tests read it.

#include <ATen/record_function.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/distributed/c10d/ParamCommsUtils.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace tdist::torch_plugin {

/// The arguments of one operation, as torch's comm events carry them.
struct CommsArgs {
  const char* op = "";  // the torch.distributed function, "all_reduce"
  int64_t in_numel = 0;
  int64_t out_numel = 0;
  at::ScalarType dtype = at::kByte;  // torch's own default when there is no tensor
  std::vector<int64_t> in_splits;
  std::vector<int64_t> out_splits;
};

class ParamCommsRecord {
 public:
  /// Opens the event (if anyone observes), for the scope of this object.
  /// `global_ranks`: the members' global ranks in group-rank order (empty:
  /// 0..size-1); torch records them as a start and a stride, -1 when they
  /// are not evenly spaced.
  ParamCommsRecord(const CommsArgs& args, int rank, int size, const std::string& group_name,
                   const std::string& group_desc, const std::vector<int64_t>& global_ranks, uint64_t seq)
      : record_(at::RecordScope::USER_SCOPE) {
    if (!record_.isActive()) return;
    int start = 0;
    int stride = 1;
    if (!global_ranks.empty()) {
      start = static_cast<int>(global_ranks[0]);
      stride = global_ranks.size() > 1 ? static_cast<int>(global_ranks[1] - global_ranks[0]) : 1;
      for (size_t i = 1; i < global_ranks.size(); ++i) {
        if (global_ranks[i] - global_ranks[i - 1] != stride) stride = -1;
      }
    }
    // Observers read the debug info when the event starts and ends: it is
    // declared before record_, so it outlives it.
    auto info = std::make_shared<torch::ParamCommsDebugInfo>(
        std::make_tuple(group_name, group_desc), rank, std::string(args.op), args.in_numel, args.out_numel,
        args.dtype, args.in_splits, args.out_splits, start, stride, size, /*isAsynchronizedOp=*/true);
    info->setSequenceInfo(static_cast<int64_t>(seq), /*isP2P=*/false);
    info_.emplace(c10::DebugInfoKind::PARAM_COMMS_INFO, std::move(info));
    std::vector<c10::IValue> inputs{c10::IValue(static_cast<int64_t>(seq)),
                                    c10::IValue(std::make_tuple(group_name, group_desc)),
                                    c10::IValue(static_cast<int64_t>(rank)),
                                    c10::IValue(std::string(args.op)),
                                    c10::IValue(args.in_splits),
                                    c10::IValue(args.out_splits),
                                    c10::IValue(static_cast<int64_t>(start)),
                                    c10::IValue(static_cast<int64_t>(stride)),
                                    c10::IValue(static_cast<int64_t>(size)),
                                    c10::IValue(true)};
    record_.before(at::kParamCommsCallName, &inputs);
  }

 private:
  std::optional<c10::DebugInfoGuard> info_;
  at::RecordFunction record_;
};

/// One record_param_comms event of this plugin as an observer saw it.
struct ParamCommsEvent {
  std::string op;
  int rank = -1;
  int64_t in_numel = 0;
  int64_t out_numel = 0;
  std::string dtype;
  std::vector<int64_t> in_splits;
  std::vector<int64_t> out_splits;
  int64_t seq = -1;
  std::string group_name;
  int64_t group_size = 0;
};

/// A global RecordFunction observer of record_param_comms events (for tests).
class ParamCommsObserver {
 public:
  static void start() {
    std::lock_guard<std::mutex> lock(mutex());
    if (handle() != 0) return;
    events().clear();
    handle() = at::addGlobalCallback(
        at::RecordFunctionCallback(&on_start).needsInputs(true).scopes({at::RecordScope::USER_SCOPE}));
  }

  /// Stops observing; returns the events seen since start().
  static std::vector<ParamCommsEvent> stop() {
    std::lock_guard<std::mutex> lock(mutex());
    if (handle() != 0) at::removeCallback(handle());
    handle() = 0;
    std::vector<ParamCommsEvent> seen;
    seen.swap(events());
    return seen;
  }

 private:
  static std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
    if (std::strcmp(fn.name(), at::kParamCommsCallName.c_str()) != 0) return nullptr;
    auto* info = dynamic_cast<torch::ParamCommsDebugInfo*>(
        c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PARAM_COMMS_INFO));
    auto inputs = fn.inputs();
    if (info == nullptr || inputs.size() != 10 || !inputs[0].isInt()) return nullptr;  // not ours
    ParamCommsEvent event;
    event.op = info->getCollectiveName();
    event.rank = info->getRank();
    event.in_numel = info->getInMessageNelems();
    event.out_numel = info->getOutMessageNelems();
    event.dtype = c10::toString(info->getDType());
    event.in_splits = info->getInputSplitSizes();
    event.out_splits = info->getOutputSplitSizes();
    event.seq = inputs[0].toInt();
    event.group_name = info->getProcessGroupName();
    event.group_size = info->getWorldSize();
    std::lock_guard<std::mutex> lock(mutex());
    events().push_back(std::move(event));
    return nullptr;
  }

  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<ParamCommsEvent>& events() {
    static std::vector<ParamCommsEvent> e;
    return e;
  }
  static at::CallbackHandle& handle() {
    static at::CallbackHandle h = 0;
    return h;
  }
};

}  // namespace tdist::torch_plugin
