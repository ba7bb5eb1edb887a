#include "common/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>

#include "tdist/errors.h"

namespace tdist {
namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

[[noreturn]] void throw_error(ErrorDomain domain, const std::string& message) {
  if (domain == ErrorDomain::kStore) throw DistStoreError(message);
  throw DistNetworkError(message);
}

[[noreturn]] void throw_timeout(ErrorDomain domain, const std::string& message) {
  if (domain == ErrorDomain::kStore) throw DistStoreTimeoutError(message);
  throw DistNetworkTimeoutError(message);
}

// poll() takes an int of milliseconds; round up so that a deadline 0.3 ms
// away does not turn into a busy loop of zero-timeout polls.
int poll_timeout_ms(Deadline deadline) {
  if (deadline == kNoDeadline) return -1;
  auto now = SocketClock::now();
  if (deadline <= now) return 0;
  auto left = std::chrono::ceil<milliseconds>(deadline - now).count();
  return static_cast<int>(std::min<int64_t>(left, INT_MAX));
}

// Waits for `events` on fd until the deadline; false on timeout. Errors and
// hang-ups count as ready: the following send/recv reports them.
bool wait_for(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd entry{fd, events, 0};
    int rc = ::poll(&entry, 1, poll_timeout_ms(deadline));
    if (rc > 0) return true;
    if (rc == 0) {
      if (SocketClock::now() >= deadline) return false;
      continue;  // poll rounds to whole milliseconds; go again until due
    }
    if (errno != EINTR) return true;  // let the I/O call report the error
  }
}

int64_t elapsed_ms(SocketClock::time_point start) {
  return duration_cast<milliseconds>(SocketClock::now() - start).count();
}

bool is_retriable_connect_error(int error) {
  switch (error) {
    case ECONNREFUSED:
    case ETIMEDOUT:
    case EAGAIN:
    case EINTR:
    case ENETUNREACH:
    case ENETDOWN:
    case EHOSTUNREACH:
    case EHOSTDOWN:
    case ECONNRESET:
    case ECONNABORTED:
    case EADDRNOTAVAIL:  // out of ephemeral ports for a moment
      return true;
    default:
      return false;
  }
}

// getaddrinfo with the resolver's error as a value so that connect_with_retry
// can retry EAI_AGAIN.
std::vector<SocketAddress> resolve_impl(const std::string& host, uint16_t port, int* gai_error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_protocol = IPPROTO_TCP;
  // AI_ADDRCONFIG is deliberately not set: it hides ::1 on hosts whose only
  // IPv6 address is the loopback one, which breaks single-host jobs.
  hints.ai_flags = host.empty() ? AI_PASSIVE : 0;
  std::string service = std::to_string(port);
  addrinfo* list = nullptr;
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &list);
  *gai_error = rc;
  std::vector<SocketAddress> out;
  if (rc != 0) return out;
  for (addrinfo* it = list; it != nullptr; it = it->ai_next) {
    out.emplace_back(it->ai_addr, it->ai_addrlen);
  }
  ::freeaddrinfo(list);
  return out;
}

std::string gai_text(int gai_error) {
  if (gai_error == EAI_SYSTEM) return errno_text(errno);
  return ::gai_strerror(gai_error);
}

// One non-blocking connect to `address`, finished with poll. Returns the
// connected socket or an invalid one with *error set.
Socket try_connect(const SocketAddress& address, Deadline attempt_deadline, int* error) {
  int fd = ::socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = errno;
    return {};
  }
  Socket sock(fd, address.to_string());
  int rc = ::connect(fd, address.data(), address.length());
  if (rc != 0 && errno != EINPROGRESS && errno != EINTR) {
    *error = errno;
    return {};
  }
  if (rc != 0) {
    if (!wait_for(fd, POLLOUT, attempt_deadline)) {
      *error = ETIMEDOUT;
      return {};
    }
    int so_error = 0;
    socklen_t len = sizeof(so_error);
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) so_error = errno;
    if (so_error != 0) {
      *error = so_error;
      return {};
    }
  }
  // Connecting to a free port of this host can succeed by "simultaneous
  // open" with itself when the kernel picks the same ephemeral port; that
  // is not a server, so treat it as refused.
  SocketAddress local = SocketAddress::local_of(fd);
  SocketAddress peer = SocketAddress::peer_of(fd);
  if (local.valid() && peer.valid() && local.port() == peer.port() && local.host() == peer.host()) {
    *error = ECONNREFUSED;
    return {};
  }
  sock.set_nonblocking(false);
  sock.set_nodelay();
  *error = 0;
  return sock;
}

milliseconds jittered(milliseconds backoff) {
  // Half fixed, half random: spreads a thousand clients that started
  // together without making any of them wait much longer than planned.
  thread_local std::minstd_rand rng(std::random_device{}());
  auto half = std::max<int64_t>(backoff.count() / 2, 1);
  std::uniform_int_distribution<int64_t> dist(0, half);
  return milliseconds(half + dist(rng));
}

Socket make_listener(int family, const sockaddr* addr, socklen_t len, int backlog, int* error) {
  int fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = errno;
    return {};
  }
  Socket sock(fd);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (family == AF_INET6) {
    int zero = 0;  // dual-stack: accept IPv4 clients as v4-mapped addresses
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  }
  if (::bind(fd, addr, len) != 0 || ::listen(fd, backlog) != 0) {
    *error = errno;
    return {};
  }
  *error = 0;
  return sock;
}

std::string listen_error_text(const std::string& where, int error) {
  std::string text = "cannot listen on " + where + ": " + errno_text(error);
  if (error == EADDRINUSE) {
    text +=
        "; another process (or another server of this one) holds the port; pass port 0 to pick a free one";
  }
  return text;
}

}  // namespace

Deadline deadline_after(std::chrono::milliseconds timeout) {
  auto now = SocketClock::now();
  if (timeout.count() < 0) return now;
  if (timeout >= duration_cast<milliseconds>(kNoDeadline - now)) return kNoDeadline;
  return now + timeout;
}

bool is_ipv6_literal(std::string_view host) {
  if (host.find(':') == std::string_view::npos) return false;
  std::string plain(host.substr(0, host.find('%')));
  in6_addr addr{};
  return ::inet_pton(AF_INET6, plain.c_str(), &addr) == 1;
}

HostPort parse_host_port(std::string_view text) {
  auto fail = [&](const std::string& why) {
    throw DistInvalidArgument("invalid address '" + std::string(text) + "': " + why +
                              " (expected host:port or [ipv6]:port)");
  };
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos) fail("missing ']'");
    host = text.substr(1, close - 1);
    if (close + 1 >= text.size() || text[close + 1] != ':') fail("missing ':port' after ']'");
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos) fail("missing ':port'");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) fail("an IPv6 address needs brackets, as in [::1]:29500");
  }
  if (host.empty()) fail("empty host");
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value > 65535) {
    fail("port must be a number from 0 to 65535");
  }
  return HostPort{std::string(host), static_cast<uint16_t>(value)};
}

std::string format_host_port(std::string_view host, uint16_t port) {
  std::string out;
  if (host.find(':') != std::string_view::npos) {
    out.append("[").append(host).append("]");
  } else {
    out.append(host);
  }
  return out + ":" + std::to_string(port);
}

// ---- SocketAddress ----------------------------------------------------------

SocketAddress::SocketAddress(const sockaddr* addr, socklen_t length) {
  length_ = std::min<socklen_t>(length, sizeof(storage_));
  std::memcpy(&storage_, addr, length_);
}

SocketAddress SocketAddress::local_of(int fd) {
  SocketAddress out;
  out.length_ = sizeof(out.storage_);
  if (::getsockname(fd, out.data(), &out.length_) != 0) out.length_ = 0;
  return out;
}

SocketAddress SocketAddress::peer_of(int fd) {
  SocketAddress out;
  out.length_ = sizeof(out.storage_);
  if (::getpeername(fd, out.data(), &out.length_) != 0) out.length_ = 0;
  return out;
}

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
  return 0;
}

std::string SocketAddress::host() const {
  if (!valid()) return "?";
  if (family() == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&storage_);
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
      char text[INET_ADDRSTRLEN];
      ::inet_ntop(AF_INET, &in6->sin6_addr.s6_addr[12], text, sizeof(text));
      return text;
    }
  }
  char text[NI_MAXHOST];
  if (::getnameinfo(data(), length_, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) != 0) return "?";
  return text;
}

std::string SocketAddress::to_string() const {
  if (!valid()) return "?";
  return format_host_port(host(), port());
}

std::vector<SocketAddress> resolve(const std::string& host, uint16_t port) {
  int gai_error = 0;
  auto out = resolve_impl(host, port, &gai_error);
  if (gai_error != 0) {
    throw DistNetworkError("cannot resolve host '" + host + "': " + gai_text(gai_error));
  }
  return out;
}

// ---- Socket -----------------------------------------------------------------

Socket::~Socket() {
  close();
}

Socket::Socket(Socket&& other) noexcept : fd_(other.fd_), peer_(std::move(other.peer_)) {
  other.fd_ = -1;
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    peer_ = std::move(other.peer_);
    other.fd_ = -1;
  }
  return *this;
}

int Socket::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void Socket::close() {
  // close() is not retried on EINTR: on Linux the fd is released either way.
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::set_nodelay(bool on) const {
  int value = on ? 1 : 0;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &value, sizeof(value));
}

void Socket::set_nonblocking(bool on) const {
  int flags = ::fcntl(fd_, F_GETFL, 0);
  if (flags < 0) return;
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  ::fcntl(fd_, F_SETFL, flags);
}

void Socket::set_cloexec(bool on) const {
  int flags = ::fcntl(fd_, F_GETFD, 0);
  if (flags < 0) return;
  flags = on ? (flags | FD_CLOEXEC) : (flags & ~FD_CLOEXEC);
  ::fcntl(fd_, F_SETFD, flags);
}

void Socket::set_keepalive(bool on) const {
  int value = on ? 1 : 0;
  ::setsockopt(fd_, SOL_SOCKET, SO_KEEPALIVE, &value, sizeof(value));
}

bool Socket::wait_readable(Deadline deadline) const {
  return wait_for(fd_, POLLIN, deadline);
}

bool Socket::wait_writable(Deadline deadline) const {
  return wait_for(fd_, POLLOUT, deadline);
}

Socket::IoResult Socket::try_recv(void* data, size_t size) const {
  IoResult result;
  for (;;) {
    ssize_t n = ::recv(fd_, data, size, MSG_DONTWAIT);
    if (n > 0) {
      result.bytes = static_cast<size_t>(n);
    } else if (n == 0) {
      result.eof = size > 0;
    } else if (errno == EINTR) {
      continue;
    } else {
      result.error = errno == EWOULDBLOCK ? EAGAIN : errno;
    }
    return result;
  }
}

Socket::IoResult Socket::try_send(const void* data, size_t size) const {
  IoResult result;
  for (;;) {
    ssize_t n = ::send(fd_, data, size, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) {
      result.bytes = static_cast<size_t>(n);
    } else if (errno == EINTR) {
      continue;
    } else {
      result.error = errno == EWOULDBLOCK ? EAGAIN : errno;
    }
    return result;
  }
}

void Socket::send_all(const void* data, size_t size, Deadline deadline) const {
  const auto* bytes = static_cast<const uint8_t*>(data);
  size_t done = 0;
  while (done < size) {
    IoResult r = try_send(bytes + done, size - done);
    done += r.bytes;
    if (r.error == 0) continue;
    if (r.error != EAGAIN) {
      throw DistNetworkError("send to " + peer_ + " failed after " + std::to_string(done) + " of " +
                             std::to_string(size) + " bytes: " + errno_text(r.error));
    }
    if (!wait_writable(deadline)) {
      throw DistNetworkTimeoutError("send to " + peer_ + " timed out after " + std::to_string(done) + " of " +
                                    std::to_string(size) + " bytes (the peer is not reading)");
    }
  }
}

void Socket::recv_all(void* data, size_t size, Deadline deadline) const {
  auto* bytes = static_cast<uint8_t*>(data);
  size_t done = 0;
  while (done < size) {
    IoResult r = try_recv(bytes + done, size - done);
    done += r.bytes;
    if (r.eof) {
      throw DistNetworkError("connection closed by " + peer_ + " after " + std::to_string(done) + " of " +
                             std::to_string(size) + " expected bytes");
    }
    if (r.error == 0) continue;
    if (r.error != EAGAIN) {
      throw DistNetworkError("receive from " + peer_ + " failed after " + std::to_string(done) + " of " +
                             std::to_string(size) + " bytes: " + errno_text(r.error));
    }
    if (!wait_readable(deadline)) {
      throw DistNetworkTimeoutError("receive from " + peer_ + " timed out after " + std::to_string(done) +
                                    " of " + std::to_string(size) + " bytes");
    }
  }
}

// ---- connect / listen / accept ------------------------------------------------

Socket connect_with_retry(const std::string& host, uint16_t port, Deadline deadline,
                          const ConnectOptions& options) {
  const auto start = SocketClock::now();
  const std::string where = format_host_port(host, port);
  milliseconds backoff = std::max(options.initial_backoff, milliseconds(1));
  int attempts = 0;
  std::string last_error = "none";
  for (;;) {
    int gai_error = 0;
    auto addresses = resolve_impl(host, port, &gai_error);
    bool retriable = true;
    if (gai_error != 0) {
      last_error = "resolving '" + host + "': " + gai_text(gai_error);
      // A name that does not exist will not start to; "try again" may.
      retriable = gai_error == EAI_AGAIN;
      if (!retriable)
        throw_error(options.domain, options.what + ": cannot connect to " + where + ": " + last_error);
    }
    bool any_retriable = addresses.empty();
    int last_errno = gai_error != 0 ? EAGAIN : 0;
    for (const auto& address : addresses) {
      ++attempts;
      int error = 0;
      auto attempt_deadline = std::min(deadline, deadline_after(options.attempt_timeout));
      Socket sock = try_connect(address, attempt_deadline, &error);
      if (sock) {
        sock.set_peer(where);
        return sock;
      }
      last_error = address.to_string() + ": " + errno_text(error);
      last_errno = error;
      if (is_retriable_connect_error(error)) any_retriable = true;
    }
    if (!any_retriable) {
      throw_error(options.domain, options.what + ": cannot connect to " + where + " after " +
                                      std::to_string(elapsed_ms(start)) + " ms: " + last_error);
    }
    auto now = SocketClock::now();
    if (now >= deadline) {
      std::ostringstream msg;
      msg << options.what << ": timed out connecting to " << where << " (host '" << host << "', port " << port
          << ") after waiting " << elapsed_ms(start) << " ms over " << attempts
          << " attempts; last error: " << last_error
          << ". Is the server running and reachable at that address?";
      throw_timeout(options.domain, msg.str());
    }
    if (options.on_retry) options.on_retry(attempts, last_errno);
    auto pause = jittered(backoff);
    std::this_thread::sleep_for(std::min<SocketClock::duration>(pause, deadline - now));
    backoff = std::min(backoff * 2, std::max(options.max_backoff, options.initial_backoff));
  }
}

Socket listen_on(uint16_t port, const ListenOptions& options) {
  int error = 0;
  if (options.host.empty()) {
    sockaddr_in6 any6{};
    any6.sin6_family = AF_INET6;
    any6.sin6_addr = in6addr_any;
    any6.sin6_port = htons(port);
    Socket sock =
        make_listener(AF_INET6, reinterpret_cast<sockaddr*>(&any6), sizeof(any6), options.backlog, &error);
    if (sock) return sock;
    // Fall back to IPv4 only when IPv6 itself is missing; a port in use is
    // in use for both.
    if (error != EAFNOSUPPORT && error != EADDRNOTAVAIL && error != EPROTONOSUPPORT) {
      throw_error(options.domain, listen_error_text("[::]:" + std::to_string(port), error));
    }
    sockaddr_in any4{};
    any4.sin_family = AF_INET;
    any4.sin_addr.s_addr = htonl(INADDR_ANY);
    any4.sin_port = htons(port);
    sock = make_listener(AF_INET, reinterpret_cast<sockaddr*>(&any4), sizeof(any4), options.backlog, &error);
    if (sock) return sock;
    throw_error(options.domain, listen_error_text("0.0.0.0:" + std::to_string(port), error));
  }
  int gai_error = 0;
  auto addresses = resolve_impl(options.host, port, &gai_error);
  if (gai_error != 0) {
    throw_error(options.domain, "cannot listen on " + format_host_port(options.host, port) +
                                    ": cannot resolve host: " + gai_text(gai_error));
  }
  std::string where = format_host_port(options.host, port);
  for (const auto& address : addresses) {
    Socket sock = make_listener(address.family(), address.data(), address.length(), options.backlog, &error);
    if (sock) return sock;
    where = address.to_string();
  }
  throw_error(options.domain, listen_error_text(where, error));
}

Socket adopt_listening_socket(int fd, uint16_t expected_port, int backlog, ErrorDomain domain) {
  Socket sock(fd);  // owned from here on, also when we throw
  int type = 0;
  socklen_t len = sizeof(type);
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) {
    throw_error(domain, "listen fd " + std::to_string(fd) + " is not a usable socket: " + errno_text(errno));
  }
  if (type != SOCK_STREAM)
    throw_error(domain, "listen fd " + std::to_string(fd) + " is not a TCP (stream) socket");
  // listen() on a socket that already listens only updates the backlog.
  if (::listen(fd, backlog) != 0) {
    throw_error(domain, "cannot listen on fd " + std::to_string(fd) + ": " + errno_text(errno));
  }
  uint16_t port = sock.local_port();
  if (expected_port != 0 && port != expected_port) {
    throw_error(domain, "listen fd " + std::to_string(fd) + " is bound to port " + std::to_string(port) +
                            ", not to the requested port " + std::to_string(expected_port));
  }
  sock.set_nonblocking();
  sock.set_cloexec();
  return sock;
}

Socket accept_connection(const Socket& listener, int* error) {
  for (;;) {
    sockaddr_storage storage{};
    socklen_t len = sizeof(storage);
    int fd =
        ::accept4(listener.fd(), reinterpret_cast<sockaddr*>(&storage), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      *error = errno == EWOULDBLOCK ? EAGAIN : errno;
      return {};
    }
    *error = 0;
    Socket sock(fd, SocketAddress(reinterpret_cast<sockaddr*>(&storage), len).to_string());
    sock.set_nodelay();
    return sock;
  }
}

std::string local_address_toward(const std::string& remote_host, uint16_t remote_port) {
  auto addresses = resolve(remote_host, remote_port);
  std::string last_error = "no address";
  for (const auto& address : addresses) {
    Socket probe(::socket(address.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!probe) {
      last_error = errno_text(errno);
      continue;
    }
    // A UDP connect sends nothing; it only asks the kernel for a route.
    if (::connect(probe.fd(), address.data(), address.length()) != 0) {
      last_error = address.to_string() + ": " + errno_text(errno);
      continue;
    }
    return probe.local_address().host();
  }
  throw DistNetworkError("no local address reaches " + format_host_port(remote_host, remote_port) + ": " +
                         last_error);
}

}  // namespace tdist
