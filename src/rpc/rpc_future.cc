#include "rpc/rpc_future.h"

#include "common/completion_thread.h"
#include "rpc/rpc_spin.h"

namespace tdist::rpc {

namespace detail {

bool FutureState::complete(Message value, std::exception_ptr failure) {
  std::vector<std::function<void()>> run;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (done) return false;
    done = true;
    settled.store(true, std::memory_order_release);
    result = std::move(value);
    error = std::move(failure);
    run.swap(callbacks);
  }
  cv.notify_all();
  for (auto& callback : run) callback();
  return true;
}

}  // namespace detail

Future::Future() : state_(std::make_shared<detail::FutureState>()) {}

Message Future::wait() const {
  if (state_->completer != nullptr && tdist::detail::CompletionThreadScope::current() == state_->completer &&
      !state_->settled.load(std::memory_order_acquire)) {
    throw DistError(
        "rpc: Future.wait() called on the thread that completes RPC futures (inside a then() callback): "
        "it would wait for itself forever; chain with then() instead");
  }
  // The answer of a short call comes within the spin budget: polling
  // spares the wake-up (rpc_spin.h), where answers have lately come soon.
  static detail::SpinGauge gauge;
  const auto start = std::chrono::steady_clock::now();
  const auto budget = detail::spin_budget();
  if (gauge.worth_polling(budget)) {
    detail::spin_until([&] { return state_->settled.load(std::memory_order_acquire); }, budget);
  }
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->cv.wait(lock, [&] { return state_->done; });
  gauge.record(std::chrono::steady_clock::now() - start);
  if (state_->error) std::rethrow_exception(state_->error);
  return state_->result;
}

bool Future::done() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done;
}

std::exception_ptr Future::error() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->error;
}

Future Future::then(std::function<Message(const Future&)> fn) const {
  Future next;
  next.state_->completer = state_->completer;
  auto run = [self = *this, next, fn = std::move(fn)] {
    Message value;
    try {
      value = fn(self);
    } catch (...) {
      next.state_->complete({}, std::current_exception());
      return;
    }
    next.state_->complete(std::move(value), nullptr);
  };
  {
    std::unique_lock<std::mutex> lock(state_->mutex);
    if (!state_->done) {
      state_->callbacks.emplace_back(std::move(run));
      return next;
    }
  }
  run();
  return next;
}

void Future::set_result(Message result) const {
  if (!state_->complete(std::move(result), nullptr)) throw DistError("rpc: this Future is already completed");
}

void Future::set_error(std::exception_ptr error) const {
  if (!state_->complete({}, std::move(error))) throw DistError("rpc: this Future is already completed");
}

}  // namespace tdist::rpc
