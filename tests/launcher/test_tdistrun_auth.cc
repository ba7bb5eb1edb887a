// tdistrun's job token (tools/launcher/job_token.h, docs/security.md): a
// one-node job that brings none gets one in a private file that every rank
// (and the store tdistrun hosts) reads, so the ranks' store refuses a
// client without it; the file goes with the job. --no-auth and a token
// the job brings are respected.

#include <sys/stat.h>

#include <set>
#include <string>
#include <vector>

#include "tdistrun_helpers.h"

namespace tdist::testing {
namespace {

struct AuthLine {
  std::string path, token_env, file, mode, digest, stranger;
};

// Rank r's "auth ..." line, split into its fields.
AuthLine auth_line(const ChildProcess& p, int rank) {
  auto lines = lines_with(p.out(), "auth rank=" + std::to_string(rank) + " ");
  AuthLine a;
  if (lines.size() != 1) return a;
  auto field = [&](const std::string& key) {
    const std::string& line = lines[0];
    size_t at = line.find(" " + key + "=");
    if (at == std::string::npos) return std::string("?");
    at += key.size() + 2;
    return line.substr(at, line.find(' ', at) - at);
  };
  return {field("path"), field("token_env"), field("file"),
          field("mode"), field("digest"),    field("stranger")};
}

bool exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

// Three ranks: every rank reads the same 0600 file, a client without the
// token is refused by the store, and the file is gone after the job.
void expect_generated_token(const std::vector<std::string>& options) {
  ChildProcess p(launch(options, {"auth"}), {"TDIST_AUTH_TOKEN=", "TDIST_AUTH_TOKEN_FILE="});
  run_to_end(p);
  ASSERT_EQ(p.exit_code(), 0) << both(p);
  std::set<std::string> digests, paths;
  for (int r = 0; r < 3; ++r) {
    const AuthLine a = auth_line(p, r);
    EXPECT_EQ(a.file, "set") << both(p);
    EXPECT_EQ(a.token_env, "unset") << both(p);
    EXPECT_EQ(a.mode, "600") << both(p);
    EXPECT_EQ(a.stranger, "refused") << both(p);
    digests.insert(a.digest);
    paths.insert(a.path);
  }
  EXPECT_EQ(digests.size(), 1U) << both(p);
  ASSERT_EQ(paths.size(), 1U) << both(p);
  EXPECT_NE(*digests.begin(), "none") << both(p);
  EXPECT_TRUE(contains(*digests.begin(), "/64")) << "a 64-character token: " << *digests.begin();
  EXPECT_FALSE(exists(*paths.begin())) << "the token file outlived the job";
}

TEST(TdistrunAuth, AOneNodeJobGetsAPrivateTokenThatItsStoreRequires) {
  expect_generated_token({"--standalone", "--nproc-per-node", "3"});
}

TEST(TdistrunAuth, TheStoreTdistrunHostsRequiresTheTokenToo) {
  expect_generated_token({"--standalone", "--nproc-per-node", "3", "--agent-store"});
}

TEST(TdistrunAuth, NoAuthMakesNoTokenAndTheStoreAdmitsAnyone) {
  ChildProcess p(launch({"--standalone", "--nproc-per-node", "2", "--no-auth"}, {"auth"}),
                 {"TDIST_AUTH_TOKEN=", "TDIST_AUTH_TOKEN_FILE="});
  run_to_end(p);
  ASSERT_EQ(p.exit_code(), 0) << both(p);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(auth_line(p, r).file, "unset") << both(p);
    EXPECT_EQ(auth_line(p, r).stranger, "admitted") << both(p);
  }
}

TEST(TdistrunAuth, ATokenTheJobBringsIsKept) {
  ChildProcess p(launch({"--standalone", "--nproc-per-node", "2"}, {"auth"}),
                 {"TDIST_AUTH_TOKEN=brought-by-the-job", "TDIST_AUTH_TOKEN_FILE="});
  run_to_end(p);
  ASSERT_EQ(p.exit_code(), 0) << both(p);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(auth_line(p, r).token_env, "set") << both(p);
    EXPECT_EQ(auth_line(p, r).file, "unset") << both(p);
    EXPECT_EQ(auth_line(p, r).stranger, "refused") << both(p);
  }
}

}  // namespace
}  // namespace tdist::testing
