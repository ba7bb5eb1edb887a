#pragma once

/// @file socket.h
/// The TCP socket layer shared by the store and the transports: address
/// parsing and resolution (IPv4, IPv6, host names), connecting with retry and
/// backoff, listening (dual-stack), an RAII fd wrapper and blocking send/recv
/// loops with deadlines. Errors are DistNetworkError (or the store variants
/// when the caller asks for ErrorDomain::kStore) and name the peer address.

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error_text.h"  // errno_text()

namespace tdist {

/// Deadlines of blocking socket calls; kNoDeadline waits forever.
using SocketClock = std::chrono::steady_clock;
using Deadline = SocketClock::time_point;
inline constexpr Deadline kNoDeadline = Deadline::max();

/// A deadline `timeout` from now, saturating instead of overflowing.
Deadline deadline_after(std::chrono::milliseconds timeout);

/// Which family of exceptions a socket helper throws: the network ones
/// (DistNetworkError, DistNetworkTimeoutError) or the store ones
/// (DistStoreError, DistStoreTimeoutError).
enum class ErrorDomain { kNetwork, kStore };

/// A host and a port, as parsed from "host:port" or "[v6]:port".
struct HostPort {
  std::string host;
  uint16_t port = 0;
};

/// Parses "host:port", "1.2.3.4:port", "[::1]:port" (brackets required around
/// an IPv6 literal when a port follows). Raises DistInvalidArgument on a
/// missing or out-of-range port or an empty host.
HostPort parse_host_port(std::string_view text);

/// "host:port", with brackets around an IPv6 literal: "[::1]:29500".
std::string format_host_port(std::string_view host, uint16_t port);

/// True if `host` is an IPv6 literal ("::1", "fe80::1%eth0").
bool is_ipv6_literal(std::string_view host);

/// One resolved socket address (IPv4 or IPv6).
class SocketAddress {
 public:
  SocketAddress() = default;
  SocketAddress(const sockaddr* addr, socklen_t length);

  /// The local / remote address of a connected or bound socket.
  static SocketAddress local_of(int fd);
  static SocketAddress peer_of(int fd);

  int family() const { return storage_.ss_family; }
  bool valid() const { return length_ > 0; }
  uint16_t port() const;
  /// The numeric host: "127.0.0.1" or "::1" (no brackets); an IPv4-mapped
  /// IPv6 address prints as its IPv4 form.
  std::string host() const;
  /// "127.0.0.1:29500" or "[::1]:29500".
  std::string to_string() const;

  const sockaddr* data() const { return reinterpret_cast<const sockaddr*>(&storage_); }
  sockaddr* data() { return reinterpret_cast<sockaddr*>(&storage_); }
  socklen_t length() const { return length_; }

 private:
  sockaddr_storage storage_{};
  socklen_t length_ = 0;
};

/// Resolves `host` (literal or name; empty means "any") with getaddrinfo for
/// stream sockets, AF_UNSPEC: IPv6 and IPv4 addresses in the resolver's
/// order. Raises DistNetworkError naming host and the resolver's message.
std::vector<SocketAddress> resolve(const std::string& host, uint16_t port);

/// An owned file descriptor of a socket; closed on destruction. Move-only.
class Socket {
 public:
  Socket() = default;
  /// Takes ownership of `fd`.
  explicit Socket(int fd, std::string peer = {}) : fd_(fd), peer_(std::move(peer)) {}
  ~Socket();
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }
  /// Gives up ownership; returns the fd.
  int release();
  /// Closes the fd now (idempotent).
  void close();

  /// The peer this socket talks to ("127.0.0.1:29500"), for error messages.
  const std::string& peer() const { return peer_; }
  void set_peer(std::string peer) { peer_ = std::move(peer); }

  void set_nodelay(bool on = true) const;
  void set_nonblocking(bool on = true) const;
  void set_cloexec(bool on = true) const;
  void set_keepalive(bool on = true) const;

  SocketAddress local_address() const { return SocketAddress::local_of(fd_); }
  SocketAddress peer_address() const { return SocketAddress::peer_of(fd_); }
  /// The port this socket is bound to.
  uint16_t local_port() const { return local_address().port(); }

  /// Sends all `size` bytes (blocking or non-blocking socket alike), retrying
  /// on EINTR and partial writes. Raises DistNetworkTimeoutError at the
  /// deadline and DistNetworkError if the peer is gone; never SIGPIPE.
  void send_all(const void* data, size_t size, Deadline deadline = kNoDeadline) const;
  /// Receives exactly `size` bytes. Raises DistNetworkError if the peer closes
  /// first (saying how many bytes came) and DistNetworkTimeoutError at the
  /// deadline.
  void recv_all(void* data, size_t size, Deadline deadline = kNoDeadline) const;

  /// Waits until the socket is readable (data, EOF or an error are all
  /// "readable"); false if the deadline passed first.
  bool wait_readable(Deadline deadline) const;
  /// Waits until the socket is writable; false at the deadline.
  bool wait_writable(Deadline deadline) const;

  /// One non-blocking read or write for event loops: errors as values.
  struct IoResult {
    size_t bytes = 0;  ///< bytes moved
    bool eof = false;  ///< the peer closed (reads only)
    int error = 0;     ///< errno, 0 if none; EAGAIN means "try later"
  };
  IoResult try_recv(void* data, size_t size) const;
  IoResult try_send(const void* data, size_t size) const;

 private:
  int fd_ = -1;
  std::string peer_;
};

/// Options of connect_with_retry().
struct ConnectOptions {
  /// First pause between attempts; doubles up to max_backoff, with jitter.
  std::chrono::milliseconds initial_backoff{10};
  std::chrono::milliseconds max_backoff{1000};
  /// Longest time one attempt may wait for the handshake before it is
  /// abandoned and retried (a dropped SYN would otherwise wait seconds).
  std::chrono::milliseconds attempt_timeout{5000};
  /// The exceptions to raise (network or store).
  ErrorDomain domain = ErrorDomain::kStore;
  /// Prefix of error messages, e.g. "TCPStore client"; names the caller.
  std::string what = "connect";
  /// Called after each failed round of attempts, before the pause, with the
  /// number of attempts so far and the last errno (for logs and tests).
  std::function<void(int attempts, int error)> on_retry;
};

/// Connects to host:port, trying every resolved address, and retrying with
/// exponential backoff while the server is not up yet (ECONNREFUSED,
/// ETIMEDOUT, EAGAIN, ENETUNREACH, EHOSTUNREACH, a full listen backlog, a
/// resolver that says "try again"). At the deadline raises the timeout error
/// of options.domain naming host, port, the time waited, the attempts and the
/// last error. Other errors (an unknown host name) are raised at once. The
/// returned socket is blocking, CLOEXEC and TCP_NODELAY.
Socket connect_with_retry(const std::string& host, uint16_t port, Deadline deadline,
                          const ConnectOptions& options = {});

/// Options of listen_on().
struct ListenOptions {
  /// Address to bind; empty means every interface: "::" dual-stack
  /// (IPV6_V6ONLY off), or 0.0.0.0 when IPv6 is unavailable.
  std::string host;
  /// Listen backlog; large so that thousands of ranks can connect at once.
  int backlog = 4096;
  ErrorDomain domain = ErrorDomain::kNetwork;
};

/// A listening socket on `port` (0 picks a free one; read it back with
/// local_port()). SO_REUSEADDR, non-blocking, CLOEXEC. Raises the error of
/// options.domain naming the address and errno ("Address already in use").
Socket listen_on(uint16_t port, const ListenOptions& options = {});

/// Takes ownership of `fd`, a socket already bound (and possibly listening)
/// to `expected_port` (0: any port), calls listen() if needed and makes it
/// non-blocking and CLOEXEC. Raises the error of `domain` if fd is not a
/// bound stream socket or is bound to a different port.
Socket adopt_listening_socket(int fd, uint16_t expected_port, int backlog = 4096,
                              ErrorDomain domain = ErrorDomain::kNetwork);

/// Accepts one connection from a non-blocking listening socket; an invalid
/// Socket if none is pending (EAGAIN). Errors as values through *error
/// (errno), so an event loop can decide what to do with EMFILE.
Socket accept_connection(const Socket& listener, int* error);

/// The address of this host that the kernel would use to reach `remote`
/// (a UDP "connect" sends nothing but picks a route and source address).
/// Useful to tell peers how to reach us. Raises DistNetworkError if there is
/// no route.
std::string local_address_toward(const std::string& remote_host, uint16_t remote_port = 9);

}  // namespace tdist
