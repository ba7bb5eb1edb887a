#pragma once

/// @file file_store.h
/// FileStore: a store kept in a file that several processes on a shared file
/// system open. Writers append records under an exclusive fcntl lock;
/// readers replay new records under a shared lock. get() and wait() re-read
/// the file with a backoff that grows from 1 ms to 50 ms, since a plain file
/// has no way to announce a change.

#include <memory>
#include <string>

#include "tdist/store.h"

namespace tdist {

class FileStore final : public Store {
 public:
  /// Opens (creating if needed) `file_name`. `world_size` is the number of
  /// processes that will use the file; the last of them to be destroyed
  /// removes it. A negative world_size means "not fixed": the file is then
  /// removed when no user is left. Raises DistStoreError if more than
  /// world_size users open the same file.
  explicit FileStore(std::string file_name, int world_size = -1);
  ~FileStore() override;

  void set(const std::string& key, const Bytes& value) override;
  using Store::set;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t amount) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  using Store::wait;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  /// User keys only; the file's internal bookkeeping keys are not counted.
  int64_t num_keys() override;
  /// Always raises DistStoreError: the spec says FileStore does not support
  /// deleting keys.
  bool delete_key(const std::string& key) override;

  const std::string& path() const { return path_; }

 private:
  struct State;
  std::string path_;
  int world_size_;
  std::unique_ptr<State> state_;
};

}  // namespace tdist
