// The server's limits (docs/stores.md, "Limits"): the memory budget that
// keys, values, waiters and buffered frames share, and the timeouts of
// partial frames, silent new connections and clients that stop reading.

#include <sys/socket.h>

#include <algorithm>

#include "common/env.h"
#include "store/tcp/server_impl.h"
#include "tdist/logging.h"

namespace tdist {
namespace {

constexpr int64_t kMinMemoryBudget = int64_t{1} << 20;
constexpr int64_t kMaxMemoryBudget = int64_t{1} << 50;

}  // namespace

size_t memory_budget_from_env() {
  return static_cast<size_t>(env_int("TDIST_STORE_MEMORY_BYTES", kMinMemoryBudget, kMaxMemoryBudget)
                                 .value_or(static_cast<int64_t>(kDefaultStoreMemoryBudget)));
}

// Keeps the budget's charge for the input buffer equal to its size, or to
// the size it will have once the frame it holds is whole (reserved when the
// frame's head came).
void TCPServer::Impl::charge_input(Connection& conn) {
  size_t charge = std::max(conn.in.size(), conn.in_expected);
  budget.recharge(conn.in_charged, charge);
  conn.in_charged = charge;
}

// The frame starting at `pos` is incomplete: if what is still to come does
// not fit in the memory budget, refuse it now (its remaining bytes will be
// dropped as they come and an error sent), instead of buffering it. True if
// refused. A frame that fits is reserved whole (in_expected), so that frames
// arriving side by side cannot each fit alone and pass the budget together
// (seven 200 MiB SETs held 1.13 GB of a 1 GiB budget).
bool TCPServer::Impl::refuse_for_budget(Connection& conn, size_t pos) {
  size_t have = conn.in.size() - pos;
  if (have < tcpstore::kHeaderBytes) return false;     // the id is needed for the error
  if (pos == 0 && conn.in_expected > 0) return false;  // reserved already
  uint64_t total = uint64_t{4} + tcpstore::load_u32(conn.in.data() + pos);
  if (total > frame_limit(conn) + 4 || total <= have) return false;  // process_input's cases
  size_t to_come = static_cast<size_t>(total - have);
  if (budget.fits(to_come)) {
    if (pos == 0) {
      conn.in_expected = static_cast<size_t>(total);
      // Grown once, to its size: doubling a 128 MiB buffer copied it whole.
      conn.in.reserve(conn.in_expected);
      charge_input(conn);
    }
    return false;
  }
  tcpstore::PayloadReader header(conn.in.data() + pos + 5, 8);
  conn.discard_id = header.u64();
  conn.discard = to_come;
  std::string command = tcpstore::command_name(conn.in[pos + 4]);
  conn.discard_why = "TCPStore server: " + command + " refused: the store's memory budget of " +
                     std::to_string(budget.limit()) + " bytes (TDIST_STORE_MEMORY_BYTES) has " +
                     std::to_string(budget.limit() - std::min(budget.limit(), budget.used())) +
                     " bytes left, this " + std::to_string(total) +
                     "-byte request needs more; nothing was stored";
  TDIST_LOG(WARNING) << where() << ": client " << conn.sock.peer() << ": " << conn.discard_why;
  stat_budget_refusals.fetch_add(1);
  conn.in.resize(pos);
  charge_input(conn);
  return true;
}

// How often the timers are checked: often enough that a timeout fires within
// a quarter of itself, rarely enough to cost nothing.
std::chrono::milliseconds TCPServer::Impl::tick() const {
  std::chrono::milliseconds shortest{1000};
  for (auto t :
       {options.frame_timeout, options.first_request_timeout, options.send_timeout, options.idle_timeout}) {
    if (t.count() > 0) shortest = std::min(shortest, t / 4);
  }
  return std::max(shortest, std::chrono::milliseconds(5));
}

// The timeouts of docs/stores.md ("Limits"). None touches a connection that
// was served and is idle, unless idle_timeout was set (or descriptors are
// short, server_peers.cc). At most kMaxClosesPerTurn connections are dropped
// per turn, the first few of them logged one by one: 19,000 silent
// connections timing out together took one turn of hundreds of ms.
void TCPServer::Impl::check_timers() {
  constexpr uint64_t kLoggedPerCheck = 8;
  auto now = ServerClock::now();
  auto over = [&](ServerClock::time_point since, std::chrono::milliseconds limit) {
    return limit.count() > 0 && now - since > limit;
  };
  uint64_t dropped = 0;
  std::string last_why;
  timers_behind = false;
  for (auto& [id, owned] : connections) {
    Connection& conn = *owned;
    if (conn.dead) continue;
    if (dropped == kMaxClosesPerTurn) {
      timers_behind = true;  // the rest next turn
      break;
    }
    std::string why;
    if (!conn.served && over(conn.accepted, options.first_request_timeout)) {
      why = std::string("did not complete ") +
            (conn.auth == Connection::Auth::kOpen ? "a first request" : "the authentication handshake") +
            " within " + std::to_string(options.first_request_timeout.count()) + " ms of connecting";
    } else if ((!conn.in.empty() || conn.discard > 0 || conn.value_expected > 0) &&
               over(conn.frame_started, options.frame_timeout)) {
      why = "left a partial frame (" + std::to_string(conn.in.size() + conn.value_in.size()) +
            " bytes buffered) unfinished for " + std::to_string(options.frame_timeout.count()) + " ms";
    } else if (conn.out_bytes > 0 && over(conn.last_sent, options.send_timeout)) {
      stat_timeouts.fetch_add(1);
      ++dropped;
      drop_non_reader(conn, "took none of its " + std::to_string(conn.out_bytes) + " bytes of replies for " +
                                std::to_string(options.send_timeout.count()) + " ms");
      continue;
    } else if (conn.in.empty() && conn.value_expected == 0 && conn.out_bytes == 0 && conn.waiters.empty() &&
               over(conn.last_active, options.idle_timeout)) {
      why = "was idle for " + std::to_string(options.idle_timeout.count()) + " ms (idle_timeout)";
    }
    if (why.empty()) continue;
    stat_timeouts.fetch_add(1);
    if (++dropped <= kLoggedPerCheck) {
      reject(conn, why, nullptr);
    } else {
      stat_rejected.fetch_add(1);
      mark_dead(conn);
      last_why = why;
    }
  }
  if (dropped > kLoggedPerCheck) {
    TDIST_LOG(WARNING) << where() << ": disconnected " << (dropped - kLoggedPerCheck)
                       << " more clients for their timeouts (the last: it " << last_why << ")";
  }
  close_idle_under_pressure();
}

void TCPServer::Impl::drop_non_reader(Connection& conn, const std::string& why) {
  linger reset{1, 0};
  ::setsockopt(conn.sock.fd(), SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  reject(conn, why, nullptr);
}

}  // namespace tdist
