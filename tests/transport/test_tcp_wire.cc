// The TCP transport's parsing of greetings, replies, advertisements and
// abort notices (transport/tcp/tcp_wire.h), on hand-made bytes.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/tcp_wire.h"

namespace tcp = tdist::transport::tcp;

namespace {

// Rank 3 of 4 connecting to rank 0, connection 1 of 2.
constexpr tcp::Hello kGood{tcp::kHelloMagic, tcp::kWireVersion, 3, 4, 0, 1, 2, 0, {1, 2, 3}, {4, 5, 6}};

tcp::AbortNotice decode(const std::string& payload) {
  return tcp::decode_abort_payload(reinterpret_cast<const uint8_t*>(payload.data()), payload.size());
}

tcp::Hello with(void (*change)(tcp::Hello&)) {
  tcp::Hello h = kGood;
  change(h);
  return h;
}

tcp::GreetingCheck check(const void* data, size_t size, int rank = 0, int group = 4) {
  tcp::Hello out{};
  return tcp::check_greeting(static_cast<const uint8_t*>(data), size, rank, group, &out);
}

tcp::ReplyHeader reply(tcp::ReplyKind kind, uint32_t length) {
  return {tcp::kReplyMagic, static_cast<uint32_t>(kind), length, 0};
}

}  // namespace

TEST(TcpWire, PlausibleGreetingFromAHigherRank) {
  EXPECT_TRUE(tcp::hello_plausible(kGood, 0, 4));
  EXPECT_TRUE(tcp::hello_plausible(with([](auto& h) { h.peer = 2; }), 2, 4));
  EXPECT_TRUE(tcp::hello_plausible(with([](auto& h) { h.flags = tcp::kHelloAuth; }), 0, 4));
  tcp::Hello most{tcp::kHelloMagic, tcp::kWireVersion, 1, 2, 0, 15, 16, 0, {}, {}};
  EXPECT_TRUE(tcp::hello_plausible(most, 0, 2));
}

TEST(TcpWire, GreetingsThatCannotBeFromThisGroup) {
  EXPECT_FALSE(tcp::hello_plausible(with([](auto& h) { h.magic = 0x47455420; }), 0, 4));  // "GET "
  EXPECT_FALSE(tcp::hello_plausible(with([](auto& h) { h.version = tcp::kWireVersion + 1; }), 0, 4));
  EXPECT_FALSE(tcp::hello_plausible(with([](auto& h) { h.size = 8; }), 0, 4));
  EXPECT_FALSE(tcp::hello_plausible(with([](auto& h) { h.peer = 3; }), 3, 4));  // not a higher rank
  EXPECT_FALSE(tcp::hello_plausible(kGood, 1, 4));                              // meant for rank 0
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
  EXPECT_FALSE(tcp::hello_plausible(with([](auto& h) { h.flags = 2; }), 0, 4));  // an unknown flag
}

TEST(TcpWire, AGreetingIsJudgedAsSoonAsItsBytesAllowAndWholeOnlyWhenComplete) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(&kGood);
  for (size_t n = 0; n < sizeof(kGood); ++n) {
    EXPECT_EQ(check(bytes, n).status, tcp::GreetingStatus::kIncomplete) << n << " bytes";
  }
  tcp::Hello out{};
  ASSERT_EQ(tcp::check_greeting(bytes, sizeof(kGood), 0, 4, &out).status, tcp::GreetingStatus::kValid);
  EXPECT_EQ(out.rank, 3u);
  EXPECT_EQ(out.to, kGood.to);
  // Garbage is refused on its first four bytes, without waiting for more.
  const tcp::GreetingCheck http = check("GET / HTTP/1.1", 4);
  EXPECT_EQ(http.status, tcp::GreetingStatus::kInvalid);
  EXPECT_NE(http.reason.find("not a tdist greeting"), std::string::npos) << http.reason;
  EXPECT_NE(http.reason.find("47455420"), std::string::npos) << http.reason;
  // A whole greeting for another rank names what it said.
  const tcp::GreetingCheck other = check(bytes, sizeof(kGood), 1, 4);
  EXPECT_EQ(other.status, tcp::GreetingStatus::kInvalid);
  EXPECT_NE(other.reason.find("rank 3 of 4 connecting to rank 0"), std::string::npos) << other.reason;
}

TEST(TcpWire, PeersOfOtherWireVersionsAreNamedNotMisread) {
  // What builds before identities sent: 20 bytes, magic "tdst".
  const uint32_t v1[5] = {tcp::kHelloMagicV1, 3, 4, 0, 1};
  const tcp::GreetingCheck old = check(v1, sizeof(v1));
  EXPECT_EQ(old.status, tcp::GreetingStatus::kInvalid);
  EXPECT_NE(old.reason.find("older build (wire version 1"), std::string::npos) << old.reason;
  const tcp::Hello newer = with([](auto& h) { h.version = 5; });
  const tcp::GreetingCheck later = check(&newer, 8);
  EXPECT_EQ(later.status, tcp::GreetingStatus::kInvalid);
  EXPECT_NE(later.reason.find("wire version 5, this build speaks 4"), std::string::npos) << later.reason;
  // Version 2 stripes from another size across several interfaces.
  const tcp::Hello older = with([](auto& h) { h.version = 2; });
  const tcp::GreetingCheck before = check(&older, 8);
  EXPECT_EQ(before.status, tcp::GreetingStatus::kInvalid);
  EXPECT_NE(before.reason.find("wire version 2, this build speaks 4"), std::string::npos) << before.reason;
}

TEST(TcpWire, RepliesHaveTheSizesOfTheirKinds) {
  EXPECT_FALSE(tcp::check_reply_header(reply(tcp::ReplyKind::kAccept, 0)));
  EXPECT_FALSE(tcp::check_reply_header(reply(tcp::ReplyKind::kAccept, tdist::auth::kProofBytes)));
  EXPECT_FALSE(tcp::check_reply_header(reply(tcp::ReplyKind::kChallenge, tdist::auth::kNonceBytes)));
  EXPECT_FALSE(tcp::check_reply_header(reply(tcp::ReplyKind::kRefuse, tcp::kMaxRefusal)));
  EXPECT_TRUE(tcp::check_reply_header(reply(tcp::ReplyKind::kAccept, 5)));
  EXPECT_TRUE(tcp::check_reply_header(reply(tcp::ReplyKind::kChallenge, 0)));
  EXPECT_TRUE(tcp::check_reply_header(reply(tcp::ReplyKind::kRefuse, tcp::kMaxRefusal + 1)));
  EXPECT_TRUE(tcp::check_reply_header(reply(static_cast<tcp::ReplyKind>(9), 0)));
  tcp::ReplyHeader foreign = reply(tcp::ReplyKind::kAccept, 0);
  foreign.magic = 0x50545448;  // "HTTP"
  EXPECT_NE(tcp::check_reply_header(foreign).value_or("").find("not a tdist reply"), std::string::npos);
  // A refusal's reason is cut to its bound, so the header always passes.
  const std::string long_refusal = tcp::encode_reply(tcp::ReplyKind::kRefuse, std::string(5000, 'r'));
  ASSERT_EQ(long_refusal.size(), sizeof(tcp::ReplyHeader) + tcp::kMaxRefusal);
  tcp::ReplyHeader header{};
  std::memcpy(&header, long_refusal.data(), sizeof(header));
  EXPECT_FALSE(tcp::check_reply_header(header));
}

TEST(TcpWire, TheProofContextTellsEveryFieldApart) {
  const std::string base = tcp::handshake_context(kGood);
  for (auto change : {+[](tcp::Hello& h) { h.rank = 2; }, +[](tcp::Hello& h) { h.peer = 1; },
                      +[](tcp::Hello& h) { h.size = 5; }, +[](tcp::Hello& h) { h.connection = 0; },
                      +[](tcp::Hello& h) { h.connections = 3; }, +[](tcp::Hello& h) { h.from[31] = 1; },
                      +[](tcp::Hello& h) { h.to[0] = 9; }, +[](tcp::Hello& h) { h.flags = 1; }}) {
    EXPECT_NE(tcp::handshake_context(with(change)), base);
  }
}

TEST(TcpWire, AdvertisementsRoundTripAndRejectAnythingElse) {
  const tcp::Identity id = tdist::auth::make_nonce();
  const std::string text = tcp::encode_advertisement(id, "127.0.0.1:5000,[::1]:6000");
  auto ad = tcp::parse_advertisement(text);
  ASSERT_TRUE(ad);
  EXPECT_EQ(ad->id, id);
  EXPECT_EQ(ad->addresses, "127.0.0.1:5000,[::1]:6000");
  EXPECT_EQ(tcp::parse_identity(tcp::identity_hex(id)), id);
  EXPECT_FALSE(tcp::parse_advertisement("127.0.0.1:5000"));  // an older build's: no identity
  EXPECT_FALSE(tcp::parse_advertisement(tcp::identity_hex(id) + " "));
  EXPECT_FALSE(tcp::parse_advertisement(tcp::identity_hex(id).substr(1) + "g 127.0.0.1:1"));
  EXPECT_FALSE(tcp::parse_identity(std::string(64, 'z')));
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
