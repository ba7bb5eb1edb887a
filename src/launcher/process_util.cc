#include "process_util.h"

#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <random>

#include "common/socket.h"
#include "tdist/errors.h"

namespace tdist::launcher {

std::string signal_name(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  if (abbrev != nullptr) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(signal);
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    std::string text = "was killed by signal " + signal_name(sig) + " (" + std::to_string(sig) + ")";
    if (WCOREDUMP(status)) text += ", core dumped";
    return text;
  }
  return "ended with wait status " + std::to_string(status);
}

bool wait_status_ok(int status) {
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int open_pidfd(pid_t pid) {
  // The raw syscall: glibc 2.36's <sys/pidfd.h> lacks extern "C" for C++.
  int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) {
    throw DistError("pidfd_open(" + std::to_string(pid) + ") failed: " + errno_text(errno) +
                    " (tdist needs Linux 5.3 or newer)");
  }
  return fd;
}

bool try_reap(pid_t pid, int* status) {
  for (;;) {
    pid_t got = waitpid(pid, status, WNOHANG);
    if (got == pid) return true;
    if (got == 0) return false;
    if (errno == EINTR) continue;
    // ECHILD: someone else reaped it (SIGCHLD ignored); call it a clean exit
    // we know nothing about rather than waiting forever.
    *status = 0;
    return true;
  }
}

int ephemeral_port_low() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  return in >> low ? low : 32768;  // Linux's default
}

namespace {

// random_device may throw where the kernel's source is missing; the time
// and pid still spread concurrent jobs' picks.
uint32_t random_seed() {
  try {
    return std::random_device{}();
  } catch (const std::exception&) {
    return static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
           static_cast<uint32_t>(getpid());
  }
}

}  // namespace

int pick_free_port() {
  // Below the ephemeral range when there is room, so that no outgoing
  // connection (of this host's other jobs, or of other tests) can take the
  // port between now and the store's listen; a port from listen_on(0) lies
  // in that range and now and then was taken so ("Address already in use").
  const int low = ephemeral_port_low();
  if (low > 20000) {
    std::mt19937 rng(random_seed());
    std::uniform_int_distribution<int> ports(10000, low - 1);
    for (int attempt = 0; attempt < 100; ++attempt) {
      try {
        return listen_on(static_cast<uint16_t>(ports(rng))).local_port();
      } catch (const DistError&) {
        // in use: try another
      }
    }
  }
  return listen_on(0).local_port();
}

bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace tdist::launcher
