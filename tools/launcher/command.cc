#include "command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "common/error_text.h"
#include "tdist/errors.h"

namespace tdist::launcher {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

// execvp's search, done once in the launcher so that a typo is one clear
// error instead of N failed ranks.
std::string find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");  // NOLINT(concurrency-mt-unsafe): read before any thread starts
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  for (;;) {
    size_t end = dirs.find(':', start);
    std::string dir = dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (is_executable_file(candidate)) return candidate;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  throw DistInvalidArgument("tdistrun: program '" + name + "' not found in PATH");
}

// The interpreter tdist's Python package was built for (CMake's
// TDIST_PYTHON_EXECUTABLE), when this tdistrun was built with it and it is
// still there.
std::string built_for_python() {
#ifdef TDIST_BUILT_FOR_PYTHON
  if (is_executable_file(TDIST_BUILT_FOR_PYTHON)) return TDIST_BUILT_FOR_PYTHON;
#endif
  return {};
}

// TDIST_PYTHON, if set and not empty.
const char* chosen_python() {
  const char* chosen = std::getenv("TDIST_PYTHON");  // NOLINT(concurrency-mt-unsafe): never set here
  return chosen != nullptr && *chosen != '\0' ? chosen : nullptr;
}

}  // namespace

std::string python_interpreter() {
  if (const char* chosen = chosen_python()) return chosen;
  if (std::string built = built_for_python(); !built.empty()) return built;
  try {
    return find_in_path("python3");
  } catch (const DistInvalidArgument&) {
    return {};
  }
}

ResolvedCommand resolve_command(const LaunchOptions& options) {
  ResolvedCommand command;
  const std::string& program = options.command.front();
  bool python = options.module || (!options.no_python && ends_with(program, ".py"));
  if (python) {
    const std::string interpreter = python_interpreter();
    if (interpreter.empty() || !is_executable_file(interpreter)) {
      throw DistInvalidArgument("tdistrun: a Python interpreter is needed to run '" + program + "' but " +
                                (interpreter.empty() ? std::string("python3 is not in PATH")
                                                     : "TDIST_PYTHON=" + interpreter + " is not executable") +
                                " (set TDIST_PYTHON, or use --no-python to execute the file directly)");
    }
    if (!options.module && access(program.c_str(), R_OK) != 0) {
      throw DistInvalidArgument("tdistrun: cannot read the script '" + program + "'");
    }
    command.path = interpreter;
    // -u: unbuffered, so each line reaches the launcher (and the failure
    // report) when it is printed, not when the buffer fills.
    command.argv = {interpreter, "-u"};
    if (options.module) command.argv.emplace_back("-m");
    command.argv.push_back(program);
  } else if ((program == "python" || program == "python3") && !options.no_python &&
             (chosen_python() != nullptr || !built_for_python().empty())) {
    // `tdistrun python3 train.py` runs the interpreter tdist and torch are
    // installed in (TDIST_PYTHON, which the console script of a pip install
    // and python3 -m tdist.run set to their own; else the one tdist was
    // built for), not whichever python3 comes first in PATH.
    command.path = python_interpreter();
    command.argv = {command.path};
  } else {
    command.path = program.find('/') != std::string::npos ? program : find_in_path(program);
    if (!is_executable_file(command.path)) {
      struct stat st {};
      if (stat(command.path.c_str(), &st) != 0) {
        const int error = errno;
        throw DistInvalidArgument("tdistrun: program '" + program + "': " + errno_text(error));
      }
      throw DistInvalidArgument("tdistrun: '" + program + "' is not an executable file");
    }
    command.argv = {program};
  }
  command.insert_at = command.argv.size();
  command.argv.insert(command.argv.end(), options.command.begin() + 1, options.command.end());
  return command;
}

std::vector<std::string> rank_argv(const ResolvedCommand& command, bool use_env, int local_rank) {
  std::vector<std::string> argv = command.argv;
  if (!use_env) {
    argv.insert(argv.begin() + static_cast<std::ptrdiff_t>(command.insert_at),
                "--local-rank=" + std::to_string(local_rank));
  }
  return argv;
}

}  // namespace tdist::launcher
