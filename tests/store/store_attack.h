#pragma once

// Helpers of the TCPStore attack tests: raw sockets that speak (or abuse)
// the wire format, and a legitimate client that measures how long the
// server takes to serve it while an attack runs.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/socket.h"
#include "store/tcp/client.h"
#include "store/tcp/protocol.h"

namespace tdist::store_attack {

inline constexpr std::chrono::milliseconds kLong{60000};

inline Socket raw_connect(uint16_t port, const std::string& host = "127.0.0.1") {
  ConnectOptions options;
  options.domain = ErrorDomain::kNetwork;
  return connect_with_retry(host, port, deadline_after(kLong), options);
}

/// Sends what the server takes; it may hang up or stop reading.
inline void send_best_effort(const Socket& sock, const std::vector<uint8_t>& bytes,
                             std::chrono::milliseconds patience = std::chrono::milliseconds(2000)) {
  size_t done = 0;
  Deadline deadline = deadline_after(patience);
  while (done < bytes.size()) {
    auto r = sock.try_send(bytes.data() + done, bytes.size() - done);
    done += r.bytes;
    if (r.error == EAGAIN && sock.wait_writable(deadline)) continue;
    if (r.error != 0) return;
  }
}

inline std::vector<uint8_t> keys_frame(tcpstore::Command command, uint64_t id,
                                       const std::vector<std::string>& keys) {
  tcpstore::FrameWriter w(static_cast<uint8_t>(command), id);
  w.keys(keys);
  return w.finish();
}

inline std::vector<uint8_t> key_frame(tcpstore::Command command, uint64_t id, const std::string& key) {
  tcpstore::FrameWriter w(static_cast<uint8_t>(command), id);
  w.str(key);
  return w.finish();
}

inline std::vector<uint8_t> set_frame(uint64_t id, const std::string& key, const std::string& value) {
  tcpstore::FrameWriter w(static_cast<uint8_t>(tcpstore::Command::kSet), id);
  w.str(key);
  w.str(value);
  return w.finish();
}

/// One whole reply frame from a raw socket (header + payload).
inline std::vector<uint8_t> read_reply(const Socket& sock, std::chrono::milliseconds within = kLong) {
  std::vector<uint8_t> frame(4);
  Deadline deadline = deadline_after(within);
  sock.recv_all(frame.data(), 4, deadline);
  uint32_t length = 0;
  for (int i = 3; i >= 0; --i) length = length << 8 | frame[static_cast<size_t>(i)];
  frame.resize(4 + size_t{length});
  sock.recv_all(frame.data() + 4, length, deadline);
  return frame;
}

inline uint64_t reply_id(const std::vector<uint8_t>& frame) {
  tcpstore::PayloadReader r(frame.data() + 5, 8);
  return r.u64();
}

/// True once the server has closed `sock` (EOF or reset) within `within`.
inline bool closed_by_server(const Socket& sock, std::chrono::milliseconds within) {
  std::vector<uint8_t> buf(64 << 10);
  Deadline deadline = deadline_after(within);
  for (;;) {
    if (!sock.wait_readable(deadline)) return false;
    auto r = sock.try_recv(buf.data(), buf.size());
    if (r.eof || (r.error != 0 && r.error != EAGAIN)) return true;
  }
}

/// Resident memory of this process (the server runs in it).
inline size_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0;
  size_t resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

/// A legitimate client: GETs one key in a loop on its own thread and keeps
/// the longest round trip, until stop(). Every answer is checked.
class LatencyProbe {
 public:
  explicit LatencyProbe(uint16_t port, std::optional<std::string> token = std::nullopt)
      : client_("127.0.0.1", port, kLong, std::move(token)) {
    client_.set("probe/key", to_bytes("probe value"), kLong);
    thread_ = std::thread([this] { loop(); });
  }
  ~LatencyProbe() { stop(); }

  void stop() {
    stopping_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  /// Starts a new measurement window (the longest round trip since then).
  void reset_max() { max_us_.store(0); }
  std::chrono::microseconds max_latency() const { return std::chrono::microseconds(max_us_.load()); }
  uint64_t rounds() const { return rounds_.load(); }
  uint64_t wrong() const { return wrong_.load(); }
  const std::string& error() const { return error_; }

 private:
  void loop() {
    while (!stopping_.load()) {
      auto start = std::chrono::steady_clock::now();
      try {
        if (to_string(client_.get("probe/key", kLong)) != "probe value") wrong_.fetch_add(1);
      } catch (const std::exception& e) {
        error_ = e.what();
        wrong_.fetch_add(1);
        return;
      }
      auto us =
          std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start);
      max_us_.store(std::max<int64_t>(max_us_.load(), us.count()));
      rounds_.fetch_add(1);
      // A short pause between rounds leaves the attacker the CPU too (two
      // cores), so the probe measures the server, not a race for cores.
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  TCPStoreClient client_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> max_us_{0};
  std::atomic<uint64_t> rounds_{0};
  std::atomic<uint64_t> wrong_{0};
  std::string error_;
};

}  // namespace tdist::store_attack
