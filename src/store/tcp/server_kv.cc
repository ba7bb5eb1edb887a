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

}  // namespace

void TCPServer::Impl::handle(Connection& conn, const tcpstore::FrameView& frame) {
  Request request;
  std::string error;
  if (!tcpstore::decode_request(frame, &request, &error)) {
    reject(conn, "sent a bad request: " + error, &frame.id);
    return;
  }
  if (authenticate(conn, request)) return;
  conn.served = true;
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
