// tdistrun: the launcher of tdist jobs (the spec's "Launch utility",
// torchrun-compatible). docs/launcher.md describes the options, the
// environment of each rank, the output and what happens on failure.
//
//   tdistrun --standalone --nproc-per-node 4 ./train --epochs 3
//   tdistrun --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500 --nproc-per-node 8 train.py

#include <sys/signalfd.h>

#include <csignal>
#include <cstdio>
#include <string>

#include "agent.h"
#include "command.h"
#include "job_token.h"
#include "options.h"

namespace {

void print_error(const std::exception& e) {
  std::string what = e.what();
  if (what.rfind("tdistrun: ", 0) != 0) what = "tdistrun: " + what;
  std::fprintf(stderr, "%s\n", what.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tdist::launcher;
  int exit_code = 0;
  std::optional<LaunchOptions> options = parse_options(argc, argv, &exit_code);
  if (!options) return exit_code;
  ResolvedCommand command;
  try {
    command = resolve_command(*options);
  } catch (const std::exception& e) {
    print_error(e);
    return 1;
  }

  // The launcher takes its stop signals through a signalfd, in its event
  // loop; they are blocked before any thread exists so that no thread gets
  // them behind its back. Ranks get the original mask back.
  sigset_t stop_signals;
  sigset_t original_mask;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  sigaddset(&stop_signals, SIGUSR1);  // passed on to the ranks (flight recorder dumps)
  pthread_sigmask(SIG_BLOCK, &stop_signals, &original_mask);
  int signal_fd = signalfd(-1, &stop_signals, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd < 0) {
    std::perror("tdistrun: signalfd");
    return 1;
  }
  // A console reader that goes away must not kill the launcher (and orphan
  // the ranks); writes to it just stop.
  std::signal(SIGPIPE, SIG_IGN);

  try {
    // Before the agent starts any thread (it sets TDIST_AUTH_TOKEN_FILE);
    // removed when the job is over.
    std::unique_ptr<JobToken> token = JobToken::provide(*options);
    Agent agent(std::move(*options), std::move(command), signal_fd, original_mask);
    return agent.run();
  } catch (const std::exception& e) {
    print_error(e);
    return 1;
  }
}
