#include "node_rendezvous.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "common/error_text.h"
#include "launcher/process_util.h"
#include "tdist/errors.h"

namespace tdist::launcher {
namespace {

constexpr const char* kPrefix = "tdistrun/";
// How often the watcher wakes up to see whether it should leave.
constexpr std::chrono::milliseconds kWatchSlice{1000};

std::string node_key(int node, const char* what) {
  return std::string(kPrefix) + "node/" + std::to_string(node) + "/" + what;
}
std::string round_key(int round, const char* what) {
  return std::string(kPrefix) + "round/" + std::to_string(round) + "/" + what;
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

NodeRendezvous::NodeRendezvous(const LaunchOptions& options) : options_(options) {
  event_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (event_fd_ < 0) throw DistError("tdistrun: eventfd failed: " + errno_text(errno));
  TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(options.master_port);
  store_options.world_size = options.nnodes;
  store_options.is_master = options.node_rank == 0;
  store_options.timeout = options.join_timeout;
  store_options.wait_for_workers = true;
  try {
    store_ = std::make_unique<TCPStore>(options.master_addr, store_options);
  } catch (const DistError& e) {
    close(event_fd_);
    throw DistError(std::string("tdistrun: node ") + std::to_string(options.node_rank) +
                    (options.node_rank == 0 ? " could not host" : " could not join") +
                    " the node agents' store at " + options.master_addr + ":" +
                    std::to_string(options.master_port) + ": " + e.what());
  }
  if (store_->add(node_key(options.node_rank, "claims"), 1) != 1) {
    close(event_fd_);
    throw DistInvalidArgument("tdistrun: another tdistrun already joined as --node-rank " +
                              std::to_string(options.node_rank) + " of this job");
  }
  store_->set(node_key(options.node_rank, "nproc"), std::to_string(options.nproc_per_node));
  for (int node = 0; node < options.nnodes; ++node) {
    int nproc = std::stoi(to_string(store_->get(node_key(node, "nproc"))));
    if (node < options.node_rank) rank_offset_ += nproc;
    world_size_ += nproc;
  }
}

NodeRendezvous::~NodeRendezvous() {
  stop_watch();
  store_.reset();
  if (event_fd_ >= 0) close(event_fd_);
}

std::optional<int> NodeRendezvous::round_port(int round, const std::function<bool()>& interrupted) {
  std::string key = round_key(round, "port");
  if (options_.node_rank == 0) {
    if (end_of(round)) return std::nullopt;
    int port = pick_free_port();
    store_->set(key, std::to_string(port));
    return port;
  }
  auto deadline = std::chrono::steady_clock::now() + options_.join_timeout;
  for (;;) {
    if (store_->check({key})) return std::stoi(to_string(store_->get(key)));
    if (end_of(round) || interrupted()) return std::nullopt;
    if (std::chrono::steady_clock::now() >= deadline) {
      throw DistTimeoutError("tdistrun: node 0 did not start round " + std::to_string(round) + " within " +
                             std::to_string(options_.join_timeout.count() / 1000) + " s");
    }
    try {
      store_->wait({key}, kWatchSlice);
    } catch (const DistTimeoutError&) {
    }
  }
}

std::optional<RoundEnd> NodeRendezvous::end_of(int round) {
  std::string key = round_key(round, "end");
  if (!store_->check({key})) return std::nullopt;
  return decode(to_string(store_->get(key)));
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
  watcher_ = std::thread([this, key = round_key(round, "end")] { watch(key); });
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
  if (store_->add(round_key(round, "ok"), 1) == options_.nnodes) {
    store_->compare_set(round_key(round, "end"), Bytes{}, to_bytes(encode(RoundEnd{})));
  }
}

void NodeRendezvous::report_end(int round, RoundEnd::Kind kind, const std::string& summary) {
  RoundEnd end{kind, options_.node_rank, summary};
  store_->compare_set(round_key(round, "end"), Bytes{}, to_bytes(encode(end)));
}

void NodeRendezvous::exit_barrier(std::chrono::milliseconds timeout) {
  try {
    std::string all = std::string(kPrefix) + "exit/all";
    if (store_->add(std::string(kPrefix) + "exit", 1) == options_.nnodes) store_->set(all, "1");
    if (options_.node_rank == 0) store_->wait({all}, timeout);
  } catch (const std::exception&) {
    // A node that is gone cannot be waited for; leaving is all that is left.
  }
}

}  // namespace tdist::launcher
