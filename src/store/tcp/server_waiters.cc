// GET, WAIT and WAIT_COUNT that cannot be answered yet: parked, indexed by
// each of their keys, and answered when a write makes their condition true.
// A WAIT counts its absent keys; a key's creation or deletion moves the count
// of the WAITs that hold it, so a WAIT of n keys costs O(n) in all, however
// its keys arrive.

#include <algorithm>
#include <charconv>

#include "store/tcp/server_impl.h"

namespace tdist {
namespace {

using tcpstore::Command;
using tcpstore::FrameWriter;
using tcpstore::Request;
using tcpstore::Status;

// A client waits for one thing at a time (a few with threads); each waiter
// costs memory, so a client that parks without end is cut off.
constexpr size_t kMaxWaitersPerConnection = 10000;

// The counter `key` holds, if it holds a number.
bool read_counter(const KvMap& table, const std::string& key, int64_t* out) {
  const Bytes* value = table.find(key);
  if (value == nullptr) return false;
  const char* begin = reinterpret_cast<const char*>(value->data());
  const char* end = begin + value->size();
  auto [ptr, ec] = std::from_chars(begin, end, *out);
  return ec == std::errc() && ptr == end;
}

// The head of an OK reply whose payload is `body_size` bytes sent after it.
std::vector<uint8_t> head_for_body(uint64_t id, size_t body_size) {
  std::vector<uint8_t> head = FrameWriter(static_cast<uint8_t>(Status::kOk), id).finish();
  auto length = static_cast<uint32_t>(tcpstore::kLengthCovered + body_size);  // values came in frames
  for (int i = 0; i < 4; ++i) head[static_cast<size_t>(i)] = static_cast<uint8_t>(length >> (8 * i));
  return head;
}

}  // namespace

void WatchList::remove(uint64_t id) {
  if (first == id) {
    first = rest.empty() ? 0 : rest.back();
    if (!rest.empty()) rest.pop_back();
    return;
  }
  auto pos = std::find(rest.begin(), rest.end(), id);
  if (pos != rest.end()) {
    *pos = rest.back();
    rest.pop_back();
  }
}

std::vector<uint64_t> WatchList::take() {
  std::vector<uint64_t> ids;
  if (first != 0) ids.push_back(first);
  ids.insert(ids.end(), rest.begin(), rest.end());
  first = 0;
  rest.clear();
  return ids;
}

void TCPServer::Impl::start_waiting(Connection& conn, Request& request) {
  Waiter waiter{conn.id, request.id, request.command, {}, 0, request.amount, 0};
  if (request.command != Command::kWait) {
    waiter.keys.push_back(std::move(request.keys.front()));
    if (ready(waiter)) {
      answer(waiter);
    } else {
      park(conn, std::move(waiter));
    }
    return;
  }
  // A small WAIT is usually satisfied at once: check before indexing it.
  if (request.keys.size() <= 16 && all_exist(request.keys)) {
    answer(waiter);
    return;
  }
  waiter.keys = std::move(request.keys);
  park(conn, std::move(waiter));
}

bool TCPServer::Impl::ready(const Waiter& waiter) const {
  switch (waiter.command) {
    case Command::kGet:
      return table.contains(waiter.keys.front());
    case Command::kWait:
      return waiter.missing == 0;
    default: {
      int64_t count = 0;
      return read_counter(table, waiter.keys.front(), &count) && count >= waiter.target;
    }
  }
}

// Queues the reply of a waiter whose condition holds.
void TCPServer::Impl::answer(const Waiter& waiter) {
  Connection* conn = find(waiter.connection);
  if (conn == nullptr || conn->dead) return;
  if (waiter.command == Command::kGet) {
    // The stored value itself, shared: a client that does not read its reply
    // costs the server a reference, not a copy.
    KvMap::Value value = table.find_shared(waiter.keys.front());
    enqueue(*conn, head_for_body(waiter.request, value->size()), value);
    return;
  }
  FrameWriter reply(static_cast<uint8_t>(Status::kOk), waiter.request);
  if (waiter.command == Command::kWaitCount) {
    int64_t count = 0;
    read_counter(table, waiter.keys.front(), &count);
    reply.i64(count);
  }
  enqueue(*conn, reply.finish());
}

void TCPServer::Impl::park(Connection& conn, Waiter waiter) {
  if (conn.waiters.size() >= kMaxWaitersPerConnection) {
    reject(conn, "has more than " + std::to_string(kMaxWaitersPerConnection) + " requests waiting for keys",
           nullptr);
    return;
  }
  size_t cost = sizeof(Waiter) + MemoryBudget::kValueOverhead;
  for (const auto& key : waiter.keys) cost += key.size() + MemoryBudget::kValueOverhead;
  if (!budget.fits(cost)) {
    stat_budget_refusals.fetch_add(1);
    enqueue(conn, tcpstore::encode_error(
                      waiter.request, std::string("TCPStore server: ") +
                                          tcpstore::command_name(static_cast<uint8_t>(waiter.command)) +
                                          " refused: the store's memory budget of " +
                                          std::to_string(budget.limit()) +
                                          " bytes (TDIST_STORE_MEMORY_BYTES) cannot hold another waiter of " +
                                          std::to_string(cost) + " bytes"));
    return;
  }
  // A rank waiting for another's key is one of the job's clients.
  make_member(conn);
  // A reused request id replaces the older waiter instead of orphaning it.
  if (auto old = conn.waiters.find(waiter.request); old != conn.waiters.end()) remove_waiter(old->second);
  uint64_t id = next_waiter_id++;
  // One pass indexes the keys, drops repeated ones (a list may repeat a key
  // 100,000 times: its watch list then already ends with this waiter) and
  // counts those absent. One rehash at most, not one per doubling.
  watchers.reserve(watchers.size() + waiter.keys.size());
  size_t distinct = 0;
  for (size_t i = 0; i < waiter.keys.size(); ++i) {
    WatchList& list = watchers[waiter.keys[i]];
    if (list.back() == id) continue;
    list.push(id);
    waiter.missing += table.contains(waiter.keys[i]) ? 0 : 1;
    if (distinct != i) waiter.keys[distinct] = std::move(waiter.keys[i]);
    ++distinct;
  }
  waiter.keys.resize(distinct);
  // Checked above for every key of the request; charged for those kept.
  cost = sizeof(Waiter) + MemoryBudget::kValueOverhead;
  for (const auto& key : waiter.keys) cost += key.size() + MemoryBudget::kValueOverhead;
  budget.charge(cost);
  waiter.charged = cost;
  conn.waiters[waiter.request] = id;
  Waiter& parked = waiters.emplace(id, std::move(waiter)).first->second;
  stat_parked.fetch_add(1);
  if (ready(parked)) {  // a WAIT whose keys all exist already
    answer(parked);
    conn.waiters.erase(parked.request);
    remove_waiter(id);
  }
}

// `key` was written (`created`: it did not exist before).
void TCPServer::Impl::written(const std::string& key, bool created) {
  auto it = watchers.find(key);
  if (it == watchers.end()) return;
  // Taken out whole, so answering a thousand waiters of the key does not
  // search this list a thousand times (their removal finds it empty); those
  // still waiting go back in. The entry stays, saving its reallocation.
  std::vector<uint64_t> ids = it->second.take();
  std::vector<uint64_t> still;
  for (uint64_t id : ids) {
    // Answering may have pushed a client over its output limit and so
    // disconnected it, taking its other waiters along: look each one up.
    auto wit = waiters.find(id);
    if (wit == waiters.end()) continue;
    Waiter& waiter = wit->second;
    if (waiter.command == Command::kWait && created && waiter.missing > 0) --waiter.missing;
    if (!ready(waiter)) {
      still.push_back(id);
      continue;
    }
    answer(waiter);
    wit = waiters.find(id);
    if (wit == waiters.end()) continue;
    if (Connection* conn = find(wit->second.connection)) conn->waiters.erase(wit->second.request);
    remove_waiter(id);
  }
  it = watchers.find(key);  // answering may have erased it (remove_waiter of an emptied list)
  if (still.empty()) {
    if (it != watchers.end() && it->second.empty()) watchers.erase(it);
    return;
  }
  WatchList& list = it != watchers.end() ? it->second : watchers[key];
  for (uint64_t id : still) list.push(id);
}

// `key` existed and was deleted: the WAITs that hold it miss it again.
void TCPServer::Impl::deleted(const std::string& key) {
  auto it = watchers.find(key);
  if (it == watchers.end()) return;
  auto bump = [&](uint64_t id) {
    auto wit = waiters.find(id);
    if (wit != waiters.end() && wit->second.command == Command::kWait) ++wit->second.missing;
  };
  if (it->second.first != 0) bump(it->second.first);
  for (uint64_t id : it->second.rest) bump(id);
}

void TCPServer::Impl::remove_waiter(uint64_t waiter_id) {
  auto it = waiters.find(waiter_id);
  if (it == waiters.end()) return;
  for (const auto& key : it->second.keys) {
    auto wit = watchers.find(key);
    if (wit == watchers.end()) continue;  // taken out by written()
    wit->second.remove(waiter_id);
    if (wit->second.empty()) watchers.erase(wit);
  }
  budget.release(it->second.charged);
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
    std::vector<std::string> missing;
    for (const auto& key : waiter.keys) {
      if (!table.contains(key)) missing.push_back(key);
    }
    reply.u8(1);
    reply.keys(missing);
    reply.i64(count);
    remove_waiter(it->second);
    conn.waiters.erase(it);
  }
  enqueue(conn, reply.finish());
}

}  // namespace tdist
