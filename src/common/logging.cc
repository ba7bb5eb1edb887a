#include "tdist/logging.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

namespace tdist {
namespace {

constexpr int kUnset = -1;
std::atomic<int> g_level{kUnset};
std::atomic<int> g_rank{-1};

std::string upper(const char* text) {
  std::string out = text;
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return out;
}

// Returns -1 for a name that is not a level.
int parse_level(const char* text) {
  std::string name = upper(text);
  if (name == "TRACE") return static_cast<int>(LogLevel::kTrace);
  if (name == "DEBUG") return static_cast<int>(LogLevel::kDebug);
  if (name == "INFO") return static_cast<int>(LogLevel::kInfo);
  if (name == "WARNING" || name == "WARN") return static_cast<int>(LogLevel::kWarning);
  if (name == "ERROR" || name == "FATAL") return static_cast<int>(LogLevel::kError);
  return -1;
}

bool is_set(const char* value) {
  return value != nullptr && *value != '\0';
}

const char* getenv_once(const char* name) {
  return std::getenv(name);  // NOLINT(concurrency-mt-unsafe): tdist never calls setenv
}

}  // namespace

LogLevel log_level_from(const char* tdist_level, const char* torch_cpp_level, const char* torch_debug,
                        const char* tdist_debug) {
  if (is_set(tdist_level)) {
    int level = parse_level(tdist_level);
    if (level >= 0) return static_cast<LogLevel>(level);
    std::fprintf(stderr,
                 "[tdist] ignoring TDIST_LOG_LEVEL='%s': expected ERROR, WARNING, INFO, DEBUG or TRACE\n",
                 tdist_level);
  }
  // TDIST_DEBUG stands for TORCH_DISTRIBUTED_DEBUG when set, as it does for
  // the debug level (debug.h). A bad value is the debug level's error to
  // raise; here it changes nothing.
  const char* debug = is_set(tdist_debug) ? tdist_debug : torch_debug;
  if (is_set(torch_cpp_level)) {
    // The spec's table: TORCH_DISTRIBUTED_DEBUG only matters with
    // TORCH_CPP_LOG_LEVEL=INFO, where INFO gives DEBUG and DETAIL gives TRACE.
    int level = parse_level(torch_cpp_level);
    if (level == static_cast<int>(LogLevel::kInfo) && is_set(debug)) {
      std::string name = upper(debug);
      if (name == "INFO") return LogLevel::kDebug;
      if (name == "DETAIL") return LogLevel::kTrace;
    }
    if (level >= static_cast<int>(LogLevel::kInfo)) return static_cast<LogLevel>(level);
  }
  // tdist's own variable alone: its INFO and DETAIL print what they log
  // (group creation) without a second variable.
  if (is_set(tdist_debug)) {
    std::string name = upper(tdist_debug);
    if (name == "INFO" || name == "DETAIL") return LogLevel::kInfo;
  }
  return LogLevel::kWarning;
}

LogLevel log_level() {
  int level = g_level.load(std::memory_order_relaxed);
  if (level == kUnset) {
    reload_log_level_from_env();
    level = g_level.load(std::memory_order_relaxed);
  }
  return static_cast<LogLevel>(level);
}

void set_log_level(LogLevel level) {
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

void reload_log_level_from_env() {
  set_log_level(log_level_from(getenv_once("TDIST_LOG_LEVEL"), getenv_once("TORCH_CPP_LOG_LEVEL"),
                               getenv_once("TORCH_DISTRIBUTED_DEBUG"), getenv_once("TDIST_DEBUG")));
}

void set_log_rank(int rank) {
  g_rank.store(rank, std::memory_order_relaxed);
}

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return "TRACE";
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarning:
      return "WARNING";
    case LogLevel::kError:
      return "ERROR";
  }
  return "?";
}

namespace detail {

LogLine::LogLine(LogLevel level, const char* file, int line) : level_(level) {
  auto now = std::chrono::system_clock::now();
  auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  std::time_t seconds = static_cast<std::time_t>(millis / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &utc);
  char frac[8];
  std::snprintf(frac, sizeof(frac), ".%03dZ", static_cast<int>(millis % 1000));

  int rank = g_rank.load(std::memory_order_relaxed);
  std::string rank_text;
  if (rank >= 0) {
    rank_text = std::to_string(rank);
  } else {
    const char* env_rank = getenv_once("RANK");
    rank_text = is_set(env_rank) ? env_rank : "?";
  }
  const char* base = file;
  for (const char* p = file; *p != '\0'; ++p) {
    if (*p == '/') base = p + 1;
  }
  stream_ << "[tdist " << stamp << frac << ' ' << log_level_name(level) << " rank " << rank_text << " pid "
          << getpid() << ' ' << base << ':' << line << "] ";
}

LogLine::~LogLine() {
  stream_ << '\n';
  std::string text = stream_.str();
  // One fwrite per line so lines from different threads do not interleave.
  std::fwrite(text.data(), 1, text.size(), stderr);
  if (level_ >= LogLevel::kError) std::fflush(stderr);
}

}  // namespace detail
}  // namespace tdist
