// Debug levels (TDIST_DEBUG / TORCH_DISTRIBUTED_DEBUG), their agreement with
// the log level, and the C++ stacks TORCH_SHOW_CPP_STACKTRACES=1 adds to
// errors.

#include <gtest/gtest.h>

#include <string>

#include "common/error_text.h"
#include "tdist/debug.h"
#include "tdist/errors.h"
#include "tdist/logging.h"

namespace tdist {
namespace {

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const DistError& e) {
    return e.what();
  }
  return "(nothing raised)";
}

TEST(DebugLevel, OffUnlessAVariableSaysOtherwise) {
  EXPECT_EQ(debug_level_from(nullptr, nullptr), DebugLevel::kOff);
  EXPECT_EQ(debug_level_from("", ""), DebugLevel::kOff);
  EXPECT_EQ(debug_level_from(nullptr, "INFO"), DebugLevel::kInfo);
  EXPECT_EQ(debug_level_from(nullptr, "detail"), DebugLevel::kDetail);
  EXPECT_EQ(debug_level_from("Detail", nullptr), DebugLevel::kDetail);
  EXPECT_EQ(debug_level_from("off", nullptr), DebugLevel::kOff);
}

TEST(DebugLevel, TdistDebugWinsOverTorchDistributedDebug) {
  EXPECT_EQ(debug_level_from("OFF", "DETAIL"), DebugLevel::kOff);
  EXPECT_EQ(debug_level_from("INFO", "DETAIL"), DebugLevel::kInfo);
  EXPECT_EQ(debug_level_from("", "DETAIL"), DebugLevel::kDetail);  // empty is unset
}

TEST(DebugLevel, ABadValueIsAnErrorNamingTheVariableAndTheValue) {
  // torch raises too ("The value of TORCH_DISTRIBUTED_DEBUG must be OFF,
  // INFO, or DETAIL."): a typo must not turn the checks off silently.
  EXPECT_THROW(debug_level_from("verbose", nullptr), DistInvalidArgument);
  // The messages alone, whatever TORCH_SHOW_CPP_STACKTRACES the run has.
  const bool stacks = show_cpp_stacktraces();
  set_show_cpp_stacktraces(false);
  EXPECT_EQ(message_of([] { debug_level_from("verbose", "INFO"); }),
            "The value of TDIST_DEBUG must be OFF, INFO, or DETAIL (any case), got 'verbose'");
  EXPECT_EQ(message_of([] { debug_level_from(nullptr, "1"); }),
            "The value of TORCH_DISTRIBUTED_DEBUG must be OFF, INFO, or DETAIL (any case), got '1'");
  set_show_cpp_stacktraces(stacks);
}

TEST(DebugLevel, SetAndGet) {
  const DebugLevel before = debug_level();
  set_debug_level(DebugLevel::kDetail);
  EXPECT_EQ(debug_level(), DebugLevel::kDetail);
  EXPECT_STREQ(debug_level_name(debug_level()), "DETAIL");
  set_debug_level(before);
}

TEST(DebugLevel, TheLogLevelReadsTheSameVariables) {
  // TDIST_DEBUG takes TORCH_DISTRIBUTED_DEBUG's place in torch's table...
  EXPECT_EQ(log_level_from(nullptr, "INFO", "OFF", "DETAIL"), LogLevel::kTrace);
  EXPECT_EQ(log_level_from(nullptr, "INFO", "DETAIL", "OFF"), LogLevel::kInfo);
  EXPECT_EQ(log_level_from(nullptr, "INFO", nullptr, "INFO"), LogLevel::kDebug);
  // ... and alone shows what INFO and DETAIL log (group creation).
  EXPECT_EQ(log_level_from(nullptr, nullptr, nullptr, "INFO"), LogLevel::kInfo);
  EXPECT_EQ(log_level_from(nullptr, nullptr, nullptr, "DETAIL"), LogLevel::kInfo);
  EXPECT_EQ(log_level_from(nullptr, nullptr, nullptr, "OFF"), LogLevel::kWarning);
  // torch's own variable alone changes nothing, as in the spec's table.
  EXPECT_EQ(log_level_from(nullptr, nullptr, "DETAIL", nullptr), LogLevel::kWarning);
  EXPECT_EQ(log_level_from("ERROR", nullptr, nullptr, "DETAIL"), LogLevel::kError);
}

// Restores the switch whatever a test does.
class CppStacks : public ::testing::Test {
 protected:
  void SetUp() override { set_show_cpp_stacktraces(true); }
  void TearDown() override { set_show_cpp_stacktraces(false); }
};

[[gnu::noinline]] void raise_from_a_named_function() {
  throw DistInvalidArgument("send: tag -1 is invalid");
}

TEST_F(CppStacks, ErrorsEndWithTheStackWhereTheyWereRaised) {
  const std::string what = message_of(raise_from_a_named_function);
  const std::string marker = detail::kCppStackMarker;
  ASSERT_EQ(what.rfind("send: tag -1 is invalid" + marker, 0), 0u) << what;
  EXPECT_NE(what.find(" (most recent call first):\nframe #0: "), std::string::npos) << what;
  // The first frame is where the error was raised, not the error's own
  // constructors.
  const std::string first =
      what.substr(what.find("frame #0: "), what.find("\nframe #1") - what.find("frame #0: "));
  EXPECT_EQ(first.find("DistInvalidArgument::DistInvalidArgument"), std::string::npos) << what;
  EXPECT_EQ(first.find("capture"), std::string::npos) << what;
#ifdef TDIST_HAVE_LIBBACKTRACE
  // libbacktrace names static and executable-local functions, with file:line.
  EXPECT_NE(first.find("raise_from_a_named_function"), std::string::npos) << what;
  EXPECT_NE(first.find("test_debug.cc:"), std::string::npos) << what;
  EXPECT_NE(what.find("ErrorsEndWithTheStackWhereTheyWereRaised"), std::string::npos) << what;
#endif
}

TEST_F(CppStacks, ARebuiltErrorKeepsTheFirstStackAndPeersGetTheMessageAlone) {
  std::exception_ptr original;
  try {
    raise_from_a_named_function();
  } catch (...) {
    original = std::current_exception();
  }
  const std::string what = message_of([&] { std::rethrow_exception(with_context(original, "irecv: ")); });
  EXPECT_EQ(what.rfind("irecv: send: tag -1 is invalid" + std::string(detail::kCppStackMarker), 0), 0u)
      << what;
  EXPECT_EQ(what.find(detail::kCppStackMarker), what.rfind(detail::kCppStackMarker))
      << "two stacks: " << what;
  // What goes to peers and into the flight recorder has no stack.
  EXPECT_EQ(exception_text(original), "send: tag -1 is invalid");
}

// Naming a stack reads the modules' debug information (about half a second
// in a new process): an error that nobody reads, as a peer's clean close
// made into an error no operation carries, must not pay it. Its message,
// once read, has the stack, named once for the error and its copies.
TEST_F(CppStacks, AStackIsNamedOnlyWhenTheMessageIsRead) {
  const uint64_t before = detail::cpp_stacks_named();
  std::exception_ptr error;
  try {
    raise_from_a_named_function();
  } catch (...) {
    error = std::current_exception();
  }
  EXPECT_EQ(detail::cpp_stacks_named(), before);
  const std::string what = message_of([&] { std::rethrow_exception(error); });
  EXPECT_EQ(detail::cpp_stacks_named(), before + 1);
  EXPECT_NE(what.find(detail::kCppStackMarker), std::string::npos) << what;
  try {
    std::rethrow_exception(error);
  } catch (const DistInvalidArgument& e) {
    const DistInvalidArgument copy = e;
    EXPECT_EQ(std::string(copy.what()), what);
  }
  EXPECT_EQ(detail::cpp_stacks_named(), before + 1);
}

TEST(CppStacksOff, MessagesAreExactlyTheText) {
  set_show_cpp_stacktraces(false);
  EXPECT_EQ(message_of(raise_from_a_named_function), "send: tag -1 is invalid");
}

}  // namespace
}  // namespace tdist
