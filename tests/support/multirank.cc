#include "multirank.h"

#include "common/error_text.h"

#include "tdist/file_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <sstream>
#include <thread>

namespace tdist::testing {
namespace {

// Reads everything a child wrote to its error pipe (non-blocking, after exit).
std::string drain(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  return out;
}

}  // namespace

std::vector<RankOutcome> run_threads(int n, const RankFn& fn, std::chrono::milliseconds deadline) {
  std::vector<RankOutcome> outcomes(static_cast<size_t>(n));
  std::mutex mutex;
  std::condition_variable done_cv;
  int done = 0;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      RankOutcome outcome;
      outcome.rank = rank;
      try {
        fn(rank);
        outcome.ok = true;
      } catch (...) {
        outcome.error = exception_text(std::current_exception());
      }
      std::lock_guard<std::mutex> lock(mutex);
      outcomes[static_cast<size_t>(rank)] = outcome;
      ++done;
      done_cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mutex);
    if (!done_cv.wait_for(lock, deadline, [&] { return done == n; })) {
      std::ostringstream msg;
      msg << "run_threads: deadline of " << deadline.count() << " ms passed; ranks still running:";
      for (int rank = 0; rank < n; ++rank) {
        if (outcomes[static_cast<size_t>(rank)].rank < 0) msg << ' ' << rank;
      }
      std::fprintf(stderr, "%s\n", msg.str().c_str());
      std::fflush(stderr);
      std::abort();  // a hung thread cannot be killed; fail loudly instead of hanging
    }
  }
  for (auto& thread : threads) thread.join();
  return outcomes;
}

std::vector<RankOutcome> run_forked(int n, const RankFn& fn, std::chrono::milliseconds deadline) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids(static_cast<size_t>(n), -1);
  std::vector<int> pipes(static_cast<size_t>(n), -1);
  std::vector<RankOutcome> outcomes(static_cast<size_t>(n));
  for (int rank = 0; rank < n; ++rank) {
    int fds[2];
    if (pipe(fds) != 0) std::abort();
    pid_t pid = fork();
    if (pid < 0) std::abort();
    if (pid == 0) {
      close(fds[0]);
      int code = 0;
      try {
        fn(rank);
      } catch (...) {
        std::string what = exception_text(std::current_exception());
        (void)!write(fds[1], what.data(), what.size());
        code = 1;
      }
      close(fds[1]);
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(code);  // skip atexit/static destructors of the parent's state
    }
    close(fds[1]);
    pids[static_cast<size_t>(rank)] = pid;
    pipes[static_cast<size_t>(rank)] = fds[0];
    outcomes[static_cast<size_t>(rank)].rank = rank;
  }
  auto end = std::chrono::steady_clock::now() + deadline;
  int remaining = n;
  // Children write little (one error message), so reading the pipes after they
  // exit cannot deadlock on a full pipe.
  while (remaining > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int rank = 0; rank < n; ++rank) {
        if (pids[static_cast<size_t>(rank)] != pid) continue;
        auto& outcome = outcomes[static_cast<size_t>(rank)];
        if (WIFEXITED(status)) outcome.exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) outcome.signal = WTERMSIG(status);
        outcome.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        outcome.error = drain(pipes[static_cast<size_t>(rank)]);
        close(pipes[static_cast<size_t>(rank)]);
        pids[static_cast<size_t>(rank)] = -1;
        --remaining;
      }
      continue;
    }
    if (std::chrono::steady_clock::now() >= end) {
      for (int rank = 0; rank < n; ++rank) {
        pid_t child = pids[static_cast<size_t>(rank)];
        if (child <= 0) continue;
        kill(child, SIGKILL);
        waitpid(child, nullptr, 0);
        auto& outcome = outcomes[static_cast<size_t>(rank)];
        outcome.timed_out = true;
        outcome.signal = SIGKILL;
        outcome.error = drain(pipes[static_cast<size_t>(rank)]);
        close(pipes[static_cast<size_t>(rank)]);
        pids[static_cast<size_t>(rank)] = -1;
        --remaining;
      }
      break;
    }
    // Wait for the next child exit without spinning: SIGCHLD is not ours to
    // take in a test binary, so poll with a short sleep instead.
    poll(nullptr, 0, 2);
  }
  return outcomes;
}

std::string describe_failures(const std::vector<RankOutcome>& outcomes) {
  std::ostringstream out;
  for (const auto& o : outcomes) {
    if (o.ok) continue;
    out << "rank " << o.rank << ":";
    if (o.timed_out) out << " killed at the deadline (hung)";
    if (o.signal != 0 && !o.timed_out)
      out << " killed by signal " << o.signal << " (" << strsignal(o.signal) << ")";
    if (o.exit_code > 0) out << " exit code " << o.exit_code;
    if (!o.error.empty()) out << ": " << o.error;
    out << "\n";
  }
  return out.str();
}

std::string run_ranks(Mode mode, int n, const RankFn& fn, std::chrono::milliseconds deadline) {
  return describe_failures(mode == Mode::kThreads ? run_threads(n, fn, deadline)
                                                  : run_forked(n, fn, deadline));
}

ReservedPort reserve_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) std::abort();
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return ReservedPort{fd, ntohs(addr.sin_port)};
}

void exit_barrier(Store& store, int rank, int world_size, const std::string& name) {
  // Everyone arrives; then every rank but 0 reports it is past the barrier
  // with one more add, whose reply proves the server answered it.
  if (store.add(name + "/arrived", 1) == world_size) store.set(name + "/open", "1");
  store.wait({name + "/open"});
  if (world_size == 1) return;
  if (rank != 0) {
    if (store.add(name + "/left", 1) == world_size - 1) store.set(name + "/all_left", "1");
  } else {
    store.wait({name + "/all_left"});
  }
}

std::string run_with_store(Mode mode, int n, const std::function<KeepAlive(Store& store, int rank)>& fn,
                           std::chrono::milliseconds deadline, std::chrono::milliseconds store_timeout) {
  auto hash = std::make_shared<HashStore>();
  hash->set_timeout(store_timeout);
  std::string path = temp_path("ranks");
  return run_ranks(
      mode, n,
      [&](int rank) {
        std::unique_ptr<FileStore> file;
        Store* store = hash.get();
        if (mode == Mode::kProcesses) {
          file = std::make_unique<FileStore>(path, n);
          file->set_timeout(store_timeout);
          store = file.get();
        }
        KeepAlive resources;
        try {
          resources = fn(*store, rank);
        } catch (...) {
          // Open the barrier below for the others: they would otherwise wait
          // out the store's timeout and then report timeouts of their own
          // next to (or, in the log, long before) this rank's real error.
          try {
            store->set("run_with_store/all_finished", "rank " + std::to_string(rank) + " failed");
          } catch (...) {  // NOLINT(bugprone-empty-catch): the rank's own error matters more
          }
          throw;
        }
        if (store->add("run_with_store/finished", 1) == n) store->set("run_with_store/all_finished", "1");
        store->wait({"run_with_store/all_finished"});
      },
      deadline);
}

std::string temp_path(const std::string& stem) {
  static std::atomic<int> counter{0};
  const char* dir = std::getenv("TMPDIR");
  std::ostringstream path;
  path << (dir != nullptr && *dir != '\0' ? dir : "/tmp") << "/tdist-test-" << stem << "-" << getpid() << "-"
       << counter.fetch_add(1) << "-" << std::chrono::steady_clock::now().time_since_epoch().count();
  return path.str();
}

}  // namespace tdist::testing
