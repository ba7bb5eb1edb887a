#include "launcher_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

extern char** environ;  // NOLINT(readability-redundant-declaration)

namespace tdist::testing {

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string item(*entry);
    std::string name = item.substr(0, item.find('='));
    bool overridden = std::any_of(env.begin(), env.end(),
                                  [&](const std::string& e) { return e.substr(0, e.find('=')) == name; });
    if (!overridden) environment.push_back(item);
  }
  environment.insert(environment.end(), env.begin(), env.end());
  std::vector<char*> c_argv;
  std::vector<char*> c_env;
  std::vector<std::string> argv_copy = argv;
  c_argv.reserve(argv_copy.size() + 1);
  c_env.reserve(environment.size() + 1);
  for (auto& a : argv_copy) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  for (auto& e : environment) c_env.push_back(e.data());
  c_env.push_back(nullptr);

  int out[2];
  int err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  pid_t parent = getpid();
  std::fflush(stdout);
  std::fflush(stderr);
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    // A test binary killed by ctest must not leave launchers behind.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);  // NOLINT(concurrency-mt-unsafe): one thread after fork
    execve(c_argv[0], c_argv.data(), c_env.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
  fcntl(out_fd_, F_SETFL, O_NONBLOCK);
  fcntl(err_fd_, F_SETFL, O_NONBLOCK);
  pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
  if (pidfd_ < 0) throw std::runtime_error("pidfd_open failed");
}

ChildProcess::~ChildProcess() {
  if (!exited_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &status_, 0);
  }
  for (int fd : {pidfd_, out_fd_, err_fd_}) {
    if (fd >= 0) close(fd);
  }
}

void ChildProcess::send_signal(int signal) const {
  if (!exited_) kill(pid_, signal);
}

int ChildProcess::exit_code() const {
  return exited_ && WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
}

void ChildProcess::read_pipe(int* fd, std::string* into) {
  char buffer[8192];
  for (;;) {
    ssize_t n = read(*fd, buffer, sizeof(buffer));
    if (n > 0) {
      into->append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    close(*fd);
    *fd = -1;
    return;
  }
}

void ChildProcess::reap() {
  if (exited_) return;
  if (waitpid(pid_, &status_, WNOHANG) == pid_) {
    exited_ = true;
    close(pidfd_);
    pidfd_ = -1;
  }
}

bool ChildProcess::step(const std::vector<ChildProcess*>& children, Clock::time_point deadline) {
  std::vector<pollfd> fds;
  std::vector<std::pair<ChildProcess*, int>> slots;  // 0 pidfd, 1 out, 2 err
  for (ChildProcess* child : children) {
    if (child->out_fd_ >= 0) {
      fds.push_back({child->out_fd_, POLLIN, 0});
      slots.emplace_back(child, 1);
    }
    if (child->err_fd_ >= 0) {
      fds.push_back({child->err_fd_, POLLIN, 0});
      slots.emplace_back(child, 2);
    }
    if (!child->exited_) {
      fds.push_back({child->pidfd_, POLLIN, 0});
      slots.emplace_back(child, 0);
    }
  }
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return false;
  int ready = poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left, 60'000)));
  if (ready < 0 && errno != EINTR) throw std::runtime_error("poll failed");
  for (size_t i = 0; i < fds.size() && ready > 0; ++i) {
    if (fds[i].revents == 0) continue;
    auto [child, kind] = slots[i];
    if (kind == 1) child->read_pipe(&child->out_fd_, &child->out_);
    if (kind == 2) child->read_pipe(&child->err_fd_, &child->err_);
  }
  for (size_t i = 0; i < fds.size() && ready > 0; ++i) {
    if (fds[i].revents != 0 && slots[i].second == 0) slots[i].first->reap();
  }
  return true;
}

bool ChildProcess::wait_until(const std::function<bool()>& done, Clock::time_point deadline) {
  while (!done()) {
    if (exited_ && out_fd_ < 0 && err_fd_ < 0) return false;
    if (!step({this}, deadline)) return false;
  }
  return true;
}

void ChildProcess::wait_all(const std::vector<ChildProcess*>& children, Clock::time_point deadline) {
  for (;;) {
    bool running = false;
    for (ChildProcess* child : children) running = running || !child->exited_;
    if (!running) break;
    if (!step(children, deadline)) {
      for (ChildProcess* child : children) {
        if (child->exited_) continue;
        kill(child->pid_, SIGKILL);
        waitpid(child->pid_, &child->status_, 0);
        child->exited_ = true;
        child->timed_out_ = true;
      }
      break;
    }
  }
  // What the children wrote last; pipes that grandchildren keep open are
  // read without waiting.
  for (ChildProcess* child : children) {
    if (child->out_fd_ >= 0) child->read_pipe(&child->out_fd_, &child->out_);
    if (child->err_fd_ >= 0) child->read_pipe(&child->err_fd_, &child->err_);
  }
}

bool process_alive(pid_t pid) {
  if (kill(pid, 0) != 0) return errno != ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  size_t close_paren = line.rfind(')');
  if (close_paren == std::string::npos || close_paren + 2 >= line.size()) return true;
  char state = line[close_paren + 2];
  return state != 'Z' && state != 'X';
}

bool wait_until_gone(pid_t pid, Clock::time_point deadline) {
  // The process was sent SIGKILL already; this only waits for the kernel to
  // finish it, so a short poll interval is fine.
  while (process_alive(pid)) {
    if (Clock::now() >= deadline) return false;
    poll(nullptr, 0, 5);
  }
  return true;
}

std::vector<long> values_after(const std::string& text, const std::string& key) {
  std::vector<long> values;
  std::string needle = key + "=";
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    if (at > 0 && (std::isalnum(static_cast<unsigned char>(text[at - 1])) || text[at - 1] == '_')) continue;
    values.push_back(std::strtol(text.c_str() + at + needle.size(), nullptr, 10));
  }
  return values;
}

std::vector<std::string> lines_with(const std::string& text, const std::string& needle) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(needle) != std::string::npos) lines.push_back(line);
  }
  return lines;
}

}  // namespace tdist::testing
