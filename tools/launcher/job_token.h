#pragma once

// The job's shared secret (docs/security.md): with it the ranks' TCPStore
// and the TCP transport authenticate every connection (src/common/auth.h).
// tdistrun makes one for a job that gave none and runs on one node: a
// private file (0600 in a 0700 directory) that TDIST_AUTH_TOKEN_FILE names,
// set in tdistrun's own environment so that the stores it hosts and every
// rank it starts (they inherit it) use it. Jobs of several nodes must bring
// their own token (every node the same), since the nodes' launchers cannot
// agree on a secret over an unauthenticated channel.

#include <memory>
#include <string>

#include "options.h"

namespace tdist::launcher {

class JobToken {
 public:
  /// Makes the token file and sets TDIST_AUTH_TOKEN_FILE, or returns null:
  /// the environment has TDIST_AUTH_TOKEN or TDIST_AUTH_TOKEN_FILE already
  /// (kept as given), --no-auth, or more than one node. Call before any
  /// thread starts (setenv). Raises DistError if the file cannot be made.
  static std::unique_ptr<JobToken> provide(const LaunchOptions& options);
  /// Removes the file and its directory.
  ~JobToken();
  JobToken(const JobToken&) = delete;
  JobToken& operator=(const JobToken&) = delete;

  const std::string& path() const { return path_; }

 private:
  JobToken(std::string dir, std::string path) : dir_(std::move(dir)), path_(std::move(path)) {}
  std::string dir_;
  std::string path_;
};

}  // namespace tdist::launcher
