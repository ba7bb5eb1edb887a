// The TCP transport's parsing of greetings and abort notices
// (transport/tcp/tcp_wire.h), on hand-made bytes: what tcp_connect.cc and
// tcp_transport.cc relied on before it was factored out for the fuzzer.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/tcp_wire.h"

namespace tcp = tdist::transport::tcp;

namespace {

constexpr tcp::Hello kGood{tcp::kHelloMagic, 3, 4, 1, 2};  // rank 3 of 4, connection 1 of 2

tcp::AbortNotice decode(const std::string& payload) {
  return tcp::decode_abort_payload(reinterpret_cast<const uint8_t*>(payload.data()), payload.size());
}

}  // namespace

TEST(TcpWire, PlausibleGreetingFromAHigherRank) {
  EXPECT_TRUE(tcp::hello_plausible(kGood, 0, 4));
  EXPECT_TRUE(tcp::hello_plausible(kGood, 2, 4));
  EXPECT_TRUE(tcp::hello_plausible({tcp::kHelloMagic, 1, 2, 15, 16}, 0, 2));
}

TEST(TcpWire, GreetingsThatCannotBeFromThisGroup) {
  auto with = [](auto change) {
    tcp::Hello h = kGood;
    change(h);
    return h;
  };
  EXPECT_FALSE(tcp::hello_plausible(with([](auto& h) { h.magic = 0x47455420; }), 0, 4));  // "GET "
  EXPECT_FALSE(tcp::hello_plausible(with([](auto& h) { h.size = 8; }), 0, 4));
  EXPECT_FALSE(tcp::hello_plausible(kGood, 3, 4));  // not a higher rank
  EXPECT_FALSE(tcp::hello_plausible(with([](auto& h) {
                                      h.rank = 4;
                                      h.size = 4;
                                    }),
                                    0, 4));
  // A rank that is negative as an int must not pass the "higher" test.
  EXPECT_FALSE(tcp::hello_plausible(with([](auto& h) { h.rank = 0x80000001u; }), 0, 4));
  EXPECT_FALSE(tcp::hello_plausible(with([](auto& h) {
                                      h.connections = 0;
                                      h.connection = 0;
                                    }),
                                    0, 4));
  EXPECT_FALSE(tcp::hello_plausible(
      with([](auto& h) { h.connections = tdist::transport::kMaxSocketsPerPeer + 1; }), 0, 4));
  EXPECT_FALSE(tcp::hello_plausible(with([](auto& h) { h.connection = 2; }), 0, 4));
}

TEST(TcpWire, AbortNoticeKinds) {
  EXPECT_EQ(decode(std::string("\0broken pipe", 12)).kind, tcp::AbortKind::kNetwork);
  EXPECT_EQ(decode("\1timed out").kind, tcp::AbortKind::kTimeout);
  EXPECT_EQ(decode("\2mismatch").kind, tcp::AbortKind::kBackend);
  EXPECT_EQ(decode("\2mismatch").reason, "mismatch");
  // An unknown kind byte reads as a network failure, its text kept.
  tcp::AbortNotice unknown = decode("\7what");
  EXPECT_EQ(unknown.kind, tcp::AbortKind::kNetwork);
  EXPECT_EQ(unknown.reason, "what");
  tcp::AbortNotice empty = tcp::decode_abort_payload(nullptr, 0);
  EXPECT_EQ(empty.kind, tcp::AbortKind::kNetwork);
  EXPECT_EQ(empty.reason, "");
}

TEST(TcpWire, AbortNoticeRoundTripCutsTheReason) {
  EXPECT_EQ(tcp::encode_abort_payload(tcp::AbortKind::kTimeout, "late"), "\1late");
  const std::string long_reason(tcp::kMaxAbortReason + 100, 'x');
  const std::string payload = tcp::encode_abort_payload(tcp::AbortKind::kBackend, long_reason);
  ASSERT_EQ(payload.size(), 1 + tcp::kMaxAbortReason);
  tcp::AbortNotice notice = decode(payload);
  EXPECT_EQ(notice.kind, tcp::AbortKind::kBackend);
  EXPECT_EQ(notice.reason, long_reason.substr(0, tcp::kMaxAbortReason));
}

TEST(TcpWire, NoticeSizeIsTrustedUpToTheLongestReason) {
  EXPECT_EQ(tcp::notice_payload_size(0), 0u);
  EXPECT_EQ(tcp::notice_payload_size(tcp::kMaxAbortReason + 1), tcp::kMaxAbortReason + 1);
  EXPECT_EQ(tcp::notice_payload_size(tcp::kMaxAbortReason + 2), 0u);
  EXPECT_EQ(tcp::notice_payload_size(~uint64_t{0}), 0u);
}
