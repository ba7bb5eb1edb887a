// The RPC headers on the wire (src/rpc/rpc_wire.h): what is encoded comes
// back decoded, and a damaged header is refused with an error, never read
// past its end.

#include <gtest/gtest.h>

#include "rpc/rpc_wire.h"
#include "tdist/errors.h"

namespace tdist::rpc::wire {
namespace {

Request sample_request() {
  Request r;
  r.id = 0x0123456789abcdefULL;
  r.timeout_us = 1'500'000;
  r.function = "add";
  r.payload = {1, 2, 3, 0, 255};
  r.tensors = {{DType::kFloat32, {2, 3}}, {DType::kInt64, {}}, {DType::kBool, {0}}};
  return r;
}

TEST(RpcWire, ARequestComesBackAsItWent) {
  const Request r = sample_request();
  const auto bytes = encode(r);
  EXPECT_EQ(kind_of(bytes), Kind::kRequest);
  const Request back = decode_request(bytes);
  EXPECT_EQ(back.id, r.id);
  EXPECT_EQ(back.timeout_us, r.timeout_us);
  EXPECT_EQ(back.function, "add");
  EXPECT_EQ(back.payload, r.payload);
  ASSERT_EQ(back.tensors.size(), 3u);
  EXPECT_EQ(back.tensors[0].dtype, DType::kFloat32);
  EXPECT_EQ(back.tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(back.tensors[0].nbytes(), 24u);
  EXPECT_EQ(back.tensors[1].nbytes(), 8u);  // a scalar: one element
  EXPECT_EQ(back.tensors[2].nbytes(), 0u);
}

TEST(RpcWire, AnErrorResponseCarriesTypeMessageAndTraceback) {
  Response r;
  r.id = 7;
  r.ok = false;
  r.error_type = "ValueError";
  r.error_message = "bad value";
  r.error_traceback = "Traceback (most recent call last): ...";
  const Response back = decode_response(encode(r));
  EXPECT_EQ(back.id, 7u);
  EXPECT_FALSE(back.ok);
  EXPECT_EQ(back.error_type, "ValueError");
  EXPECT_EQ(back.error_message, "bad value");
  EXPECT_EQ(back.error_traceback, r.error_traceback);
  EXPECT_TRUE(back.payload.empty());

  Response ok;
  ok.id = 8;
  ok.payload = {9};
  ok.tensors = {{DType::kComplex128, {4}}};
  const Response okback = decode_response(encode(ok));
  EXPECT_TRUE(okback.ok);
  EXPECT_EQ(okback.payload, ok.payload);
  EXPECT_EQ(okback.tensors[0].nbytes(), 64u);
}

TEST(RpcWire, EveryTruncationIsRefused) {
  const auto bytes = encode(sample_request());
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(decode_request(cut), DistBackendError) << n << " of " << bytes.size() << " bytes";
  }
  auto longer = bytes;
  longer.push_back(0);
  EXPECT_THROW(decode_request(longer), DistBackendError);
}

TEST(RpcWire, ForeignOrDamagedHeadersAreRefused) {
  EXPECT_THROW(kind_of({}), DistBackendError);
  EXPECT_THROW(kind_of({9}), DistBackendError);
  EXPECT_THROW(decode_response(encode(sample_request())), DistBackendError);  // a request is no response

  Request bad_dtype = sample_request();
  auto bytes = encode(bad_dtype);
  // The first tensor's dtype byte sits right after the tensor count.
  // (Each: dtype, dimension count, dimensions, placement.)
  const size_t tensors_at = bytes.size() - (1 + 4 + 2 * 8 + 1) - (1 + 4 + 1) - (1 + 4 + 8 + 1) - 4;
  bytes[tensors_at + 4] = 200;
  try {
    decode_request(bytes);
    FAIL() << "an unknown dtype was accepted";
  } catch (const DistBackendError& e) {
    EXPECT_NE(std::string(e.what()).find("dtype 200 is unknown"), std::string::npos) << e.what();
  }

  // A tensor whose size overflows is refused, not allocated.
  Request huge = sample_request();
  huge.tensors = {{DType::kFloat64, {int64_t{1} << 40, int64_t{1} << 40}}};
  EXPECT_THROW(decode_request(encode(huge)), DistBackendError);
  // A negative dimension too.
  Request negative = sample_request();
  negative.tensors = {{DType::kFloat32, {-1}}};
  EXPECT_THROW(decode_request(encode(negative)), DistBackendError);
}

TEST(RpcWire, SmallTensorsRideInTheHeaderAndLargeOnesMayBeOfferedForADirectRead) {
  Response r;
  r.id = 11;
  r.tensors = {{DType::kInt16, {3}, std::nullopt, std::vector<uint8_t>{1, 0, 2, 0, 3, 0}},
               {DType::kFloat32, {1 << 20}, DirectSource{0x7f0000001000, 0x7f0000002000, 42}, std::nullopt},
               {DType::kFloat32, {5}}};
  const Response back = decode_response(encode(r));
  ASSERT_EQ(back.tensors.size(), 3u);
  ASSERT_TRUE(back.tensors[0].bytes.has_value());
  EXPECT_EQ(*back.tensors[0].bytes, *r.tensors[0].bytes);
  EXPECT_FALSE(back.tensors[0].direct.has_value());
  ASSERT_TRUE(back.tensors[1].direct.has_value());
  EXPECT_EQ(back.tensors[1].direct->address, 0x7f0000001000u);
  EXPECT_EQ(back.tensors[1].direct->hold_word, 0x7f0000002000u);
  EXPECT_EQ(back.tensors[1].direct->token, 42u);
  EXPECT_FALSE(back.tensors[1].bytes.has_value());
  EXPECT_FALSE(back.tensors[2].bytes.has_value() || back.tensors[2].direct.has_value());

  // Bytes that do not match the tensor's size, a direct read without a
  // hold word, an unknown placement: refused.
  Response short_bytes = r;
  short_bytes.tensors[0].bytes->pop_back();
  EXPECT_THROW(decode_response(encode(short_bytes)), DistBackendError);
  Response no_hold = r;
  no_hold.tensors[1].direct->hold_word = 0;
  EXPECT_THROW(decode_response(encode(no_hold)), DistBackendError);
  Response plain;
  plain.tensors = {{DType::kFloat32, {5}}};
  auto bytes = encode(plain);
  bytes.back() = 3;  // the placement is the last byte
  EXPECT_THROW(decode_response(bytes), DistBackendError);
}

TEST(RpcWire, AReleaseComesBackAsItWent) {
  const auto bytes = encode(Release{77, true});
  EXPECT_EQ(kind_of(bytes), Kind::kRelease);
  const Release back = decode_release(bytes);
  EXPECT_EQ(back.id, 77u);
  EXPECT_TRUE(back.response);
  EXPECT_THROW(decode_release(encode(sample_request())), DistBackendError);
  auto damaged = bytes;
  damaged.back() = 2;
  EXPECT_THROW(decode_release(damaged), DistBackendError);
}

TEST(RpcWire, DataTagsOfCallsNeverCollideWithHeaders) {
  EXPECT_GE(data_tag(0, false), kFirstDataTag);
  EXPECT_NE(data_tag(5, false), data_tag(5, true));
  EXPECT_NE(data_tag(5, true), data_tag(6, false));
}

}  // namespace
}  // namespace tdist::rpc::wire
