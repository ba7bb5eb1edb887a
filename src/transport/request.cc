#include "transport/transport.h"

#include <stdexcept>

namespace tdist::transport {

bool Request::wait_until(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!done_cv_.wait_until(lock, deadline, [&] { return done_.load(std::memory_order_relaxed); }))
    return false;
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
T Request::outcome(const T& field) const {
  if (done_.load(std::memory_order_acquire)) return field;
  std::lock_guard<std::mutex> lock(mutex_);
  return field;
}

std::exception_ptr Request::error() const {
  return outcome(error_);
}

int Request::source() const {
  return outcome(source_);
}

size_t Request::received_bytes() const {
  return outcome(received_bytes_);
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

void Request::run_callbacks() {
  std::shared_ptr<void> owner;  // declared first: released after the callbacks
  std::function<void(Request&)> first;
  std::vector<std::function<void(Request&)>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    first.swap(first_callback_);
    callbacks.swap(callbacks_);
    owner.swap(owner_);
  }
  if (first) first(*this);
  for (auto& callback : callbacks) callback(*this);
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
  std::shared_ptr<void> owner;  // declared first: released after the callbacks
  std::function<void(Request&)> first;
  std::vector<std::function<void(Request&)>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!done_.load(std::memory_order_relaxed)) {
      source_ = source;
      received_bytes_ = received_bytes;
      error_ = std::move(error);
      done_.store(true, std::memory_order_release);
    }
    first.swap(first_callback_);
    callbacks.swap(callbacks_);
    owner.swap(owner_);
  }
  done_cv_.notify_all();
  if (first) first(*this);
  for (auto& callback : callbacks) callback(*this);
}

bool Request::settle(int source, size_t received_bytes, std::exception_ptr error) {
  bool callbacks_left = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!done_.load(std::memory_order_relaxed)) {
      source_ = source;
      received_bytes_ = received_bytes;
      error_ = std::move(error);
      done_.store(true, std::memory_order_release);
    }
    callbacks_left = first_callback_ || !callbacks_.empty();
  }
  done_cv_.notify_all();
  return callbacks_left;
}

}  // namespace tdist::transport
