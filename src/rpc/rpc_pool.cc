#include "rpc/rpc_pool.h"

#include <algorithm>

#include "rpc/rpc_spin.h"

namespace tdist::rpc::detail {

ServingPool::ServingPool(int threads, int max_queued)
    : max_threads_(static_cast<size_t>(std::max(1, threads))),
      max_queued_(static_cast<size_t>(std::max(0, max_queued))) {}

ServingPool::~ServingPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

bool ServingPool::try_post(std::function<void()> task) {
  std::unique_lock<std::mutex> lock(mutex_);
  // Queued tasks each take an idle thread first; beyond those, a new thread
  // while there may be more, then the queue's room.
  const size_t waiting = queue_.size();
  if (waiting >= idle_ && threads_.size() < max_threads_) {
    threads_.emplace_back([this] { run(); });
    ++idle_;
  } else if (waiting >= idle_ + max_queued_) {
    return false;
  }
  queue_.push_back(std::move(task));
  queued_.store(queue_.size(), std::memory_order_release);
  // The polling thread will see it (it takes the mutex before it sleeps,
  // so it cannot miss it either) -- but takes only one: a second request
  // posted while it polls wakes a sleeper.
  const bool wake = !spinner_ || queue_.size() > 1;
  lock.unlock();
  if (wake) work_cv_.notify_one();
  return true;
}

void ServingPool::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    const auto idle_since = std::chrono::steady_clock::now();
    const bool waits = queue_.empty() && !stopping_;
    if (waits && !spinner_ && gauge_.worth_polling(spin_budget())) {
      spinner_ = true;
      lock.unlock();
      spin_until([&] { return queued_.load(std::memory_order_acquire) > 0; }, spin_budget());
      lock.lock();
      spinner_ = false;
    }
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (waits) gauge_.record(std::chrono::steady_clock::now() - idle_since);
    if (queue_.empty()) return;  // stopping, and nothing left to run
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    queued_.store(queue_.size(), std::memory_order_release);
    if (!queue_.empty()) work_cv_.notify_one();  // more than this thread takes (see try_post)
    --idle_;
    ++running_;
    lock.unlock();
    task();
    task = nullptr;  // what it holds goes before the pool counts it done
    lock.lock();
    --running_;
    ++idle_;
    if (running_ == 0 && queue_.empty()) idle_cv_.notify_all();
  }
}

bool ServingPool::wait_idle_until(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  return idle_cv_.wait_until(lock, deadline, [&] { return running_ == 0 && queue_.empty(); });
}

size_t ServingPool::drop_queued() {
  std::deque<std::function<void()>> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    dropped.swap(queue_);
    queued_.store(0, std::memory_order_release);
    if (running_ == 0) idle_cv_.notify_all();
  }
  return dropped.size();  // destroyed here, outside the lock
}

size_t ServingPool::outstanding() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return running_ + queue_.size();
}

}  // namespace tdist::rpc::detail
