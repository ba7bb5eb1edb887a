// What a client without the token can cost a TCPStore server that has one
// (docs/security.md, "Optional authentication"): before the handshake only
// its small frames are accepted, so such a client cannot fill the memory
// budget; and the connections in the handshake are capped, the oldest
// closed first, so they cannot lock the job's clients out either.

#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "store/tcp/server.h"
#include "store_attack.h"
#include "tdist/errors.h"

namespace tdist {
namespace {

using std::chrono::milliseconds;
using store_attack::kLong;

constexpr size_t kMiB = size_t{1} << 20;
const std::string kToken = "the job's token";

// Everything the server sends on `sock` until it closes it; `closed` says
// whether it did within `within`.
std::string read_until_closed(const Socket& sock, milliseconds within, bool* closed) {
  std::string got;
  std::vector<uint8_t> buf(64 << 10);
  Deadline deadline = deadline_after(within);
  *closed = false;
  while (sock.wait_readable(deadline)) {
    auto r = sock.try_recv(buf.data(), buf.size());
    got.append(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(r.bytes));
    if (r.eof || (r.error != 0 && r.error != EAGAIN)) {
      *closed = true;
      break;
    }
  }
  return got;
}

// The reviewer's case: a 64 MiB budget, five connections without the token
// each sending all but the last byte of a 12 MiB SET. They used to be
// buffered (60 MiB) until the frame timeout, and the job's 8 MiB SET failed
// for the budget. Now each is refused on its length and closed.
TEST(StoreAuthLimits, ClientsWithoutTheTokenCannotFillTheBudget) {
  TCPServerOptions options;
  options.memory_budget = 64 * kMiB;
  options.auth_token = kToken;
  auto server = TCPServer::start(options);
  constexpr int kHogs = 5;
  std::vector<Socket> hogs;
  for (int i = 0; i < kHogs; ++i) {
    hogs.push_back(store_attack::raw_connect(server->port()));
    std::vector<uint8_t> frame =
        store_attack::set_frame(static_cast<uint64_t>(i) + 1, "hog", std::string(12 * kMiB, 'h'));
    frame.pop_back();  // never finished
    store_attack::send_best_effort(hogs.back(), frame);
  }
  // Until the server has dealt with all of them: refused (now) or buffered
  // (before the fix).
  Deadline deadline = deadline_after(kLong);
  auto settled = [&] {
    TCPServerStats s = server->stats();
    return s.auth_refusals >= kHogs || s.memory_used >= kHogs * (12 * kMiB - 1);
  };
  while (!settled() && SocketClock::now() < deadline) std::this_thread::yield();
  ASSERT_TRUE(settled()) << "memory used " << server->stats().memory_used;

  TCPStoreClient job("127.0.0.1", server->port(), kLong, kToken);
  Bytes value(8 * kMiB, 'v');
  try {
    job.set("legit", value, kLong);
  } catch (const DistStoreError& e) {
    ADD_FAILURE() << "the job's SET failed: " << e.what();
  }
  EXPECT_EQ(job.get("legit", kLong), value);
  for (const Socket& hog : hogs) {
    bool closed = false;
    std::string reply = read_until_closed(hog, milliseconds(5000), &closed);
    EXPECT_TRUE(closed) << "a connection without the token kept a 12 MiB frame open";
    EXPECT_NE(reply.find("authentication required"), std::string::npos) << reply;
  }
  EXPECT_EQ(server->stats().auth_refusals, static_cast<uint64_t>(kHogs));
  EXPECT_LT(server->stats().memory_used, 9 * kMiB) << "only the job's value is held";
}

// The handshake's own frames pass the bound, and a frame of just over it is
// refused on its length, before the rest of it comes (it used to wait for
// the whole frame, up to max_frame_bytes, for the frame timeout).
TEST(StoreAuthLimits, FrameBoundBeforeTheHandshakeIsTheHandshakes) {
  TCPServerOptions options;
  options.auth_token = kToken;
  auto server = TCPServer::start(options);
  TCPStoreClient job("127.0.0.1", server->port(), kLong, kToken);  // AUTH_BEGIN and AUTH_PROOF passed
  job.set("k", to_bytes("v"), kLong);
  Socket sock = store_attack::raw_connect(server->port());
  // A SET whose frame's length field is 257: one over the bound.
  std::vector<uint8_t> frame = store_attack::set_frame(7, "k", std::string(257 - 9 - 8 - 1, 'x'));
  ASSERT_EQ(frame.size(), 4u + 257u);
  frame.pop_back();  // never finished
  store_attack::send_best_effort(sock, frame);
  bool closed = false;
  std::string reply = read_until_closed(sock, milliseconds(5000), &closed);
  EXPECT_TRUE(closed);
  EXPECT_NE(reply.find("authentication required"), std::string::npos) << reply;
  EXPECT_EQ(to_string(job.get("k", kLong)), "v");
}

// Silent connections fill every place of the handshake; the job's client
// still gets in, as the oldest silent one is closed to make room.
TEST(StoreAuthLimits, AFullHandshakeClosesItsOldestConnection) {
  TCPServerOptions options;
  options.auth_token = kToken;
  options.max_unauthenticated = 4;
  auto server = TCPServer::start(options);
  std::vector<Socket> silent;
  for (size_t i = 0; i < options.max_unauthenticated; ++i)
    silent.push_back(store_attack::raw_connect(server->port()));
  Deadline deadline = deadline_after(kLong);
  while (server->stats().connections_accepted < options.max_unauthenticated &&
         SocketClock::now() < deadline) {
    std::this_thread::yield();
  }
  ASSERT_EQ(server->stats().connections_accepted, options.max_unauthenticated);

  TCPStoreClient job("127.0.0.1", server->port(), kLong, kToken);
  job.set("k", to_bytes("v"), kLong);
  EXPECT_EQ(to_string(job.get("k", kLong)), "v");
  bool closed = false;
  read_until_closed(silent.front(), milliseconds(5000), &closed);
  EXPECT_TRUE(closed) << "the oldest silent connection was kept past the limit";
  EXPECT_EQ(server->stats().auth_refusals, 1u) << "only the oldest makes room";
  EXPECT_EQ(server->stats().connections_open, options.max_unauthenticated)
      << "three silent connections and the job's";
}

}  // namespace
}  // namespace tdist
