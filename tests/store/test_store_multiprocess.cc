// Ranks as threads and as forked processes racing on one FileStore or
// TCPStore: add, compare_set and wait must give exact results, and a rank
// waiting for one that never comes must get an error, not hang.

#include <gtest/gtest.h>
#include <unistd.h>

#include <optional>

#include "multirank.h"
#include "tdist/errors.h"
#include "tdist/file_store.h"
#include "tdist/tcp_store.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;

enum class Kind { kFile, kTcp };

struct Case {
  Kind kind;
  Mode mode;
  int world_size;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.kind == Kind::kFile ? "FileStore" : "TCPStore") + "_" +
         mode_name(info.param.mode) + "_" + std::to_string(info.param.world_size);
}

// Everything a rank needs to open its handle on the shared store.
struct Rendezvous {
  Kind kind;
  std::string path;
  ReservedPort port;

  std::unique_ptr<Store> open(int rank, int world_size, Store::Duration timeout = 30s) const {
    if (kind == Kind::kFile) {
      auto store = std::make_unique<FileStore>(path, world_size);
      store->set_timeout(timeout);
      return store;
    }
    TCPStoreOptions options;
    options.port = static_cast<uint16_t>(port.port);
    options.world_size = world_size;
    options.is_master = rank == 0;
    options.master_listen_fd = rank == 0 ? port.fd : -1;
    options.timeout = timeout;
    return std::make_unique<TCPStore>("127.0.0.1", options);
  }
};

class StoreRace : public ::testing::TestWithParam<Case> {
 protected:
  Rendezvous make_rendezvous() {
    Rendezvous r{GetParam().kind, temp_path("race"), {}};
    if (r.kind == Kind::kTcp) r.port = reserve_port();
    return r;
  }
};

TEST_P(StoreRace, AddCompareSetAndWaitGiveExactResults) {
  const int n = GetParam().world_size;
  Rendezvous r = make_rendezvous();
  std::string failures = run_ranks(GetParam().mode, n, [&](int rank) {
    auto store = r.open(rank, n);
    constexpr int kAdds = 25;
    for (int i = 0; i < kAdds; ++i) store->add("counter", rank + 1);
    // Election: every rank proposes itself; all must see the same winner.
    std::string leader = to_string(store->compare_set("leader", Bytes{}, to_bytes(std::to_string(rank))));
    // Barrier: the last to arrive opens the gate.
    if (store->add("arrived", 1) == n) store->set("gate", "open");
    store->wait({"gate"});
    int64_t total = store->add("counter", 0);
    int64_t expected = static_cast<int64_t>(kAdds) * n * (n + 1) / 2;
    if (total != expected) {
      throw std::runtime_error("counter is " + std::to_string(total) + ", expected " +
                               std::to_string(expected));
    }
    if (to_string(store->get("leader")) != leader) throw std::runtime_error("leader changed after election");
    // All-gather through the store.
    store->set("value/" + std::to_string(rank), std::to_string(rank * 1000 + 7));
    for (int peer = 0; peer < n; ++peer) {
      std::string got = to_string(store->get("value/" + std::to_string(peer)));
      if (got != std::to_string(peer * 1000 + 7)) {
        throw std::runtime_error("value of rank " + std::to_string(peer) + " is '" + got + "'");
      }
    }
    exit_barrier(*store, rank, n);
  });
  if (r.port.fd >= 0) close(r.port.fd);
  EXPECT_EQ(failures, "");
  if (r.kind == Kind::kFile) {
    EXPECT_NE(access(r.path.c_str(), F_OK), 0) << "FileStore left " << r.path;
  }
}

TEST_P(StoreRace, ARankWaitingForAMissingPeerTimesOut) {
  const int n = GetParam().world_size;
  if (n < 2) {
    GTEST_SKIP() << "needs a peer that never comes";
  }
  Rendezvous r = make_rendezvous();
  // Rank n-1 never sets its key; every other rank must get a timeout error
  // naming that key.
  std::string failures = run_ranks(GetParam().mode, n, [&](int rank) {
    auto store = r.open(rank, n, 2s);
    if (rank != n - 1) store->set("key/" + std::to_string(rank), "x");
    std::vector<std::string> keys;
    for (int peer = 0; peer < n; ++peer) keys.push_back("key/" + std::to_string(peer));
    std::optional<std::string> error;
    if (rank != n - 1) {
      try {
        store->wait(keys, 300ms);
      } catch (const DistStoreTimeoutError& e) {
        error = e.what();
      }
      if (!error) throw std::runtime_error("wait returned although a key was never set");
      if (error->find("key/" + std::to_string(n - 1)) == std::string::npos) {
        throw std::runtime_error("timeout message does not name the missing key: " + *error);
      }
    }
    exit_barrier(*store, rank, n);
  });
  if (r.port.fd >= 0) close(r.port.fd);
  EXPECT_EQ(failures, "");
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (Kind kind : {Kind::kFile, Kind::kTcp}) {
    for (Mode mode : {Mode::kThreads, Mode::kProcesses}) {
      for (int n : {1, 2, 3, 5, 8}) out.push_back({kind, mode, n});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreRace, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace tdist::testing
