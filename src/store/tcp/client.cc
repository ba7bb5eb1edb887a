#include "store/tcp/client.h"

#include <algorithm>
#include <utility>

#include "common/auth.h"
#include "kv_map.h"
#include "store_deadline.h"
#include "tdist/errors.h"

namespace tdist {
namespace {

using tcpstore::Command;
using tcpstore::Request;
using tcpstore::Status;

// How long a cancelled wait waits for the server's acknowledgement, and how
// long the rest of a reply may take once its first bytes arrived. A live
// server answers both in microseconds; these only bound a sick one.
constexpr std::chrono::milliseconds kCancelTimeout{5000};
constexpr std::chrono::milliseconds kFrameGrace{30000};
constexpr size_t kReadChunk = size_t{1} << 20;
constexpr size_t kMaxKeysInMessage = 10;

std::string ms_text(std::chrono::milliseconds timeout) {
  return std::to_string(timeout.count()) + " ms";
}

std::string key_list(const std::vector<std::string>& keys) {
  std::string out = "[";
  for (size_t i = 0; i < keys.size() && i < kMaxKeysInMessage; ++i) {
    if (i > 0) out += ", ";
    out += "'" + keys[i] + "'";
  }
  if (keys.size() > kMaxKeysInMessage)
    out += ", ... " + std::to_string(keys.size() - kMaxKeysInMessage) + " more";
  return out + "]";
}

// The answer to CANCEL_WAIT: u8 found, then the keys still missing and the
// counter. A reply cut short is the server's or the network's fault, never a
// shorter list of missing keys: it breaks the connection.
void read_cancel_reply(const tcpstore::PayloadReader& payload, tcpstore::Status status,
                       std::vector<std::string>* missing, int64_t* count) {
  if (status != tcpstore::Status::kOk) return;
  tcpstore::PayloadReader p = payload;
  uint8_t found = p.u8();
  std::vector<std::string> keys = p.keys();
  int64_t counter = p.i64();
  if (!p.ok() || !p.at_end() || found > 1) {
    throw DistNetworkError("it sent a malformed CANCEL_WAIT reply (truncated or with trailing bytes)");
  }
  if (found == 1) {
    *missing = std::move(keys);
    *count = counter;
  }
}

bool is_waiting(Command command) {
  return command == Command::kGet || command == Command::kWait || command == Command::kWaitCount;
}

}  // namespace

tcpstore::PayloadReader TCPStoreClient::Reply::payload() const {
  return tcpstore::PayloadReader(frame.data() + tcpstore::kHeaderBytes,
                                 frame.size() - tcpstore::kHeaderBytes);
}

TCPStoreClient::TCPStoreClient(std::string host, uint16_t port, Duration connect_timeout,
                               std::optional<std::string> token)
    : host_(std::move(host)),
      port_(port),
      address_(format_host_port(host_, port_)),
      max_frame_bytes_(tcpstore::max_frame_bytes_from_env()),
      token_(std::move(token)) {
  if (token_ && token_->empty()) token_.reset();
  Deadline deadline = deadline_after(connect_timeout);
  idle_.push_back(open_connection(deadline));
  // A first round trip proves the peer is a store server of our version,
  // instead of failing later on the first real request. It gets what is left
  // of the timeout, but at least a second: the connection is up already.
  auto left = std::chrono::duration_cast<Duration>(deadline - SocketClock::now());
  try {
    ping(std::max(left, Duration(1000)));
  } catch (const DistStoreError& e) {
    if (!token_ && std::string(e.what()).find("authentication required") != std::string::npos) {
      throw DistStoreError("TCPStore client: the store at " + address_ +
                           " requires authentication: set TDIST_AUTH_TOKEN (or TDIST_AUTH_TOKEN_FILE) "
                           "to the job's token");
    }
    throw;
  }
}

TCPStoreClient::~TCPStoreClient() = default;

void TCPStoreClient::fail(const std::string& op, const std::string& why) {
  throw DistStoreError(op + ": lost the connection to the server at " + address_ + ": " + why);
}

std::unique_ptr<TCPStoreClient::Connection> TCPStoreClient::acquire(Deadline deadline) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  return open_connection(deadline);
}

std::unique_ptr<TCPStoreClient::Connection> TCPStoreClient::open_connection(Deadline deadline) {
  ConnectOptions options;
  options.domain = ErrorDomain::kStore;
  options.what = "TCPStore client";
  auto c = std::make_unique<Connection>(open_, connect_with_retry(host_, port_, deadline, options));
  if (token_) authenticate(*c, deadline);
  return c;
}

TCPStoreClient::Reply TCPStoreClient::exchange(Connection& c, const Request& request, Deadline deadline) {
  std::vector<uint8_t> frame = tcpstore::encode_request(request);
  std::string op = std::string("TCPStore client authenticating to ") + address_;
  try {
    c.socket.send_all(frame.data(), frame.size(), deadline);
    uint64_t got = 0;
    Reply reply = read_frame(c, deadline, &got);
    if (got != request.id) {
      throw DistNetworkError("it answered request " + std::to_string(got) + ", not " +
                             std::to_string(request.id));
    }
    return reply;
  } catch (const DistTimeoutError& e) {
    throw DistStoreTimeoutError(op + ": no answer to the handshake: " + e.what());
  } catch (const DistNetworkError& e) {
    throw DistStoreError(op + ": the connection failed during the handshake: " + e.what());
  }
}

// The client's half of auth.h's handshake. Nothing of the token travels:
// only nonces and MACs over them.
void TCPStoreClient::authenticate(Connection& c, Deadline deadline) {
  Request begin;
  begin.command = Command::kAuthBegin;
  begin.id = ++c.next_id;
  Reply hello = exchange(c, begin, deadline);
  tcpstore::PayloadReader p = hello.payload();
  uint8_t authenticates = hello.status == Status::kOk ? p.u8() : 0;
  if (hello.status != Status::kOk || (p.ok() && authenticates == 0 && p.at_end())) {
    throw DistStoreError("TCPStore client: the store at " + address_ +
                         " does not authenticate but this client has a token (TDIST_AUTH_TOKEN or "
                         "TDIST_AUTH_TOKEN_FILE): refusing it, as any process could pose as an "
                         "unauthenticated store; give the server the same token, or unset it here");
  }
  auth::Nonce server_nonce{};
  if (!p.ok() || authenticates != 1 || hello.frame.size() != tcpstore::kHeaderBytes + 1 + auth::kNonceBytes) {
    throw DistStoreError("TCPStore client: the store at " + address_ +
                         " sent a malformed answer to AUTH_BEGIN (" + std::to_string(hello.frame.size()) +
                         " bytes); is that port a tdist TCPStore server?");
  }
  std::copy_n(hello.frame.end() - auth::kNonceBytes, auth::kNonceBytes, server_nonce.begin());
  auth::Nonce client_nonce = auth::make_nonce();
  auth::Proof proof = auth::client_proof(*token_, "store", server_nonce, client_nonce);
  Request prove;
  prove.command = Command::kAuthProof;
  prove.id = ++c.next_id;
  prove.auth.resize(tcpstore::kAuthProofPayload);
  std::copy(client_nonce.begin(), client_nonce.end(), prove.auth.begin());
  std::copy(proof.begin(), proof.end(), prove.auth.begin() + auth::kNonceBytes);
  Reply verdict = exchange(c, prove, deadline);
  if (verdict.status != Status::kOk) {
    throw DistStoreError("TCPStore client: authentication failed: wrong token: the store at " + address_ +
                         " refused this client's proof (check that TDIST_AUTH_TOKEN / TDIST_AUTH_TOKEN_FILE "
                         "hold the job's token)");
  }
  auth::Proof server_proof{};
  if (verdict.frame.size() != tcpstore::kHeaderBytes + auth::kProofBytes) {
    throw DistStoreError("TCPStore client: the store at " + address_ + " sent a malformed proof (" +
                         std::to_string(verdict.frame.size()) + " bytes)");
  }
  std::copy_n(verdict.frame.end() - auth::kProofBytes, auth::kProofBytes, server_proof.begin());
  if (!auth::proofs_equal(server_proof, auth::server_proof(*token_, "store", server_nonce, client_nonce))) {
    throw DistStoreError("TCPStore client: authentication failed: the store at " + address_ +
                         " could not prove it holds this client's token (wrong token on the server, "
                         "or not the job's store)");
  }
}

void TCPStoreClient::release(std::unique_ptr<Connection> connection) {
  std::lock_guard<std::mutex> lock(mutex_);
  idle_.push_back(std::move(connection));
}

TCPStoreClient::Reply TCPStoreClient::read_frame(Connection& c, Deadline deadline, uint64_t* id) {
  Reply reply;
  reply.frame.resize(4);
  c.socket.recv_all(reply.frame.data(), 4, deadline);
  uint64_t length = 0;
  for (int i = 3; i >= 0; --i) length = length << 8 | reply.frame[static_cast<size_t>(i)];
  // Replies are never larger than the largest request; a bigger length means
  // the peer is not a store server (or is broken), not a reason to allocate.
  if (length < tcpstore::kLengthCovered || length > max_frame_bytes_ + 64) {
    throw DistNetworkError("it sent a frame with a length field of " + std::to_string(length) +
                           " bytes (limit " + std::to_string(max_frame_bytes_) +
                           "); is that port a tdist TCPStore server?");
  }
  size_t total = 4 + static_cast<size_t>(length);
  while (reply.frame.size() < total) {
    size_t have = reply.frame.size();
    size_t chunk = std::min(kReadChunk, total - have);
    reply.frame.resize(have + chunk);
    c.socket.recv_all(reply.frame.data() + have, chunk, deadline);
  }
  uint8_t status = reply.frame[4];
  if (status != static_cast<uint8_t>(Status::kOk) && status != static_cast<uint8_t>(Status::kError)) {
    throw DistNetworkError("it sent a reply with unknown status " + std::to_string(status));
  }
  reply.status = static_cast<Status>(status);
  tcpstore::PayloadReader header(reply.frame.data() + 5, 8);
  *id = header.u64();
  // Request ids start at 1: an error for id 0 is the server's word on the
  // connection itself (refused for its address's cap, or for want of file
  // descriptors), sent before it closes it.
  if (*id == 0 && reply.status == Status::kError) {
    tcpstore::PayloadReader payload = reply.payload();
    std::string message = payload.str();
    throw DistNetworkError(payload.ok() ? message : "it refused this connection");
  }
  return reply;
}

bool TCPStoreClient::read_reply(Connection& c, uint64_t id, Deadline deadline, Duration timeout,
                                Reply* reply) {
  for (;;) {
    if (!c.socket.wait_readable(deadline)) return false;
    uint64_t got = 0;
    Reply r = read_frame(c, deadline_after(std::max(timeout, kFrameGrace)), &got);
    if (got == id) {
      *reply = std::move(r);
      return true;
    }
    // Otherwise the late reply of a request that timed out earlier: drop it.
  }
}

TCPStoreClient::Outcome TCPStoreClient::call(Request request, Duration timeout, const std::string& op) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_.empty()) fail(op, "it failed earlier: " + broken_);
  }
  Deadline deadline = deadline_after(timeout);
  // A caller's cap (StoreDeadlineScope) bounds the connect and the wait for
  // the reply, never a frame once it is on its way: one cut short would
  // leave the connection out of step for good.
  const Deadline capped = detail::StoreDeadlineScope::capped(deadline);
  const bool by_cap = capped < deadline;
  if (by_cap && capped <= SocketClock::now()) {
    throw DistStoreTimeoutError(op + ": no time left for the store at " + address_ +
                                " (the caller's deadline has passed)");
  }
  Outcome out;
  std::unique_ptr<Connection> c = acquire(capped);
  Connection& conn = *c;
  request.id = ++conn.next_id;
  std::vector<uint8_t> frame = tcpstore::encode_request(request);
  if (frame.size() - 4 > max_frame_bytes_) {
    release(std::move(c));
    throw DistInvalidArgument(op + ": the request takes " + std::to_string(frame.size()) +
                              " bytes, over the store's limit of " + std::to_string(max_frame_bytes_) +
                              " bytes per message (TDIST_STORE_MAX_FRAME_BYTES)");
  }
  try {
    conn.socket.send_all(frame.data(), frame.size(), deadline);
    requests_sent_.fetch_add(1);
    if (!read_reply(conn, request.id, capped, timeout, &out.reply)) {
      out.timed_out = true;
      // The connection is dropped, for a reply may still come; a waiting
      // request cut short by the cap is not cancelled either (that waits for
      // the server, which may be the one not answering): the server drops
      // its waiter with the connection.
      if (!is_waiting(request.command) || by_cap) return out;
      // Tell the server to drop the waiter, then read until its answer. The
      // wait's own reply may still come first if the key arrived just now.
      Request cancel;
      cancel.command = Command::kCancelWait;
      cancel.id = ++conn.next_id;
      cancel.target_id = request.id;
      std::vector<uint8_t> cancel_frame = tcpstore::encode_request(cancel);
      Deadline cancel_deadline = deadline_after(kCancelTimeout);
      conn.socket.send_all(cancel_frame.data(), cancel_frame.size(), cancel_deadline);
      requests_sent_.fetch_add(1);
      out.missing = request.keys;
      bool answered = false;
      for (;;) {
        if (!conn.socket.wait_readable(cancel_deadline)) break;
        uint64_t got = 0;
        Reply r = read_frame(conn, deadline_after(kFrameGrace), &got);
        if (got == request.id) {
          out.reply = std::move(r);
          answered = true;
        } else if (got == cancel.id) {
          read_cancel_reply(r.payload(), r.status, &out.missing, &out.count);
          break;
        }
      }
      if (!answered) {
        release(std::move(c));
        return out;
      }
      out.timed_out = false;
    }
  } catch (const DistTimeoutError& e) {
    // Part of a frame went out or came in: the stream is out of step.
    std::lock_guard<std::mutex> lock(mutex_);
    broken_ = e.what();
    throw DistStoreTimeoutError(op + ": the server at " + address_ +
                                " stopped in the middle of a message: " + e.what());
  } catch (const DistNetworkError& e) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      broken_ = e.what();
    }
    fail(op, e.what());
  }
  release(std::move(c));
  if (out.reply.status == Status::kError) {
    tcpstore::PayloadReader p = out.reply.payload();
    std::string message = p.str();
    throw DistStoreError(p.ok() ? message : op + ": the server at " + address_ + " reported an error");
  }
  return out;
}

void TCPStoreClient::set(const std::string& key, const Bytes& value, Duration timeout) {
  Request r;
  r.command = Command::kSet;
  r.keys = {key};
  r.value = value;
  std::string op = "TCPStore set('" + key + "')";
  if (call(std::move(r), timeout, op).timed_out) {
    throw DistStoreTimeoutError(op + ": no reply from the server at " + address_ + " within " +
                                ms_text(timeout));
  }
}

Bytes TCPStoreClient::get(const std::string& key, Duration timeout) {
  Request r;
  r.command = Command::kGet;
  r.keys = {key};
  Outcome out = call(std::move(r), timeout, "TCPStore get('" + key + "')");
  if (out.timed_out) {
    throw DistStoreTimeoutError(
        wait_timeout_message("TCPStore", "get", {key}, timeout, "(server " + address_ + ")"));
  }
  return out.reply.payload().rest();
}

int64_t TCPStoreClient::add(const std::string& key, int64_t amount, Duration timeout) {
  Request r;
  r.command = Command::kAdd;
  r.keys = {key};
  r.amount = amount;
  std::string op = "TCPStore add('" + key + "')";
  Outcome out = call(std::move(r), timeout, op);
  if (out.timed_out) {
    throw DistStoreTimeoutError(op + ": no reply from the server at " + address_ + " within " +
                                ms_text(timeout));
  }
  return out.reply.payload().i64();
}

Bytes TCPStoreClient::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired,
                                  Duration timeout) {
  Request r;
  r.command = Command::kCompareSet;
  r.keys = {key};
  r.expected = expected;
  r.value = desired;
  std::string op = "TCPStore compare_set('" + key + "')";
  Outcome out = call(std::move(r), timeout, op);
  if (out.timed_out) {
    throw DistStoreTimeoutError(op + ": no reply from the server at " + address_ + " within " +
                                ms_text(timeout));
  }
  return out.reply.payload().rest();
}

bool TCPStoreClient::check(const std::vector<std::string>& keys, Duration timeout) {
  Request r;
  r.command = Command::kCheck;
  r.keys = keys;
  std::string op = "TCPStore check(" + key_list(keys) + ")";
  Outcome out = call(std::move(r), timeout, op);
  if (out.timed_out) {
    throw DistStoreTimeoutError(op + ": no reply from the server at " + address_ + " within " +
                                ms_text(timeout));
  }
  return out.reply.payload().u8() != 0;
}

void TCPStoreClient::wait(const std::vector<std::string>& keys, Duration timeout) {
  check_wait_timeout("TCPStore", timeout);
  Request r;
  r.command = Command::kWait;
  r.keys = keys;
  Outcome out = call(std::move(r), timeout, "TCPStore wait(" + key_list(keys) + ")");
  if (out.timed_out) {
    throw DistStoreTimeoutError(
        wait_timeout_message("TCPStore", "wait", out.missing, timeout, "(server " + address_ + ")"));
  }
}

bool TCPStoreClient::wait_count(const std::string& key, int64_t target, Duration timeout, int64_t* count) {
  Request r;
  r.command = Command::kWaitCount;
  r.keys = {key};
  r.amount = target;
  Outcome out = call(std::move(r), timeout, "TCPStore wait for counter '" + key + "'");
  *count = out.timed_out ? out.count : out.reply.payload().i64();
  return !out.timed_out;
}

int64_t TCPStoreClient::num_keys(Duration timeout) {
  Request r;
  r.command = Command::kNumKeys;
  std::string op = "TCPStore num_keys()";
  Outcome out = call(std::move(r), timeout, op);
  if (out.timed_out) {
    throw DistStoreTimeoutError(op + ": no reply from the server at " + address_ + " within " +
                                ms_text(timeout));
  }
  return out.reply.payload().i64();
}

bool TCPStoreClient::delete_key(const std::string& key, Duration timeout) {
  Request r;
  r.command = Command::kDeleteKey;
  r.keys = {key};
  std::string op = "TCPStore delete_key('" + key + "')";
  Outcome out = call(std::move(r), timeout, op);
  if (out.timed_out) {
    throw DistStoreTimeoutError(op + ": no reply from the server at " + address_ + " within " +
                                ms_text(timeout));
  }
  return out.reply.payload().u8() != 0;
}

void TCPStoreClient::ping(Duration timeout) {
  Request r;
  r.command = Command::kPing;
  std::string op = "TCPStore client connecting to " + address_;
  Outcome out = call(std::move(r), timeout, op);
  if (out.timed_out) {
    throw DistStoreTimeoutError(op + ": connected, but no reply to the first request within " +
                                ms_text(timeout) + "; is that port a tdist TCPStore server?");
  }
  tcpstore::PayloadReader p = out.reply.payload();
  uint32_t version = p.u32();
  if (!p.ok() || version != tcpstore::kProtocolVersion) {
    throw DistStoreError(op + ": the server speaks protocol version " + std::to_string(version) +
                         ", this client " + std::to_string(tcpstore::kProtocolVersion));
  }
}

}  // namespace tdist
