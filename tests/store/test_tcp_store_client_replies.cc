// The TCPStore client against a scripted server that answers wrongly: a
// malformed reply must be an error naming it, never half-read data.

#include <gtest/gtest.h>

#include <functional>

#include "fake_store_server.h"
#include "store/tcp/client.h"
#include "tdist/errors.h"

namespace tdist {
namespace {

using std::chrono::milliseconds;
using tcpstore::Command;

// A fake server that answers the client's PING, ignores the wait that
// follows (`waited` is its command) until the client cancels it, then
// answers the CANCEL_WAIT with the reply body `body` writes.
FakeStoreServer cancel_wait_replier(Command waited, std::function<void(tcpstore::FrameWriter&)> body) {
  return FakeStoreServer([waited, body = std::move(body)](FakeStoreServer& fake, Socket& sock) {
    answer_ping(sock, fake.read_request(sock));
    std::vector<uint8_t> wait = fake.read_request(sock);
    ASSERT_EQ(wait[4], static_cast<uint8_t>(waited));
    std::vector<uint8_t> cancel = fake.read_request(sock);
    ASSERT_EQ(cancel[4], static_cast<uint8_t>(Command::kCancelWait));
    tcpstore::FrameWriter w(static_cast<uint8_t>(tcpstore::Status::kOk), store_attack::reply_id(cancel));
    body(w);
    std::vector<uint8_t> reply = w.finish();
    sock.send_all(reply.data(), reply.size(), deadline_after(store_attack::kLong));
  });
}

TEST(StoreClientReplies, TruncatedCancelWaitReplyIsAnError) {
  // Three keys claimed missing, one sent, and no counter.
  FakeStoreServer fake = cancel_wait_replier(Command::kGet, [](tcpstore::FrameWriter& w) {
    w.u8(1);
    w.u32(3);           // three keys announced...
    w.str("only-one");  // ...one sent, and no counter
  });
  TCPStoreClient client("127.0.0.1", fake.port(), store_attack::kLong);
  try {
    client.get("k", milliseconds(200));
    ADD_FAILURE() << "get() returned despite the malformed reply";
  } catch (const DistStoreTimeoutError& e) {
    ADD_FAILURE() << "reported as a plain timeout, keys half-read: " << e.what();
  } catch (const DistStoreError& e) {
    EXPECT_NE(std::string(e.what()).find("malformed CANCEL_WAIT reply"), std::string::npos) << e.what();
  }
  // The connection is out of step: the client does not use it again.
  EXPECT_THROW(client.num_keys(milliseconds(200)), DistStoreError);
}

// The same reply with the counter's bytes cut short (keys complete).
TEST(StoreClientReplies, CancelWaitReplyWithoutItsCounterIsAnError) {
  FakeStoreServer fake = cancel_wait_replier(Command::kWaitCount, [](tcpstore::FrameWriter& w) {
    w.u8(1);
    w.keys({"k"});
    w.u32(0);  // half a counter
  });
  TCPStoreClient client("127.0.0.1", fake.port(), store_attack::kLong);
  int64_t count = 0;
  EXPECT_THROW(client.wait_count("k", 5, milliseconds(200), &count), DistStoreError);
}

// A well-formed reply is still read as before: the keys still missing.
TEST(StoreClientReplies, WholeCancelWaitReplyNamesTheMissingKeys) {
  FakeStoreServer fake = cancel_wait_replier(Command::kWait, [](tcpstore::FrameWriter& w) {
    w.u8(1);
    w.keys({"still-missing"});
    w.i64(0);
  });
  TCPStoreClient client("127.0.0.1", fake.port(), store_attack::kLong);
  try {
    client.wait({"a", "still-missing"}, milliseconds(200));
    ADD_FAILURE() << "wait() returned";
  } catch (const DistStoreTimeoutError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("'still-missing'"), std::string::npos) << what;
    EXPECT_EQ(what.find("'a'"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace tdist
