#include <gtest/gtest.h>

#include <cstdlib>

#include "common/env.h"
#include "tdist/errors.h"

namespace tdist {
namespace {

TEST(Env, IntegersAreParsedAndRangeChecked) {
  setenv("TDIST_TEST_INT", " 42 ", 1);
  EXPECT_EQ(env_int("TDIST_TEST_INT"), 42);
  setenv("TDIST_TEST_INT", "42x", 1);
  try {
    env_int("TDIST_TEST_INT");
    FAIL();
  } catch (const DistInvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("environment variable TDIST_TEST_INT must be an integer, got '42x'"),
              std::string::npos)
        << e.what();
  }
  setenv("TDIST_TEST_INT", "9", 1);
  EXPECT_THROW(env_int("TDIST_TEST_INT", 0, 8), DistInvalidArgument);
  setenv("TDIST_TEST_INT", "", 1);
  EXPECT_EQ(env_int("TDIST_TEST_INT"), std::nullopt);
  unsetenv("TDIST_TEST_INT");
  EXPECT_EQ(env_int("TDIST_TEST_INT"), std::nullopt);
  EXPECT_THROW(parse_int("99999999999999999999", "x"), DistInvalidArgument);
}

TEST(Env, Booleans) {
  for (const char* yes : {"1", "true", "YES", "On"}) {
    setenv("TDIST_TEST_BOOL", yes, 1);
    EXPECT_EQ(env_bool("TDIST_TEST_BOOL"), true) << yes;
  }
  for (const char* no : {"0", "false", "No", "OFF"}) {
    setenv("TDIST_TEST_BOOL", no, 1);
    EXPECT_EQ(env_bool("TDIST_TEST_BOOL"), false) << no;
  }
  setenv("TDIST_TEST_BOOL", "maybe", 1);
  EXPECT_THROW(env_bool("TDIST_TEST_BOOL"), DistInvalidArgument);
  unsetenv("TDIST_TEST_BOOL");
}

}  // namespace
}  // namespace tdist
