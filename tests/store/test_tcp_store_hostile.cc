// Clients that break the TCPStore protocol: garbage, truncated and oversized
// frames, unknown commands, clients that vanish mid-request or never read
// their replies. Each must be disconnected (with a warning) without costing
// the server memory, while well-behaved clients keep getting right answers.

#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/socket.h"
#include "store/tcp/client.h"
#include "store/tcp/protocol.h"
#include "store/tcp/server.h"
#include "tdist/errors.h"

namespace tdist {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using tcpstore::Command;
using tcpstore::FrameWriter;

constexpr milliseconds kLong = seconds(60);
constexpr size_t kMiB = size_t{1} << 20;
// Growth the server may show after a hostile client; what it must not do is
// allocate what the client announced (hundreds of MiB to 4 GiB).
constexpr size_t kMaxGrowth = 64 * kMiB;

size_t read_status_kib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1));
  }
  return 0;
}

// Current and peak resident memory of this process (the server runs in it).
struct Memory {
  size_t rss = 0;
  size_t peak = 0;
  static Memory now() {
    std::ifstream statm("/proc/self/statm");
    size_t pages = 0;
    size_t resident = 0;
    statm >> pages >> resident;
    return Memory{resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE)), read_status_kib("VmHWM") * 1024};
  }
};

void expect_bounded_growth(const Memory& before) {
  Memory after = Memory::now();
  EXPECT_LT(after.rss, before.rss + kMaxGrowth) << "RSS grew from " << before.rss << " to " << after.rss;
  if (before.peak > 0) {
    EXPECT_LT(after.peak, before.peak + kMaxGrowth)
        << "peak RSS grew from " << before.peak << " to " << after.peak;
  }
}

std::vector<uint8_t> frame(Command command, uint64_t id, const std::vector<std::string>& strings = {}) {
  FrameWriter w(static_cast<uint8_t>(command), id);
  for (const auto& s : strings) w.str(s);
  return w.finish();
}

class HostileClient : public ::testing::Test {
 protected:
  virtual TCPServerOptions server_options() { return {}; }

  void SetUp() override {
    server_ = TCPServer::start(server_options());
    good_ = std::make_unique<TCPStoreClient>("127.0.0.1", server_->port(), kLong);
    expect_healthy();  // also warms up allocations before memory is measured
  }

  Socket raw() {
    ConnectOptions options;
    options.domain = ErrorDomain::kNetwork;
    return connect_with_retry("127.0.0.1", server_->port(), deadline_after(kLong), options);
  }

  // Sends what fits; the server may already have hung up on us.
  static void send_best_effort(const Socket& sock, const std::vector<uint8_t>& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      auto r = sock.try_send(bytes.data() + done, bytes.size() - done);
      done += r.bytes;
      if (r.error == EAGAIN && sock.wait_writable(deadline_after(milliseconds(200)))) continue;
      if (r.error != 0) return;
    }
  }

  // Reads until the server closes the connection; returns what it sent.
  static std::vector<uint8_t> read_until_closed(const Socket& sock) {
    std::vector<uint8_t> got;
    std::vector<uint8_t> buf(64 << 10);
    Deadline deadline = deadline_after(kLong);
    for (;;) {
      if (!sock.wait_readable(deadline)) {
        ADD_FAILURE() << "the server did not disconnect the hostile client";
        return got;
      }
      auto r = sock.try_recv(buf.data(), buf.size());
      got.insert(got.end(), buf.data(), buf.data() + r.bytes);
      if (r.eof || (r.error != 0 && r.error != EAGAIN)) return got;
    }
  }

  // The first frame of `bytes` must be an error reply to `id` containing `text`.
  static void expect_error_reply(const std::vector<uint8_t>& bytes, uint64_t id, const std::string& text) {
    tcpstore::FrameView view;
    uint64_t announced = 0;
    ASSERT_EQ(tcpstore::parse_frame(bytes.data(), bytes.size(), kMiB, &view, &announced),
              tcpstore::ParseStatus::kFrame)
        << "no complete reply frame in " << bytes.size() << " bytes";
    EXPECT_EQ(view.code, static_cast<uint8_t>(tcpstore::Status::kError));
    EXPECT_EQ(view.id, id);
    tcpstore::PayloadReader reader(view.payload, view.payload_size);
    std::string message = reader.str();
    EXPECT_NE(message.find(text), std::string::npos) << message;
  }

  void expect_healthy() {
    ++round_;
    std::string key = "healthy/" + std::to_string(round_);
    good_->set(key, to_bytes("ok"), kLong);
    EXPECT_EQ(to_string(good_->get(key, kLong)), "ok");
    EXPECT_EQ(good_->add("healthy/count", 1, kLong), round_);
    EXPECT_EQ(to_string(good_->compare_set(key, to_bytes("ok"), to_bytes("still ok"), kLong)), "still ok");
  }

  uint64_t rejected() const { return server_->stats().clients_rejected; }

  std::shared_ptr<TCPServer> server_;
  std::unique_ptr<TCPStoreClient> good_;
  int64_t round_ = 0;
};

TEST_F(HostileClient, GarbageBytesAreDisconnected) {
  Socket sock = raw();
  std::string http = "GET / HTTP/1.1\r\nHost: store\r\n\r\n";
  send_best_effort(sock, std::vector<uint8_t>(http.begin(), http.end()));
  read_until_closed(sock);
  EXPECT_EQ(rejected(), 1u);
  expect_healthy();
}

TEST_F(HostileClient, LengthFieldTooSmallForAHeaderIsDisconnected) {
  Socket sock = raw();
  send_best_effort(sock, {3, 0, 0, 0, 1, 2, 3});
  read_until_closed(sock);
  EXPECT_EQ(rejected(), 1u);
  expect_healthy();
}

TEST_F(HostileClient, RandomGarbageFromManyClientsLeavesOthersServed) {
  std::mt19937 rng(12345);
  for (int i = 0; i < 40; ++i) {
    Socket sock = raw();
    std::vector<uint8_t> junk(1 + rng() % 4096);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    send_best_effort(sock, junk);
    ::shutdown(sock.fd(), SHUT_WR);  // whatever it meant, it is over
    read_until_closed(sock);
    expect_healthy();
  }
}

TEST_F(HostileClient, FourGiBLengthFieldAllocatesNothing) {
  Memory before = Memory::now();
  Socket sock = raw();
  std::vector<uint8_t> header = {0xff, 0xff, 0xff, 0xff, static_cast<uint8_t>(Command::kSet), 77, 0, 0, 0,
                                 0,    0,    0,    0};
  send_best_effort(sock, header);
  std::vector<uint8_t> reply = read_until_closed(sock);
  expect_error_reply(reply, 77, "limit");
  EXPECT_EQ(rejected(), 1u);
  expect_bounded_growth(before);
  expect_healthy();
}

TEST_F(HostileClient, AnnouncedButUnsentBytesAreNeverAllocated) {
  Memory before = Memory::now();
  Socket sock = raw();
  // 200 MiB announced (under the 256 MiB limit), 1 MiB sent, then gone.
  std::vector<uint8_t> partial(kMiB, 'x');
  uint32_t length = 200 * kMiB;
  for (int i = 0; i < 4; ++i) partial[static_cast<size_t>(i)] = static_cast<uint8_t>(length >> (8 * i));
  partial[4] = static_cast<uint8_t>(Command::kSet);
  send_best_effort(sock, partial);
  ::shutdown(sock.fd(), SHUT_WR);
  read_until_closed(sock);
  EXPECT_EQ(rejected(), 1u);
  expect_bounded_growth(before);
  expect_healthy();
}

TEST_F(HostileClient, UnknownCommandGetsAnErrorAndIsDisconnected) {
  Socket sock = raw();
  FrameWriter w(0x7f, 5);
  w.str("whatever");
  send_best_effort(sock, w.finish());
  expect_error_reply(read_until_closed(sock), 5, "unknown command");
  EXPECT_EQ(rejected(), 1u);
  expect_healthy();
}

TEST_F(HostileClient, TruncatedPayloadIsDisconnected) {
  Socket sock = raw();
  FrameWriter w(static_cast<uint8_t>(Command::kSet), 9);
  w.u32(1000);  // a key of 1000 bytes, of which 3 follow
  w.raw("abc", 3);
  send_best_effort(sock, w.finish());
  expect_error_reply(read_until_closed(sock), 9, "truncated SET");
  expect_healthy();
}

TEST_F(HostileClient, TrailingBytesAfterAPayloadAreDisconnected) {
  Socket sock = raw();
  FrameWriter w(static_cast<uint8_t>(Command::kNumKeys), 4);
  w.u64(0);
  send_best_effort(sock, w.finish());
  expect_error_reply(read_until_closed(sock), 4, "trailing bytes");
  expect_healthy();
}

TEST_F(HostileClient, ClientVanishingMidFrameIsDropped) {
  Socket sock = raw();
  std::vector<uint8_t> whole = frame(Command::kSet, 1, {"key", std::string(100, 'v')});
  send_best_effort(sock, std::vector<uint8_t>(whole.begin(), whole.begin() + 20));
  ::shutdown(sock.fd(), SHUT_WR);
  read_until_closed(sock);
  EXPECT_EQ(rejected(), 1u);
  sock.close();
  EXPECT_FALSE(good_->check({"key"}, kLong));  // the half-sent SET did nothing
  expect_healthy();
}

TEST_F(HostileClient, ClientVanishingWhileItsGetIsParkedIsForgotten) {
  Socket sock = raw();
  send_best_effort(sock, frame(Command::kGet, 1, {"parked"}));
  FrameWriter ping(static_cast<uint8_t>(Command::kPing), 2);
  ping.u32(tcpstore::kProtocolVersion);
  send_best_effort(sock, ping.finish());
  // The PING reply proves the GET before it was parked.
  std::vector<uint8_t> reply(tcpstore::kHeaderBytes + 4);
  sock.recv_all(reply.data(), reply.size(), deadline_after(kLong));
  EXPECT_EQ(reply[5], 2);
  EXPECT_EQ(server_->stats().waiters_parked, 1u);
  sock.close();
  good_->set("parked", to_bytes("now"), kLong);  // must not reply to the dead client
  expect_healthy();
  EXPECT_EQ(rejected(), 0u);  // leaving between requests is not an offence
}

TEST_F(HostileClient, ClientParkingWaitersWithoutEndIsDisconnected) {
  Memory before = Memory::now();
  Socket sock = raw();
  std::vector<uint8_t> gets;
  for (int i = 0; i < 20000; ++i) {
    auto f = frame(Command::kGet, static_cast<uint64_t>(i + 1), {"missing/" + std::to_string(i)});
    gets.insert(gets.end(), f.begin(), f.end());
  }
  send_best_effort(sock, gets);
  read_until_closed(sock);
  EXPECT_EQ(rejected(), 1u);
  expect_bounded_growth(before);
  expect_healthy();
}

TEST_F(HostileClient, PipelinedAndDribbledFramesAreServedInOrder) {
  Socket sock = raw();
  std::vector<uint8_t> batch;
  constexpr int kFrames = 200;
  for (int i = 0; i < kFrames; ++i) {
    FrameWriter w(static_cast<uint8_t>(Command::kAdd), static_cast<uint64_t>(1000 + i));
    w.str("pipelined");
    w.i64(1);
    auto f = w.finish();
    batch.insert(batch.end(), f.begin(), f.end());
  }
  sock.send_all(batch.data(), batch.size(), deadline_after(kLong));
  for (int i = 0; i < kFrames; ++i) {
    std::vector<uint8_t> reply(tcpstore::kHeaderBytes + 8);
    sock.recv_all(reply.data(), reply.size(), deadline_after(kLong));
    tcpstore::PayloadReader id(reply.data() + 5, 8);
    EXPECT_EQ(id.u64(), static_cast<uint64_t>(1000 + i));
    tcpstore::PayloadReader value(reply.data() + tcpstore::kHeaderBytes, 8);
    EXPECT_EQ(value.i64(), i + 1);
  }
  std::vector<uint8_t> dribble = frame(Command::kSet, 7, {"dribbled", "one byte at a time"});
  for (uint8_t byte : dribble) sock.send_all(&byte, 1, deadline_after(kLong));
  std::vector<uint8_t> reply(tcpstore::kHeaderBytes);
  sock.recv_all(reply.data(), reply.size(), deadline_after(kLong));
  EXPECT_EQ(reply[4], static_cast<uint8_t>(tcpstore::Status::kOk));
  EXPECT_EQ(reply[5], 7);
  EXPECT_EQ(to_string(good_->get("dribbled", kLong)), "one byte at a time");
  EXPECT_EQ(rejected(), 0u);
}

class SmallLimits : public HostileClient {
 protected:
  TCPServerOptions server_options() override {
    TCPServerOptions options;
    options.max_frame_bytes = kMiB;
    options.output_soft_limit = 256 << 10;
    options.output_hard_limit = 4 * kMiB;
    return options;
  }
};

TEST_F(SmallLimits, FrameOverTheConfiguredLimitIsRejectedWithAReason) {
  Socket sock = raw();
  std::vector<uint8_t> big = frame(Command::kSet, 3, {"k", std::string(2 * kMiB, 'x')});
  send_best_effort(sock, big);
  read_until_closed(sock);
  EXPECT_EQ(rejected(), 1u);
  EXPECT_FALSE(good_->check({"k"}, kLong));
  expect_healthy();
}

TEST_F(SmallLimits, ClientThatNeverReadsIsThrottledThenDisconnected) {
  Memory before = Memory::now();
  good_->set("big", Bytes(512 << 10, 'b'), kLong);
  // A flood of GETs for a large value, never reading the replies: the server
  // stops reading this client once 256 KiB of replies are pending.
  Socket flood = raw();
  std::vector<uint8_t> gets;
  for (int i = 0; i < 2000; ++i) {
    auto f = frame(Command::kGet, static_cast<uint64_t>(i + 1), {"big"});
    gets.insert(gets.end(), f.begin(), f.end());
  }
  send_best_effort(flood, gets);
  expect_healthy();
  // Replies that pile up anyway (64 parked GETs answered at once by one SET)
  // pass the hard limit: that client is disconnected.
  Socket parked = raw();
  for (int i = 0; i < 64; ++i)
    send_best_effort(parked, frame(Command::kGet, static_cast<uint64_t>(i + 1), {"later"}));
  FrameWriter ping(static_cast<uint8_t>(Command::kPing), 99);
  ping.u32(tcpstore::kProtocolVersion);
  send_best_effort(parked, ping.finish());
  std::vector<uint8_t> pong(tcpstore::kHeaderBytes + 4);
  parked.recv_all(pong.data(), pong.size(), deadline_after(kLong));  // all 64 are parked now
  good_->set("later", Bytes(512 << 10, 'l'), kLong);
  read_until_closed(parked);
  EXPECT_EQ(rejected(), 1u);
  expect_healthy();
  expect_bounded_growth(before);
}

}  // namespace
}  // namespace tdist
