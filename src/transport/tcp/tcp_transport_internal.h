#pragma once

// What the files of TcpTransport share: the constants of its protocol and
// loop, and small helpers. The transport is split by seam:
//   tcp_transport.cc    construction, shutdown, peer state
//   tcp_matching.cc     posting sends and receives, matching messages to them
//   tcp_framing.cc      writing queued messages, reading headers and payloads
//   tcp_failure.cc      a lost connection, abort, and failing what is pending
//   tcp_event_loop.cc   the loop thread and a caller driving the sockets itself
// (tcp_connect.cc sets the connections up, tcp_handshake.cc admits them,
// tcp_wire.cc defines what goes over them.)

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <exception>
#include <string>
#include <vector>

#include "common/env.h"
#include "tdist/errors.h"
#include "transport/message_checks.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/tcp_wire.h"

namespace tdist::transport::tcp::internal {

using tcp::Header;
using tcp::Incoming;
using tcp::Pair;
using tcp::RecvOp;
using tcp::SendOp;

// Microseconds a driver polls before sleeping (spin_time()).
inline constexpr int64_t kDefaultSpinUs = 50;

// How long a thread waiting on TCP polls before it sleeps in poll():
// TDIST_TCP_SPIN_US, read once.
inline std::chrono::microseconds spin_time() {
  static const auto spin =
      std::chrono::microseconds(env_int("TDIST_TCP_SPIN_US", 0, 1'000'000).value_or(kDefaultSpinUs));
  return spin;
}

// A zero-byte message with this tag says "I am shutting down on purpose".
constexpr uint64_t kGoodbyeTag = ~uint64_t{0};
// "I am giving up on the group, and here is why": the payload is one kind
// byte and the reason's text (tcp_wire.h), so peers can report the
// real cause instead of a bare disconnect.
constexpr uint64_t kAbortTag = ~uint64_t{0} - 1;
// "Your message (a send) met a receive of another dtype or count": the
// payload is the receiver's error text, which the sender raises at its next
// send or recv.
constexpr uint64_t kRejectTag = ~uint64_t{0} - 2;
// kMaxAbortReason (tcp_wire.h) bounds refusals too.
// "I have waited long in the call of this header's signature (its seq)":
// no payload (announce_waiting).
constexpr uint64_t kWaitingTag = ~uint64_t{0} - 3;
// The transport's own frames (the four above), which no receive matches.
constexpr bool is_notice_tag(uint64_t tag) {
  return tag >= kWaitingTag;
}

// Bytes read from one peer before the lock is released and other peers (and
// threads posting operations) get their turn; epoll is level-triggered, so
// the rest is picked up on the next round.
constexpr size_t kReadBudget = size_t{1} << 20;
// How long a transport broken by a crashed peer keeps its connections open on
// destruction, so every survivor learns of the crash from the dead rank
// itself (see ~TcpTransport).
constexpr auto kCrashLinger = std::chrono::seconds(1);
// A thread that waits while another drives checks back this often, in case
// the driver stops before completing its request.
constexpr auto kDriverRecheck = std::chrono::milliseconds(1);

// The transports on which this thread is inside a collective call.
extern thread_local std::vector<const Transport*> t_calls;  // defined in tcp_event_loop.cc

inline bool in_call(const Transport* transport) {
  return std::find(t_calls.begin(), t_calls.end(), transport) != t_calls.end();
}

// Eventfds wake a thread in epoll_wait or poll.
inline void signal_fd(int fd) {
  uint64_t one = 1;
  (void)!write(fd, &one, sizeof(one));
}
inline void drain_fd(int fd) {
  uint64_t value = 0;
  (void)!read(fd, &value, sizeof(value));
}

inline timespec to_timespec(Clock::duration d) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::min<Clock::duration>(d, std::chrono::hours(1)))
                      .count();
  return timespec{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
}

// epoll/poll ids: the pair's first connection is its peer number, lane j
// (connection j + 1) adds j + 1 in the high half; the wake fd has its own.
constexpr uint64_t kWakeId = ~uint64_t{0};
inline uint64_t lane_id(int peer, size_t lane) {
  return (static_cast<uint64_t>(lane + 1) << 32) | static_cast<uint32_t>(peer);
}

}  // namespace tdist::transport::tcp::internal
