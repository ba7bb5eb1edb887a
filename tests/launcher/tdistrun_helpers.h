#pragma once

// Helpers of the tdistrun tests: starting the launcher with launcher_worker
// as its ranks and reading what they print.

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "launcher_process.h"

namespace tdist::testing {

inline const std::string kTdistrun = TDIST_TDISTRUN;
inline const std::string kWorker = TDIST_LAUNCHER_WORKER;

inline Clock::time_point deadline(std::chrono::seconds from_now = std::chrono::seconds(60)) {
  return Clock::now() + from_now;
}

inline std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// tdistrun OPTIONS... launcher_worker MODE_ARGS...
inline std::vector<std::string> launch(const std::vector<std::string>& options,
                                       const std::vector<std::string>& mode) {
  return cat(cat({kTdistrun}, options), cat({kWorker}, mode));
}

// Runs to the end; fails the test if it hangs.
inline void run_to_end(ChildProcess& p, std::chrono::seconds limit = std::chrono::seconds(60)) {
  p.wait(deadline(limit));
  ASSERT_FALSE(p.timed_out()) << "tdistrun hung; stdout:\n" << p.out() << "\nstderr:\n" << p.err();
}

inline std::string both(const ChildProcess& p) {
  return "stdout:\n" + p.out() + "\nstderr:\n" + p.err();
}

inline bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// The one line of rank `rank`'s "env ..." output.
inline std::string env_line(const ChildProcess& p, int rank) {
  auto lines =
      lines_with(p.out(), "[rank " + std::to_string(rank) + "]: env RANK=" + std::to_string(rank) + " ");
  return lines.size() == 1 ? lines[0] : "";
}

inline long value(const std::string& line, const std::string& key) {
  auto values = values_after(line, key);
  return values.size() == 1 ? values[0] : -12345;
}

}  // namespace tdist::testing
