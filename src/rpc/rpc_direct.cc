#include "rpc/rpc_direct.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <sstream>
#include <vector>

#include "common/env.h"
#include "common/error_text.h"
#include "common/peer_memory.h"
#include "tdist/errors.h"
#include "transport/shm/shm_group.h"
#include "transport/shm/shm_single_copy.h"

namespace tdist::rpc::detail {
namespace {

// Offers one process may have outstanding at once; more go over TCP.
constexpr size_t kHoldWords = size_t{1} << 14;

struct HoldTable {
  std::mutex mutex;
  std::vector<uint64_t*> free;
  std::atomic<uint64_t> next_token{1};
  HoldTable() {
    // Never freed: a reader in another process may look at a word after
    // this process's agents are gone, and must find 0 there, not garbage.
    auto* words = new uint64_t[kHoldWords]();  // NOLINT(cppcoreguidelines-owning-memory)
    free.reserve(kHoldWords);
    for (size_t i = 0; i < kHoldWords; ++i) free.push_back(&words[i]);
  }
};

HoldTable& table() {
  static auto* t = new HoldTable();  // NOLINT(cppcoreguidelines-owning-memory): see HoldTable
  return *t;
}

// The word other workers read to learn whether they may read this process.
uint64_t& probe_word() {
  static uint64_t word = (static_cast<uint64_t>(getpid()) << 32) ^
                         static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                         0x9e3779b97f4a7c15ULL;
  return word;
}

struct Card {
  std::string host;
  pid_t pid = 0;
  uint64_t address = 0;
  uint64_t value = 0;
};

std::optional<Card> parse_card(const std::string& text) {
  std::istringstream in(text);
  Card card;
  std::string pid, address, value;
  if (!std::getline(in, card.host) || !std::getline(in, pid) || !std::getline(in, address) ||
      !std::getline(in, value))
    return std::nullopt;
  try {
    card.pid = static_cast<pid_t>(std::stol(pid));
    card.address = std::stoull(address);
    card.value = std::stoull(value);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return card;
}

}  // namespace

std::optional<Hold> acquire_hold() {
  HoldTable& t = table();
  uint64_t* word = nullptr;
  {
    std::lock_guard<std::mutex> lock(t.mutex);
    if (t.free.empty()) return std::nullopt;
    word = t.free.back();
    t.free.pop_back();
  }
  Hold hold{word, t.next_token.fetch_add(1)};
  std::atomic_ref<uint64_t>(*word).store(hold.token, std::memory_order_release);
  return hold;
}

void release_hold(const Hold& hold) {
  // Cleared before the tensor goes: a reader that finds the token after its
  // copy copied a tensor that was still kept.
  std::atomic_ref<uint64_t>(*hold.word).store(0, std::memory_order_seq_cst);
  HoldTable& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.free.push_back(hold.word);
}

size_t holds_in_use() {
  HoldTable& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  return kHoldWords - t.free.size();
}

size_t direct_min_bytes(size_t configured) {
  if (!transport::shm::single_copy_allowed()) return 0;
  return static_cast<size_t>(
      env_int("TDIST_RPC_DIRECT_MIN_BYTES", 0, int64_t{1} << 50).value_or(static_cast<int64_t>(configured)));
}

std::string direct_probe_card() {
  return transport::shm::host_identity() + "\n" + std::to_string(getpid()) + "\n" +
         std::to_string(reinterpret_cast<uintptr_t>(&probe_word())) + "\n" + std::to_string(probe_word());
}

bool can_read_directly(const std::string& text) {
  auto card = parse_card(text);
  if (!card || card->host != transport::shm::host_identity()) return false;
  return transport::shm::can_access_peer_memory(card->pid, reinterpret_cast<void*>(card->address),
                                                card->value);
}

pid_t card_pid(const std::string& text) {
  auto card = parse_card(text);
  return card ? card->pid : 0;
}

void read_offer(pid_t pid, const std::string& peer, void* local, size_t n, uint64_t address,
                uint64_t hold_word, uint64_t token, size_t max_piece) {
  // Every piece before the hold word is read (common/peer_memory.h: one
  // rule for short reads).
  if (auto failure =
          tdist::detail::read_peer(pid, local, reinterpret_cast<const void*>(address), n, max_piece)) {
    if (failure->error == ESRCH) {
      throw DistNetworkError("rpc: worker '" + peer + "' (process " + std::to_string(pid) +
                             ") is gone; its tensor of " + std::to_string(n) + " bytes could not be read");
    }
    throw DistBackendError("rpc: reading a tensor of " + std::to_string(n) + " bytes from worker '" + peer +
                           "' (process " + std::to_string(pid) + ") failed at byte " +
                           std::to_string(failure->done) + ": " + errno_text(failure->error));
  }
  uint64_t held = 0;
  if (tdist::detail::read_peer(pid, &held, reinterpret_cast<const void*>(hold_word), sizeof(held)) ||
      held != token) {
    throw DistBackendError("rpc: worker '" + peer + "' let go of a tensor of " + std::to_string(n) +
                           " bytes while this worker read it (it shut down or gave up on the call); "
                           "what was read is not used");
  }
}

}  // namespace tdist::rpc::detail
