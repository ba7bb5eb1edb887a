#pragma once

// What the profiler learns about each operation, beyond its "tdist:<op>"
// event (which c10d::Work's constructor records: see WorkTdist).
//
// ParamCommsRecord is the event torch's own backends record for every
// collective ("record_param_comms", torch's RECORD_PARAM_COMMS): torch 1.13's
// ParamCommsDebugInfo carries the rank, op, element counts in and out, dtype
// and split sizes, which profilers with Kineto read into their traces. Torch
// 1.13 has no field for the group's name and size or the sequence number, so
// those ride as the event's inputs, in the order later torch versions pass
// them: {sequence number, group name, rank, op, input split sizes, output
// split sizes, group size}. Nothing is built unless an observer is active.
//
// ParamCommsObserver is a RecordFunction observer that keeps what it sees of
// those events: the tests read it (Debian's torch has no Kineto, so no
// trace of theirs would show the arguments).

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
  ParamCommsRecord(const CommsArgs& args, int rank, int size, const std::string& group_name, uint64_t seq)
      : record_(at::RecordScope::USER_SCOPE) {
    if (!record_.isActive()) return;
    // Observers read the debug info when the event starts and ends: it is
    // declared before record_, so it outlives it.
    info_.emplace(c10::DebugInfoKind::PARAM_COMMS_INFO,
                  std::make_shared<torch::ParamCommsDebugInfo>(
                      rank, std::string(args.op), static_cast<int>(args.in_numel),
                      static_cast<int>(args.out_numel), args.dtype, args.in_splits, args.out_splits));
    std::vector<c10::IValue> inputs{c10::IValue(static_cast<int64_t>(seq)),
                                    c10::IValue(group_name),
                                    c10::IValue(static_cast<int64_t>(rank)),
                                    c10::IValue(std::string(args.op)),
                                    c10::IValue(args.in_splits),
                                    c10::IValue(args.out_splits),
                                    c10::IValue(static_cast<int64_t>(size))};
    record_.before(torch::kParamCommsCallName, &inputs);
  }

 private:
  std::optional<c10::DebugInfoGuard> info_;
  at::RecordFunction record_;
};

/// One record_param_comms event of this plugin as an observer saw it.
struct ParamCommsEvent {
  std::string op;
  int rank = -1;
  int in_numel = 0;
  int out_numel = 0;
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
    if (std::strcmp(fn.name(), torch::kParamCommsCallName.c_str()) != 0) return nullptr;
    auto* info = dynamic_cast<torch::ParamCommsDebugInfo*>(
        c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PARAM_COMMS_INFO));
    auto inputs = fn.inputs();
    if (info == nullptr || inputs.size() != 7 || !inputs[1].isString()) return nullptr;  // not ours
    ParamCommsEvent event;
    event.op = info->getColumnName();
    event.rank = info->getRank();
    event.in_numel = info->getInMessageSize();
    event.out_numel = info->getOutMessageSize();
    event.dtype = c10::toString(info->getDType());
    event.in_splits = info->getInputSplitSizes();
    event.out_splits = info->getOutputSplitSizes();
    event.seq = inputs[0].toInt();
    event.group_name = inputs[1].toStringRef();
    event.group_size = inputs[6].toInt();
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
