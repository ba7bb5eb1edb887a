#include "transport/transport.h"

#include <stdexcept>
#include <string>

#include "tdist/errors.h"

namespace tdist::transport {

bool Request::wait_until(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  ++waiters_;
  const bool done =
      done_cv_.wait_until(lock, deadline, [&] { return done_.load(std::memory_order_relaxed); });
  --waiters_;
  if (!done) return false;
  if (error_) std::rethrow_exception(error_);
  return true;
}

bool Request::done() const {
  return done_.load(std::memory_order_acquire);
}

// Once done_ is set (release, under the mutex) the outcome never changes,
// so a reader that sees it set (acquire) reads without the lock: the
// completion callbacks read all three, once per message.
template <typename T>
T Request::settled(const T& field) const {
  if (done_.load(std::memory_order_acquire)) return field;
  std::lock_guard<std::mutex> lock(mutex_);
  return field;
}

bool Request::outcome() const {
  if (auto e = error()) std::rethrow_exception(e);
  return true;
}

std::exception_ptr Request::error() const {
  return settled(error_);
}

int Request::source() const {
  return settled(source_);
}

size_t Request::received_bytes() const {
  return settled(received_bytes_);
}

void Request::on_complete(std::function<void(Request&)> callback) {
  on_complete(std::move(callback), nullptr);
}

void Request::on_complete(std::function<void(Request&)> callback, std::shared_ptr<void> owner) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!done_.load(std::memory_order_relaxed)) {
      if (owner) {
        // A second owner would release the first while its callback,
        // which holds a plain pointer to it, is still queued.
        if (owner_) throw std::logic_error("Request::on_complete: the request already has an owner");
        owner_ = std::move(owner);
      }
      if (!first_callback_) {
        first_callback_ = std::move(callback);
      } else {
        callbacks_.push_back(std::move(callback));
      }
      return;
    }
  }
  callback(*this);
}

// The callbacks registered so far, taken under the lock and run outside
// it; the owner is declared first, so it is released after them.
struct Request::Callbacks {
  std::shared_ptr<void> owner;
  std::function<void(Request&)> first;
  std::vector<std::function<void(Request&)>> rest;
  bool finished = false;
  void run(Request& request) const {
    if (first) first(request);
    for (const auto& callback : rest) callback(request);
    if (finished) request.finished();
  }
};

Request::Callbacks Request::take_callbacks_locked() {
  Callbacks taken;
  taken.first.swap(first_callback_);
  taken.rest.swap(callbacks_);
  taken.owner.swap(owner_);
  taken.finished = std::exchange(finished_due_, false);
  return taken;
}

void Request::settle_locked(int source, size_t received_bytes, std::exception_ptr error) {
  if (done_.load(std::memory_order_relaxed)) return;  // the first outcome stays
  source_ = source;
  received_bytes_ = received_bytes;
  error_ = std::move(error);
  finished_due_ = notify_;
  done_.store(true, std::memory_order_release);
}

void Request::run_callbacks() {
  Callbacks taken;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    taken = take_callbacks_locked();
  }
  taken.run(*this);
}

void Request::complete(int source, size_t received_bytes) {
  finish(source, received_bytes, nullptr);
}

void Request::fail(std::exception_ptr error) {
  finish(-1, 0, std::move(error));
}

void Request::finish(int source, size_t received_bytes, std::exception_ptr error) {
  // settle() and run_callbacks() in one hold of the lock: this runs once
  // per message.
  // Most requests have no thread asleep on them (their waiter moves the
  // transport itself and polls done()): no wake-up call then.
  Callbacks taken;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    settle_locked(source, received_bytes, std::move(error));
    taken = take_callbacks_locked();
    wake = waiters_ != 0;
  }
  if (wake) done_cv_.notify_all();
  taken.run(*this);
}

bool Request::settle(int source, size_t received_bytes, std::exception_ptr error) {
  bool callbacks_left = false;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    settle_locked(source, received_bytes, std::move(error));
    callbacks_left = first_callback_ || !callbacks_.empty() || finished_due_;
    wake = waiters_ != 0;
  }
  if (wake) done_cv_.notify_all();
  return callbacks_left;
}

namespace {

[[noreturn]] void refuse_caller_request(const Transport& transport, const char* call) {
  throw DistBackendError(std::string(call) + ": the " + transport.name() +
                         " transport here is a view of some ranks of another (the hierarchy's); post "
                         "point-to-point works on the group's own transport");
}

}  // namespace

void Transport::isend_into(const RequestPtr& request, const void* data,
                           const tdist::detail::CallSignature& sig) {
  (void)request;
  (void)data;
  (void)sig;
  refuse_caller_request(*this, "isend_into");
}

void Transport::irecv_into(const RequestPtr& request, void* data, const tdist::detail::CallSignature& sig) {
  (void)request;
  (void)data;
  (void)sig;
  refuse_caller_request(*this, "irecv_into");
}

}  // namespace tdist::transport
