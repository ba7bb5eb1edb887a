#include "notes_worker.h"

#include <unistd.h>

#include <thread>

namespace tdist::detail {

struct NotesWorker::Job {
  std::function<void()> fn;
  bool done = false;  // under State::mutex
  bool ok = false;
};

// Shared by the worker and its thread, which may outlive it (detached,
// stuck in a store operation).
struct NotesWorker::State {
  std::mutex mutex;
  std::condition_variable cv;
  std::shared_ptr<Job> job;  // the one running or about to; null when idle
  bool stop = false;
};

NotesWorker::~NotesWorker() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!state_) return;
  {
    std::lock_guard<std::mutex> state_lock(state_->mutex);
    state_->stop = true;
  }
  state_->cv.notify_all();
}

void NotesWorker::loop(const std::shared_ptr<State>& state) {
  std::unique_lock<std::mutex> lock(state->mutex);
  for (;;) {
    state->cv.wait(lock, [&] { return state->stop || (state->job && !state->job->done); });
    if (!state->job || state->job->done) return;  // stopped, nothing to finish
    const std::shared_ptr<Job> job = state->job;
    lock.unlock();
    bool ok = false;
    try {
      job->fn();
      ok = true;
    } catch (...) {
      // A failed note is a note not taken; the caller sees false.
    }
    lock.lock();
    job->ok = ok;
    job->done = true;
    state->job.reset();
    state->cv.notify_all();
  }
}

std::shared_ptr<NotesWorker::State> NotesWorker::state() {
  std::lock_guard<std::mutex> lock(mutex_);
  // A forked child has the state but not the thread: it starts its own.
  if (!state_ || pid_ != getpid()) {
    state_ = std::make_shared<State>();
    pid_ = getpid();
    std::thread([state = state_] { loop(state); }).detach();
  }
  return state_;
}

bool NotesWorker::run(std::function<void()> job_fn, Clock::time_point until) {
  const std::shared_ptr<State> s = state();
  auto job = std::make_shared<Job>();
  job->fn = std::move(job_fn);
  std::unique_lock<std::mutex> lock(s->mutex);
  // An earlier job (a note posted a moment ago) goes first; one that is
  // still running at `until` has a store that does not answer.
  if (!s->cv.wait_until(lock, until, [&] { return !s->job; })) return false;
  s->job = job;
  s->cv.notify_all();
  s->cv.wait_until(lock, until, [&] { return job->done; });
  return job->done && job->ok;
}

bool NotesWorker::post(std::function<void()> job_fn) {
  const std::shared_ptr<State> s = state();
  auto job = std::make_shared<Job>();
  job->fn = std::move(job_fn);
  std::lock_guard<std::mutex> lock(s->mutex);
  if (s->job) return false;
  s->job = job;
  s->cv.notify_all();
  return true;
}

}  // namespace tdist::detail
