#include "job_token.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "common/auth.h"
#include "common/env.h"
#include "common/error_text.h"
#include "tdist/errors.h"

namespace tdist::launcher {

std::unique_ptr<JobToken> JobToken::provide(const LaunchOptions& options) {
  if (!options.auth || options.max_nodes > 1) return nullptr;
  if (env_string("TDIST_AUTH_TOKEN") || env_string("TDIST_AUTH_TOKEN_FILE")) return nullptr;  // as given
  const char* tmp = getenv("TMPDIR");  // NOLINT(concurrency-mt-unsafe): before any thread starts
  std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/tdistrun-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (mkdtemp(buffer.data()) == nullptr) {  // mode 0700
    throw DistError("tdistrun: cannot make a private directory for the job's token (" + pattern +
                    "): " + errno_text(errno) + "; --no-auth runs without one");
  }
  std::string dir(buffer.data());
  std::string path = dir + "/token";
  const std::string token = auth::generate_token();
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  bool written = fd >= 0 && write(fd, token.data(), token.size()) == static_cast<ssize_t>(token.size());
  const int saved = errno;
  if (fd >= 0) close(fd);
  if (!written) {
    unlink(path.c_str());
    rmdir(dir.c_str());
    throw DistError("tdistrun: cannot write the job's token to " + path + ": " + errno_text(saved) +
                    "; --no-auth runs without one");
  }
  setenv("TDIST_AUTH_TOKEN_FILE", path.c_str(), 1);  // NOLINT(concurrency-mt-unsafe): before any thread
  return std::unique_ptr<JobToken>(new JobToken(std::move(dir), std::move(path)));
}

JobToken::~JobToken() {
  unlink(path_.c_str());
  rmdir(dir_.c_str());
}

}  // namespace tdist::launcher
