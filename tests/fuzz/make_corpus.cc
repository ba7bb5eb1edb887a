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
  // Layout: Hello, receiving rank, group size, announced notice size, payload.
  auto input = [&](const std::string& name, tcp::Hello hello, uint8_t rank, uint8_t group,
                   tcp::AbortKind kind, const std::string& reason) {
    std::string payload = tcp::encode_abort_payload(kind, reason);
    std::vector<uint8_t> out(sizeof(hello) + 2 + 8);
    std::memcpy(out.data(), &hello, sizeof(hello));
    out[20] = static_cast<uint8_t>(group - 1);  // the target adds one
    out[21] = rank;
    const uint64_t announced = payload.size();
    std::memcpy(out.data() + 22, &announced, 8);
    out.insert(out.end(), payload.begin(), payload.end());
    write(dir, name, out);
  };
  input("rank3_of_4_conn0", {tcp::kHelloMagic, 3, 4, 0, 4}, 1, 4, tcp::AbortKind::kNetwork,
        "rank 3: connection to rank 1 reset by peer");
  input("rank1_of_2_conn3", {tcp::kHelloMagic, 1, 2, 3, 4}, 0, 2, tcp::AbortKind::kTimeout,
        "rank 1: all_reduce (call #12) timed out after 1800000 ms");
  input("rank7_of_8_single", {tcp::kHelloMagic, 7, 8, 0, 1}, 0, 8, tcp::AbortKind::kBackend,
        "all_reduce (call #7 in this group): rank 0 passed 10 float32 elements, rank 1 passed 20");
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
