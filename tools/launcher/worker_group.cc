#include "worker_group.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "common/error_text.h"
#include "launcher/process_util.h"
#include "tdist/errors.h"

extern char** environ;  // NOLINT(readability-redundant-declaration)

namespace tdist::launcher {
namespace {

// The deleter of a CPU_ALLOC set.
void cpu_free(cpu_set_t* set) {
  CPU_FREE(set);
}

// Read at most this much from one pipe per wake-up, so one chatty rank
// cannot starve the others.
constexpr size_t kReadBudget = size_t{256} * 1024;

// The variables tdistrun sets; inherited values of these are dropped.
// (torchrun's set, plus tdist's own restart variables; NCCL_ASYNC_ERROR_HANDLING
// and OMP_NUM_THREADS are only given a default, below.)
constexpr const char* kRankVariables[] = {"RANK",
                                          "LOCAL_RANK",
                                          "WORLD_SIZE",
                                          "LOCAL_WORLD_SIZE",
                                          "GROUP_RANK",
                                          "GROUP_WORLD_SIZE",
                                          "ROLE_RANK",
                                          "ROLE_NAME",
                                          "ROLE_WORLD_SIZE",
                                          "MASTER_ADDR",
                                          "MASTER_PORT",
                                          "TORCHELASTIC_RUN_ID",
                                          "TORCHELASTIC_RESTART_COUNT",
                                          "TORCHELASTIC_MAX_RESTARTS",
                                          "TORCHELASTIC_USE_AGENT_STORE",
                                          "TDIST_RESTART_COUNT",
                                          "TDIST_MAX_RESTARTS"};

bool inherited(const char* name) {
  return std::getenv(name) != nullptr;  // NOLINT(concurrency-mt-unsafe): nothing sets the environment
}

std::vector<std::string> inherited_environment() {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view item(*entry);
    std::string_view name = item.substr(0, item.find('='));
    bool ours = false;
    for (const char* variable : kRankVariables) ours = ours || name == variable;
    if (!ours) env.emplace_back(item);
  }
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

void make_pipe(int fds[2]) {
  if (pipe2(fds, O_CLOEXEC) != 0) throw DistError("tdistrun: pipe failed: " + errno_text(errno));
}

}  // namespace

WorkerGroup::WorkerGroup(GroupSpec spec) : spec_(std::move(spec)) {}

WorkerGroup::~WorkerGroup() {
  for (auto& worker : workers_) {
    if (worker.pid > 0 && !worker.exited) {
      killpg(worker.pid, SIGKILL);
      kill(worker.pid, SIGKILL);
      int status = 0;
      while (waitpid(worker.pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    for (int fd : {worker.pidfd, worker.out_fd, worker.err_fd}) {
      if (fd >= 0) close(fd);
    }
  }
}

void WorkerGroup::open_streams(Worker& worker) {
  const bool logging = !spec_.log_dir.empty();
  std::string stem;
  if (logging) {
    // A rank restarted alone writes where a whole-group restart with its
    // count would: attempt_<its TDIST_RESTART_COUNT>.
    const std::string attempt_dir =
        spec_.log_dir + "/attempt_" + std::to_string(spec_.attempt + worker.restarts);
    std::error_code error;
    std::filesystem::create_directories(attempt_dir, error);
    if (error)
      throw DistError("tdistrun: cannot create log directory " + attempt_dir + ": " + error.message());
    stem = attempt_dir + "/rank_" + std::to_string(worker.rank);
  }
  worker.out = std::make_unique<RankStream>(worker.rank, !logging || (spec_.tee & 1) ? 1 : -1,
                                            logging ? stem + ".stdout.log" : "", 0);
  worker.err = std::make_unique<RankStream>(worker.rank, !logging || (spec_.tee & 2) ? 2 : -1,
                                            logging ? stem + ".stderr.log" : "", kTailLines);
}

void WorkerGroup::start() {
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0) throw DistError("tdistrun: cannot open /dev/null: " + errno_text(errno));
  std::vector<std::string> base_env = inherited_environment();
  workers_.resize(static_cast<size_t>(spec_.nproc));
  try {
    for (int local = 0; local < spec_.nproc; ++local) {
      Worker& worker = workers_[static_cast<size_t>(local)];
      worker.local_rank = local;
      worker.rank = spec_.rank_offset + local;
      open_streams(worker);
      start_one(worker, base_env, devnull);
    }
  } catch (...) {
    close(devnull);
    throw;
  }
  close(devnull);
}

void WorkerGroup::restart(size_t index) {
  Worker& worker = workers_.at(index);
  if (!worker.exited) throw DistError("tdistrun: rank " + std::to_string(worker.rank) + " is still running");
  // What the old process left in its pipes is printed first (a grandchild
  // holding them open is not waited for).
  close_streams_of(worker);
  std::erase(failures_, index);
  worker.exited = false;
  worker.failed = false;
  worker.status = 0;
  worker.pid = -1;
  ++worker.restarts;
  open_streams(worker);
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0) throw DistError("tdistrun: cannot open /dev/null: " + errno_text(errno));
  try {
    start_one(worker, inherited_environment(), devnull);
  } catch (...) {
    close(devnull);
    throw;
  }
  close(devnull);
}

void WorkerGroup::start_one(Worker& worker, const std::vector<std::string>& base_env, int devnull) {
  // Everything the child needs is built here: between fork and execve only
  // async-signal-safe calls are allowed (the launcher may have threads).
  std::vector<std::string> argv = rank_argv(*spec_.command, spec_.use_env, worker.local_rank);
  std::vector<std::string> env = base_env;
  auto put = [&](const char* name, const std::string& value) {
    env.push_back(std::string(name) + "=" + value);
  };
  put("RANK", std::to_string(worker.rank));
  put("LOCAL_RANK", std::to_string(worker.local_rank));
  put("WORLD_SIZE", std::to_string(spec_.world_size));
  put("LOCAL_WORLD_SIZE", std::to_string(spec_.nproc));
  put("GROUP_RANK", std::to_string(spec_.node_rank));
  put("GROUP_WORLD_SIZE", std::to_string(spec_.nnodes));
  put("MASTER_ADDR", spec_.master_addr);
  put("MASTER_PORT", std::to_string(spec_.master_port));
  // One role per job: a rank's role rank and size are its global ones.
  put("ROLE_RANK", std::to_string(worker.rank));
  put("ROLE_NAME", spec_.role);
  put("ROLE_WORLD_SIZE", std::to_string(spec_.world_size));
  put("TORCHELASTIC_RUN_ID", spec_.run_id);
  // A rank restarted alone counts its own restarts on top of the group's.
  const std::string restarts = std::to_string(spec_.attempt + worker.restarts);
  put("TORCHELASTIC_RESTART_COUNT", restarts);
  put("TORCHELASTIC_MAX_RESTARTS", std::to_string(spec_.max_restarts));
  // "True": node 0's agent hosts the ranks' store at MASTER_PORT and every
  // rank (0 too) only joins it (tdist's env://, as torch's). "False": rank
  // 0 hosts it.
  put("TORCHELASTIC_USE_AGENT_STORE", spec_.agent_store ? "True" : "False");
  put("TDIST_RESTART_COUNT", restarts);
  put("TDIST_MAX_RESTARTS", std::to_string(spec_.max_restarts));
  // torch's own TCPStore listens on every interface and cannot
  // authenticate: with this, a torch program's env:// makes tdist's store
  // instead (tdist.torch, loaded with torch), which listens on MASTER_ADDR
  // only and proves the job's token. An inherited value is kept
  // ("torch": torch's store, as under torchrun).
  if (!inherited("TDIST_TORCH_STORE")) put("TDIST_TORCH_STORE", "tdist");
  // torchrun's defaults, kept when the launcher's environment sets them.
  if (!inherited("NCCL_ASYNC_ERROR_HANDLING")) put("NCCL_ASYNC_ERROR_HANDLING", "1");
  if (!inherited("OMP_NUM_THREADS") && spec_.nproc > 1) put("OMP_NUM_THREADS", "1");
  std::vector<char*> c_argv = c_strings(argv);
  std::vector<char*> c_env = c_strings(env);
  std::string exec_error = "tdistrun: cannot execute " + spec_.command->path + ": ";
  const bool bind = !spec_.bind_sets.empty();
  // Sized for the highest CPU (a fixed cpu_set_t holds 1024), made before
  // fork: the child only calls sched_setaffinity.
  std::unique_ptr<cpu_set_t, decltype(&cpu_free)> bind_set(nullptr, &cpu_free);
  size_t bind_bytes = 0;
  std::string bind_error;
  if (bind) {
    const std::vector<int>& cpus =
        spec_.bind_sets[static_cast<size_t>(worker.local_rank) % spec_.bind_sets.size()];
    const int highest = *std::max_element(cpus.begin(), cpus.end());
    bind_set.reset(CPU_ALLOC(highest + 1));
    if (!bind_set) throw DistError("tdistrun: out of memory for a CPU set");
    bind_bytes = CPU_ALLOC_SIZE(highest + 1);
    CPU_ZERO_S(bind_bytes, bind_set.get());
    std::string listed;
    for (int cpu : cpus) {
      CPU_SET_S(cpu, bind_bytes, bind_set.get());
      listed += (listed.empty() ? "" : ",") + std::to_string(cpu);
    }
    bind_error = "tdistrun: cannot bind rank " + std::to_string(worker.rank) + " to CPU" +
                 (cpus.size() > 1 ? "s " : " ") + listed + ": ";
  }
  const char* path = spec_.command->path.c_str();

  int out[2];
  int err[2];
  make_pipe(out);
  try {
    make_pipe(err);
  } catch (...) {
    close(out[0]);
    close(out[1]);
    throw;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    for (int fd : {out[0], out[1], err[0], err[1]}) close(fd);
    throw DistError("tdistrun: fork of rank " + std::to_string(worker.rank) + " failed: " + errno_text(e));
  }
  if (pid == 0) {
    // Its own process group: stopping a rank stops what it started too, and
    // the terminal's Ctrl-C goes to the launcher, which stops everyone.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);  // the launcher died before prctl
    dup2(devnull, STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &dfl, nullptr);
    // NOLINTNEXTLINE(concurrency-mt-unsafe): the child has one thread
    sigprocmask(SIG_SETMASK, &spec_.child_signal_mask, nullptr);
    const std::string* failed = &exec_error;
    if (!bind || sched_setaffinity(0, bind_bytes, bind_set.get()) == 0) {
      execve(path, c_argv.data(), c_env.data());
    } else {
      failed = &bind_error;
    }
    int e = errno;
    (void)write_all(STDERR_FILENO, failed->data(), failed->size());
    const char* why = strerrordesc_np(e);
    if (why != nullptr) (void)write_all(STDERR_FILENO, why, strlen(why));
    (void)write_all(STDERR_FILENO, "\n", 1);
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so killpg works even before the child ran
  close(out[1]);
  close(err[1]);
  worker.pid = pid;
  worker.out_fd = out[0];
  worker.err_fd = err[0];
  fcntl(worker.out_fd, F_SETFL, O_NONBLOCK);
  fcntl(worker.err_fd, F_SETFL, O_NONBLOCK);
  worker.pidfd = open_pidfd(pid);
}

void WorkerGroup::add_pollfds(std::vector<pollfd>* fds) {
  poll_offset_ = fds->size();
  poll_slots_.clear();
  for (size_t i = 0; i < workers_.size(); ++i) {
    const Worker& worker = workers_[i];
    if (worker.out_fd >= 0) {
      fds->push_back({worker.out_fd, POLLIN, 0});
      poll_slots_.emplace_back(i, 1);
    }
    if (worker.err_fd >= 0) {
      fds->push_back({worker.err_fd, POLLIN, 0});
      poll_slots_.emplace_back(i, 2);
    }
    if (!worker.exited && worker.pidfd >= 0) {
      fds->push_back({worker.pidfd, POLLIN, 0});
      poll_slots_.emplace_back(i, 0);
    }
  }
}

void WorkerGroup::handle(const std::vector<pollfd>& fds) {
  // Output first, so that a rank's last words are in before its exit is.
  for (size_t slot = 0; slot < poll_slots_.size(); ++slot) {
    auto [index, kind] = poll_slots_[slot];
    if (kind != 0 && fds[poll_offset_ + slot].revents != 0) read_stream(workers_[index], kind == 2);
  }
  for (size_t slot = 0; slot < poll_slots_.size(); ++slot) {
    auto [index, kind] = poll_slots_[slot];
    if (kind == 0 && fds[poll_offset_ + slot].revents != 0) reap(workers_[index]);
  }
}

void WorkerGroup::read_stream(Worker& worker, bool is_err) {
  int& fd = is_err ? worker.err_fd : worker.out_fd;
  RankStream& stream = is_err ? *worker.err : *worker.out;
  char buffer[16384];
  size_t budget = kReadBudget;
  while (fd >= 0 && budget > 0) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      stream.feed(buffer, static_cast<size_t>(n));
      budget -= std::min(budget, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    stream.finish();  // EOF, or an error that will not go away
    close(fd);
    fd = -1;
  }
}

void WorkerGroup::reap(Worker& worker) {
  siginfo_t info{};
  if (waitid(P_PID, static_cast<id_t>(worker.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
      info.si_pid == 0) {
    return;  // not ended after all
  }
  bool clean = info.si_code == CLD_EXITED && info.si_status == 0;
  // While the rank is a zombie its pid (= its process group id) cannot be
  // reused, so this reaches exactly what it left behind.
  if (!clean || stopping_) killpg(worker.pid, SIGKILL);
  if (!try_reap(worker.pid, &worker.status)) return;
  worker.exited = true;
  close(worker.pidfd);
  worker.pidfd = -1;
  if (!clean && !stopping_) {
    worker.failed = true;
    failures_.push_back(static_cast<size_t>(&worker - workers_.data()));
  }
}

void WorkerGroup::signal_all(int signal) {
  for (auto& worker : workers_) {
    if (worker.pid <= 0 || worker.exited) continue;
    // A rank that moved itself to another process group (setsid) is still
    // reached directly.
    if (killpg(worker.pid, signal) != 0 || getpgid(worker.pid) != worker.pid) kill(worker.pid, signal);
  }
}

bool WorkerGroup::all_exited() const {
  return running() == 0;
}

int WorkerGroup::running() const {
  int count = 0;
  for (const auto& worker : workers_) count += worker.pid > 0 && !worker.exited ? 1 : 0;
  return count;
}

void WorkerGroup::close_streams_of(Worker& worker) {
  for (bool is_err : {false, true}) {
    int& fd = is_err ? worker.err_fd : worker.out_fd;
    if (fd < 0) continue;
    read_stream(worker, is_err);
    if (fd >= 0) {
      (is_err ? *worker.err : *worker.out).finish();
      close(fd);
      fd = -1;
    }
  }
}

void WorkerGroup::close_streams() {
  for (auto& worker : workers_) close_streams_of(worker);
}

}  // namespace tdist::launcher
