#include "call_executor.h"

namespace tdist::detail {

CallExecutor::CallExecutor(std::function<void(QueuedCall&)> execute) : execute_(std::move(execute)) {}

CallExecutor::~CallExecutor() {
  stop();
}

void CallExecutor::start() {
  worker_ = std::thread([this] { run(); });
}

bool CallExecutor::try_claim() {
  uint64_t idle = 0;
  // Acquire: what the previous call did to the group's state (shared-memory
  // rounds, the transport) happened before this one starts.
  return state_.compare_exchange_strong(idle, 1, std::memory_order_acquire, std::memory_order_relaxed);
}

void CallExecutor::release() {
  // Work queued meanwhile by other threads waits for this call: wake the
  // worker only then (a needless wake-up costs a futex call per op).
  // Sequentially consistent, as claim_when_idle's counterparts: a claimer
  // that found the group busy is then always seen waiting (on x86 no
  // dearer than acq_rel).
  if (state_.fetch_sub(1) != 1) {
    std::lock_guard<std::mutex> lock(mutex_);
    cv_.notify_one();
  } else if (idle_waiters_.load() != 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    idle_cv_.notify_all();
  }
}

bool CallExecutor::push(QueuedCall call) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return false;
    queue_.push_back(std::move(call));
    // Counted once queued; nobody takes the call before this lock is
    // released.
    state_.fetch_add(2, std::memory_order_relaxed);
  }
  cv_.notify_one();
  return true;
}

bool CallExecutor::claim_when_idle() {
  std::unique_lock<std::mutex> lock(mutex_);
  // Sequentially consistent with the releases' fetch_sub and load (run,
  // release): whoever makes the group idle after this failed to claim it
  // sees the waiter and wakes it.
  idle_waiters_.fetch_add(1);
  idle_cv_.wait(lock, [&] {
    uint64_t idle = 0;
    return stopping_ || state_.compare_exchange_strong(idle, 1);
  });
  idle_waiters_.fetch_sub(1);
  // Under the lock that stop() sets stopping_ with: a claim that won saw it
  // false, and a stopping executor was never claimed.
  return !stopping_;
}

void CallExecutor::release_claim() {
  state_.fetch_sub(1);  // seq_cst: see release
  std::lock_guard<std::mutex> lock(mutex_);
  cv_.notify_one();
  idle_cv_.notify_all();  // another claimer may wait for the group
}

std::deque<QueuedCall> CallExecutor::take_queued() {
  std::deque<QueuedCall> taken;
  std::lock_guard<std::mutex> lock(mutex_);
  taken.swap(queue_);
  state_.fetch_sub(2 * taken.size());
  idle_cv_.notify_all();
  return taken;
}

bool CallExecutor::idle() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const WorkPtr latest = latest_work_.lock();  // held by its call while it runs
  return queue_.empty() && (!latest || latest->is_completed());
}

std::deque<QueuedCall> CallExecutor::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  idle_cv_.notify_all();
  if (worker_.joinable() && worker_.get_id() != std::this_thread::get_id()) worker_.join();
  std::deque<QueuedCall> left;
  std::lock_guard<std::mutex> lock(mutex_);
  left.swap(queue_);
  return left;
}

void CallExecutor::run() {
  for (;;) {
    QueuedCall call;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      auto owned = [&] { return (state_.load(std::memory_order_acquire) & 1) != 0; };
      cv_.wait(lock, [&] { return stopping_ || (!queue_.empty() && !owned()); });
      // Stopping: what is queued still runs, unless an inline call owns the
      // group (stop() then fails it).
      if (queue_.empty() || owned()) return;
      call = std::move(queue_.front());
      queue_.pop_front();
      latest_work_ = call.work;
    }
    execute_(call);
    if (state_.fetch_sub(2) == 2 && idle_waiters_.load() != 0) {  // seq_cst: see release
      std::lock_guard<std::mutex> lock(mutex_);
      idle_cv_.notify_all();
    }
  }
}

}  // namespace tdist::detail
