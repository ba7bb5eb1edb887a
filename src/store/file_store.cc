#include "tdist/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/error_text.h"
#include "kv_map.h"
#include "tdist/errors.h"
#include "tdist/logging.h"

// The file is an append-only log of records:
//   u8 kind (kValue or kCounter) | u32 key length | key | u64 value length | value
// Every store replays the records it has not seen yet into a KvMap before it
// answers, so all users converge on the same map. Appends happen under an
// exclusive flock and are complete before the lock is released, so a reader
// holding a shared lock never sees half a record. flock (not fcntl) because
// its locks belong to the open file, so two FileStores of one process (as in
// the spec's example) exclude each other too; Linux maps flock onto fcntl
// locks on NFS.

namespace tdist {
namespace {

constexpr uint8_t kValue = 1;
constexpr uint8_t kCounter = 2;
// Bookkeeping keys for cleanup; hidden from num_keys().
constexpr const char* kInternalPrefix = "__tdist_filestore/";
const std::string kUsersKey = std::string(kInternalPrefix) + "users";
const std::string kDoneKey = std::string(kInternalPrefix) + "done";

void append_u32(std::string& out, uint32_t v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}
void append_u64(std::string& out, uint64_t v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

}  // namespace

struct FileStore::State {
  std::mutex mutex;  // guards everything below for threads of this process
  int fd = -1;
  off_t position = 0;  // how far into the file `map` reflects
  KvMap map;
  bool joined = false;

  // Holds an flock for its lifetime.
  class Lock {
   public:
    Lock(const std::string& path, int fd, int mode) : fd_(fd) {
      while (flock(fd_, mode) != 0) {
        if (errno != EINTR) throw DistStoreError("FileStore " + path + ": cannot lock: " + errno_text(errno));
      }
    }
    ~Lock() { flock(fd_, LOCK_UN); }
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

   private:
    int fd_;
  };

  // Replays records appended since the last call. Caller holds a lock.
  void refresh(const std::string& path) {
    struct stat st {};
    if (fstat(fd, &st) != 0) throw DistStoreError("FileStore " + path + ": fstat: " + errno_text(errno));
    if (st.st_size < position) {
      throw DistStoreError("FileStore " + path + ": the file shrank from " + std::to_string(position) +
                           " to " + std::to_string(st.st_size) +
                           " bytes; another job deleted or truncated it while this store was using it");
    }
    if (st.st_size == position) return;
    std::string data(static_cast<size_t>(st.st_size - position), '\0');
    size_t got = 0;
    while (got < data.size()) {
      ssize_t n = pread(fd, data.data() + got, data.size() - got, position + static_cast<off_t>(got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw DistStoreError("FileStore " + path + ": read: " + errno_text(n < 0 ? errno : EIO));
      got += static_cast<size_t>(n);
    }
    size_t at = 0;
    auto corrupt = [&](const char* what) {
      return DistStoreError("FileStore " + path + ": corrupt record at byte " +
                            std::to_string(position + static_cast<off_t>(at)) + " (" + what +
                            "); is the file shared with something that is not a FileStore?");
    };
    while (at < data.size()) {
      if (data.size() - at < 1 + 4) throw corrupt("truncated header");
      uint8_t kind = static_cast<uint8_t>(data[at]);
      uint32_t key_len = 0;
      std::memcpy(&key_len, data.data() + at + 1, 4);
      size_t p = at + 5;
      if (data.size() - p < static_cast<size_t>(key_len) + 8) throw corrupt("truncated key");
      std::string key = data.substr(p, key_len);
      p += key_len;
      uint64_t value_len = 0;
      std::memcpy(&value_len, data.data() + p, 8);
      p += 8;
      if (data.size() - p < value_len) throw corrupt("truncated value");
      Bytes value(data.begin() + static_cast<std::ptrdiff_t>(p),
                  data.begin() + static_cast<std::ptrdiff_t>(p + value_len));
      p += value_len;
      if (kind == kValue) {
        map.set(key, std::move(value));
      } else if (kind == kCounter) {
        // Counter records carry the increment; replaying them in file order
        // gives every reader the same total.
        int64_t amount = 0;
        if (value.size() != sizeof(amount)) throw corrupt("bad counter record");
        std::memcpy(&amount, value.data(), sizeof(amount));
        if (!map.add(key, amount)) throw corrupt("counter record on a value key");
      } else {
        throw corrupt("unknown record kind");
      }
      at = p;
    }
    position = st.st_size;
  }

  // Appends one record; caller holds an exclusive lock and has refreshed.
  void append(const std::string& path, uint8_t kind, const std::string& key, const Bytes& value) {
    std::string record;
    record.reserve(1 + 4 + key.size() + 8 + value.size());
    record.push_back(static_cast<char>(kind));
    append_u32(record, static_cast<uint32_t>(key.size()));
    record += key;
    append_u64(record, value.size());
    record.append(reinterpret_cast<const char*>(value.data()), value.size());
    size_t put = 0;
    while (put < record.size()) {
      ssize_t n = pwrite(fd, record.data() + put, record.size() - put, position + static_cast<off_t>(put));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw DistStoreError("FileStore " + path + ": write: " + errno_text(n < 0 ? errno : EIO));
      put += static_cast<size_t>(n);
    }
  }

  // Re-reads the file until every key is there; a file cannot announce
  // changes, so the pause between reads grows from 1 ms to 50 ms.
  void wait_keys(const std::string& path, const std::vector<std::string>& keys, Duration timeout,
                 const char* op) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    auto backoff = std::chrono::milliseconds(1);
    for (;;) {
      {
        std::lock_guard<std::mutex> guard(mutex);
        Lock lock(path, fd, LOCK_SH);
        refresh(path);
        if (map.contains_all(keys)) return;
        if (std::chrono::steady_clock::now() >= deadline) {
          throw DistStoreTimeoutError(
              wait_timeout_message("FileStore", op, map.missing(keys), timeout, "in file " + path));
        }
      }
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      std::this_thread::sleep_for(std::max(std::chrono::milliseconds(0), std::min(backoff, left)));
      backoff = std::min(backoff * 2, std::chrono::milliseconds(50));
    }
  }

  int64_t add_locked(const std::string& path, const std::string& key, int64_t amount) {
    if (map.contains(key) && !map.add(key, 0)) throw DistStoreError(add_on_value_message("FileStore", key));
    Bytes increment(sizeof(amount));
    std::memcpy(increment.data(), &amount, sizeof(amount));
    append(path, kCounter, key, increment);
    refresh(path);
    return *map.add(key, 0);
  }
};

FileStore::FileStore(std::string file_name, int world_size)
    : path_(std::move(file_name)), world_size_(world_size), state_(std::make_unique<State>()) {
  if (path_.empty()) throw DistInvalidArgument("FileStore: file_name is empty");
  if (world_size == 0)
    throw DistInvalidArgument("FileStore " + path_ + ": world_size must be positive or -1, got 0");
  state_->fd = open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (state_->fd < 0) throw DistStoreError("FileStore: cannot open " + path_ + ": " + errno_text(errno));
  try {
    State::Lock lock(path_, state_->fd, LOCK_EX);
    state_->refresh(path_);
    int64_t users = state_->add_locked(path_, kUsersKey, 1);
    state_->joined = true;
    if (world_size_ > 0 && users > world_size_) {
      throw DistStoreError("FileStore " + path_ + ": this is user " + std::to_string(users) +
                           " of the file but world_size is " + std::to_string(world_size_) +
                           "; is the file left over from an earlier job? Delete it or use a new path");
    }
  } catch (...) {
    close(state_->fd);
    throw;
  }
}

FileStore::~FileStore() {
  try {
    std::lock_guard<std::mutex> guard(state_->mutex);
    State::Lock lock(path_, state_->fd, LOCK_EX);
    state_->refresh(path_);
    int64_t done = state_->add_locked(path_, kDoneKey, 1);
    const Bytes* users = state_->map.find(kUsersKey);
    int64_t joined = users != nullptr ? std::stoll(to_string(*users)) : 0;
    // Remove the file once every user is done with it: world_size of them
    // when it is fixed, else everyone who has joined so far.
    if (world_size_ > 0 ? done >= world_size_ : done >= joined) unlink(path_.c_str());
  } catch (const std::exception& e) {
    TDIST_LOG(WARNING) << "FileStore " << path_ << ": cleanup failed: " << e.what();
  }
  close(state_->fd);
}

void FileStore::set(const std::string& key, const Bytes& value) {
  std::lock_guard<std::mutex> guard(state_->mutex);
  State::Lock lock(path_, state_->fd, LOCK_EX);
  state_->refresh(path_);
  state_->append(path_, kValue, key, value);
  state_->refresh(path_);
}

Bytes FileStore::get(const std::string& key) {
  state_->wait_keys(path_, {key}, timeout(), "get");
  std::lock_guard<std::mutex> guard(state_->mutex);
  return *state_->map.find(key);
}

int64_t FileStore::add(const std::string& key, int64_t amount) {
  std::lock_guard<std::mutex> guard(state_->mutex);
  State::Lock lock(path_, state_->fd, LOCK_EX);
  state_->refresh(path_);
  return state_->add_locked(path_, key, amount);
}

Bytes FileStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  std::lock_guard<std::mutex> guard(state_->mutex);
  State::Lock lock(path_, state_->fd, LOCK_EX);
  state_->refresh(path_);
  const Bytes* current = state_->map.find(key);
  bool swap = current == nullptr ? expected.empty() : *current == expected;
  if (!swap) return current == nullptr ? expected : *current;
  state_->append(path_, kValue, key, desired);
  state_->refresh(path_);
  return desired;
}

bool FileStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> guard(state_->mutex);
  State::Lock lock(path_, state_->fd, LOCK_SH);
  state_->refresh(path_);
  return state_->map.contains_all(keys);
}

void FileStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  check_wait_timeout("FileStore", timeout);
  state_->wait_keys(path_, keys, timeout, "wait");
}

int64_t FileStore::num_keys() {
  std::lock_guard<std::mutex> guard(state_->mutex);
  State::Lock lock(path_, state_->fd, LOCK_SH);
  state_->refresh(path_);
  return state_->map.size() - (state_->map.contains(kUsersKey) ? 1 : 0) -
         (state_->map.contains(kDoneKey) ? 1 : 0);
}

bool FileStore::delete_key(const std::string& key) {
  throw DistStoreError("FileStore delete_key('" + key +
                       "'): FileStore does not support deleting keys (only TCPStore and HashStore do)");
}

}  // namespace tdist
