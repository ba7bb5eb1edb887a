#pragma once

// A scripted stand-in for a TCPStore server: it listens on loopback, accepts
// connections one after another and hands each to the test's script, which
// reads requests and writes whatever replies (right or wrong) it wants.

#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/socket.h"
#include "store_attack.h"

namespace tdist {

class FakeStoreServer {
 public:
  /// `script` runs on the server's thread for each of the first
  /// `connections` connections; whatever it throws ends that connection.
  explicit FakeStoreServer(std::function<void(FakeStoreServer&, Socket&)> script, int connections = 1)
      : listener_(listen_on(0, ListenOptions{"127.0.0.1"})), script_(std::move(script)) {
    thread_ = std::thread([this, connections] {
      for (int i = 0; i < connections; ++i) {
        if (!listener_.wait_readable(deadline_after(store_attack::kLong))) return;
        int error = 0;
        Socket sock = accept_connection(listener_, &error);
        if (!sock) continue;
        try {
          script_(*this, sock);
        } catch (const std::exception&) {
          // The client hung up on the script: that is often the point.
        }
      }
    });
  }
  ~FakeStoreServer() {
    if (thread_.joinable()) thread_.join();
  }
  uint16_t port() const { return listener_.local_port(); }

  /// One request frame from `sock`, recorded in received().
  std::vector<uint8_t> read_request(Socket& sock) {
    std::vector<uint8_t> frame = store_attack::read_reply(sock);
    std::lock_guard<std::mutex> lock(mutex_);
    received_.insert(received_.end(), frame.begin(), frame.end());
    return frame;
  }
  /// Every byte the clients sent through read_request().
  std::vector<uint8_t> received() {
    std::lock_guard<std::mutex> lock(mutex_);
    return received_;
  }

 private:
  Socket listener_;
  std::function<void(FakeStoreServer&, Socket&)> script_;
  std::thread thread_;
  std::mutex mutex_;
  std::vector<uint8_t> received_;
};

/// Answers a PING frame as a server of this protocol version does.
inline void answer_ping(Socket& sock, const std::vector<uint8_t>& ping) {
  tcpstore::FrameWriter w(static_cast<uint8_t>(tcpstore::Status::kOk), store_attack::reply_id(ping));
  w.u32(tcpstore::kProtocolVersion);
  std::vector<uint8_t> reply = w.finish();
  sock.send_all(reply.data(), reply.size(), deadline_after(store_attack::kLong));
}

}  // namespace tdist
