#pragma once

/// @file protocol.h
/// The TCPStore wire format. Every message is one frame:
///
///     u32 length | u8 code | u64 request_id | payload
///
/// `length` counts the bytes after itself (code + id + payload). In a request
/// `code` is a Command; in a response it is a Status and `request_id` echoes
/// the request, so a client can drop the late answer of a request it already
/// gave up on. Integers are little-endian; strings and byte strings are a u32
/// length and the bytes; key lists are a u32 count and that many strings.
///
/// Request payloads:            Response payloads (Status::kOk):
///   SET      key, value          -
///   GET      key                 the value (rest of the frame), when it exists
///   ADD      key, i64 amount     i64 new value
///   COMPARE_SET key, expected, desired   the value afterwards (rest of frame)
///   CHECK    keys                u8 all exist
///   WAIT     keys                -, once all exist
///   WAIT_COUNT key, i64 target   i64 counter, once counter >= target
///   CANCEL_WAIT u64 id           u8 found, keys still missing, i64 counter
///   NUM_KEYS -                   i64
///   DELETE_KEY key               u8 existed
///   PING     u32 version         u32 server version
///   AUTH_BEGIN -                 u8 1 + server nonce (32 bytes) when the
///                                server authenticates; u8 0 when it does not
///   AUTH_PROOF client nonce (32), client proof (32)   server proof (32)
/// Status::kError carries a message string instead.
///
/// A server with a token (docs/security.md) answers nothing but AUTH_BEGIN
/// and AUTH_PROOF until a connection has proved it holds the token; a client
/// with a token starts every connection with them and checks the server's
/// proof before sending anything else (auth.h's three messages, after the
/// client's AUTH_BEGIN that asks for the server's nonce).
///
/// Frames are bounded (max_frame_bytes); a receiver checks `length` against
/// the bound before reading the body and grows its buffer only as bytes come.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tdist/store.h"

namespace tdist::tcpstore {

/// The little-endian 32-bit number at `p` (frame lengths and field sizes).
inline uint32_t load_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

/// Bumped when the frame layout or a command changes incompatibly.
inline constexpr uint32_t kProtocolVersion = 2;  // 2: AUTH_BEGIN / AUTH_PROOF
/// u32 length + u8 code + u64 request id.
inline constexpr size_t kHeaderBytes = 13;
/// Bytes of a frame counted by `length` before the payload (code + id).
inline constexpr size_t kLengthCovered = 9;
/// Default bound of `length`: 256 MiB, enough for any value users put in a
/// store; overridden by TDIST_STORE_MAX_FRAME_BYTES.
inline constexpr size_t kDefaultMaxFrameBytes = size_t{256} << 20;

/// The frame bound in force: TDIST_STORE_MAX_FRAME_BYTES if set (4096 to
/// 2^32 - 1 bytes; anything else raises DistInvalidArgument), else
/// kDefaultMaxFrameBytes. Read once per process.
size_t max_frame_bytes_from_env();

enum class Command : uint8_t {
  kSet = 1,
  kGet = 2,
  kAdd = 3,
  kCompareSet = 4,
  kCheck = 5,
  kWait = 6,
  kWaitCount = 7,
  kCancelWait = 8,
  kNumKeys = 9,
  kDeleteKey = 10,
  kPing = 11,
  kAuthBegin = 12,
  kAuthProof = 13,
};

/// AUTH_PROOF's payload: the client's nonce and its proof.
inline constexpr size_t kAuthProofPayload = 64;

enum class Status : uint8_t {
  kOk = 0,
  kError = 1,
};

/// "SET", "GET", ...; "unknown" for other bytes.
const char* command_name(uint8_t code);
bool is_known_command(uint8_t code);

/// A decoded request; which fields are used depends on the command.
struct Request {
  Command command = Command::kPing;
  uint64_t id = 0;
  std::vector<std::string> keys;        ///< one key, or the keys of CHECK / WAIT
  Bytes value;                          ///< SET value, COMPARE_SET desired
  Bytes expected;                       ///< COMPARE_SET expected
  int64_t amount = 0;                   ///< ADD amount, WAIT_COUNT target
  uint64_t target_id = 0;               ///< CANCEL_WAIT: the request to cancel
  uint32_t version = kProtocolVersion;  ///< PING
  Bytes auth;                           ///< AUTH_PROOF: nonce + proof (kAuthProofPayload bytes)
};

/// A complete frame found in a buffer; points into that buffer.
struct FrameView {
  uint8_t code = 0;
  uint64_t id = 0;
  const uint8_t* payload = nullptr;
  size_t payload_size = 0;
  size_t frame_size = 0;  ///< header + payload: bytes to consume
};

enum class ParseStatus {
  kNeedMore,   ///< not a whole frame yet
  kFrame,      ///< *frame is filled
  kTooLarge,   ///< the length field exceeds the bound
  kMalformed,  ///< the length field is too small to hold code + id
};

/// Looks for one frame at the start of [data, data + size). On kTooLarge,
/// *announced holds the length field.
ParseStatus parse_frame(const uint8_t* data, size_t size, size_t max_frame_bytes, FrameView* frame,
                        uint64_t* announced);

/// Appends little-endian integers and strings to a frame under construction
/// and patches the length field in finish().
class FrameWriter {
 public:
  FrameWriter(uint8_t code, uint64_t id);
  void u8(uint8_t value) { out_.push_back(value); }
  void u32(uint32_t value);
  void u64(uint64_t value);
  void i64(int64_t value) { u64(static_cast<uint64_t>(value)); }
  void bytes(const void* data, size_t size);  ///< u32 length + bytes
  void str(std::string_view text) { bytes(text.data(), text.size()); }
  void keys(const std::vector<std::string>& keys);
  void raw(const void* data, size_t size);  ///< bytes, no length
  size_t size() const { return out_.size(); }
  std::vector<uint8_t> finish();

 private:
  std::vector<uint8_t> out_;
};

/// Reads a payload; errors as values: after an underflow ok() is false and
/// every read returns zero / empty.
class PayloadReader {
 public:
  PayloadReader(const uint8_t* data, size_t size) : pos_(data), end_(data + size) {}
  uint8_t u8();
  uint32_t u32();
  uint64_t u64();
  int64_t i64() { return static_cast<int64_t>(u64()); }
  Bytes bytes();
  std::string str();
  std::vector<std::string> keys();
  Bytes rest();  ///< everything left
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == end_; }

 private:
  bool take(size_t n);
  const uint8_t* pos_;
  const uint8_t* end_;
  bool ok_ = true;
};

/// The frame of a request.
std::vector<uint8_t> encode_request(const Request& request);
/// Decodes a request frame; false with *error set if the payload does not
/// match the command (too short, trailing bytes, bad counts).
bool decode_request(const FrameView& frame, Request* request, std::string* error);

/// A response frame with status kError and a message.
std::vector<uint8_t> encode_error(uint64_t id, std::string_view message);

}  // namespace tdist::tcpstore
