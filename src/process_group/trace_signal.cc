// SIGUSR1 dumps the flight recorder (flight_recorder.h). A signal handler
// may not allocate or lock, so it only writes a byte to a pipe; a thread of
// the recorder's own waits on the pipe and dumps. The handler then passes
// the signal on to whatever handler was installed before (another copy of
// tdist in the process, such as the torch plugin's, or the program's).

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <mutex>
#include <thread>

#include "common/env.h"
#include "flight_recorder.h"
#include "tdist/logging.h"

namespace tdist::detail {
namespace {

std::atomic<int> g_pipe_write{-1};
struct sigaction g_previous {};

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

void dump_on_signal(int read_fd) {
  for (;;) {
    char buffer[64];
    const ssize_t n = read(read_fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    try {
      const std::string path = FlightRecorder::instance().dump("SIGUSR1");
      TDIST_LOG(WARNING) << "flight recorder written to " << path << " (SIGUSR1)";
    } catch (const std::exception& e) {
      TDIST_LOG(WARNING) << "flight recorder: SIGUSR1 dump failed: " << e.what();
    }
  }
}

}  // namespace

void install_trace_signal_handler() {
  // Once per process; a forked child (the tests' ranks) installs its own,
  // since the parent's thread did not come along.
  static std::mutex mutex;
  static pid_t installed_in = 0;
  std::lock_guard<std::mutex> lock(mutex);
  if (installed_in == getpid()) return;
  const auto dir = env_string("TDIST_TRACE_DIR");
  if (!dir || dir->empty() || !FlightRecorder::instance().enabled()) return;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return;
  fcntl(fds[1], F_SETFL, O_NONBLOCK);
  const bool first = installed_in == 0;
  installed_in = getpid();
  g_pipe_write.store(fds[1], std::memory_order_relaxed);
  std::thread(dump_on_signal, fds[0]).detach();
  if (!first) return;  // the handler came along with the fork
  struct sigaction action {};
  action.sa_sigaction = on_sigusr1;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGUSR1, &action, &g_previous);
}

}  // namespace tdist::detail
