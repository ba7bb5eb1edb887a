#pragma once

// Helpers of the process-group tests: groups on N ranks (threads or forked
// processes), and tensors of any dtype filled from exact small numbers so a
// reference can be computed in int64/double arithmetic, apart from tdist.

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "multirank.h"
#include "tdist/errors.h"
#include "tdist/process_group.h"
#include "tdist/tensor.h"

namespace tdist::testing {

/// Runs fn(group, rank) on n ranks, each with a "tdist" process group over a
/// shared store (HashStore for threads, FileStore for processes).
std::string with_groups(Mode mode, int n, const std::function<void(ProcessGroup&, int)>& fn,
                        std::chrono::milliseconds timeout = std::chrono::seconds(60));

/// A tdist group of `size` ranks over `store` (which outlives it), under
/// the key prefix "pg", as with_groups makes it.
Group group_on_store(Store& store, int rank, int size, const ProcessGroupOptions& options);

/// The fixture of tests run over (mode, world size), and their names
/// ("threads_3"), for INSTANTIATE_TEST_SUITE_P.
class WorldsTest : public ::testing::TestWithParam<std::tuple<Mode, int>> {
 protected:
  Mode mode() const { return std::get<0>(GetParam()); }
  int n() const { return std::get<1>(GetParam()); }
};
std::string worlds_param_name(const ::testing::TestParamInfo<std::tuple<Mode, int>>& p);

/// A tensor of `dtype` with element i set to value(i) (real part; complex
/// elements get imaginary part -value(i)).
Tensor make_tensor(DType dtype, int64_t count, const std::function<double(int64_t)>& value);
/// Element i as a double (real part) and, for complex, its imaginary part.
double real_at(const Tensor& t, int64_t i);
double imag_at(const Tensor& t, int64_t i);
/// Writes value v (and -v as imaginary part) into element i.
void set_at(const Tensor& t, int64_t i, double v);

/// Throws std::runtime_error with `what` if !ok.
void check(bool ok, const std::string& what);
void check(bool ok, const char* what);  // no string made for a check that holds
/// The same, with the message made by `what()` only if the check fails: in
/// loops over elements, making it every time took most of a test's CPU.
template <typename Text, typename = std::enable_if_t<std::is_invocable_r_v<std::string, Text>>>
void check(bool ok, Text&& what) {
  if (!ok) check(false, std::string(std::forward<Text>(what)()));
}
/// The what() of the `Error` that fn raises; anything else (another error,
/// or none) fails the check, named by `what`.
template <typename Error>
std::string error_of(const std::function<void()>& fn, const std::string& what) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    check(false, what + ": wrong error type: " + e.what());
  }
  check(false, what + ": no error raised");
  return {};
}
/// check() that `part` occurs in `text`, showing both otherwise.
inline void expect_in(const std::string& text, const std::string& part) {
  check(text.find(part) != std::string::npos, "'" + part + "' not in: " + text);
}
/// Checks elements [first, first + count) of `t` against want(0..count-1);
/// the error names `what` and the first index that differs.
void check_elements(const Tensor& t, int64_t first, int64_t count, const std::function<double(int64_t)>& want,
                    const std::string& what);
/// A SUM all_reduce on `pg` of `count` float32 elements, element i of rank
/// r being r + i + round, checked against the sum computed here.
void checked_all_reduce(ProcessGroup& pg, int64_t count, int round = 0);

/// The collective a kill test runs over a float32 tensor: what each rank's
/// elements start as, how a call starts, and what every element holds once
/// two calls have completed everywhere.
struct KillTestOp {
  std::string name;
  std::function<float(int rank)> initial;
  std::function<WorkPtr(ProcessGroup&, Tensor&)> start;
  std::function<float(int ranks)> after_two;
};
/// SUM all_reduces (every element starts at 1).
KillTestOp all_reduce_op();

/// Forked ranks (a FileStore at temp_path(`name`), removed afterwards since
/// the victim cannot close it; a 60 s group timeout, so errors come from the
/// dead peer) run two calls of `op` on `floats` float32 elements; rank
/// `victim` dies with SIGKILL in the middle of the second, once every rank
/// finished the first. Every other rank must fail with a DistNetworkError
/// naming the victim ("rank <victim>"), directly or through the rank that
/// aborted the group first. `setup(rank)`, if given, runs first
/// (environment), `on_group`, if given, once the group exists. Returns what
/// went otherwise ("" if the victim was killed and every other rank
/// returned).
std::string kill_one_rank_in(const KillTestOp& op, int ranks, const std::string& name, size_t floats,
                             int victim, const std::function<void(int)>& setup = {},
                             const std::function<void(ProcessGroup&)>& on_group = {});
/// kill_one_rank_in with all_reduce_op().
std::string kill_one_rank_in_all_reduce(int ranks, const std::string& name, size_t floats, int victim,
                                        const std::function<void(int)>& setup = {},
                                        const std::function<void(ProcessGroup&)>& on_group = {});

}  // namespace tdist::testing
