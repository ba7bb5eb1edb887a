#include "store/tcp/protocol.h"

#include <limits>

#include "common/env.h"

namespace tdist::tcpstore {
namespace {

constexpr int64_t kMinMaxFrameBytes = 4096;
constexpr int64_t kMaxMaxFrameBytes = std::numeric_limits<uint32_t>::max();

uint64_t load_u64(const uint8_t* p) {
  return static_cast<uint64_t>(load_u32(p)) | static_cast<uint64_t>(load_u32(p + 4)) << 32;
}

}  // namespace

size_t max_frame_bytes_from_env() {
  // Read once: a frame bound that changed under a running server and its
  // clients would make them disagree.
  static const size_t value =
      static_cast<size_t>(env_int("TDIST_STORE_MAX_FRAME_BYTES", kMinMaxFrameBytes, kMaxMaxFrameBytes)
                              .value_or(static_cast<int64_t>(kDefaultMaxFrameBytes)));
  return value;
}

const char* command_name(uint8_t code) {
  switch (static_cast<Command>(code)) {
    case Command::kSet:
      return "SET";
    case Command::kGet:
      return "GET";
    case Command::kAdd:
      return "ADD";
    case Command::kCompareSet:
      return "COMPARE_SET";
    case Command::kCheck:
      return "CHECK";
    case Command::kWait:
      return "WAIT";
    case Command::kWaitCount:
      return "WAIT_COUNT";
    case Command::kCancelWait:
      return "CANCEL_WAIT";
    case Command::kNumKeys:
      return "NUM_KEYS";
    case Command::kDeleteKey:
      return "DELETE_KEY";
    case Command::kPing:
      return "PING";
    case Command::kAuthBegin:
      return "AUTH_BEGIN";
    case Command::kAuthProof:
      return "AUTH_PROOF";
  }
  return "unknown";
}

bool is_known_command(uint8_t code) {
  return code >= 1 && code <= static_cast<uint8_t>(Command::kAuthProof);
}

ParseStatus parse_frame(const uint8_t* data, size_t size, size_t max_frame_bytes, FrameView* frame,
                        uint64_t* announced) {
  if (size < 4) return ParseStatus::kNeedMore;
  // Judge the length before anything else: a hostile length must be refused
  // on its first four bytes, never used to size a buffer.
  uint32_t length = load_u32(data);
  if (length > max_frame_bytes) {
    *announced = length;
    return ParseStatus::kTooLarge;
  }
  if (length < kLengthCovered) return ParseStatus::kMalformed;
  if (size - 4 < length) return ParseStatus::kNeedMore;
  frame->code = data[4];
  frame->id = load_u64(data + 5);
  frame->payload = data + kHeaderBytes;
  frame->payload_size = length - kLengthCovered;
  frame->frame_size = size_t{4} + length;
  return ParseStatus::kFrame;
}

// ---- FrameWriter ---------------------------------------------------------------

FrameWriter::FrameWriter(uint8_t code, uint64_t id) {
  out_.reserve(64);
  u32(0);  // length, patched by finish()
  u8(code);
  u64(id);
}

void FrameWriter::u32(uint32_t value) {
  for (int i = 0; i < 4; ++i) out_.push_back(static_cast<uint8_t>(value >> (8 * i)));
}

void FrameWriter::u64(uint64_t value) {
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<uint8_t>(value >> (8 * i)));
}

void FrameWriter::bytes(const void* data, size_t size) {
  u32(static_cast<uint32_t>(size));
  raw(data, size);
}

void FrameWriter::raw(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  out_.insert(out_.end(), p, p + size);
}

void FrameWriter::keys(const std::vector<std::string>& keys) {
  u32(static_cast<uint32_t>(keys.size()));
  for (const auto& key : keys) str(key);
}

std::vector<uint8_t> FrameWriter::finish() {
  // Frames over 4 GiB cannot be described; callers check sizes against the
  // (smaller) frame bound first, so saturating here only guards misuse.
  uint64_t length = out_.size() - 4;
  uint32_t field = length > static_cast<uint64_t>(kMaxMaxFrameBytes) ? std::numeric_limits<uint32_t>::max()
                                                                     : static_cast<uint32_t>(length);
  for (int i = 0; i < 4; ++i) out_[static_cast<size_t>(i)] = static_cast<uint8_t>(field >> (8 * i));
  return std::move(out_);
}

// ---- PayloadReader -------------------------------------------------------------

bool PayloadReader::take(size_t n) {
  if (!ok_ || static_cast<size_t>(end_ - pos_) < n) {
    ok_ = false;
    return false;
  }
  return true;
}

uint8_t PayloadReader::u8() {
  if (!take(1)) return 0;
  return *pos_++;
}

uint32_t PayloadReader::u32() {
  if (!take(4)) return 0;
  uint32_t value = load_u32(pos_);
  pos_ += 4;
  return value;
}

uint64_t PayloadReader::u64() {
  if (!take(8)) return 0;
  uint64_t value = load_u64(pos_);
  pos_ += 8;
  return value;
}

Bytes PayloadReader::bytes() {
  uint32_t size = u32();
  if (!take(size)) return {};
  Bytes out(pos_, pos_ + size);
  pos_ += size;
  return out;
}

std::string PayloadReader::str() {
  uint32_t size = u32();
  if (!take(size)) return {};
  std::string out(reinterpret_cast<const char*>(pos_), size);
  pos_ += size;
  return out;
}

std::vector<std::string> PayloadReader::keys() {
  uint32_t count = u32();
  std::vector<std::string> out;
  // No reserve(count): the count is untrusted, and every key costs at least
  // four bytes of payload, so a lying count runs out of bytes quickly.
  for (uint32_t i = 0; i < count && ok_; ++i) out.push_back(str());
  if (!ok_) out.clear();
  return out;
}

Bytes PayloadReader::rest() {
  if (!ok_) return {};
  Bytes out(pos_, end_);
  pos_ = end_;
  return out;
}

// ---- requests ----------------------------------------------------------------------

std::vector<uint8_t> encode_request(const Request& request) {
  FrameWriter w(static_cast<uint8_t>(request.command), request.id);
  const std::string empty;
  const std::string& key = request.keys.empty() ? empty : request.keys.front();
  switch (request.command) {
    case Command::kSet:
      w.str(key);
      w.bytes(request.value.data(), request.value.size());
      break;
    case Command::kGet:
    case Command::kDeleteKey:
      w.str(key);
      break;
    case Command::kAdd:
    case Command::kWaitCount:
      w.str(key);
      w.i64(request.amount);
      break;
    case Command::kCompareSet:
      w.str(key);
      w.bytes(request.expected.data(), request.expected.size());
      w.bytes(request.value.data(), request.value.size());
      break;
    case Command::kCheck:
    case Command::kWait:
      w.keys(request.keys);
      break;
    case Command::kCancelWait:
      w.u64(request.target_id);
      break;
    case Command::kNumKeys:
      break;
    case Command::kPing:
      w.u32(request.version);
      break;
    case Command::kAuthBegin:
      break;
    case Command::kAuthProof:
      w.raw(request.auth.data(), request.auth.size());
      break;
  }
  return w.finish();
}

bool decode_request(const FrameView& frame, Request* request, std::string* error) {
  if (!is_known_command(frame.code)) {
    *error = "unknown command byte " + std::to_string(frame.code);
    return false;
  }
  request->command = static_cast<Command>(frame.code);
  request->id = frame.id;
  request->keys.clear();
  PayloadReader r(frame.payload, frame.payload_size);
  switch (request->command) {
    case Command::kSet:
      request->keys.push_back(r.str());
      request->value = r.bytes();
      break;
    case Command::kGet:
    case Command::kDeleteKey:
      request->keys.push_back(r.str());
      break;
    case Command::kAdd:
    case Command::kWaitCount:
      request->keys.push_back(r.str());
      request->amount = r.i64();
      break;
    case Command::kCompareSet:
      request->keys.push_back(r.str());
      request->expected = r.bytes();
      request->value = r.bytes();
      break;
    case Command::kCheck:
    case Command::kWait:
      request->keys = r.keys();
      break;
    case Command::kCancelWait:
      request->target_id = r.u64();
      break;
    case Command::kNumKeys:
      break;
    case Command::kPing:
      request->version = r.u32();
      break;
    case Command::kAuthBegin:
      break;
    case Command::kAuthProof:
      request->auth = r.rest();
      if (request->auth.size() != kAuthProofPayload) {
        *error = "an AUTH_PROOF payload of " + std::to_string(request->auth.size()) + " bytes, not " +
                 std::to_string(kAuthProofPayload);
        return false;
      }
      break;
  }
  if (!r.ok()) {
    *error = std::string("truncated ") + command_name(frame.code) + " payload (" +
             std::to_string(frame.payload_size) + " bytes)";
    return false;
  }
  if (!r.at_end()) {
    *error = std::string("trailing bytes after a ") + command_name(frame.code) + " payload (" +
             std::to_string(frame.payload_size) + " bytes)";
    return false;
  }
  return true;
}

std::vector<uint8_t> encode_error(uint64_t id, std::string_view message) {
  FrameWriter w(static_cast<uint8_t>(Status::kError), id);
  w.str(message);
  return w.finish();
}

}  // namespace tdist::tcpstore
