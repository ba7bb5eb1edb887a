// The TCPStore client against a scripted server that answers wrongly: a
// malformed reply must be an error naming it, never half-read data.

#include <gtest/gtest.h>

#include "fake_store_server.h"
#include "store/tcp/client.h"
#include "tdist/errors.h"

namespace tdist {
namespace {

using std::chrono::milliseconds;
using tcpstore::Command;

// The server ignores a GET until the client cancels it, then claims three
// keys are missing but sends only one of them.
void truncated_cancel_reply(FakeStoreServer& fake, Socket& sock) {
  answer_ping(sock, fake.read_request(sock));
  std::vector<uint8_t> get = fake.read_request(sock);
  ASSERT_EQ(get[4], static_cast<uint8_t>(Command::kGet));
  std::vector<uint8_t> cancel = fake.read_request(sock);
  ASSERT_EQ(cancel[4], static_cast<uint8_t>(Command::kCancelWait));
  tcpstore::FrameWriter w(static_cast<uint8_t>(tcpstore::Status::kOk), store_attack::reply_id(cancel));
  w.u8(1);
  w.u32(3);           // three keys announced...
  w.str("only-one");  // ...one sent, and no counter
  std::vector<uint8_t> reply = w.finish();
  sock.send_all(reply.data(), reply.size(), deadline_after(store_attack::kLong));
}

TEST(StoreClientReplies, TruncatedCancelWaitReplyIsAnError) {
  FakeStoreServer fake(truncated_cancel_reply);
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
  FakeStoreServer fake([](FakeStoreServer& self, Socket& sock) {
    answer_ping(sock, self.read_request(sock));
    self.read_request(sock);
    std::vector<uint8_t> cancel = self.read_request(sock);
    tcpstore::FrameWriter w(static_cast<uint8_t>(tcpstore::Status::kOk), store_attack::reply_id(cancel));
    w.u8(1);
    w.keys({"k"});
    w.u32(0);  // half a counter
    std::vector<uint8_t> reply = w.finish();
    sock.send_all(reply.data(), reply.size(), deadline_after(store_attack::kLong));
  });
  TCPStoreClient client("127.0.0.1", fake.port(), store_attack::kLong);
  int64_t count = 0;
  EXPECT_THROW(client.wait_count("k", 5, milliseconds(200), &count), DistStoreError);
}

// A well-formed reply is still read as before: the keys still missing.
TEST(StoreClientReplies, WholeCancelWaitReplyNamesTheMissingKeys) {
  FakeStoreServer fake([](FakeStoreServer& self, Socket& sock) {
    answer_ping(sock, self.read_request(sock));
    self.read_request(sock);
    std::vector<uint8_t> cancel = self.read_request(sock);
    tcpstore::FrameWriter w(static_cast<uint8_t>(tcpstore::Status::kOk), store_attack::reply_id(cancel));
    w.u8(1);
    w.keys({"still-missing"});
    w.i64(0);
    std::vector<uint8_t> reply = w.finish();
    sock.send_all(reply.data(), reply.size(), deadline_after(store_attack::kLong));
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
