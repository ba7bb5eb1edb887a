// The key-value core: one decoded request at a time, each in time linear in
// its size (CHECK and WAIT with 100,000 keys are one hash lookup per key).

#include <charconv>

#include "store/tcp/server_impl.h"
#include "tdist/logging.h"

namespace tdist {
namespace {

using tcpstore::Command;
using tcpstore::FrameWriter;
using tcpstore::Request;
using tcpstore::Status;

// What a key costs the budget besides its bytes (map node, hash, counters).
size_t key_cost(const std::string& key) {
  return key.size() + MemoryBudget::kValueOverhead;
}

// What a stored value costs the budget (MemoryBudget::make_value).
size_t value_cost(size_t bytes) {
  return bytes + MemoryBudget::kValueOverhead;
}

// The longest decimal text of a counter: "-9223372036854775808".
constexpr size_t kMaxCounterText = 20;

}  // namespace

void TCPServer::Impl::handle(Connection& conn, const tcpstore::FrameView& frame) {
  Request request;
  std::string error;
  if (!tcpstore::decode_request(frame, &request, &error)) {
    reject(conn, "sent a bad request: " + error, &frame.id);
    return;
  }
  handle_request(conn, request, frame.frame_size);
}

// `frame_bytes`: what the request's frame holds of the budget until it is
// handled (0 for a streamed SET, whose value moved out of it).
void TCPServer::Impl::handle_request(Connection& conn, Request& request, size_t frame_bytes) {
  if (authenticate(conn, request)) return;
  conn.served = true;
  if (refuse_for_budget(conn, request, frame_bytes)) return;
  // A client that writes keys is taken for a rank of the job: never closed
  // to make room for others (server_peers.cc).
  if (request.command == Command::kSet || request.command == Command::kAdd ||
      request.command == Command::kCompareSet || request.command == Command::kDeleteKey) {
    make_member(conn);
  }
  FrameWriter reply(static_cast<uint8_t>(Status::kOk), request.id);
  const std::string& key = request.keys.empty() ? std::string() : request.keys.front();
  switch (request.command) {
    case Command::kSet:
      set(key, std::move(request.value));
      break;
    case Command::kGet:
    case Command::kWait:
    case Command::kWaitCount:
      start_waiting(conn, request);
      return;
    case Command::kAdd:
      add(conn, request);
      return;
    case Command::kCompareSet:
      compare_set(conn, request);
      return;
    case Command::kCheck:
      reply.u8(all_exist(request.keys) ? 1 : 0);
      break;
    case Command::kCancelWait:
      cancel(conn, request);
      return;
    case Command::kNumKeys:
      reply.i64(table.size());
      break;
    case Command::kDeleteKey:
      erase(conn, request);
      return;
    case Command::kPing:
      if (request.version != tcpstore::kProtocolVersion) {
        enqueue(conn, tcpstore::encode_error(request.id,
                                             "TCPStore protocol version mismatch: client speaks version " +
                                                 std::to_string(request.version) + ", server " +
                                                 std::to_string(tcpstore::kProtocolVersion)));
        return;
      }
      reply.u32(tcpstore::kProtocolVersion);
      break;
    case Command::kAuthBegin:
    case Command::kAuthProof:
      return;  // authenticate() answered them
  }
  enqueue(conn, reply.finish());
}

// How much a SET, ADD or COMPARE_SET would add to the memory budget (0 if
// it stores nothing). A new key costs its value and its own bookkeeping; an
// existing one only what its new value adds to the old, which goes.
size_t TCPServer::Impl::storage_growth(const Request& request) const {
  bool writes = request.command == Command::kSet || request.command == Command::kAdd ||
                request.command == Command::kCompareSet;
  if (!writes) return 0;
  const std::string& key = request.keys.front();
  KvMap::Value old = table.find_shared(key);
  size_t bytes = request.command == Command::kAdd ? kMaxCounterText : request.value.size();
  if (request.command == Command::kAdd && old) {
    // The counter's next text, exactly, so that ADDs to an existing counter
    // (barriers) go on in a full store. A plain value reads as 0 here; the
    // ADD then fails anyway.
    int64_t current = 0;
    const auto* text = reinterpret_cast<const char*>(old->data());
    std::from_chars(text, text + old->size(), current);
    bytes = std::to_string(
                static_cast<int64_t>(static_cast<uint64_t>(current) + static_cast<uint64_t>(request.amount)))
                .size();
  }
  if (request.command == Command::kCompareSet) {
    // compare_set writes only to an absent key when `expected` is empty, or
    // over a value equal to `expected` (KvMap::compare_set).
    bool swaps = old ? *old == request.expected : request.expected.empty();
    if (!swaps) return 0;
  }
  if (!old) return value_cost(bytes) + key_cost(key);
  return bytes > old->size() ? bytes - old->size() : 0;
}

// Refuses (with an error reply; nothing is stored) a write whose value
// would pass the memory budget. The request's own frame is still buffered
// and charged while it is handled, and goes right after: it is not counted
// against the request, or no value of more than half the budget could ever
// be stored. True if refused.
bool TCPServer::Impl::refuse_for_budget(Connection& conn, const Request& request, size_t frame_bytes) {
  size_t growth = storage_growth(request);
  if (growth == 0) return false;
  size_t used = budget.used();
  size_t others = used - std::min(used, frame_bytes);
  if (growth <= budget.limit() && others <= budget.limit() - growth) return false;
  std::string why = std::string("TCPStore server: ") +
                    tcpstore::command_name(static_cast<uint8_t>(request.command)) + " of key '" +
                    request.keys.front() + "' refused: the store's memory budget of " +
                    std::to_string(budget.limit()) + " bytes (TDIST_STORE_MEMORY_BYTES) has " +
                    std::to_string(budget.limit() - std::min(budget.limit(), others)) +
                    " bytes left, storing this needs " + std::to_string(growth) + "; nothing was stored";
  TDIST_LOG(WARNING) << where() << ": client " << conn.sock.peer() << ": " << why;
  stat_budget_refusals.fetch_add(1);
  enqueue(conn, tcpstore::encode_error(request.id, why));
  return true;
}

bool TCPServer::Impl::all_exist(const std::vector<std::string>& keys) const {
  for (const auto& key : keys) {
    if (!table.contains(key)) return false;
  }
  return true;
}

void TCPServer::Impl::key_created(const std::string& key) {
  budget.charge(key_cost(key));
  stat_keys.store(static_cast<uint64_t>(table.size()));
}

void TCPServer::Impl::set(const std::string& key, Bytes value) {
  bool created = !table.contains(key);
  table.set(key, std::move(value));
  if (created) key_created(key);
  written(key, created);
}

void TCPServer::Impl::add(Connection& conn, const Request& request) {
  const std::string& key = request.keys.front();
  bool created = !table.contains(key);
  std::optional<int64_t> next = table.add(key, request.amount);
  if (!next) {
    enqueue(conn, tcpstore::encode_error(request.id, add_on_value_message("TCPStore", key)));
    return;
  }
  if (created) key_created(key);
  written(key, created);
  FrameWriter reply(static_cast<uint8_t>(Status::kOk), request.id);
  reply.i64(*next);
  enqueue(conn, reply.finish());
}

void TCPServer::Impl::compare_set(Connection& conn, const Request& request) {
  const std::string& key = request.keys.front();
  bool created = !table.contains(key);
  Bytes result = table.compare_set(key, request.expected, request.value);
  created = created && table.contains(key);
  if (created) key_created(key);
  // Waking the watchers of a key that was not written is harmless: they
  // check their condition again and keep waiting.
  written(key, created);
  FrameWriter reply(static_cast<uint8_t>(Status::kOk), request.id);
  reply.raw(result.data(), result.size());
  enqueue(conn, reply.finish());
}

void TCPServer::Impl::erase(Connection& conn, const Request& request) {
  const std::string& key = request.keys.front();
  bool existed = table.erase(key);
  if (existed) {
    budget.release(key_cost(key));
    stat_keys.store(static_cast<uint64_t>(table.size()));
    deleted(key);
  }
  FrameWriter reply(static_cast<uint8_t>(Status::kOk), request.id);
  reply.u8(existed ? 1 : 0);
  enqueue(conn, reply.finish());
}

}  // namespace tdist
