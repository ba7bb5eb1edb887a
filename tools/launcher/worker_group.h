#pragma once

// The ranks of one node for one attempt: started with fork/execve, each in
// its own process group, watched through pidfds and the pipes of its stdout
// and stderr, stopped with SIGTERM then SIGKILL.

#include <poll.h>
#include <signal.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "output.h"

namespace tdist::launcher {

/// Everything a group needs to start its ranks.
struct GroupSpec {
  const ResolvedCommand* command = nullptr;
  bool use_env = false;
  int nproc = 1;        // ranks on this node
  int rank_offset = 0;  // global rank of local rank 0
  int world_size = 1;
  int node_rank = 0;
  int nnodes = 1;
  std::string master_addr;
  int master_port = 0;
  int attempt = 0;  // restarts of the whole group so far
  int max_restarts = 0;
  /// Node 0's agent hosts the ranks' store (TORCHELASTIC_USE_AGENT_STORE=True).
  bool agent_store = false;
  std::string run_id;   // TORCHELASTIC_RUN_ID
  std::string role;     // ROLE_NAME
  std::string log_dir;  // empty: console only
  int tee = 0;          // with log_dir: 1 stdout, 2 stderr, 3 both to the console too
  /// The signal mask the launcher started with; ranks get it back.
  sigset_t child_signal_mask{};
  /// Not empty (--bind-to): local rank i runs on the CPUs bind_sets[i % size].
  std::vector<std::vector<int>> bind_sets;
};

/// Lines of stderr kept per rank for the failure report.
inline constexpr size_t kTailLines = 20;

struct Worker {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;
  int pidfd = -1;
  int out_fd = -1;  // read ends of the rank's stdout and stderr pipes
  int err_fd = -1;
  std::unique_ptr<RankStream> out;
  std::unique_ptr<RankStream> err;
  bool exited = false;
  int status = 0;
  /// Ended badly before the launcher began stopping the group.
  bool failed = false;
  /// Times this rank was restarted alone (--restart-policy=failed); its
  /// TDIST_RESTART_COUNT is the group's attempt plus this.
  int restarts = 0;
};

class WorkerGroup {
 public:
  explicit WorkerGroup(GroupSpec spec);
  /// Kills (SIGKILL, whole process groups) and reaps any rank still running.
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  /// Starts every rank. Raises DistError if a pipe, fork or log file fails
  /// (the ranks already started are killed by the destructor).
  void start();

  /// Appends the fds to watch; handle() must get the same vector back.
  void add_pollfds(std::vector<pollfd>* fds);
  /// Reads output and reaps ranks that ended, for the fds added last.
  void handle(const std::vector<pollfd>& fds);

  /// From now on ranks that end are being stopped, not failing.
  void set_stopping() { stopping_ = true; }
  /// Starts the failed worker `index` again alone, with the same rank and
  /// its restart count one higher, and forgets its failure (failures()).
  /// Raises DistError as start() does.
  void restart(size_t index);

  /// Sends `signal` to the process group of every rank still running.
  void signal_all(int signal);

  bool all_exited() const;
  int running() const;
  /// Indices of workers that failed, in the order their failure was seen.
  const std::vector<size_t>& failures() const { return failures_; }
  const std::vector<Worker>& workers() const { return workers_; }
  const GroupSpec& spec() const { return spec_; }

  /// Reads what is left in the pipes without waiting (grandchildren may hold
  /// them open forever) and closes them; call once every rank has ended.
  void close_streams();

 private:
  /// The worker's output streams (log files under its attempt's directory,
  /// made if needed).
  void open_streams(Worker& worker);
  void start_one(Worker& worker, const std::vector<std::string>& base_env, int devnull);
  void read_stream(Worker& worker, bool is_err);
  /// Reads what is left in `worker`'s pipes, prints it and closes them.
  void close_streams_of(Worker& worker);
  void reap(Worker& worker);

  GroupSpec spec_;
  std::vector<Worker> workers_;
  std::vector<size_t> failures_;
  bool stopping_ = false;
  size_t poll_offset_ = 0;
  std::vector<std::pair<size_t, int>> poll_slots_;  // (worker index, 0 pidfd / 1 out / 2 err)
};

}  // namespace tdist::launcher
