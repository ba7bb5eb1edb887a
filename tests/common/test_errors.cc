#include <gtest/gtest.h>

#include <typeinfo>

#include "common/error_text.h"
#include "tdist/errors.h"

namespace tdist {
namespace {

template <typename Caught, typename Thrown>
bool caught_as() {
  try {
    throw Thrown("boom");
  } catch (const Caught& e) {
    return std::string(e.what()) == "boom";
  } catch (...) {
    return false;
  }
}

TEST(Errors, HierarchyMatchesTheSpec) {
  EXPECT_TRUE((caught_as<std::runtime_error, DistError>()));
  EXPECT_TRUE((caught_as<DistError, DistBackendError>()));
  EXPECT_TRUE((caught_as<DistError, DistNetworkError>()));
  EXPECT_TRUE((caught_as<DistError, DistStoreError>()));
  EXPECT_TRUE((caught_as<DistError, DistTimeoutError>()));
  EXPECT_TRUE((caught_as<DistError, DistInvalidArgument>()));
  EXPECT_TRUE((caught_as<std::runtime_error, DistStoreTimeoutError>()));
  EXPECT_TRUE((caught_as<DistError, DistStoreTimeoutError>()));
  EXPECT_TRUE((caught_as<DistStoreError, DistStoreTimeoutError>()));
  EXPECT_TRUE((caught_as<DistTimeoutError, DistStoreTimeoutError>()));
  EXPECT_TRUE((caught_as<DistNetworkError, DistNetworkTimeoutError>()));
  EXPECT_TRUE((caught_as<DistTimeoutError, DistNetworkTimeoutError>()));
  // Distinct branches stay distinct.
  EXPECT_FALSE((caught_as<DistStoreError, DistNetworkError>()));
  EXPECT_FALSE((caught_as<DistTimeoutError, DistStoreError>()));
  EXPECT_FALSE((caught_as<DistInvalidArgument, DistBackendError>()));
}

// with_context keeps the exact type, so every handler that caught the
// original still catches the copy.
template <typename Thrown>
void expect_context_kept_type(const std::string& what, const std::string& expected) {
  std::exception_ptr with = with_context(std::make_exception_ptr(Thrown(what)), "all_reduce (call #7): ");
  try {
    std::rethrow_exception(with);
  } catch (const DistError& e) {
    EXPECT_EQ(typeid(e), typeid(Thrown)) << typeid(e).name();
    EXPECT_EQ(std::string(e.what()), expected);
  }
}

TEST(Errors, ContextGoesAfterTheReportingRankAndTheTypeIsKept) {
  expect_context_kept_type<DistNetworkError>(
      "rank 0: rank 1 (127.0.0.1:5) closed the connection",
      "rank 0: all_reduce (call #7): rank 1 (127.0.0.1:5) closed the connection");
  expect_context_kept_type<DistNetworkTimeoutError>("rank 12: no reply",
                                                    "rank 12: all_reduce (call #7): no reply");
  expect_context_kept_type<DistStoreTimeoutError>("key never came", "all_reduce (call #7): key never came");
  expect_context_kept_type<DistStoreError>("rank x: store", "all_reduce (call #7): rank x: store");
  expect_context_kept_type<DistTimeoutError>("ranks 1, 2: late", "all_reduce (call #7): ranks 1, 2: late");
  expect_context_kept_type<DistInvalidArgument>("bad", "all_reduce (call #7): bad");
  expect_context_kept_type<DistBackendError>("rank 3:", "all_reduce (call #7): rank 3:");
  expect_context_kept_type<DistError>("rank 3: x", "rank 3: all_reduce (call #7): x");
}

TEST(Errors, ContextIsNotAddedTwiceNorToForeignExceptions) {
  // A message with an op's context where one would go keeps it: the call
  // that aborted the group is the one to name.
  auto timeout =
      std::make_exception_ptr(DistTimeoutError("all_reduce (call #7 in this group): timed out after 5 ms"));
  EXPECT_EQ(with_context(timeout, "barrier (call #8 in this group): "), timeout);
  auto network =
      std::make_exception_ptr(DistNetworkError("rank 2: all_reduce (call #7 in this group): rank 1 left"));
  EXPECT_EQ(with_context(network, "reduce (call #7 in this group): "), network);
  // One elsewhere in the message (a peer's reason it forwards) does not count.
  expect_context_kept_type<DistNetworkError>(
      "rank 0: rank 1 aborted the group: reduce (call #7 in this group): late",
      "rank 0: all_reduce (call #7): rank 1 aborted the group: reduce (call #7 "
      "in this group): late");
  auto foreign = std::make_exception_ptr(std::runtime_error("rank 0: x"));
  EXPECT_EQ(with_context(foreign, "all_reduce (call #7): "), foreign);
}

}  // namespace
}  // namespace tdist
