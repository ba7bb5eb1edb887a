#include "tdist/work.h"

#include "common/completion_thread.h"
#include "common/owned_by_process.h"
#include "tdist/errors.h"

namespace tdist {

void Future::check_wait_allowed(const std::string& what) const {
  // Waiting for an unfinished operation on the thread that finishes it
  // (from inside a then() callback) could never end.
  if (completer_ == nullptr || completer_ != detail::CompletionThreadScope::current() || completed()) return;
  throw DistError(what +
                  ": wait() inside a then() callback would deadlock: the callback runs on the tdist thread "
                  "that must finish the awaited operation (the group's worker or the transport's event "
                  "loop); return a future from the callback or wait outside it");
}

void Future::wait() {
  wait_for(std::chrono::milliseconds::max(), "Future");
}

bool Future::wait_for(std::chrono::milliseconds timeout, const std::string& what) {
  if (timeout.count() != 0) check_wait_allowed(what);
  // A finished future's outcome never changes (done_ is set last, with
  // release): no lock on the way out of a wait that is over, as most
  // waits on a small message are by the time they start or once the
  // waiting thread has moved the transport itself.
  const auto outcome = [&] {
    if (error_) std::rethrow_exception(error_);
    return true;
  };
  if (done_.load(std::memory_order_acquire)) return outcome();
  auto deadline = timeout == std::chrono::milliseconds::max() ? std::chrono::steady_clock::time_point::max()
                                                              : std::chrono::steady_clock::now() + timeout;
  if (progress_ != nullptr && timeout.count() != 0) {
    progress_(progress_context_, deadline);
    if (done_.load(std::memory_order_acquire)) return outcome();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  ++waiters_;
  const bool done =
      done_cv_.wait_until(lock, deadline, [&] { return done_.load(std::memory_order_relaxed); });
  --waiters_;
  if (!done) return false;
  return outcome();
}

bool Future::completed() const {
  return done_.load(std::memory_order_acquire);
}

std::exception_ptr Future::error() const {
  if (done_.load(std::memory_order_acquire)) return error_;
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

std::vector<Tensor> Future::value() {
  wait();
  std::lock_guard<std::mutex> lock(mutex_);
  return value_;
}

std::shared_ptr<Future> Future::then(std::function<std::vector<Tensor>(Future&)> callback) {
  auto next = std::make_shared<Future>();
  // `this` outlives the callback: it runs below, or from finish(), on a
  // future its caller holds (a work's future has no shared_from_this of its
  // own: it shares the work's).
  auto run = [self = this, next, callback = std::move(callback)] {
    try {
      auto result = callback(*self);
      if (auto error = self->error()) {
        next->set_error(error);
      } else {
        next->set_value(std::move(result));
      }
    } catch (...) {
      next->set_error(std::current_exception());
    }
  };
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!done_.load(std::memory_order_relaxed)) {
      callbacks_.push_back(std::move(run));
      return next;
    }
  }
  run();
  return next;
}

void Future::set_value(std::vector<Tensor> value) {
  finish(std::move(value), nullptr);
}

void Future::set_error(std::exception_ptr error) {
  finish({}, std::move(error));
}

void Future::set_value_unshared(std::vector<Tensor> value) {
  value_ = std::move(value);
  done_.store(true, std::memory_order_release);
}

void Future::finish(std::vector<Tensor> value, std::exception_ptr error) {
  std::vector<std::function<void()>> callbacks;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_.load(std::memory_order_relaxed)) return;
    value_ = std::move(value);
    error_ = std::move(error);
    done_.store(true, std::memory_order_release);
    callbacks.swap(callbacks_);
    wake = waiters_ != 0;  // a waiter that counts itself later finds done_ set
  }
  if (wake) done_cv_.notify_all();
  for (auto& callback : callbacks) callback();
}

Work::Work(std::string op, std::vector<Tensor> outputs, const void* completer)
    : op_(std::move(op)), outputs_(std::move(outputs)), owner_pid_(detail::this_process_id()) {
  future_.set_completer(completer);
}

std::shared_ptr<Future> Work::get_future() const {
  // Aliasing: the future is a member, its owner the work's owner.
  return std::shared_ptr<Future>(shared_from_this(), &future_);
}

bool Work::is_completed() const {
  return future_.completed();
}

bool Work::is_success() const {
  if (!future_.completed()) {
    throw DistError(op_ +
                    ": is_success() called before the operation completed; call wait() or is_completed()");
  }
  return future_.error() == nullptr;
}

std::exception_ptr Work::exception() const {
  return future_.error();
}

bool Work::wait(std::chrono::milliseconds timeout) {
  if (timeout.count() < 0) {
    throw DistInvalidArgument(op_ + ": Work.wait: the timeout is " + std::to_string(timeout.count()) +
                              " ms; it must not be negative");
  }
  if (owner_pid_ != detail::this_process_id() && !future_.completed()) {
    // Its group's threads are the parent's: nothing here would finish it,
    // and driving it would read the parent's connections.
    throw DistBackendError(op_ + ": Work.wait: " + detail::forked_copy_text("operation", owner_pid_) +
                           ", where it never completes");
  }
  // 0 is torch's kNoTimeout: wait for as long as the operation runs.
  if (timeout.count() == 0) timeout = std::chrono::milliseconds::max();
  if (!future_.wait_for(timeout, op_)) {
    throw DistTimeoutError(op_ + ": Work.wait: Timed out after " + std::to_string(timeout.count()) +
                           " ms; the operation is still running");
  }
  return true;
}

int Work::source_rank() const {
  return source_rank_.load(std::memory_order_acquire);
}

WorkPtr Work::finished(std::string op, std::vector<Tensor> outputs, const void* completer, int source_rank) {
  auto work = std::make_shared<Work>(std::move(op), std::vector<Tensor>{}, completer);
  work->finished_.store(true, std::memory_order_relaxed);
  work->source_rank_.store(source_rank, std::memory_order_relaxed);
  work->future_.set_value_unshared(std::move(outputs));
  return work;
}

void Work::finish(std::exception_ptr error, int source_rank) {
  // The first call finishes the work (as the future's first set wins);
  // no lock: this runs once per message.
  if (finished_.exchange(true, std::memory_order_acq_rel)) return;
  source_rank_.store(source_rank, std::memory_order_release);
  // The future holds them from now on (a copy cost allocations on every
  // point-to-point message).
  std::vector<Tensor> outputs = std::move(outputs_);
  if (error) {
    future_.set_error(std::move(error));
  } else {
    future_.set_value(std::move(outputs));
  }
}

}  // namespace tdist
