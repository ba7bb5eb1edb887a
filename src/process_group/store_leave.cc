#include "store_leave.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/owned_by_process.h"
#include "rendezvous/left_store.h"
#include "tdist/errors.h"
#include "tdist/logging.h"

namespace tdist::detail {

namespace {

// How long one wait for the keys lasts before the host looks again at who
// is still connected.
constexpr std::chrono::milliseconds kSlice{50};
// How many looks in a row must find no other user connected before the
// host takes the ranks it waits for as gone (about a second): a live
// client holds no connection for a moment after a request of its timed out
// (its pool drops that connection and opens one at its next request).
constexpr int kGoneLooks = 20;
// A rank's key costs one round trip; more means the host is stopped.
constexpr std::chrono::milliseconds kSetAtMost{5000};

// The store rank 0 keeps after destroy_process_group(). Never destroyed
// itself (it is used at exit, after static destructors may have run).
struct KeptStore {
  std::mutex mutex;
  std::shared_ptr<TCPStore> store;  // guarded by mutex
  int size = 0;
  std::chrono::milliseconds limit{0};
  pid_t owner = 0;
};

KeptStore& kept() {
  static auto* kept = new KeptStore;  // NOLINT(cppcoreguidelines-owning-memory): never freed, see above
  return *kept;
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

std::string left_key(int rank) {
  return "tdist_left/" + std::to_string(rank);
}

// A rank other than 0 is done with `store`: this process's key, then its
// rank's, within `limit` and at most 5 s (the host may be stopped or gone).
void say_left(TCPStore& store, int rank, std::chrono::milliseconds limit) noexcept {
  try {
    // The store is about to go: its timeout is ours to shorten.
    store.set_timeout(std::clamp(limit, std::chrono::milliseconds(1), kSetAtMost));
    // This process's key first: once rank 0 has every rank's key it may
    // close the store, and this process's next rendezvous must find it.
    remember_left_store(store.host(), store.port());
    store.set(this_process_left_key(), "1");
    store.set(left_key(rank), "1");
  } catch (const std::exception& e) {
    // News for nobody once the host is gone.
    TDIST_LOG(INFO) << "rank " << rank << ": leaving the job's store: " << e.what();
  }
}

// Rank 0, the store's host, waits until every other rank of `size` has said
// it left, or for about a second no other user has been connected (a killed
// rank's connection closes), or `limit` passes: then it names the ranks it
// did not see leave.
void wait_until_left(TCPStore& store, int size, std::chrono::milliseconds limit) noexcept {
  try {
    std::vector<std::string> keys;
    for (int r = 1; r < size; ++r) keys.push_back(left_key(r));
    if (store.check(keys)) return;
    TDIST_LOG(INFO) << "rank 0 hosts the job's store (TCPStore at " << store.host() << ":" << store.port()
                    << "): waiting up to " << limit.count() << " ms for the other ranks to leave it";
    const auto deadline = std::chrono::steady_clock::now() + limit;
    int gone_looks = 0;
    while (true) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) break;
      try {
        store.wait(keys, std::min(kSlice, std::chrono::ceil<std::chrono::milliseconds>(deadline - now)));
        return;
      } catch (const DistStoreTimeoutError&) {
      }
      // Every other user gone (exited, or its store closed): no one is left
      // to serve. Checked after a wait, whose connection is idle again.
      gone_looks = store.others_connected() <= 0 ? gone_looks + 1 : 0;
      if (gone_looks >= kGoneLooks) return;
    }
    std::vector<int> missing;
    for (int r = 1; r < size; ++r) {
      if (!store.check({left_key(r)})) missing.push_back(r);
    }
    if (missing.empty()) return;  // the last keys came just now
    TDIST_LOG(WARNING) << "rank 0 hosts the job's store (TCPStore at " << store.host() << ":" << store.port()
                       << ") and is leaving, but rank(s) " << ranks_text(missing)
                       << " did not say they left within " << limit.count()
                       << " ms; their store requests will fail from now on";
  } catch (const std::exception& e) {
    TDIST_LOG(WARNING) << "rank 0: closing the job's store: " << e.what();
  }
}

}  // namespace

void leave_made_store(std::shared_ptr<TCPStore> store, int rank, int size, std::chrono::milliseconds limit) {
  if (rank != 0) {
    say_left(*store, rank, limit);
    return;
  }
  // What was kept before is a forked parent's (init_process_group released
  // this process's own): the child's copy of it is dropped, outside the
  // lock (its server is the parent's and stays).
  std::shared_ptr<TCPStore> parents;
  std::lock_guard<std::mutex> lock(kept().mutex);
  parents = std::exchange(kept().store, std::move(store));
  kept().size = size;
  kept().limit = limit;
  kept().owner = this_process_id();
}

void release_kept_store() noexcept {
  std::shared_ptr<TCPStore> store;
  int size = 0;
  std::chrono::milliseconds limit{0};
  {
    std::lock_guard<std::mutex> lock(kept().mutex);
    if (kept().owner != this_process_id()) return;  // a forked child's copy: the parent's store
    store = std::move(kept().store);
    size = kept().size;
    limit = kept().limit;
  }
  if (store) wait_until_left(*store, size, limit);
}

}  // namespace tdist::detail
