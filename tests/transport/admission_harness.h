#pragma once

// What the TCP transport's admission tests share (test_tcp_admission.cc,
// test_tcp_admission_flood.cc, test_tcp_greeting_desk.cc): dialling a rank at the address it
// published, posing as a rank, and running a real group beside one
// intruder (one more rank of the harness, a thread or a forked process).

#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/socket.h"
#include "multirank.h"
#include "tdist/errors.h"
#include "tdist/logging.h"
#include "tdist/store.h"
#include "transport/tcp/tcp_handshake.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/tcp_wire.h"

namespace tdist::testing::admission {

using namespace std::chrono_literals;
namespace tcp = transport::tcp;

inline constexpr const char* kToken = "token-of-the-admission-tests";

inline tcp::Advertisement advertised(Store& store, int rank) {
  auto ad = tcp::parse_advertisement(to_string(store.get("tcp/addr/" + std::to_string(rank))));
  if (!ad) throw std::runtime_error("rank " + std::to_string(rank) + " published no advertisement");
  return *ad;
}

inline Socket dial(Store& store, int rank) {
  const std::string list = advertised(store, rank).addresses;
  const HostPort target = parse_host_port(list.substr(0, list.find(',')));
  ConnectOptions options;
  options.domain = ErrorDomain::kNetwork;
  return connect_with_retry(target.host, target.port, deadline_after(20s), options);
}

// The acceptor's reply on a client's end: its kind and body (a refusal's
// reason). Throws on a malformed header.
inline std::pair<tcp::ReplyKind, std::string> read_reply(const Socket& socket) {
  tcp::ReplyHeader header{};
  socket.recv_all(&header, sizeof(header), deadline_after(20s));
  if (auto bad = tcp::check_reply_header(header)) throw std::runtime_error("bad reply: " + *bad);
  std::string body(header.length, '\0');
  socket.recv_all(body.data(), body.size(), deadline_after(20s));
  return {static_cast<tcp::ReplyKind>(header.kind), body};
}

// The same as "" for an acceptance, else the refusal's reason.
inline std::string reply(const Socket& socket) {
  auto [kind, body] = read_reply(socket);
  return kind == tcp::ReplyKind::kAccept ? "" : body;
}

// Sends raw bytes to rank `to` and returns the reason of the refusal that
// comes back (throws if anything else comes).
inline std::string send_raw(Store& store, int to, const void* data, size_t size) {
  Socket socket = dial(store, to);
  socket.send_all(data, size, deadline_after(20s));
  auto [kind, reason] = read_reply(socket);
  if (kind != tcp::ReplyKind::kRefuse) throw std::runtime_error("the transport did not refuse raw bytes");
  return reason;
}

// Poses as rank `claimed` of a group of `size` toward rank `to` with the
// identities both published (then `change` edits the greeting), and runs the
// connector's side; returns the error it raised, "" if it was admitted.
inline std::string pose(Store& store, int to, int claimed, int size, const std::optional<std::string>& token,
                        const std::function<void(tcp::Hello&)>& change = {}) {
  Socket socket = dial(store, to);
  tcp::Hello hello{tcp::kHelloMagic,
                   tcp::kWireVersion,
                   static_cast<uint32_t>(claimed),
                   static_cast<uint32_t>(size),
                   static_cast<uint32_t>(to),
                   0,
                   1,
                   token ? tcp::kHelloAuth : 0,
                   advertised(store, claimed).id,
                   advertised(store, to).id};
  if (change) change(hello);
  try {
    tcp::greet_acceptor(socket, hello, token, deadline_after(20s), "intruder");
    return "";
  } catch (const DistNetworkError& e) {
    return e.what();
  }
}

inline void expect_in(const std::string& text, const std::string& part, const std::string& what) {
  if (text.find(part) == std::string::npos)
    throw std::runtime_error(what + " does not say '" + part + "': " + text);
}

// Every pair exchanges one value each way, checked.
inline void exchange(transport::Transport& t, int rank, int n) {
  std::vector<int64_t> out(static_cast<size_t>(n)), in(static_cast<size_t>(n), -1);
  std::vector<transport::RequestPtr> requests;
  for (int peer = 0; peer < n; ++peer) {
    out[static_cast<size_t>(peer)] = rank * 1000 + peer;
    requests.push_back(t.irecv(peer, 3, &in[static_cast<size_t>(peer)], 8));
    requests.push_back(t.isend(peer, 3, &out[static_cast<size_t>(peer)], 8));
  }
  for (auto& r : requests) {
    if (!r->wait_until(transport::Clock::now() + 30s)) throw std::runtime_error("an exchange timed out");
  }
  for (int peer = 0; peer < n; ++peer) {
    if (in[static_cast<size_t>(peer)] != peer * 1000 + rank) {
      throw std::runtime_error("rank " + std::to_string(rank) + ": wrong value from rank " +
                               std::to_string(peer));
    }
  }
}

struct Scenario {
  int n = 3;
  std::optional<std::string> token;  // the group's
  int gate = 2;                      // real ranks from here on connect once the intruder is done
  // The intruder's act; throws if it was not refused as expected.
  std::function<void(Store&)> intrude;
};

// Runs the group and the intruder; returns the harness's failures and, in
// *log, what every rank wrote to stderr.
inline std::string run(Mode mode, const Scenario& s, std::string* log) {
  const LogLevel level = log_level();
  set_log_level(LogLevel::kWarning);
  ::testing::internal::CaptureStderr();
  std::string failures = run_with_store(mode, s.n + 1, [&](Store& store, int rank) -> KeepAlive {
    if (rank == s.n) {
      struct Done {
        Store& store;
        ~Done() { store.set("intruder_done", "1"); }
      } done{store};
      s.intrude(store);
      return nullptr;
    }
    if (rank >= s.gate) store.wait({"intruder_done"}, 60s);
    transport::TcpOptions options;
    options.timeout = 60s;
    options.token = s.token.value_or("");
    options.sockets_per_peer = 2;
    std::shared_ptr<transport::Transport> t = transport::connect_tcp(store, rank, s.n, options);
    exchange(*t, rank, s.n);
    return t;
  });
  *log = ::testing::internal::GetCapturedStderr();
  set_log_level(level);
  return failures;
}

}  // namespace tdist::testing::admission
