// Fuzzes the TCPStore wire format (src/store/tcp/protocol.h) on arbitrary
// bytes, read both ways:
//  - as the server reads a connection: frames cut by parse_frame, each
//    decoded by decode_request. A request that decodes must encode back to
//    the very bytes it came from (the encoding is canonical: decoding
//    refuses short and trailing payloads), and parse_frame's view must lie
//    inside the buffer.
//  - as the client reads a reply: the same frames taken as replies to a
//    command picked from the request id, read with PayloadReader exactly as
//    src/store/tcp/client.cc reads them. A reader that ran out must return
//    zeros and empties, as its contract says, and a fixed-layout reply that
//    reads whole must re-encode to its bytes.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "store/tcp/protocol.h"

namespace tcpstore = tdist::tcpstore;
using tcpstore::Command;

namespace {

// Small enough that the fuzzer reaches kTooLarge with short inputs.
constexpr size_t kMaxFrame = 1 << 16;

#define FUZZ_CHECK(cond)  \
  do {                    \
    if (!(cond)) abort(); \
  } while (0)

void check_request(const tcpstore::FrameView& frame, const uint8_t* start) {
  tcpstore::Request request;
  std::string error;
  if (!tcpstore::decode_request(frame, &request, &error)) {
    FUZZ_CHECK(!error.empty());
    return;
  }
  std::vector<uint8_t> again = tcpstore::encode_request(request);
  FUZZ_CHECK(again == std::vector<uint8_t>(start, start + frame.frame_size));
}

// The reads of client.cc for a reply to `command`; returns whether they
// consumed the payload exactly, and re-encodes what it read into `out`.
bool read_reply(Command command, tcpstore::PayloadReader& p, tcpstore::FrameWriter& out) {
  switch (command) {
    case Command::kGet:
    case Command::kCompareSet: {
      tdist::Bytes value = p.rest();
      out.raw(value.data(), value.size());
      break;
    }
    case Command::kAdd:
    case Command::kWaitCount:
    case Command::kNumKeys:
      out.i64(p.i64());
      break;
    case Command::kCheck:
    case Command::kDeleteKey:
      out.u8(p.u8());
      break;
    case Command::kPing:
      out.u32(p.u32());
      break;
    case Command::kCancelWait: {
      // The client reads the found byte, the keys and the counter, and
      // refuses a reply that does not hold exactly these.
      uint8_t found = p.u8();
      std::vector<std::string> missing = p.keys();
      if (!p.ok()) FUZZ_CHECK(missing.empty());  // never a partial list
      int64_t count = p.i64();
      if (!p.ok()) FUZZ_CHECK(count == 0);
      out.u8(found);
      out.keys(missing);
      out.i64(count);
      break;
    }
    case Command::kAuthBegin: {
      // u8 1 and the server's nonce, or u8 0 (no authentication).
      uint8_t authenticates = p.u8();
      tdist::Bytes nonce = p.rest();
      out.u8(authenticates);
      out.raw(nonce.data(), nonce.size());
      break;
    }
    case Command::kAuthProof: {
      tdist::Bytes proof = p.rest();  // the server's proof
      out.raw(proof.data(), proof.size());
      break;
    }
    case Command::kSet:
    case Command::kWait:
      break;  // nothing to read
  }
  return p.ok() && p.at_end();
}

void check_reply(const tcpstore::FrameView& frame, const uint8_t* start) {
  // client.cc refuses any other status byte before reading a payload.
  if (frame.code != static_cast<uint8_t>(tcpstore::Status::kOk) &&
      frame.code != static_cast<uint8_t>(tcpstore::Status::kError)) {
    return;
  }
  tcpstore::PayloadReader p(frame.payload, frame.payload_size);
  const std::vector<uint8_t> original(start, start + frame.frame_size);
  if (frame.code == static_cast<uint8_t>(tcpstore::Status::kError)) {
    std::string message = p.str();
    if (!p.ok()) FUZZ_CHECK(message.empty());
    if (p.ok() && p.at_end()) FUZZ_CHECK(tcpstore::encode_error(frame.id, message) == original);
    return;
  }
  const auto command = static_cast<Command>(1 + frame.id % static_cast<uint8_t>(Command::kAuthProof));
  tcpstore::FrameWriter out(frame.code, frame.id);
  if (read_reply(command, p, out)) FUZZ_CHECK(out.finish() == original);
  // After an underflow every read is empty.
  if (!p.ok()) FUZZ_CHECK(p.u64() == 0 && p.bytes().empty() && p.str().empty() && p.rest().empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t pos = 0;
  for (;;) {
    tcpstore::FrameView frame;
    uint64_t announced = 0;
    tcpstore::ParseStatus status =
        tcpstore::parse_frame(data + pos, size - pos, kMaxFrame, &frame, &announced);
    if (status == tcpstore::ParseStatus::kTooLarge) FUZZ_CHECK(announced > kMaxFrame);
    if (status != tcpstore::ParseStatus::kFrame) break;
    FUZZ_CHECK(frame.frame_size == tcpstore::kHeaderBytes + frame.payload_size);
    FUZZ_CHECK(frame.frame_size <= size - pos && frame.payload == data + pos + tcpstore::kHeaderBytes);
    check_request(frame, data + pos);
    check_reply(frame, data + pos);
    pos += frame.frame_size;
  }
  return 0;
}
