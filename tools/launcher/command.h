#pragma once

// What each rank executes: the resolved program and its argv.

#include <string>
#include <vector>

#include "options.h"

namespace tdist::launcher {

/// The interpreter of .py programs and --module: $TDIST_PYTHON if set,
/// else python3 in PATH (so an activated virtual environment's own), as
/// torchrun runs programs under its own interpreter. Empty if neither exists.
std::string python_interpreter();

/// The command every rank runs, before the per-rank --local-rank=N.
struct ResolvedCommand {
  /// The file to execve.
  std::string path;
  /// argv[0..insert_at) come before --local-rank=N, the rest after it.
  std::vector<std::string> argv;
  size_t insert_at = 0;
};

/// Resolves options.command: a .py program (or --module) runs under
/// python_interpreter() -u; a name without '/' is looked up in PATH. Raises
/// DistInvalidArgument saying what is missing or not executable.
ResolvedCommand resolve_command(const LaunchOptions& options);

/// argv of local rank `local_rank`: the command with --local-rank=N after
/// the program (unless use_env).
std::vector<std::string> rank_argv(const ResolvedCommand& command, bool use_env, int local_rank);

}  // namespace tdist::launcher
