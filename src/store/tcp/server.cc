#include "store/tcp/server.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/socket.h"
#include "kv_map.h"
#include "store/tcp/protocol.h"
#include "tdist/errors.h"
#include "tdist/logging.h"

namespace tdist {
namespace {

using tcpstore::Command;
using tcpstore::FrameWriter;
using tcpstore::ParseStatus;
using tcpstore::Request;
using tcpstore::Status;

// epoll tags: connection ids start above these.
constexpr uint64_t kListenerTag = 0;
constexpr uint64_t kWakeTag = 1;
constexpr uint64_t kFirstConnectionId = 2;
constexpr size_t kReadChunk = size_t{64} << 10;
// Per readiness event, so one busy client cannot starve the others.
constexpr size_t kMaxReadPerEvent = size_t{1} << 20;
constexpr int kMaxAcceptsPerEvent = 512;
constexpr int kMaxEvents = 256;
constexpr size_t kMaxWaitersPerConnection = 10000;

struct Connection {
  uint64_t id = 0;
  Socket sock;
  std::vector<uint8_t> in;                         // received, not yet parsed
  std::deque<std::vector<uint8_t>> out;            // reply frames not yet sent
  size_t out_offset = 0;                           // bytes of out.front() already sent
  size_t out_bytes = 0;                            // unsent bytes in all of out
  uint32_t events = 0;                             // the epoll mask registered
  bool dead = false;                               // closed at the end of this loop turn
  bool dirty = false;                              // in the flush list
  std::unordered_map<uint64_t, uint64_t> waiters;  // request id -> waiter id
};

struct Waiter {
  uint64_t connection = 0;
  uint64_t request = 0;
  Command command = Command::kGet;
  std::vector<std::string> keys;  // GET / WAIT_COUNT: one key; WAIT: the missing ones
  int64_t target = 0;             // WAIT_COUNT
};

// The counter `key` holds, if it holds a number.
bool read_counter(const KvMap& table, const std::string& key, int64_t* out) {
  const Bytes* value = table.find(key);
  if (value == nullptr) return false;
  const char* begin = reinterpret_cast<const char*>(value->data());
  const char* end = begin + value->size();
  auto [ptr, ec] = std::from_chars(begin, end, *out);
  return ec == std::errc() && ptr == end;
}

}  // namespace

struct TCPServer::Impl {
  explicit Impl(const TCPServerOptions& opts) : options(opts) {
    if (options.max_frame_bytes == 0) options.max_frame_bytes = tcpstore::max_frame_bytes_from_env();
    if (options.output_hard_limit == 0)
      options.output_hard_limit = options.max_frame_bytes + (size_t{16} << 20);
  }
  ~Impl();

  void open();
  void run();
  void loop_once(epoll_event* events, int count);

  void accept_all();
  void shed_one_connection();
  void on_connection_event(uint64_t id, uint32_t events);
  void read_from(Connection& conn);
  void process_input(Connection& conn);
  void handle(Connection& conn, const tcpstore::FrameView& frame);
  void flush(Connection& conn);
  void update_interest(Connection& conn);
  void enqueue(Connection& conn, std::vector<uint8_t> frame);
  void reject(Connection& conn, const std::string& why, const uint64_t* request_id);
  void mark_dead(Connection& conn);
  void reap();
  Connection* find(uint64_t id);

  // Store operations.
  bool try_answer(const Waiter& waiter);
  void park(Connection& conn, Waiter waiter);
  void notify(const std::string& key);
  void watch(uint64_t waiter_id, const std::string& key);
  void remove_waiter(uint64_t waiter_id);
  std::vector<std::string> missing_keys(const std::vector<std::string>& keys) const;
  void written(const std::string& key);
  void cancel(Connection& conn, const Request& request);
  void add(Connection& conn, const Request& request);
  void compare_set(Connection& conn, const Request& request);

  std::string where() const { return "TCPStore server on port " + std::to_string(port); }

  TCPServerOptions options;
  Socket listener;
  int epoll_fd = -1;
  int wake_fd = -1;
  int spare_fd = -1;  // /dev/null, given up to accept() once when out of fds
  uint16_t port = 0;
  std::thread thread;
  std::atomic<bool> stopping{false};

  // Owned by the loop thread.
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> connections;
  uint64_t next_connection_id = kFirstConnectionId;
  std::vector<uint64_t> dirty;
  std::vector<uint64_t> dead;
  std::vector<uint8_t> scratch;
  KvMap table;
  std::unordered_map<uint64_t, Waiter> waiters;
  std::unordered_map<std::string, std::vector<uint64_t>> watchers;  // key -> waiter ids
  uint64_t next_waiter_id = 1;
  uint64_t fd_exhaustion_warnings = 0;

  std::atomic<uint64_t> stat_accepted{0};
  std::atomic<uint64_t> stat_open{0};
  std::atomic<uint64_t> stat_requests{0};
  std::atomic<uint64_t> stat_parked{0};
  std::atomic<uint64_t> stat_rejected{0};
  std::atomic<uint64_t> stat_keys{0};
};

TCPServer::Impl::~Impl() {
  if (thread.joinable()) {
    stopping.store(true);
    uint64_t one = 1;
    // The loop drains the eventfd and sees `stopping`; a full counter
    // (impossible in practice) would still leave it readable.
    (void)!::write(wake_fd, &one, sizeof(one));
    thread.join();
  }
  connections.clear();
  if (epoll_fd >= 0) ::close(epoll_fd);
  if (wake_fd >= 0) ::close(wake_fd);
  if (spare_fd >= 0) ::close(spare_fd);
}

void TCPServer::Impl::open() {
  try {
    if (options.listen_fd >= 0) {
      listener =
          adopt_listening_socket(options.listen_fd, options.port, options.backlog, ErrorDomain::kStore);
    } else {
      listener = listen_on(options.port, ListenOptions{options.host, options.backlog, ErrorDomain::kStore});
    }
  } catch (const DistError& e) {
    throw DistStoreError(std::string("TCPStore server: ") + e.what());
  }
  port = listener.local_port();
  epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (epoll_fd < 0 || wake_fd < 0) {
    throw DistStoreError("TCPStore server: cannot create epoll/eventfd: " + errno_text(errno));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenerTag;
  ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listener.fd(), &ev);
  ev.data.u64 = kWakeTag;
  ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &ev);
  scratch.resize(kReadChunk);
  thread = std::thread([this] { run(); });
}

void TCPServer::Impl::run() {
  epoll_event events[kMaxEvents];
  while (!stopping.load()) {
    int count = ::epoll_wait(epoll_fd, events, kMaxEvents, -1);
    if (count < 0) {
      if (errno == EINTR) continue;
      TDIST_LOG(ERROR) << where() << ": epoll_wait failed: " << errno_text(errno) << "; the server stops";
      return;
    }
    // Nothing may escape the thread: a failure is confined to the
    // connection it belongs to, or logged and survived.
    try {
      loop_once(events, count);
    } catch (const std::exception& e) {
      TDIST_LOG(ERROR) << where() << ": unexpected error in the event loop: " << e.what();
    } catch (...) {
      TDIST_LOG(ERROR) << where() << ": unexpected non-standard exception in the event loop";
    }
  }
}

void TCPServer::Impl::loop_once(epoll_event* events, int count) {
  for (int i = 0; i < count; ++i) {
    uint64_t tag = events[i].data.u64;
    if (tag == kWakeTag) {
      uint64_t value = 0;
      (void)!::read(wake_fd, &value, sizeof(value));
      if (stopping.load()) return;
    } else if (tag == kListenerTag) {
      accept_all();
    } else {
      Connection* conn = find(tag);
      if (conn == nullptr || conn->dead) continue;
      try {
        on_connection_event(tag, events[i].events);
      } catch (const std::exception& e) {
        // bad_alloc and the like: drop this client, keep serving the rest.
        reject(*conn, std::string("internal error while serving it: ") + e.what(), nullptr);
      }
    }
  }
  // Replies are sent once per turn, so a SET that wakes a thousand waiters
  // costs one send per waiter and not one per event.
  for (size_t i = 0; i < dirty.size(); ++i) {
    Connection* conn = find(dirty[i]);
    if (conn == nullptr) continue;
    conn->dirty = false;
    if (!conn->dead) flush(*conn);
  }
  dirty.clear();
  reap();
}

Connection* TCPServer::Impl::find(uint64_t id) {
  auto it = connections.find(id);
  return it == connections.end() ? nullptr : it->second.get();
}

void TCPServer::Impl::accept_all() {
  for (int i = 0; i < kMaxAcceptsPerEvent; ++i) {
    int error = 0;
    Socket sock = accept_connection(listener, &error);
    if (!sock) {
      if (error == EAGAIN) return;
      if (error == EMFILE || error == ENFILE) {
        shed_one_connection();
        return;
      }
      if (error == ECONNABORTED || error == EPROTO || error == EPERM) continue;
      TDIST_LOG(WARNING) << where() << ": accept failed: " << errno_text(error);
      return;
    }
    auto conn = std::make_unique<Connection>();
    conn->id = next_connection_id++;
    conn->sock = std::move(sock);
    conn->events = EPOLLIN;
    epoll_event ev{};
    ev.events = conn->events;
    ev.data.u64 = conn->id;
    if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, conn->sock.fd(), &ev) != 0) {
      TDIST_LOG(WARNING) << where() << ": cannot watch client " << conn->sock.peer() << ": "
                         << errno_text(errno);
      continue;
    }
    TDIST_LOG(DEBUG) << where() << ": client " << conn->sock.peer() << " connected";
    connections.emplace(conn->id, std::move(conn));
    stat_accepted.fetch_add(1);
    stat_open.fetch_add(1);
  }
}

// Out of file descriptors: the pending connection would keep the level-
// triggered listener readable forever. Accept it with the spare fd and close
// it at once, so the client sees a reset and retries, and the loop goes on.
void TCPServer::Impl::shed_one_connection() {
  if (fd_exhaustion_warnings++ % 1000 == 0) {
    TDIST_LOG(WARNING) << where() << ": out of file descriptors with " << connections.size()
                       << " clients connected; refusing new clients (raise RLIMIT_NOFILE)";
  }
  if (spare_fd >= 0) {
    ::close(spare_fd);
    spare_fd = -1;
  }
  int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
  if (fd >= 0) ::close(fd);
  spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

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
      // The buffer grows by what actually arrived, never by what a length
      // field announces.
      conn.in.insert(conn.in.end(), scratch.data(), scratch.data() + r.bytes);
      total += r.bytes;
      if (r.bytes < scratch.size()) break;
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
    if (conn.in.empty()) {
      TDIST_LOG(DEBUG) << where() << ": client " << conn.sock.peer() << " " << how;
      mark_dead(conn);
    } else if (tcpstore::parse_frame(conn.in.data(), conn.in.size(), options.max_frame_bytes, &frame,
                                     &announced) == ParseStatus::kFrame) {
      // Whole requests left over: it was throttled for not reading replies.
      reject(conn, how + " with requests unanswered after not reading its replies", nullptr);
    } else {
      std::string what = "an incomplete frame";
      if (conn.in.size() > 4 && tcpstore::is_known_command(conn.in[4])) {
        what = std::string("an incomplete ") + tcpstore::command_name(conn.in[4]) + " frame";
      }
      reject(conn,
             how + " in the middle of a request: " + std::to_string(conn.in.size()) + " bytes of " + what,
             nullptr);
    }
    return;
  }
  process_input(conn);
}

void TCPServer::Impl::process_input(Connection& conn) {
  size_t pos = 0;
  while (!conn.dead && conn.out_bytes <= options.output_soft_limit) {
    tcpstore::FrameView frame;
    uint64_t announced = 0;
    ParseStatus status = tcpstore::parse_frame(conn.in.data() + pos, conn.in.size() - pos,
                                               options.max_frame_bytes, &frame, &announced);
    if (status == ParseStatus::kNeedMore) break;
    if (status == ParseStatus::kTooLarge) {
      uint64_t id = 0;
      bool has_id = conn.in.size() - pos >= tcpstore::kHeaderBytes;
      if (has_id) {
        tcpstore::PayloadReader header(conn.in.data() + pos + 5, 8);
        id = header.u64();
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
    handle(conn, frame);
    pos += frame.frame_size;
  }
  if (conn.dead) return;
  conn.in.erase(conn.in.begin(), conn.in.begin() + static_cast<std::ptrdiff_t>(pos));
  // Give back the memory of a large value once it has been stored.
  if (conn.in.empty() && conn.in.capacity() > 4 * kReadChunk) std::vector<uint8_t>().swap(conn.in);
  update_interest(conn);
}

void TCPServer::Impl::update_interest(Connection& conn) {
  if (conn.dead) return;
  uint32_t wanted = 0;
  if (conn.out_bytes <= options.output_soft_limit) wanted |= EPOLLIN;
  if (conn.out_bytes > 0) wanted |= EPOLLOUT;
  if (wanted == conn.events) return;
  epoll_event ev{};
  ev.events = wanted;
  ev.data.u64 = conn.id;
  ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, conn.sock.fd(), &ev);
  conn.events = wanted;
}

void TCPServer::Impl::enqueue(Connection& conn, std::vector<uint8_t> frame) {
  if (conn.dead) return;
  conn.out_bytes += frame.size();
  conn.out.push_back(std::move(frame));
  if (conn.out_bytes > options.output_hard_limit) {
    reject(conn,
           "does not read its replies: " + std::to_string(conn.out_bytes) +
               " bytes unsent exceed the limit of " + std::to_string(options.output_hard_limit),
           nullptr);
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
    auto& front = conn.out.front();
    Socket::IoResult r = conn.sock.try_send(front.data() + conn.out_offset, front.size() - conn.out_offset);
    conn.out_offset += r.bytes;
    conn.out_bytes -= r.bytes;
    if (conn.out_offset == front.size()) {
      conn.out.pop_front();
      conn.out_offset = 0;
      continue;
    }
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
  ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, conn.sock.fd(), nullptr);
  for (const auto& [request, waiter_id] : conn.waiters) remove_waiter(waiter_id);
  conn.waiters.clear();
  conn.out.clear();
  conn.out_bytes = 0;
  dead.push_back(conn.id);
}

void TCPServer::Impl::reap() {
  for (uint64_t id : dead) {
    if (connections.erase(id) > 0) stat_open.fetch_sub(1);
  }
  dead.clear();
}

// ---- store operations ------------------------------------------------------------

void TCPServer::Impl::handle(Connection& conn, const tcpstore::FrameView& frame) {
  Request request;
  std::string error;
  if (!tcpstore::decode_request(frame, &request, &error)) {
    reject(conn, "sent a bad request: " + error, &frame.id);
    return;
  }
  FrameWriter reply(static_cast<uint8_t>(Status::kOk), request.id);
  const std::string& key = request.keys.empty() ? std::string() : request.keys.front();
  switch (request.command) {
    case Command::kSet:
      table.set(key, std::move(request.value));
      written(key);
      break;
    case Command::kGet:
    case Command::kWait:
    case Command::kWaitCount: {
      Waiter waiter{conn.id, request.id, request.command, std::move(request.keys), request.amount};
      if (request.command == Command::kWait) waiter.keys = missing_keys(waiter.keys);
      if (!try_answer(waiter)) park(conn, std::move(waiter));
      return;
    }
    case Command::kAdd:
      add(conn, request);
      return;
    case Command::kCompareSet:
      compare_set(conn, request);
      return;
    case Command::kCheck:
      reply.u8(missing_keys(request.keys).empty() ? 1 : 0);
      break;
    case Command::kCancelWait:
      cancel(conn, request);
      return;
    case Command::kNumKeys:
      reply.i64(table.size());
      break;
    case Command::kDeleteKey:
      reply.u8(table.erase(key) ? 1 : 0);
      stat_keys.store(static_cast<uint64_t>(table.size()));
      break;
    case Command::kPing:
      if (request.version != tcpstore::kProtocolVersion) {
        enqueue(conn, tcpstore::encode_error(request.id,
                                             "TCPStore protocol version mismatch: client speaks version " +
                                                 std::to_string(request.version) + ", server " +
                                                 std::to_string(tcpstore::kProtocolVersion)));
        return;
      }
      reply.u32(tcpstore::kProtocolVersion);
      break;
  }
  enqueue(conn, reply.finish());
}

void TCPServer::Impl::written(const std::string& key) {
  stat_keys.store(static_cast<uint64_t>(table.size()));
  notify(key);
}

void TCPServer::Impl::add(Connection& conn, const Request& request) {
  const std::string& key = request.keys.front();
  std::optional<int64_t> next = table.add(key, request.amount);
  if (!next) {
    enqueue(conn, tcpstore::encode_error(request.id, add_on_value_message("TCPStore", key)));
    return;
  }
  written(key);
  FrameWriter reply(static_cast<uint8_t>(Status::kOk), request.id);
  reply.i64(*next);
  enqueue(conn, reply.finish());
}

void TCPServer::Impl::compare_set(Connection& conn, const Request& request) {
  const std::string& key = request.keys.front();
  Bytes result = table.compare_set(key, request.expected, request.value);
  // Waking the watchers of a key that was not written is harmless: they
  // check their condition again and keep waiting.
  written(key);
  FrameWriter reply(static_cast<uint8_t>(Status::kOk), request.id);
  reply.raw(result.data(), result.size());
  enqueue(conn, reply.finish());
}

std::vector<std::string> TCPServer::Impl::missing_keys(const std::vector<std::string>& keys) const {
  std::vector<std::string> missing;
  for (const auto& key : table.missing(keys)) {
    if (std::find(missing.begin(), missing.end(), key) == missing.end()) missing.push_back(key);
  }
  return missing;
}

// Answers the waiter if its condition holds now; false otherwise.
bool TCPServer::Impl::try_answer(const Waiter& waiter) {
  Connection* conn = find(waiter.connection);
  if (conn == nullptr || conn->dead) return true;  // nobody to answer: drop it
  FrameWriter reply(static_cast<uint8_t>(Status::kOk), waiter.request);
  if (waiter.command == Command::kGet) {
    const Bytes* value = table.find(waiter.keys.front());
    if (value == nullptr) return false;
    reply.raw(value->data(), value->size());
  } else if (waiter.command == Command::kWait) {
    if (!missing_keys(waiter.keys).empty()) return false;
  } else {
    int64_t count = 0;
    if (!read_counter(table, waiter.keys.front(), &count) || count < waiter.target) return false;
    reply.i64(count);
  }
  enqueue(*conn, reply.finish());
  return true;
}

void TCPServer::Impl::park(Connection& conn, Waiter waiter) {
  // A well-behaved client waits for one thing at a time; each waiter costs
  // memory, so a client that parks without end is cut off.
  if (conn.waiters.size() >= kMaxWaitersPerConnection) {
    reject(conn, "has more than " + std::to_string(kMaxWaitersPerConnection) + " requests waiting for keys",
           nullptr);
    return;
  }
  // A reused request id replaces the older waiter instead of orphaning it.
  if (auto old = conn.waiters.find(waiter.request); old != conn.waiters.end()) remove_waiter(old->second);
  uint64_t id = next_waiter_id++;
  for (const auto& key : waiter.keys) watch(id, key);
  conn.waiters[waiter.request] = id;
  waiters.emplace(id, std::move(waiter));
  stat_parked.fetch_add(1);
}

void TCPServer::Impl::watch(uint64_t waiter_id, const std::string& key) {
  auto& list = watchers[key];
  if (std::find(list.begin(), list.end(), waiter_id) == list.end()) list.push_back(waiter_id);
}

void TCPServer::Impl::notify(const std::string& key) {
  auto it = watchers.find(key);
  if (it == watchers.end()) return;
  std::vector<uint64_t> ids = std::move(it->second);
  watchers.erase(it);
  for (uint64_t id : ids) {
    auto wit = waiters.find(id);
    if (wit == waiters.end()) continue;
    bool answered = try_answer(wit->second);
    // Answering may have pushed its client over the output limit and so
    // disconnected it, taking this waiter along: look it up again.
    wit = waiters.find(id);
    if (wit == waiters.end()) continue;
    Waiter& waiter = wit->second;
    if (answered) {
      if (Connection* conn = find(waiter.connection)) conn->waiters.erase(waiter.request);
      remove_waiter(id);
      continue;
    }
    // Still waiting: for the counter to grow, or for keys that are missing
    // again (deleted after they were set).
    for (const auto& k : waiter.command == Command::kWait ? missing_keys(waiter.keys) : waiter.keys)
      watch(id, k);
  }
}

void TCPServer::Impl::remove_waiter(uint64_t waiter_id) {
  auto it = waiters.find(waiter_id);
  if (it == waiters.end()) return;
  for (const auto& key : it->second.keys) {
    auto wit = watchers.find(key);
    if (wit == watchers.end()) continue;
    auto& list = wit->second;
    list.erase(std::remove(list.begin(), list.end(), waiter_id), list.end());
    if (list.empty()) watchers.erase(wit);
  }
  waiters.erase(it);
}

void TCPServer::Impl::cancel(Connection& conn, const Request& request) {
  FrameWriter reply(static_cast<uint8_t>(Status::kOk), request.id);
  auto it = conn.waiters.find(request.target_id);
  if (it == conn.waiters.end()) {
    // Already answered: that reply is queued ahead of this one.
    reply.u8(0);
    reply.keys({});
    reply.i64(0);
  } else {
    const Waiter& waiter = waiters.at(it->second);
    int64_t count = 0;
    if (waiter.command == Command::kWaitCount) read_counter(table, waiter.keys.front(), &count);
    reply.u8(1);
    reply.keys(missing_keys(waiter.keys));
    reply.i64(count);
    remove_waiter(it->second);
    conn.waiters.erase(it);
  }
  enqueue(conn, reply.finish());
}

// ---- TCPServer ----------------------------------------------------------------------

namespace {

std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::map<uint16_t, std::weak_ptr<TCPServer>>& registry() {
  static auto* servers = new std::map<uint16_t, std::weak_ptr<TCPServer>>();  // never destroyed: used at exit
  return *servers;
}

}  // namespace

TCPServer::TCPServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TCPServer::~TCPServer() = default;

std::shared_ptr<TCPServer> TCPServer::start(const TCPServerOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  impl->open();
  return std::shared_ptr<TCPServer>(new TCPServer(std::move(impl)));
}

std::shared_ptr<TCPServer> TCPServer::start_shared(const TCPServerOptions& options) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto& servers = registry();
  if (options.port != 0) {
    auto it = servers.find(options.port);
    if (it != servers.end()) {
      if (auto server = it->second.lock()) {
        if (options.listen_fd >= 0) ::close(options.listen_fd);  // ours to close; the port is served already
        return server;
      }
    }
  }
  auto server = start(options);
  // Drop entries of servers that are gone while we hold the lock anyway.
  for (auto it = servers.begin(); it != servers.end();)
    it = it->second.expired() ? servers.erase(it) : std::next(it);
  servers[server->port()] = server;
  return server;
}

uint16_t TCPServer::port() const {
  return impl_->port;
}

TCPServerStats TCPServer::stats() const {
  TCPServerStats s;
  s.connections_accepted = impl_->stat_accepted.load();
  s.connections_open = impl_->stat_open.load();
  s.requests = impl_->stat_requests.load();
  s.waiters_parked = impl_->stat_parked.load();
  s.clients_rejected = impl_->stat_rejected.load();
  s.keys = impl_->stat_keys.load();
  return s;
}

}  // namespace tdist
