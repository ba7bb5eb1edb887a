#include "node_rendezvous.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <utility>

#include "common/error_text.h"
#include "common/socket.h"
#include "launcher/process_util.h"
#include "output.h"
#include "tdist/errors.h"

namespace tdist::launcher {
namespace {

std::string hostname() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

// The store's default timeout set to `timeout` for one scope. Waits that
// happen while or after the ranks run are bounded by the read timeout, not
// the join timeout: a node cut off from the store gives up in a minute
// instead of retrying its connection for five. (The watcher thread passes
// explicit timeouts, so it never sees the change.)
class ReadTimeout {
 public:
  ReadTimeout(Store& store, std::chrono::milliseconds timeout) : store_(store), previous_(store.timeout()) {
    store_.set_timeout(timeout);
  }
  ~ReadTimeout() { store_.set_timeout(previous_); }
  ReadTimeout(const ReadTimeout&) = delete;
  ReadTimeout& operator=(const ReadTimeout&) = delete;

 private:
  Store& store_;
  Store::Duration previous_;
};

// How often a waiting agent wakes up to see whether it should leave.
constexpr std::chrono::milliseconds kWatchSlice{1000};

std::string round_key(int round, const char* what) {
  return "round/" + std::to_string(round) + "/" + what;
}

std::string seconds_text(std::chrono::milliseconds ms) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%g s", static_cast<double>(ms.count()) / 1000.0);
  return buffer;
}

std::string encode(const RoundEnd& end) {
  switch (end.kind) {
    case RoundEnd::Kind::kOk:
      return "ok";
    case RoundEnd::Kind::kFailed:
      return "failed " + std::to_string(end.node) + " " + end.summary;
    case RoundEnd::Kind::kInterrupted:
      return "interrupted " + std::to_string(end.node) + " " + end.summary;
    case RoundEnd::Kind::kLost:
      break;
  }
  return "lost";
}

RoundEnd decode(const std::string& text) {
  RoundEnd end;
  if (text == "ok") return end;
  size_t space = text.find(' ');
  std::string kind = text.substr(0, space);
  end.kind = kind == "failed" ? RoundEnd::Kind::kFailed : RoundEnd::Kind::kInterrupted;
  if (kind != "failed" && kind != "interrupted") {
    end.summary = "an agent ended the round with '" + text + "'";
    return end;
  }
  std::string rest = space == std::string::npos ? "" : text.substr(space + 1);
  size_t second = rest.find(' ');
  try {
    end.node = std::stoi(rest.substr(0, second));
  } catch (const std::exception&) {
    end.node = -1;
  }
  end.summary = second == std::string::npos ? "" : rest.substr(second + 1);
  return end;
}

}  // namespace

NodeRendezvous::NodeRendezvous(const LaunchOptions& options)
    : options_(options), prefix_("tdistrun/" + options.run_id + "/") {
  event_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (event_fd_ < 0) throw DistError("tdistrun: eventfd failed: " + errno_text(errno));
  try {
    if (options.rdzv_backend == RdzvBackend::kC10d) {
      connect_c10d_store();
    } else {
      join_static();
    }
  } catch (...) {
    close(event_fd_);
    event_fd_ = -1;
    throw;
  }
}

void NodeRendezvous::join_static() {
  const LaunchOptions& o = options_;
  TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(o.rdzv_port);
  store_options.world_size = o.nnodes;
  store_options.is_master = o.node_rank == 0;
  store_options.timeout = o.join_timeout;
  // The nodes' arrival is awaited below, key by key, so that a wrong
  // --node-rank on any node is reported on every node within a second,
  // not after the join timeout.
  store_options.wait_for_workers = false;
  const std::string where = format_host_port(o.rdzv_host, static_cast<uint16_t>(o.rdzv_port));
  const std::string me = "'" + hostname() + "' (pid " + std::to_string(getpid()) + ")";
  try {
    store_ = std::make_unique<TCPStore>(o.rdzv_host, store_options);
  } catch (const DistError& e) {
    std::string text = std::string("tdistrun: node ") + std::to_string(o.node_rank) +
                       (o.node_rank == 0 ? " could not host" : " could not join") +
                       " the node agents' store at " + where + ": " + e.what();
    if (o.node_rank == 0 && o.nnodes > 1) {
      // The usual cause: a node other than the master left out
      // --node-rank, and 0 is the default. If a master answers there, tell
      // it too, so that it stops waiting for this node.
      text += "; this node was given --node-rank 0";
      if (!o.node_rank_given) text += " (the default: --node-rank was not given)";
      text +=
          ", which makes it the node that hosts the store at --master-addr; every other node needs its own "
          "--node-rank in [1, " +
          std::to_string(o.nnodes) + ")";
      try {
        TCPStoreOptions client = store_options;
        client.is_master = false;
        client.timeout = std::chrono::seconds(2);
        TCPStore other(o.rdzv_host, client);
        other.compare_set(key("conflict"), Bytes{},
                          to_bytes("another tdistrun, on " + me + ", was also started as --node-rank 0" +
                                   (o.node_rank_given ? "" : " (it was not given --node-rank)") +
                                   "; give every node but this one its own --node-rank in [1, " +
                                   std::to_string(o.nnodes) + ")"));
      } catch (const DistError&) {
        // No master there yet, or unreachable: the local error says it all.
      }
    }
    throw DistError(text);
  }
  hosting_ = o.node_rank == 0;
  const std::string rank_text = std::to_string(o.node_rank);
  const std::string claimant = key("node/" + rank_text + "/host");
  const Bytes first = store_->compare_set(claimant, Bytes{}, to_bytes(me));
  if (to_string(first) != me) {
    // Recorded for every node, this one included: the wait below reports it.
    store_->compare_set(
        key("conflict"), Bytes{},
        to_bytes("two tdistruns were started with --node-rank " + rank_text + " of --nnodes " +
                 std::to_string(o.nnodes) + ": " + to_string(first) + " and " + me +
                 "; give every node its own --node-rank in [0, " + std::to_string(o.nnodes) + ")"));
  } else {
    store_->set(key("node/" + rank_text + "/nproc"), std::to_string(o.nproc_per_node));
  }
  node_rank_ = o.node_rank;
  nnodes_ = o.nnodes;
  const auto deadline = std::chrono::steady_clock::now() + o.join_timeout;
  for (int node = 0; node < o.nnodes; ++node) {
    const std::string nproc_key = key("node/" + std::to_string(node) + "/nproc");
    for (;;) {
      if (store_->check({key("conflict")})) {
        // The host keeps the store up for two of the others' wait slices,
        // so that each reads the reason instead of a lost connection.
        if (hosting_) std::this_thread::sleep_for(2 * kWatchSlice);
        throw DistInvalidArgument("tdistrun: " + to_string(store_->get(key("conflict"))));
      }
      if (store_->check({nproc_key})) break;
      auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        std::string missing;
        for (int n = node; n < o.nnodes; ++n) {
          if (!store_->check({key("node/" + std::to_string(n) + "/nproc")})) {
            missing += (missing.empty() ? "" : ", ") + std::to_string(n);
          }
        }
        throw DistTimeoutError(
            "tdistrun: node(s) " + missing + " of --nnodes " + std::to_string(o.nnodes) +
            " did not join the store at " + where + " within " + seconds_text(o.join_timeout) +
            " (--join-timeout); start tdistrun on every node, each with its own --node-rank");
      }
      try {
        store_->wait({nproc_key}, std::min(left, kWatchSlice));
      } catch (const DistTimeoutError&) {
      }
    }
    int nproc = std::stoi(to_string(store_->get(nproc_key)));
    if (node < o.node_rank) rank_offset_ += nproc;
    world_size_ += nproc;
  }
}

void NodeRendezvous::connect_c10d_store() {
  const LaunchOptions& o = options_;
  const std::string where = format_host_port(o.rdzv_host, static_cast<uint16_t>(o.rdzv_port));
  TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(o.rdzv_port);
  store_options.timeout = o.join_timeout;
  store_options.wait_for_workers = false;
  // As torchrun: the agent that can listen at the endpoint hosts the store,
  // the others join it. Binding the endpoint's own address (not the
  // wildcard) fails on hosts that do not own it, and fails with "in use" for
  // the agents that come after the host on its machine.
  if (o.is_host.value_or(true)) {
    try {
      ListenOptions listen;
      listen.host = o.rdzv_host;
      listen.domain = ErrorDomain::kStore;
      store_options.master_listen_fd = listen_on(store_options.port, listen).release();
    } catch (const DistError& e) {
      if (o.is_host.value_or(false)) {
        throw DistError("tdistrun: could not host the node agents' store at " + where +
                        " (--rdzv-conf is_host=true): " + e.what());
      }
    }
  }
  store_options.is_master = store_options.master_listen_fd >= 0;
  try {
    store_ = std::make_unique<TCPStore>(o.rdzv_host, store_options);
  } catch (const DistError& e) {
    throw DistError(std::string("tdistrun: could not ") + (store_options.is_master ? "host" : "join") +
                    " the node agents' store at " + where + ": " + e.what());
  }
  hosting_ = store_options.is_master;
}

int NodeRendezvous::first_round() {
  if (options_.rdzv_backend != RdzvBackend::kC10d || !store_->check({key("latest")})) return 0;
  return std::stoi(to_string(store_->get(key("latest"))));
}

JoinResult NodeRendezvous::join(int round, const std::function<bool()>& interrupted) {
  if (options_.rdzv_backend != RdzvBackend::kC10d) return JoinResult::kJoined;  // the members never change
  return join_c10d(round, interrupted);
}

void NodeRendezvous::raise_latest(int round) {
  // A node that read round k in first_round() may get here after the others
  // moved on to k + 1; a plain set would send later nodes back to round k,
  // which nobody else joins any more.
  const std::string latest = key("latest");
  const Bytes desired = to_bytes(std::to_string(round));
  Bytes seen = store_->check({latest}) ? store_->get(latest) : Bytes{};
  for (;;) {
    if (!seen.empty() && std::stoi(to_string(seen)) >= round) return;
    Bytes now = store_->compare_set(latest, seen, desired);
    if (now == desired) return;
    seen = std::move(now);  // another node wrote it meanwhile: compare with its value
  }
}

std::string NodeRendezvous::nnodes_text() const {
  if (options_.min_nodes == options_.max_nodes) return std::to_string(options_.max_nodes);
  return std::to_string(options_.min_nodes) + ":" + std::to_string(options_.max_nodes);
}

bool NodeRendezvous::wait_for(const std::string& name, std::chrono::steady_clock::time_point deadline,
                              const std::function<bool()>& interrupted) {
  for (;;) {
    if (store_->check({name})) return true;
    if (interrupted()) return false;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    try {
      store_->wait({name}, std::min(left, kWatchSlice));
      return true;
    } catch (const DistTimeoutError&) {
    }
  }
}

JoinResult NodeRendezvous::join_c10d(int round, const std::function<bool()>& interrupted) {
  const LaunchOptions& o = options_;
  const std::string base = "rdzv/" + std::to_string(round) + "/";
  const std::string closed_key = key(base + "closed");
  const std::string nnodes = nnodes_text();
  raise_latest(round);
  const auto index = static_cast<int>(store_->add(key(base + "joined"), 1) - 1);
  auto closed_with = [&] { return std::stoi(to_string(store_->get(closed_key))); };
  auto too_late = [&](int nodes) {
    node_rank_ = -1;  // in no round until it joins one
    standby_ticket_ = static_cast<int>(store_->add(key("standby"), 1));
    refusal_ = "run '" + o.run_id + "' started with " + std::to_string(nodes) + " node(s) (--nnodes " +
               nnodes + ") before this node joined; a node cannot join a job that has started";
    return JoinResult::kTooLate;
  };
  if (store_->check({closed_key}) && index >= closed_with()) return too_late(closed_with());
  if (index >= o.max_nodes) return too_late(o.max_nodes);
  store_->set(key(base + "node/" + std::to_string(index)), std::to_string(o.nproc_per_node));
  if (index + 1 == o.max_nodes) {
    store_->compare_set(closed_key, Bytes{}, to_bytes(std::to_string(o.max_nodes)));
  }

  const auto start = std::chrono::steady_clock::now();
  if (!wait_for(key(base + "node/" + std::to_string(o.min_nodes - 1)), start + o.join_timeout, interrupted)) {
    if (interrupted()) return JoinResult::kInterrupted;
    const std::string needs = o.min_nodes == o.max_nodes ? "needs " : "needs at least ";
    throw DistTimeoutError("tdistrun: only " + std::to_string(store_->add(key(base + "joined"), 0)) +
                           " node(s) joined run '" + o.run_id + "' within " + seconds_text(o.join_timeout) +
                           " (--join-timeout, or join_timeout in --rdzv-conf); --nnodes " + nnodes + " " +
                           needs + std::to_string(o.min_nodes));
  }
  // MIN are here: more may come until the last call ends (the first agent
  // whose wait ends closes the round with whoever has joined by then), or
  // until MAX have come (the MAX-th closed it already). A wait that may last
  // long is said once, so that a quiet launcher is not taken for a hung one;
  // with MIN == MAX the round is closed at once (the MAX-th node closes it
  // right after joining), and a healthy fixed-size job stays silent.
  if (o.min_nodes < o.max_nodes && o.last_call_timeout.count() > 0 && !store_->check({closed_key})) {
    console_write(2, "tdistrun: " + std::to_string(store_->add(key(base + "joined"), 0)) +
                         " node(s) joined run '" + o.run_id + "' (--nnodes " + nnodes + "); starting in " +
                         seconds_text(o.last_call_timeout) + " unless more join (last_call_timeout)\n");
  }
  if (!wait_for(closed_key, std::chrono::steady_clock::now() + o.last_call_timeout, interrupted)) {
    if (interrupted()) return JoinResult::kInterrupted;
    const auto joined = static_cast<int>(store_->add(key(base + "joined"), 0));
    store_->compare_set(closed_key, Bytes{}, to_bytes(std::to_string(std::min(joined, o.max_nodes))));
  }
  const int nodes = closed_with();
  if (index >= nodes) return too_late(nodes);
  node_rank_ = index;
  nnodes_ = nodes;
  rank_offset_ = 0;
  world_size_ = 0;
  for (int node = 0; node < nodes; ++node) {
    const int nproc = std::stoi(to_string(store_->get(key(base + "node/" + std::to_string(node)))));
    if (node < index) rank_offset_ += nproc;
    world_size_ += nproc;
  }
  return JoinResult::kJoined;
}

NodeRendezvous::~NodeRendezvous() {
  stop_watch();
  store_.reset();
  if (event_fd_ >= 0) close(event_fd_);
}

std::optional<RoundMaster> NodeRendezvous::round_master(int round, const std::function<bool()>& interrupted) {
  const std::string port_key = key(round_key(round, "port"));
  const std::string addr_key = key(round_key(round, "addr"));
  if (node_rank_ == 0) {
    if (end_of(round)) return std::nullopt;
    RoundMaster master;
    // c10d: node 0 is whichever node joined first; the others reach it at
    // the address it uses toward the agents' store (torchrun names its host).
    master.addr = options_.rdzv_backend == RdzvBackend::kC10d ? local_address_toward(options_.rdzv_host)
                                                              : options_.master_addr;
    master.port = pick_free_port();
    store_->set(addr_key, master.addr);  // before the port, which the others wait for
    store_->set(port_key, std::to_string(master.port));
    return master;
  }
  auto deadline = std::chrono::steady_clock::now() + options_.join_timeout;
  for (;;) {
    if (store_->check({port_key})) {
      return RoundMaster{to_string(store_->get(addr_key)), std::stoi(to_string(store_->get(port_key)))};
    }
    if (end_of(round) || interrupted()) return std::nullopt;
    if (std::chrono::steady_clock::now() >= deadline) {
      throw DistTimeoutError("tdistrun: node 0 did not start round " + std::to_string(round) + " within " +
                             seconds_text(options_.join_timeout));
    }
    try {
      store_->wait({port_key}, kWatchSlice);
    } catch (const DistTimeoutError&) {
    }
  }
}

std::optional<RoundEnd> NodeRendezvous::end_of(int round) {
  const std::string end_key = key(round_key(round, "end"));
  if (!store_->check({end_key})) return std::nullopt;
  return decode(to_string(store_->get(end_key)));
}

void NodeRendezvous::start_watch(int round) {
  stop_watch();
  uint64_t drained = 0;
  (void)!read(event_fd_, &drained, sizeof(drained));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    end_.reset();
  }
  stop_watch_ = false;
  watcher_ = std::thread([this, end_key = key(round_key(round, "end"))] { watch(end_key); });
}

void NodeRendezvous::watch(const std::string& key) {
  RoundEnd end;
  for (;;) {
    if (stop_watch_) return;
    try {
      store_->wait({key}, kWatchSlice);
      end = decode(to_string(store_->get(key)));
      break;
    } catch (const DistTimeoutError&) {
      continue;
    } catch (const std::exception& e) {
      end.kind = RoundEnd::Kind::kLost;
      end.summary = e.what();
      break;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    end_ = end;
  }
  uint64_t one = 1;
  (void)!write(event_fd_, &one, sizeof(one));
}

RoundEnd NodeRendezvous::watched_end() {
  if (watcher_.joinable()) watcher_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  if (!end_) return RoundEnd{RoundEnd::Kind::kLost, -1, "the watcher stopped without an answer"};
  return *end_;
}

void NodeRendezvous::stop_watch() {
  stop_watch_ = true;
  if (watcher_.joinable()) watcher_.join();
}

void NodeRendezvous::report_success(int round) {
  const ReadTimeout bounded(*store_, options_.read_timeout);
  if (store_->add(key(round_key(round, "ok")), 1) == nnodes_) {
    store_->compare_set(key(round_key(round, "end")), Bytes{}, to_bytes(encode(RoundEnd{})));
  }
}

void NodeRendezvous::report_end(int round, RoundEnd::Kind kind, const std::string& summary) {
  RoundEnd end{kind, node_rank_, summary};
  const ReadTimeout bounded(*store_, options_.read_timeout);
  store_->compare_set(key(round_key(round, "end")), Bytes{}, to_bytes(encode(end)));
}

void NodeRendezvous::exit_barrier(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  try {
    const ReadTimeout bounded(*store_, std::min(timeout, options_.read_timeout));
    const std::string all = key("exit/all");
    if (store_->add(key("exit"), 1) == nnodes_) store_->set(all, "1");
    if (hosting_) store_->wait({all}, timeout);
  } catch (const std::exception&) {
    // A node that is gone cannot be waited for; leaving is all that is left.
  }
  wait_for_standby(deadline);
}

void NodeRendezvous::leave_standby() {
  if (standby_ticket_ == 0) return;
  const int ticket = std::exchange(standby_ticket_, 0);
  try {
    store_->set(key("standby/" + std::to_string(ticket) + "/gone"), "1");
  } catch (const std::exception&) {
    // The store is gone: nobody waits for this node any more.
  }
}

void NodeRendezvous::wait_for_standby(std::chrono::steady_clock::time_point deadline) {
  if (!hosting_ || options_.rdzv_backend != RdzvBackend::kC10d) return;
  try {
    const auto refused = static_cast<int>(store_->add(key("standby"), 0));
    std::vector<std::string> gone;
    for (int ticket = 1; ticket <= refused; ++ticket) {
      gone.push_back(key("standby/" + std::to_string(ticket) + "/gone"));
    }
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (!gone.empty() && left.count() > 0) store_->wait(gone, left);
  } catch (const std::exception&) {
    // As in exit_barrier: a node that does not answer is not waited for.
  }
}

void NodeRendezvous::wait_for_exit(std::chrono::milliseconds timeout) {
  if (!hosting_) return;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  try {
    store_->wait({key("exit/all")}, timeout);
  } catch (const std::exception&) {
    // As in exit_barrier: the others are gone or late; leaving is all that is left.
  }
  wait_for_standby(deadline);
}

}  // namespace tdist::launcher
