#include "common/signal_dump.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <map>
#include <mutex>
#include <new>
#include <thread>
#include <utility>

#include "common/env.h"

namespace tdist::detail {
namespace {

std::atomic<int> g_pipe_write{-1};
struct sigaction g_previous {};

struct Dumps {
  std::mutex mutex;
  // Held while dumps run: once remove_sigusr1_dump returns, its dump is
  // not running and will not run (what it reads may go).
  std::mutex running;
  pid_t thread_in = 0;  // the process whose signal thread runs
  bool handler_installed = false;
  uint64_t next_id = 1;
  // id -> (the process that registered it, the dump)
  std::map<uint64_t, std::pair<pid_t, std::function<void()>>> dumps;
};

Dumps& dumps() {
  static auto* d = new Dumps();  // NOLINT(cppcoreguidelines-owning-memory): the thread outlives statics
  return *d;
}

void on_sigusr1(int signo, siginfo_t* info, void* context) {
  const int saved = errno;
  const int fd = g_pipe_write.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const char byte = 1;
    [[maybe_unused]] ssize_t n = write(fd, &byte, 1);  // full pipe: a dump is pending anyway
  }
  errno = saved;
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(signo, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN &&
             g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(signo);
  }
}

void run_dumps(int read_fd) {
  for (;;) {
    char buffer[64];
    const ssize_t n = read(read_fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    std::lock_guard<std::mutex> run(dumps().running);
    std::map<uint64_t, std::pair<pid_t, std::function<void()>>> now;
    {
      std::lock_guard<std::mutex> lock(dumps().mutex);
      now = dumps().dumps;
    }
    const pid_t me = getpid();
    for (auto& [id, dump] : now) {
      if (dump.first == me) dump.second();
    }
  }
}

// In a child forked while another thread held a lock of these (a dump
// running, a registration), that thread is not there to release it: the
// child starts with fresh ones. Its parent's dumps never run there anyway.
void reset_locks_in_child() {
  Dumps& d = dumps();
  new (&d.mutex) std::mutex();    // NOLINT(cppcoreguidelines-owning-memory): reinitialised in place
  new (&d.running) std::mutex();  // NOLINT(cppcoreguidelines-owning-memory)
}

}  // namespace

uint64_t add_sigusr1_dump(std::function<void()> dump) {
  static const bool reset_registered = pthread_atfork(nullptr, nullptr, reset_locks_in_child) == 0;
  (void)reset_registered;
  Dumps& d = dumps();
  std::lock_guard<std::mutex> lock(d.mutex);
  const pid_t me = getpid();
  if (d.thread_in != me) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) == 0) {
      fcntl(fds[1], F_SETFL, O_NONBLOCK);
      d.thread_in = me;
      g_pipe_write.store(fds[1], std::memory_order_relaxed);
      std::thread(run_dumps, fds[0]).detach();
      if (!d.handler_installed) {  // else the handler came along with the fork
        d.handler_installed = true;
        struct sigaction action {};
        action.sa_sigaction = on_sigusr1;
        action.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&action.sa_mask);
        sigaction(SIGUSR1, &action, &g_previous);
      }
    }
  }
  const uint64_t id = d.next_id++;
  d.dumps.emplace(id, std::make_pair(me, std::move(dump)));
  return id;
}

void remove_sigusr1_dump(uint64_t id) {
  Dumps& d = dumps();
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    d.dumps.erase(id);
  }
  std::lock_guard<std::mutex> wait_for_running(d.running);
}

bool sigusr1_dumps_wanted() {
  for (const char* name :
       {"TDIST_TRACE_DIR", "RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (env_string(name)) return true;
  }
  return false;
}

std::string sigusr1_dump_dir() {
  if (auto dir = env_string("TDIST_TRACE_DIR")) return *dir;
  const auto tmp = env_string("TMPDIR");
  return (tmp ? *tmp : std::string("/tmp")) + "/tdist-trace-" + std::to_string(getppid());
}

}  // namespace tdist::detail
