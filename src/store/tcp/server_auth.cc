// The token handshake (src/common/auth.h) on the server's side. A server
// with a token serves nothing to a connection until it has proved it holds
// the token; the server proves it holds it too, so a client can tell the
// job's store from an impostor. Refusals are logged with the peer's address.

#include "store/tcp/server_impl.h"
#include "tdist/logging.h"

namespace tdist {
namespace {

using tcpstore::Command;
using tcpstore::FrameWriter;
using tcpstore::Request;
using tcpstore::Status;

// The proofs' context: a store proof can never pass for a transport's.
constexpr const char* kContext = "store";

}  // namespace

bool TCPServer::Impl::authenticate(Connection& conn, const Request& request) {
  bool is_auth = request.command == Command::kAuthBegin || request.command == Command::kAuthProof;
  if (!options.auth_token) {
    if (!is_auth) return false;
    // A client with a token asks; this server has none and says so (the
    // client then refuses to use it).
    if (request.command == Command::kAuthBegin) {
      FrameWriter reply(static_cast<uint8_t>(Status::kOk), request.id);
      reply.u8(0);
      enqueue(conn, reply.finish());
    } else {
      enqueue(conn, tcpstore::encode_error(request.id, "TCPStore server: this store does not authenticate"));
    }
    return true;
  }
  auto refuse = [&](const std::string& why, const std::string& to_client) {
    stat_auth_refusals.fetch_add(1);
    uint64_t id = request.id;
    TDIST_LOG(WARNING) << where() << ": refused client " << conn.sock.peer() << ": " << why;
    std::vector<uint8_t> frame = tcpstore::encode_error(id, to_client);
    conn.sock.try_send(frame.data(), frame.size());  // best effort, then close
    mark_dead(conn);
  };
  switch (conn.auth) {
    case Connection::Auth::kOpen:
      if (!is_auth) return false;
      refuse(std::string("sent ") + tcpstore::command_name(static_cast<uint8_t>(request.command)) +
                 " after it had authenticated",
             "TCPStore server: authentication already done on this connection");
      return true;
    case Connection::Auth::kExpectBegin:
      if (request.command != Command::kAuthBegin) {
        refuse(std::string("sent ") + tcpstore::command_name(static_cast<uint8_t>(request.command)) +
                   " without authenticating (a client without the job's token?)",
               "TCPStore server: authentication required: this store serves only clients holding the "
               "job's token (TDIST_AUTH_TOKEN or TDIST_AUTH_TOKEN_FILE)");
        return true;
      }
      {
        conn.server_nonce = auth::make_nonce();
        FrameWriter reply(static_cast<uint8_t>(Status::kOk), request.id);
        reply.u8(1);
        reply.raw(conn.server_nonce.data(), conn.server_nonce.size());
        enqueue(conn, reply.finish());
        conn.auth = Connection::Auth::kExpectProof;
      }
      return true;
    case Connection::Auth::kExpectProof: {
      if (request.command != Command::kAuthProof) {
        refuse(std::string("sent ") + tcpstore::command_name(static_cast<uint8_t>(request.command)) +
                   " instead of its proof of the token",
               "TCPStore server: authentication required: expected AUTH_PROOF");
        return true;
      }
      auth::Nonce client_nonce{};
      auth::Proof client_proof{};
      std::copy(request.auth.begin(), request.auth.begin() + auth::kNonceBytes, client_nonce.begin());
      std::copy(request.auth.begin() + auth::kNonceBytes, request.auth.end(), client_proof.begin());
      auth::Proof expected =
          auth::client_proof(*options.auth_token, kContext, conn.server_nonce, client_nonce);
      if (!auth::proofs_equal(expected, client_proof)) {
        refuse("authentication failed: its proof does not match this store's token (wrong token)",
               "TCPStore server: authentication failed: wrong token");
        return true;
      }
      auth::Proof mine = auth::server_proof(*options.auth_token, kContext, conn.server_nonce, client_nonce);
      FrameWriter reply(static_cast<uint8_t>(Status::kOk), request.id);
      reply.raw(mine.data(), mine.size());
      enqueue(conn, reply.finish());
      conn.auth = Connection::Auth::kOpen;
      unauthenticated.erase(conn.id);
      conn.served = true;
      make_member(conn);
      TDIST_LOG(DEBUG) << where() << ": client " << conn.sock.peer() << " authenticated";
      return true;
    }
  }
  return true;
}

}  // namespace tdist
