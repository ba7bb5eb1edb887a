// Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/)
// with the real encoders, so that every seed is an input the code meets in
// use. Rerun after a wire format changes:
//   build-fuzz/bin/tdist_fuzz_make_corpus tests/fuzz/corpus

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "store/tcp/protocol.h"
#include "transport/tcp/tcp_wire.h"

namespace fs = std::filesystem;
namespace tcpstore = tdist::tcpstore;
namespace tcp = tdist::transport::tcp;
using tcpstore::Command;

namespace {

void write(const fs::path& dir, const std::string& name, const void* data, size_t size) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary)
      .write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
}

void write(const fs::path& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  write(dir, name, bytes.data(), bytes.size());
}

tdist::Bytes bytes(const std::string& text) {
  return tdist::Bytes(text.begin(), text.end());
}

void store_protocol(const fs::path& dir) {
  // Requests, one per command; the id picks the command a reply answers
  // (fuzz_store_protocol.cc), so replies get the matching ids.
  auto request = [&](Command command, const std::string& name, auto fill) {
    tcpstore::Request r;
    r.command = command;
    r.id = 7;
    fill(r);
    write(dir, "request_" + name, tcpstore::encode_request(r));
  };
  request(Command::kSet, "set", [](auto& r) {
    r.keys = {"rank/0"};
    r.value = bytes("127.0.0.1:29500");
  });
  request(Command::kGet, "get", [](auto& r) { r.keys = {"tcp/addr/1"}; });
  request(Command::kAdd, "add", [](auto& r) {
    r.keys = {"barrier"};
    r.amount = 1;
  });
  request(Command::kCompareSet, "compare_set", [](auto& r) {
    r.keys = {"latest"};
    r.expected = bytes("3");
    r.value = bytes("4");
  });
  request(Command::kCheck, "check", [](auto& r) { r.keys = {"a", "b/c"}; });
  request(Command::kWait, "wait", [](auto& r) { r.keys = {"ready/0", "ready/1", "ready/2"}; });
  request(Command::kWaitCount, "wait_count", [](auto& r) {
    r.keys = {"joined"};
    r.amount = 4;
  });
  request(Command::kCancelWait, "cancel_wait", [](auto& r) { r.target_id = 6; });
  request(Command::kNumKeys, "num_keys", [](auto&) {});
  request(Command::kDeleteKey, "delete_key", [](auto& r) { r.keys = {"rank/0"}; });
  request(Command::kPing, "ping", [](auto&) {});

  // Replies: id = command - 1 (mod 11) makes the target read it as a reply to `command`.
  auto reply = [&](Command command, const std::string& name, auto fill) {
    tcpstore::FrameWriter w(static_cast<uint8_t>(tcpstore::Status::kOk), static_cast<uint64_t>(command) - 1);
    fill(w);
    write(dir, "reply_" + name, w.finish());
  };
  reply(Command::kGet, "get", [](auto& w) { w.raw("127.0.0.1:29500", 15); });
  reply(Command::kAdd, "add", [](auto& w) { w.i64(4); });
  reply(Command::kCheck, "check", [](auto& w) { w.u8(1); });
  reply(Command::kPing, "ping", [](auto& w) { w.u32(tcpstore::kProtocolVersion); });
  reply(Command::kCancelWait, "cancel_wait", [](auto& w) {
    w.u8(1);
    w.keys({"ready/2"});
    w.i64(0);
  });
  write(dir, "reply_error", tcpstore::encode_error(3, "TCPStore: key 'x' is a counter, not a value"));

  // A connection's stream: several requests back to back.
  std::vector<uint8_t> stream;
  for (const char* name : {"request_ping", "request_set", "request_get"}) {
    std::ifstream in(dir / name, std::ios::binary);
    stream.insert(stream.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  write(dir, "stream", stream);
}

void tcp_wire(const fs::path& dir) {
  // Layout (fuzz_tcp_wire.cc): receiving rank, group size, announced notice
  // size, greeting length, greeting, reply header, the rest.
  auto input = [&](const std::string& name, const std::string& greeting, uint8_t rank, uint8_t group,
                   tcp::ReplyKind kind, uint32_t reply_length, const std::string& rest) {
    std::vector<uint8_t> out(11);
    out[0] = static_cast<uint8_t>(group - 1);  // the target adds one
    out[1] = rank;
    const uint64_t announced = rest.size();
    std::memcpy(out.data() + 2, &announced, 8);
    out[10] = static_cast<uint8_t>(greeting.size());
    out.insert(out.end(), greeting.begin(), greeting.end());
    const tcp::ReplyHeader reply{tcp::kReplyMagic, static_cast<uint32_t>(kind), reply_length, 0};
    const auto* r = reinterpret_cast<const uint8_t*>(&reply);
    out.insert(out.end(), r, r + sizeof(reply));
    out.insert(out.end(), rest.begin(), rest.end());
    write(dir, name, out);
  };
  auto hello = [](uint32_t rank, uint32_t size, uint32_t peer, uint32_t connection, uint32_t connections,
                  uint32_t flags) {
    tcp::Hello h{tcp::kHelloMagic, tcp::kWireVersion, rank,  size, peer,
                 connection,       connections,       flags, {},   {}};
    for (size_t i = 0; i < h.from.size(); ++i) {
      h.from[i] = static_cast<uint8_t>(i * 7 + rank);
      h.to[i] = static_cast<uint8_t>(i * 13 + peer);
    }
    return std::string(reinterpret_cast<const char*>(&h), sizeof(h));
  };
  const std::string ad = std::string(64, 'a') + " 127.0.0.1:29501,[::1]:29502";
  input("rank3_of_4_conn0", hello(3, 4, 1, 0, 4, 0), 1, 4, tcp::ReplyKind::kAccept, 0,
        tcp::encode_abort_payload(tcp::AbortKind::kNetwork, "rank 3: connection to rank 1 reset by peer"));
  input("rank1_of_2_conn3_auth", hello(1, 2, 0, 3, 4, tcp::kHelloAuth), 0, 2, tcp::ReplyKind::kChallenge, 32,
        tcp::encode_abort_payload(tcp::AbortKind::kTimeout,
                                  "rank 1: all_reduce (call #12) timed out after 1800000 ms"));
  input("rank7_of_8_single", hello(7, 8, 0, 0, 1, 0), 0, 8, tcp::ReplyKind::kRefuse, 40,
        tcp::encode_abort_payload(
            tcp::AbortKind::kBackend,
            "all_reduce (call #7 in this group): rank 0 passed 10 float32 elements, rank 1 passed 20"));
  input("half_greeting_advertisement", hello(2, 3, 1, 1, 2, 0).substr(0, 40), 1, 3, tcp::ReplyKind::kAccept,
        32, ad);
  const uint32_t v1[5] = {tcp::kHelloMagicV1, 1, 2, 0, 1};
  input("older_build", std::string(reinterpret_cast<const char*>(v1), sizeof(v1)), 0, 2,
        tcp::ReplyKind::kRefuse, 1024, ad);
  input("http_request", "GET / HTTP/1.1\r\n", 0, 4, tcp::ReplyKind::kAccept, 0, "");
}

void init_method(const fs::path& dir) {
  const char* urls[] = {
      "env://",
      "env://?rank=0&world_size=4",
      "tcp://127.0.0.1:29500",
      "tcp://localhost:29500/?rank=1&world_size=2",
      "tcp://[::1]:29500",
      "tcp://[fe80::1%25eth0]:1234",
      "file:///tmp/tdist-rendezvous",
      "file:///tmp/a%20b?world_size=8",
      "TCP://Master:65535?rank=3",
  };
  int i = 0;
  for (const char* url : urls) write(dir, "url" + std::to_string(i++), url, std::strlen(url));
}

}  // namespace

int main(int argc, char** argv) {
  const fs::path root = argc > 1 ? argv[1] : "tests/fuzz/corpus";
  store_protocol(root / "store_protocol");
  tcp_wire(root / "tcp_wire");
  init_method(root / "init_method");
  return 0;
}
