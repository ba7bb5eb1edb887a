#pragma once

/// @file store.h
/// The distributed key-value store interface (the spec's "Distributed
/// Key-Value Store"). Processes of a job use a store to find each other and to
/// exchange small pieces of data. Values are arbitrary bytes.
///
/// Implementations: HashStore (one process), FileStore (a shared file),
/// TCPStore (a server in one process, clients everywhere) and PrefixStore (a
/// namespace on top of any of them).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tdist {

/// A store value: raw bytes.
using Bytes = std::vector<uint8_t>;

/// Bytes of a string, and back.
Bytes to_bytes(std::string_view text);
std::string to_string(const Bytes& bytes);

/// Base class of every store. All methods are thread-safe.
class Store {
 public:
  using Duration = std::chrono::milliseconds;
  /// The spec's default for stores: 300 seconds.
  static constexpr Duration kDefaultTimeout{std::chrono::seconds(300)};

  explicit Store(Duration timeout = kDefaultTimeout) : timeout_(timeout) {}
  virtual ~Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  /// Inserts or overwrites `key`.
  virtual void set(const std::string& key, const Bytes& value) = 0;
  void set(const std::string& key, std::string_view value) { set(key, to_bytes(value)); }

  /// The value of `key`; waits until it exists or the store's timeout passes
  /// (DistStoreTimeoutError).
  virtual Bytes get(const std::string& key) = 0;

  /// Adds `amount` to the counter `key` (created at `amount` if absent) and
  /// returns the new value. The counter reads back through get() as its
  /// decimal text. Raises DistStoreError if `key` was written by set().
  virtual int64_t add(const std::string& key, int64_t amount) = 0;

  /// Sets `key` to `desired` if its current value equals `expected`, or if
  /// the key does not exist and `expected` is empty. Returns the value the
  /// key holds afterwards; when `key` does not exist and `expected` is not
  /// empty, returns `expected` and changes nothing.
  virtual Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) = 0;

  /// True if every key exists, without waiting.
  virtual bool check(const std::vector<std::string>& keys) = 0;

  /// Waits until every key exists, up to the store's timeout.
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }
  /// Waits until every key exists, up to `timeout`; raises
  /// DistStoreTimeoutError naming the keys still missing.
  virtual void wait(const std::vector<std::string>& keys, Duration timeout) = 0;

  /// Number of keys in the store (counters included).
  virtual int64_t num_keys() = 0;

  /// Deletes `key`; true if it existed. FileStore raises DistStoreError as
  /// the spec says.
  virtual bool delete_key(const std::string& key) = 0;

  /// The default timeout of get() and wait().
  virtual void set_timeout(Duration timeout) { timeout_.store(timeout); }
  Duration timeout() const { return timeout_.load(); }

 private:
  std::atomic<Duration> timeout_;
};

/// An in-process store backed by a hash map; shared by threads, not
/// processes.
class HashStore final : public Store {
 public:
  HashStore();
  ~HashStore() override;

  void set(const std::string& key, const Bytes& value) override;
  using Store::set;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t amount) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  using Store::wait;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  int64_t num_keys() override;
  bool delete_key(const std::string& key) override;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// Adds "<prefix>/" to every key before passing it to an underlying store,
/// so several users can share one store without collisions.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> store);

  void set(const std::string& key, const Bytes& value) override;
  using Store::set;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t amount) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  using Store::wait;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  /// The number of keys of the whole underlying store, as torch does.
  int64_t num_keys() override;
  bool delete_key(const std::string& key) override;
  /// Sets the timeout of the underlying store too.
  void set_timeout(Duration timeout) override;

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& underlying_store() const { return store_; }

 private:
  std::string prefixed(const std::string& key) const;
  std::string prefix_;
  std::shared_ptr<Store> store_;
};

}  // namespace tdist
