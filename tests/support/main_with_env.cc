// GoogleTest's main, plus any number of --setenv=NAME=VALUE arguments, set
// before the first test: ctest runs a suite again under other settings
// that need several variables at once, which gtest_discover_tests's
// ENVIRONMENT property cannot carry (it splits the list).

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  constexpr const char* kFlag = "--setenv=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], kFlag, std::strlen(kFlag)) != 0) {
      std::fprintf(stderr, "unknown argument: %s\n", argv[i]);
      return 2;
    }
    std::string assignment = argv[i] + std::strlen(kFlag);
    auto eq = assignment.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::fprintf(stderr, "--setenv needs NAME=VALUE, got: %s\n", argv[i]);
      return 2;
    }
    setenv(assignment.substr(0, eq).c_str(), assignment.substr(eq + 1).c_str(), 1);
  }
  return RUN_ALL_TESTS();
}
