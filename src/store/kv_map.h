#pragma once

// The key-value semantics every store shares, without locking or waiting:
// counters vs plain values, the compare_set rules, key counting. HashStore
// guards one with a mutex, FileStore rebuilds one from its file, the TCP
// server keeps one on its event-loop thread.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tdist/store.h"

namespace tdist {

class KvMap {
 public:
  /// Values are immutable and shared: a reader (the TCP server's reply to a
  /// GET) keeps one alive without copying it. The factory makes them; the
  /// TCP server's charges each value to its memory budget for its lifetime.
  using Value = std::shared_ptr<const Bytes>;
  using ValueFactory = std::function<Value(Bytes)>;
  void set_value_factory(ValueFactory factory) { make_ = std::move(factory); }

  /// Writes a plain value.
  void set(const std::string& key, Bytes value);

  /// Adds to a counter; returns the new value, or nullopt if `key` holds a
  /// plain value written by set() (the caller raises, naming its store).
  std::optional<int64_t> add(const std::string& key, int64_t amount);

  /// The spec's compare_set rule; returns what the caller returns.
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired);

  /// The value, or nullptr if absent. Counters read as their decimal text.
  const Bytes* find(const std::string& key) const;
  /// The value as a shared reference, or nullptr if absent.
  Value find_shared(const std::string& key) const;
  bool contains(const std::string& key) const { return entries_.count(key) != 0; }
  bool contains_all(const std::vector<std::string>& keys) const;
  /// The keys among `keys` that are absent.
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  bool erase(const std::string& key) { return entries_.erase(key) != 0; }
  int64_t size() const { return static_cast<int64_t>(entries_.size()); }

 private:
  struct Entry {
    Value value;
    bool counter = false;
  };
  Value make(Bytes bytes) const {
    return make_ ? make_(std::move(bytes)) : std::make_shared<const Bytes>(std::move(bytes));
  }
  std::unordered_map<std::string, Entry> entries_;
  ValueFactory make_;
};

/// The message of the error raised when add() meets a plain value.
std::string add_on_value_message(const std::string& store_name, const std::string& key);

/// "'a', 'b'" for error messages.
std::string quote_keys(const std::vector<std::string>& keys);

}  // namespace tdist

namespace tdist {

/// "HashStore get: key 'a' not set after waiting 300 ms" style message for a
/// get() or wait() that ran out of time; `where` adds context such as the
/// server address.
std::string wait_timeout_message(const std::string& store_name, const std::string& op,
                                 const std::vector<std::string>& missing, Store::Duration timeout,
                                 const std::string& where = "");

/// Raises DistInvalidArgument for a negative wait() timeout, which would
/// otherwise time out at once with a message about "-1000 ms".
void check_wait_timeout(const std::string& store_name, Store::Duration timeout);

}  // namespace tdist
