#pragma once

/// @file logging.h
/// Leveled logging to stderr. The level comes from TDIST_LOG_LEVEL (ERROR,
/// WARNING, INFO, DEBUG, TRACE) or, when that is unset, from torch's pair
/// TORCH_CPP_LOG_LEVEL x TORCH_DISTRIBUTED_DEBUG (docs/environment.md). The
/// default is WARNING: a healthy job prints nothing. Each line carries a UTC
/// timestamp, the level, the rank and the pid.
///
///     TDIST_LOG(WARNING) << "store client " << peer << " sent garbage";

#include <sstream>
#include <string>

namespace tdist {

enum class LogLevel : int { kTrace = 0, kDebug = 1, kInfo = 2, kWarning = 3, kError = 4 };

/// The level in force; read from the environment on first use.
LogLevel log_level();
/// Overrides the level (tests, tools).
void set_log_level(LogLevel level);
/// Re-reads the level from the environment.
void reload_log_level_from_env();
/// Computes the level a given environment would give; exposed for tests.
/// Null pointers stand for unset variables. TDIST_DEBUG (`tdist_debug`)
/// replaces TORCH_DISTRIBUTED_DEBUG in torch's table when set, and alone
/// (no TDIST_LOG_LEVEL, no TORCH_CPP_LOG_LEVEL) INFO or DETAIL give INFO.
LogLevel log_level_from(const char* tdist_level, const char* torch_cpp_level, const char* torch_debug,
                        const char* tdist_debug = nullptr);
/// The rank printed on each line; -1 (the default, until rendezvous sets it)
/// prints the RANK environment variable if there is one, else "?".
void set_log_rank(int rank);
/// True if a message at `level` would be printed.
inline bool log_enabled(LogLevel level) {
  return level >= log_level();
}
/// "ERROR", "WARNING", ...
const char* log_level_name(LogLevel level);

namespace detail {
/// Collects one line and writes it, whole, to stderr when destroyed.
class LogLine {
 public:
  LogLine(LogLevel level, const char* file, int line);
  ~LogLine();
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};
/// Turns the streamed line into void for TDIST_LOG's conditional.
struct LogVoidify {
  void operator&(std::ostream&) {}
};
}  // namespace detail

}  // namespace tdist

/// Streams one log line at the given level (ERROR, WARNING, INFO, DEBUG,
/// TRACE); the arguments are not evaluated when the level is off.
/// An expression, not a statement, so it is safe as the body of an unbraced
/// if: `&` binds looser than `<<`, so the whole line is streamed first.
// NOLINTBEGIN(bugprone-macro-parentheses): the caller's << must follow
#define TDIST_LOG(LEVEL)                                                                             \
  !::tdist::log_enabled(::tdist::LogLevel::TDIST_LOG_LEVEL_##LEVEL)                                  \
      ? (void)0                                                                                      \
      : ::tdist::detail::LogVoidify() &                                                              \
            ::tdist::detail::LogLine(::tdist::LogLevel::TDIST_LOG_LEVEL_##LEVEL, __FILE__, __LINE__) \
                .stream()
// NOLINTEND(bugprone-macro-parentheses)

#define TDIST_LOG_LEVEL_ERROR kError
#define TDIST_LOG_LEVEL_WARNING kWarning
#define TDIST_LOG_LEVEL_INFO kInfo
#define TDIST_LOG_LEVEL_DEBUG kDebug
#define TDIST_LOG_LEVEL_TRACE kTrace
