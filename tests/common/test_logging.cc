#include <gtest/gtest.h>

#include <regex>

#include "tdist/logging.h"

namespace tdist {
namespace {

TEST(LogLevel, DefaultIsWarning) {
  EXPECT_EQ(log_level_from(nullptr, nullptr, nullptr), LogLevel::kWarning);
}

TEST(LogLevel, TdistLogLevelNamesEveryLevel) {
  EXPECT_EQ(log_level_from("ERROR", nullptr, nullptr), LogLevel::kError);
  EXPECT_EQ(log_level_from("warning", nullptr, nullptr), LogLevel::kWarning);
  EXPECT_EQ(log_level_from("Info", nullptr, nullptr), LogLevel::kInfo);
  EXPECT_EQ(log_level_from("DEBUG", nullptr, nullptr), LogLevel::kDebug);
  EXPECT_EQ(log_level_from("TRACE", nullptr, nullptr), LogLevel::kTrace);
  // TDIST_LOG_LEVEL wins over torch's variables.
  EXPECT_EQ(log_level_from("ERROR", "INFO", "DETAIL"), LogLevel::kError);
}

TEST(LogLevel, TorchTableFromTheSpec) {
  EXPECT_EQ(log_level_from(nullptr, "ERROR", "DETAIL"), LogLevel::kError);
  EXPECT_EQ(log_level_from(nullptr, "WARNING", "INFO"), LogLevel::kWarning);
  EXPECT_EQ(log_level_from(nullptr, "INFO", nullptr), LogLevel::kInfo);
  EXPECT_EQ(log_level_from(nullptr, "INFO", "OFF"), LogLevel::kInfo);
  EXPECT_EQ(log_level_from(nullptr, "INFO", "INFO"), LogLevel::kDebug);
  EXPECT_EQ(log_level_from(nullptr, "INFO", "DETAIL"), LogLevel::kTrace);
}

TEST(LogLevel, AnUnknownNameFallsBackWithAWarning) {
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(log_level_from("LOUD", nullptr, nullptr), LogLevel::kWarning);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("TDIST_LOG_LEVEL='LOUD'"), std::string::npos) << err;
}

TEST(Logging, LinesCarryTimestampLevelRankAndPid) {
  set_log_level(LogLevel::kInfo);
  set_log_rank(3);
  ::testing::internal::CaptureStderr();
  TDIST_LOG(INFO) << "hello " << 42;
  TDIST_LOG(DEBUG) << "not shown";
  std::string err = ::testing::internal::GetCapturedStderr();
  set_log_rank(-1);
  reload_log_level_from_env();
  std::regex line(
      R"(\[tdist \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO rank 3 pid \d+ test_logging\.cc:\d+\] hello 42\n)");
  EXPECT_TRUE(std::regex_match(err, line)) << err;
}

TEST(Logging, ArgumentsAreNotEvaluatedWhenTheLevelIsOff) {
  set_log_level(LogLevel::kError);
  int calls = 0;
  auto count = [&] { return ++calls; };
  TDIST_LOG(WARNING) << count();
  reload_log_level_from_env();
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace tdist
