#include "common/owned_by_process.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <string>

namespace tdist::detail {

namespace {

std::atomic<pid_t> cached_pid{0};

void refresh_in_child() {
  cached_pid.store(getpid(), std::memory_order_relaxed);
}

}  // namespace

pid_t this_process_id() {
  static const bool registered = [] {
    cached_pid.store(getpid(), std::memory_order_relaxed);
    // Runs in the child of every fork() after this, before fork returns there.
    pthread_atfork(nullptr, nullptr, refresh_in_child);
    return true;
  }();
  (void)registered;
  return cached_pid.load(std::memory_order_relaxed);
}

std::string forked_copy_text(const std::string& what, pid_t owner) {
  return "this " + what + " belongs to process " + std::to_string(owner) + "; this is a child forked from it";
}

}  // namespace tdist::detail
