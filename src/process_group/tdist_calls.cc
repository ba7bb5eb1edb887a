// ProcessGroupTdist (tdist_backend.h): how a call runs. Inline on the
// caller's thread or queued on the executor, with its context (sequence
// number, deadline, signature), its checks against the peers' calls, its
// flight-recorder entry, and the domain it runs in.

#include <optional>
#include "algorithms/tuning/tuning.h"
#include "common/completion_thread.h"
#include "common/error_text.h"
#include "forced_algorithms.h"
#include "tdist/blocking_call.h"
#include "tdist/errors.h"
#include "tdist/logging.h"
#include "tdist_backend.h"

namespace tdist {

std::vector<Tensor> ProcessGroupTdist::Outputs::get() const {
  if (list != nullptr) return *list;
  if (one != nullptr) return {*one};
  return {};
}

bool ProcessGroupTdist::claim_inline() {
  // Only the call the functional API made on this very group (not a call
  // that some other backend makes on it from inside that one), and never on
  // a thread that completes operations (a callback): it would hold up the
  // operations that thread must finish meanwhile.
  if (!detail::BlockingCallScope::take(static_cast<const ProcessGroup*>(this)) ||
      detail::CompletionThreadScope::current() != nullptr)
    return false;
  return executor_.try_claim();
}

void ProcessGroupTdist::run_inline(std::string_view op, const Signature& sig,
                                   std::chrono::milliseconds timeout, BodyRef body) {
  struct Release {
    detail::CallExecutor& executor;
    ~Release() { executor.release(); }
  } release{executor_};
  const uint64_t seq = take_seq();
  const algorithms::CallContext ctx = start_call(op, sig, seq, timeout);
  const uint64_t trace_id = trace_begin(op, ctx.sig, static_cast<int64_t>(seq), detail::TraceState::kStarted,
                                        -1, 0, ctx.entered_at);
  try {
    // Only calls that may wait on TCP need it (see transport.h).
    std::optional<transport::CallScope> call;
    if (!all_on_shared_memory_) call.emplace(*transport_);
    run_checked(ctx, body);
  } catch (const std::exception& e) {
    TDIST_LOG(DEBUG) << op << " (call #" << seq << ") failed: " << e.what();
    auto error = explain(std::current_exception(), op, seq);
    trace_end(trace_id, error);
    std::rethrow_exception(error);
  }
  trace_end(trace_id, nullptr);
}

WorkPtr ProcessGroupTdist::enqueue(std::string_view op, const Signature& sig,
                                   std::chrono::milliseconds timeout, std::vector<Tensor> outputs,
                                   Body body) {
  auto work = std::make_shared<Work>(std::string(op), std::move(outputs), this);
  const uint64_t trace_id = trace_begin(op, sig, -1, detail::TraceState::kQueued);
  if (!executor_.push({std::string(op), sig, 0, work, std::move(body), trace_id, timeout})) {
    // Refused: the group is being destroyed. Traced as failed, with the
    // error the caller gets.
    auto error =
        std::make_exception_ptr(DistError(std::string(op) + ": the process group is being destroyed"));
    trace_end(trace_id, error);
    std::rethrow_exception(error);
  }
  return work;
}

void ProcessGroupTdist::execute(detail::QueuedCall& task) {
  // Numbered when it runs: operations run one at a time in call order, so
  // the numbers follow the order in which they run on every rank.
  task.seq = take_seq();
  if (!transport_) {
    // Queued (by another thread) while a rebuild that then failed held the group.
    auto error = std::make_exception_ptr(DistBackendError(task.op + ": " + unusable_text()));
    trace_end(task.trace_id, error);
    task.work->finish(error);
    return;
  }
  const algorithms::CallContext ctx = start_call(task.op, task.sig, task.seq, task.timeout);
  recorder_.started(task.trace_id, static_cast<int64_t>(task.seq), ctx.entered_at);
  std::exception_ptr error;
  try {
    transport::CallScope call(*transport_);
    run_checked(ctx, task.body);
  } catch (...) {
    error = explain(std::current_exception(), task.op, task.seq);
    try {
      throw;
    } catch (const std::exception& e) {
      TDIST_LOG(DEBUG) << task.op << " (call #" << task.seq << ") failed: " << e.what();
    }
  }
  trace_end(task.trace_id, error);
  // Callbacks run inside finish(), here: a blocking wait in one of them must
  // raise (the next operation cannot start until this one returns).
  detail::CompletionThreadScope completing(this);
  task.work->finish(error);
}

std::exception_ptr ProcessGroupTdist::explain(const std::exception_ptr& error, std::string_view op,
                                              uint64_t seq) const {
  if (error_kind(error) != ErrorKind::kNetwork) return error;
  const auto reason = notes_->failure(algorithms::Clock::now() + algorithms::kLateNotes);
  if (!reason) return error;
  return std::make_exception_ptr(DistBackendError(std::string(op) + " (call #" + std::to_string(seq) +
                                                  " in this group): a peer aborted the group: " + *reason));
}

algorithms::CallContext ProcessGroupTdist::start_call(std::string_view op, const Signature& sig, uint64_t seq,
                                                      std::chrono::milliseconds timeout) {
  algorithms::CallContext ctx{
      *transport_, op,        seq,          transport::coarse_now() + timeout,        timeout,
      sig,         last_sig_, notes_.get(), record_calls_ ? detail::trace_ticks() : 0};
  ctx.sig.seq = seq;
  last_sig_ = ctx.sig;
  return ctx;
}

void detail::end_trace(FlightRecorder& recorder, uint64_t trace_id, const std::exception_ptr& error,
                       const char* algorithm) {
  if (trace_id == 0) return;
  if (!error) {
    recorder.completed(trace_id, algorithm);
    return;
  }
  const std::string text = exception_text(error);
  recorder.failed(trace_id, text);
  recorder.dump_if_configured("a call failed: " + text);
}

void ProcessGroupTdist::trace_end(uint64_t trace_id, const std::exception_ptr& error) const {
  // Taken whether recorded or not, so that no later call finds it.
  detail::end_trace(recorder_, trace_id, error, algorithms::take_chosen_algorithm());
}

void ProcessGroupTdist::run_checked(const algorithms::CallContext& ctx, BodyRef body) const {
  if (all_on_shared_memory_) return body(ctx);
  record_call(ctx);
  algorithms::detail::check_unmatched(ctx);
  body(ctx);
  // A peer's message of an earlier call that this rank never received (its
  // broadcast root sent and returned) has arrived by now if this call
  // received anything from that peer: connections keep order.
  algorithms::detail::check_unmatched(ctx);
}

void ProcessGroupTdist::record_call(const algorithms::CallContext& ctx) const {
  auto* group = shm() != nullptr ? shm() : domains_.local.get();
  if (group == nullptr || ctx.sig.empty()) return;
  group->begin_call(ctx.sig, ctx.entered_at);
  group->flush_record();
}

bool ProcessGroupTdist::empty_call(const algorithms::CallContext& ctx, size_t total_bytes) const {
  if (total_bytes != 0 || ctx.size() == 1) return false;
  // On shared memory too: a call that meets nobody would let a rank run any
  // number of calls ahead, past the ring of call records its peers read.
  domain_for<algorithms::BarrierAlgo>().barrier(ctx);
  return true;
}

}  // namespace tdist
