// Framing: bytes in, requests out to handle(); replies queued and sent
// without blocking; the limits on what one connection may buffer.

#include <sys/epoll.h>

#include <algorithm>

#include "store/tcp/server_impl.h"
#include "tdist/logging.h"

namespace tdist {
namespace {

using tcpstore::ParseStatus;

constexpr size_t kReadChunk = size_t{64} << 10;
// Per readiness event, so one busy client cannot starve the others.
constexpr size_t kMaxReadPerEvent = size_t{256} << 10;
// Requests served per connection and loop turn: a burst of 100,000 pipelined
// SETs is served a slice at a time, with everyone else's requests between.
constexpr int kMaxRequestsPerTurn = 256;
// A SET frame longer than this has its value read into a buffer of its own,
// reserved whole when the frame's head arrives: storing it then moves that
// buffer into the table. Copying a 200 MiB value out of the frame (and
// faulting in the copy's pages) stalled every other client for 100 ms and
// more.
constexpr size_t kStreamedFrameBytes = size_t{1} << 20;

}  // namespace

void TCPServer::Impl::on_connection_event(uint64_t id, uint32_t events) {
  Connection& conn = *find(id);
  if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0) read_from(conn);
  if (!conn.dead && (events & EPOLLOUT) != 0) flush(conn);
}

void TCPServer::Impl::read_from(Connection& conn) {
  size_t total = 0;
  while (total < kMaxReadPerEvent) {
    Socket::IoResult r = conn.sock.try_recv(scratch.data(), scratch.size());
    if (r.bytes > 0) {
      const uint8_t* data = scratch.data();
      size_t size = r.bytes;
      if (conn.value_expected > 0) {
        size_t take = std::min(size, conn.value_expected - conn.value_in.size());
        conn.value_in.insert(conn.value_in.end(), data, data + take);
        data += take;
        size -= take;
        if (conn.value_in.size() == conn.value_expected) finish_streamed_value(conn);
        if (conn.dead) return;
      }
      if (conn.discard > 0) {
        // The rest of a frame refused for the budget: drop it, then answer.
        size_t drop = static_cast<size_t>(std::min<uint64_t>(conn.discard, size));
        conn.discard -= drop;
        data += drop;
        size -= drop;
        if (conn.discard == 0) {
          enqueue(conn, tcpstore::encode_error(conn.discard_id, conn.discard_why));
          conn.frame_started = ServerClock::now();
        }
      }
      // The buffer grows by what actually arrived, never by what a length
      // field announces (the budget reserves it, refuse_for_budget).
      if (size > 0) {
        if (conn.in.empty()) conn.frame_started = ServerClock::now();
        conn.in.insert(conn.in.end(), data, data + size);
        charge_input(conn);
      }
      total += r.bytes;
      if (r.bytes < scratch.size()) break;
      // More than a handshake frame from a client yet to authenticate:
      // process_input refuses it without reading more.
      if (conn.auth != Connection::Auth::kOpen && conn.in.size() > kMaxHandshakeFrameBytes + 4) break;
      // Refuse early a frame the budget cannot hold, before reading on; a
      // large SET's value goes to its own buffer from here on.
      if (conn.discard == 0 && conn.value_expected == 0 && !refuse_for_budget(conn, 0)) {
        start_streaming_value(conn);
      }
      continue;
    }
    if (r.error == EAGAIN) break;
    // EOF or a reset. Between frames that is a normal goodbye; inside one the
    // client vanished mid-request.
    process_input(conn);
    if (conn.dead) return;
    std::string how = r.eof ? "closed the connection" : "reset the connection (" + errno_text(r.error) + ")";
    tcpstore::FrameView frame;
    uint64_t announced = 0;
    if (conn.in.empty() && conn.discard == 0 && conn.value_expected == 0) {
      if (!conn.served && conn.auth != Connection::Auth::kOpen) {
        stat_auth_refusals.fetch_add(1);
        TDIST_LOG(WARNING) << where() << ": client " << conn.sock.peer()
                           << " left without authenticating (no token, or it refused this server)";
      } else {
        TDIST_LOG(DEBUG) << where() << ": client " << conn.sock.peer() << " " << how;
      }
      mark_dead(conn);
    } else if (tcpstore::parse_frame(conn.in.data(), conn.in.size(), frame_limit(conn), &frame, &announced) ==
               ParseStatus::kFrame) {
      // Whole requests left over: it was throttled for not reading replies.
      reject(conn, how + " with requests unanswered after not reading its replies", nullptr);
    } else {
      std::string what = "an incomplete frame";
      size_t have = conn.in.size();
      if (conn.value_expected > 0) {
        what = "the value of an incomplete SET (" + std::to_string(conn.value_expected) + " bytes announced)";
        have = conn.value_in.size();
      } else if (conn.in.size() > 4 && tcpstore::is_known_command(conn.in[4])) {
        what = std::string("an incomplete ") + tcpstore::command_name(conn.in[4]) + " frame";
      }
      reject(conn, how + " in the middle of a request: " + std::to_string(have) + " bytes of " + what,
             nullptr);
    }
    return;
  }
  process_input(conn);
}

void TCPServer::Impl::process_input(Connection& conn) {
  size_t pos = 0;
  int served = 0;
  conn.pending = false;
  while (!conn.dead && conn.out_bytes <= options.output_soft_limit) {
    if (served == kMaxRequestsPerTurn) {
      // The rest next turn; not reading meanwhile (update_interest).
      conn.pending = true;
      ready_list.push_back(conn.id);
      break;
    }
    tcpstore::FrameView frame;
    uint64_t announced = 0;
    ParseStatus status = tcpstore::parse_frame(conn.in.data() + pos, conn.in.size() - pos, frame_limit(conn),
                                               &frame, &announced);
    if (status == ParseStatus::kNeedMore) break;
    if (status == ParseStatus::kTooLarge) {
      uint64_t id = 0;
      bool has_id = conn.in.size() - pos >= tcpstore::kHeaderBytes;
      if (has_id) {
        tcpstore::PayloadReader header(conn.in.data() + pos + 5, 8);
        id = header.u64();
      }
      if (conn.auth != Connection::Auth::kOpen) {
        refuse_before_handshake(conn, announced, has_id ? &id : nullptr);
        return;
      }
      reject(conn,
             "announced a frame of " + std::to_string(announced) + " bytes, over the limit of " +
                 std::to_string(options.max_frame_bytes) + " (TDIST_STORE_MAX_FRAME_BYTES)",
             has_id ? &id : nullptr);
      return;
    }
    if (status == ParseStatus::kMalformed) {
      reject(conn,
             "sent a frame whose length field is too small to hold a header (not a tdist store client?)",
             nullptr);
      return;
    }
    stat_requests.fetch_add(1);
    ++served;
    conn.last_active = ServerClock::now();
    handle(conn, frame);
    pos += frame.frame_size;
    conn.frame_started = conn.last_active;  // the next frame starts now
  }
  if (conn.dead) return;
  conn.in.erase(conn.in.begin(),
                conn.in.begin() + static_cast<std::ptrdiff_t>(std::min(pos, conn.in.size())));
  if (pos > 0) conn.in_expected = 0;  // its frame was served
  // Give back the memory of a large value once it has been stored (a
  // smaller buffer is kept: freeing and regrowing it per burst costs more).
  if (conn.in.empty() && conn.in.capacity() > 64 * kReadChunk) std::vector<uint8_t>().swap(conn.in);
  charge_input(conn);
  // What is left is the start of a frame: reserved in the budget, or
  // refused, now; a large SET's value read into its own buffer from now on.
  if (!conn.pending && conn.out_bytes <= options.output_soft_limit && conn.discard == 0 &&
      conn.value_expected == 0 && !refuse_for_budget(conn, 0)) {
    start_streaming_value(conn);
  }
  if (conn.dead) return;
  update_interest(conn);
}

size_t TCPServer::Impl::frame_limit(const Connection& conn) const {
  return conn.auth == Connection::Auth::kOpen ? options.max_frame_bytes : kMaxHandshakeFrameBytes;
}

// A client yet to authenticate announced a frame longer than any of the
// handshake's: refused on its length, before its body is buffered, so that
// clients without the token cannot fill the memory budget.
void TCPServer::Impl::refuse_before_handshake(Connection& conn, uint64_t announced,
                                              const uint64_t* request_id) {
  stat_auth_refusals.fetch_add(1);
  std::string why = "announced a frame of " + std::to_string(announced) +
                    " bytes before authenticating (the handshake's announce at most " +
                    std::to_string(kMaxHandshakeFrameBytes) + "; a client without the job's token?)";
  TDIST_LOG(WARNING) << where() << ": refused client " << conn.sock.peer() << ": " << why;
  if (request_id != nullptr) {
    std::vector<uint8_t> frame = tcpstore::encode_error(
        *request_id,
        "TCPStore server: authentication required: this store serves only clients holding the job's token "
        "(TDIST_AUTH_TOKEN or TDIST_AUTH_TOKEN_FILE)");
    conn.sock.try_send(frame.data(), frame.size());  // best effort, then close
  }
  mark_dead(conn);
}

// The connections that had more requests buffered than one turn serves.
void TCPServer::Impl::serve_ready() {
  std::vector<uint64_t> ids;
  ids.swap(ready_list);
  for (uint64_t id : ids) {
    Connection* conn = find(id);
    if (conn != nullptr && !conn->dead && conn->pending) process_input(*conn);
  }
}

void TCPServer::Impl::update_interest(Connection& conn) {
  if (conn.dead) return;
  uint32_t wanted = 0;
  if (conn.out_bytes <= options.output_soft_limit && !conn.pending) wanted |= EPOLLIN;
  if (conn.out_bytes > 0) wanted |= EPOLLOUT;
  if (wanted == conn.events) return;
  epoll_event ev{};
  ev.events = wanted;
  ev.data.u64 = conn.id;
  ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, conn.sock.fd(), &ev);
  conn.events = wanted;
}

void TCPServer::Impl::enqueue(Connection& conn, std::vector<uint8_t> frame, KvMap::Value body) {
  if (conn.dead) return;
  OutFrame out{std::move(frame), std::move(body)};
  if (conn.out_bytes == 0) conn.last_sent = ServerClock::now();  // the send timer starts now
  conn.out_bytes += out.size();
  conn.out_charged += out.head.size();
  budget.charge(out.head.size());
  conn.out.push_back(std::move(out));
  if (conn.out_bytes > options.output_hard_limit) {
    drop_non_reader(conn, "does not read its replies: " + std::to_string(conn.out_bytes) +
                              " bytes unsent exceed the limit of " +
                              std::to_string(options.output_hard_limit));
    return;
  }
  if (!conn.dirty) {
    conn.dirty = true;
    dirty.push_back(conn.id);
  }
}

void TCPServer::Impl::flush(Connection& conn) {
  bool was_paused = conn.out_bytes > options.output_soft_limit;
  while (!conn.out.empty()) {
    OutFrame& front = conn.out.front();
    // The head, then the shared value: two parts, each sent from its place.
    size_t head = front.head.size();
    const uint8_t* data = nullptr;
    size_t size = 0;
    if (conn.out_offset < head) {
      data = front.head.data() + conn.out_offset;
      size = head - conn.out_offset;
    } else {
      data = front.body->data() + (conn.out_offset - head);
      size = front.size() - conn.out_offset;
    }
    Socket::IoResult r = conn.sock.try_send(data, size);
    if (r.bytes > 0) conn.last_sent = conn.last_active = ServerClock::now();
    conn.out_offset += r.bytes;
    conn.out_bytes -= r.bytes;
    if (conn.out_offset == front.size()) {
      conn.out_charged -= head;
      budget.release(head);
      conn.out.pop_front();
      conn.out_offset = 0;
      continue;
    }
    if (r.bytes == size) continue;  // the head went out whole: the body next
    if (r.error == EAGAIN) break;
    if (r.error != 0) {
      TDIST_LOG(DEBUG) << where() << ": client " << conn.sock.peer() << " went away: " << errno_text(r.error);
      mark_dead(conn);
      return;
    }
  }
  update_interest(conn);
  // Requests left in the buffer while paused get no new EPOLLIN: resume them.
  if (was_paused && conn.out_bytes <= options.output_soft_limit && !conn.in.empty()) process_input(conn);
}

void TCPServer::Impl::reject(Connection& conn, const std::string& why, const uint64_t* request_id) {
  if (conn.dead) return;
  TDIST_LOG(WARNING) << where() << ": disconnecting client " << conn.sock.peer() << ": it " << why;
  stat_rejected.fetch_add(1);
  if (request_id != nullptr) {
    // Best effort: one try to tell the client why before closing.
    std::vector<uint8_t> frame =
        tcpstore::encode_error(*request_id, "TCPStore server: request rejected: " + why);
    conn.sock.try_send(frame.data(), frame.size());
  }
  mark_dead(conn);
}

void TCPServer::Impl::mark_dead(Connection& conn) {
  if (conn.dead) return;
  conn.dead = true;
  unauthenticated.erase(conn.id);
  count_out(conn);
  budget.release(conn.value_charged);
  conn.value_charged = 0;
  conn.value_expected = 0;
  Bytes().swap(conn.value_in);
  ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, conn.sock.fd(), nullptr);
  for (const auto& [request, waiter_id] : conn.waiters) remove_waiter(waiter_id);
  conn.waiters.clear();
  conn.out.clear();
  conn.out_bytes = 0;
  budget.release(conn.out_charged);
  conn.out_charged = 0;
  std::vector<uint8_t>().swap(conn.in);
  conn.in_expected = 0;
  charge_input(conn);
  dead.push_back(conn.id);
}

// The connections that went this turn are forgotten now; their sockets
// are closed by close_some(), a batch per turn.
void TCPServer::Impl::reap() {
  for (uint64_t id : dead) {
    auto it = connections.find(id);
    if (it == connections.end()) continue;
    if (it->second->sock) closing.push_back(std::move(it->second->sock));
    connections.erase(it);
    stat_open.fetch_sub(1);
  }
  dead.clear();
}

// A close costs more than the read of the end of stream that caused it: on
// loopback it runs the peer's side of the teardown too. 19,000 of them in
// one turn kept every other client waiting 300-450 ms.
void TCPServer::Impl::close_some() {
  while (!closing.empty() && closed_this_turn < kMaxClosesPerTurn) {
    closing.front().close();
    closing.pop_front();
    ++closed_this_turn;
  }
  if (closed_this_turn > stat_most_closed.load()) stat_most_closed.store(closed_this_turn);
  closed_this_turn = 0;
}

void TCPServer::Impl::close_now(Socket& sock) {
  if (!sock) return;
  sock.close();
  ++closed_this_turn;
}

// The head of a SET larger than kStreamedFrameBytes is in: its key and
// value length are parsed, its value's buffer reserved whole (its bytes were
// reserved in the budget already), and the bytes of the value that came
// with the head move there.
void TCPServer::Impl::start_streaming_value(Connection& conn) {
  if (conn.dead || conn.auth != Connection::Auth::kOpen || conn.in.size() < tcpstore::kHeaderBytes + 4 ||
      conn.in[4] != static_cast<uint8_t>(tcpstore::Command::kSet)) {
    return;
  }
  size_t total = size_t{4} + tcpstore::load_u32(conn.in.data());
  // Only a frame within the limit and reserved in the budget (in_expected).
  if (total <= kStreamedFrameBytes || total <= conn.in.size() || conn.in_expected != total) return;
  size_t key_bytes = tcpstore::load_u32(conn.in.data() + tcpstore::kHeaderBytes);
  size_t head = tcpstore::kHeaderBytes + 4 + key_bytes + 4;
  if (head > total) return;           // not a SET's layout: process_input rejects the whole frame
  if (conn.in.size() < head) return;  // a huge key: its frame stays in `in`
  size_t value_bytes = tcpstore::load_u32(conn.in.data() + head - 4);
  if (head + value_bytes != total) return;  // decode_request rejects it once whole
  tcpstore::PayloadReader header(conn.in.data() + 5, 8);
  conn.value_id = header.u64();
  conn.value_key.assign(reinterpret_cast<const char*>(conn.in.data()) + tcpstore::kHeaderBytes + 4,
                        key_bytes);
  // The reservation passes from the frame to its value.
  conn.in_expected = 0;
  conn.value_in.reserve(value_bytes);
  conn.value_in.assign(conn.in.begin() + static_cast<std::ptrdiff_t>(head), conn.in.end());
  std::vector<uint8_t>().swap(conn.in);
  charge_input(conn);
  conn.value_expected = value_bytes;
  conn.value_charged = value_bytes;
  budget.charge(value_bytes);
  if (conn.value_in.size() == conn.value_expected) finish_streamed_value(conn);
}

void TCPServer::Impl::finish_streamed_value(Connection& conn) {
  tcpstore::Request request;
  request.command = tcpstore::Command::kSet;
  request.id = conn.value_id;
  request.keys.push_back(std::move(conn.value_key));
  request.value = std::move(conn.value_in);
  conn.value_in = Bytes();
  conn.value_key.clear();
  conn.value_expected = 0;
  // The value's bytes are charged again by what stores them; released
  // first, so the budget never counts them twice.
  budget.release(conn.value_charged);
  conn.value_charged = 0;
  stat_requests.fetch_add(1);
  conn.last_active = ServerClock::now();
  conn.frame_started = conn.last_active;
  handle_request(conn, request, 0);
}

}  // namespace tdist
