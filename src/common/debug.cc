#include "tdist/debug.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tdist/errors.h"
#include "tdist/logging.h"

namespace tdist {
namespace {

constexpr int kUnset = -1;
std::atomic<int> g_debug_level{kUnset};
std::atomic<int> g_show_stacks{kUnset};

const char* getenv_raw(const char* name) {
  return std::getenv(name);  // NOLINT(concurrency-mt-unsafe): tdist never calls setenv
}

bool is_set(const char* value) {
  return value != nullptr && *value != '\0';
}

}  // namespace

const char* debug_level_name(DebugLevel level) {
  switch (level) {
    case DebugLevel::kOff:
      return "OFF";
    case DebugLevel::kInfo:
      return "INFO";
    case DebugLevel::kDetail:
      return "DETAIL";
  }
  return "?";
}

DebugLevel debug_level_from(const char* tdist_debug, const char* torch_debug) {
  // tdist's own variable wins, so a job can turn tdist's checks on or off
  // without changing what torch itself does.
  const char* name = is_set(tdist_debug) ? "TDIST_DEBUG" : "TORCH_DISTRIBUTED_DEBUG";
  const char* value = is_set(tdist_debug) ? tdist_debug : torch_debug;
  if (!is_set(value)) return DebugLevel::kOff;
  std::string upper = value;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (upper == "OFF") return DebugLevel::kOff;
  if (upper == "INFO") return DebugLevel::kInfo;
  if (upper == "DETAIL") return DebugLevel::kDetail;
  // torch raises here too ("The value of TORCH_DISTRIBUTED_DEBUG must be
  // OFF, INFO, or DETAIL."): a typo must not silently turn the checks off.
  throw DistInvalidArgument(std::string("The value of ") + name +
                            " must be OFF, INFO, or DETAIL (any case), got '" + value + "'");
}

void set_debug_level_from_env() {
  const DebugLevel level = debug_level_from(getenv_raw("TDIST_DEBUG"), getenv_raw("TORCH_DISTRIBUTED_DEBUG"));
  set_debug_level(level);
  TDIST_LOG(DEBUG) << "the debug level is set to " << debug_level_name(level);
}

DebugLevel debug_level() {
  int level = g_debug_level.load(std::memory_order_relaxed);
  if (level == kUnset) {
    set_debug_level_from_env();
    level = g_debug_level.load(std::memory_order_relaxed);
  }
  return static_cast<DebugLevel>(level);
}

void set_debug_level(DebugLevel level) {
  g_debug_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

bool show_cpp_stacktraces() {
  int show = g_show_stacks.load(std::memory_order_relaxed);
  if (show != kUnset) return show != 0;
  const char* value = getenv_raw("TORCH_SHOW_CPP_STACKTRACES");
  // As torch's boolean flags: "1" on, "0" off, anything else off with a warning.
  show = is_set(value) && std::strcmp(value, "1") == 0 ? 1 : 0;
  if (is_set(value) && std::strcmp(value, "1") != 0 && std::strcmp(value, "0") != 0) {
    std::fprintf(stderr, "[tdist] ignoring TORCH_SHOW_CPP_STACKTRACES='%s': valid values are 0 or 1\n",
                 value);
  }
  g_show_stacks.store(show, std::memory_order_relaxed);
  return show != 0;
}

void set_show_cpp_stacktraces(bool show) {
  g_show_stacks.store(show ? 1 : 0, std::memory_order_relaxed);
}

}  // namespace tdist
