#include "kv_map.h"

#include <charconv>

#include "tdist/errors.h"

namespace tdist {

Bytes to_bytes(std::string_view text) {
  return Bytes(text.begin(), text.end());
}

std::string to_string(const Bytes& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

void KvMap::set(const std::string& key, Bytes value) {
  Value stored = make(std::move(value));
  Entry& entry = entries_[key];
  entry.value = std::move(stored);
  entry.counter = false;
}

std::optional<int64_t> KvMap::add(const std::string& key, int64_t amount) {
  auto [it, inserted] = entries_.try_emplace(key);
  Entry& entry = it->second;
  int64_t current = 0;
  if (!inserted) {
    if (!entry.counter) return std::nullopt;
    const auto* begin = reinterpret_cast<const char*>(entry.value->data());
    std::from_chars(begin, begin + entry.value->size(), current);
  }
  // Counters wrap like the two's-complement integers they are, without UB.
  int64_t next = static_cast<int64_t>(static_cast<uint64_t>(current) + static_cast<uint64_t>(amount));
  entry.value = make(to_bytes(std::to_string(next)));
  entry.counter = true;
  return next;
}

Bytes KvMap::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    if (!expected.empty()) return expected;
    entries_[key] = Entry{make(desired), false};
    return desired;
  }
  if (*it->second.value == expected) {
    it->second = Entry{make(desired), false};
    return desired;
  }
  return *it->second.value;
}

const Bytes* KvMap::find(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : it->second.value.get();
}

KvMap::Value KvMap::find_shared(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : it->second.value;
}

bool KvMap::contains_all(const std::vector<std::string>& keys) const {
  for (const auto& key : keys) {
    if (!contains(key)) return false;
  }
  return true;
}

std::vector<std::string> KvMap::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& key : keys) {
    if (!contains(key)) out.push_back(key);
  }
  return out;
}

std::string add_on_value_message(const std::string& store_name, const std::string& key) {
  return store_name + " add: key '" + key +
         "' holds a value written by set() or compare_set(), not a counter created by add()";
}

std::string quote_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i > 0) out += ", ";
    out += "'" + keys[i] + "'";
  }
  return out;
}

}  // namespace tdist

namespace tdist {

std::string wait_timeout_message(const std::string& store_name, const std::string& op,
                                 const std::vector<std::string>& missing, Store::Duration timeout,
                                 const std::string& where) {
  std::string msg = store_name + " " + op + ": timed out after " + std::to_string(timeout.count()) +
                    " ms waiting for " + (missing.size() == 1 ? "key " : "keys ") + quote_keys(missing) +
                    " (never set)";
  if (!where.empty()) msg += " " + where;
  return msg;
}

void check_wait_timeout(const std::string& store_name, Store::Duration timeout) {
  if (timeout.count() < 0) {
    throw DistInvalidArgument(store_name + " wait: the timeout is " + std::to_string(timeout.count()) +
                              " ms; it must not be negative");
  }
}

}  // namespace tdist
