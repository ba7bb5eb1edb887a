#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tdist
