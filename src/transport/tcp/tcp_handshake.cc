#include "transport/tcp/tcp_handshake.h"

#include <algorithm>
#include <cstring>

#include "common/error_text.h"
#include "tdist/errors.h"
#include "tdist/logging.h"

namespace tdist::transport::tcp {
namespace {

// The next reply from the acceptor; a closed connection or garbage is an
// error naming the connection, a refusal is raised with its reason.
ReplyHeader read_reply(const Socket& socket, Deadline deadline, const std::string& where,
                       const char* waiting_for) {
  ReplyHeader header{};
  try {
    socket.recv_all(&header, sizeof(header), deadline);
  } catch (const DistNetworkTimeoutError& e) {
    throw DistNetworkTimeoutError(where + ": no " + waiting_for + " came: " + e.what());
  } catch (const DistNetworkError& e) {
    throw DistNetworkError(where + ": the connection closed while waiting for " + waiting_for + " (" +
                           e.what() + "); is the listener a tdist rank of this build?");
  }
  if (auto bad = check_reply_header(header)) throw DistNetworkError(where + ": the listener sent " + *bad);
  if (static_cast<ReplyKind>(header.kind) == ReplyKind::kRefuse) {
    std::string reason(header.length, '\0');
    try {
      socket.recv_all(reason.data(), reason.size(), deadline);
    } catch (const DistNetworkError&) {
      reason = "(the reason was cut off)";
    }
    throw DistNetworkError(where + ": the connection was refused: " + reason);
  }
  return header;
}

template <typename Bytes>
void read_body(const Socket& socket, Bytes& out, Deadline deadline, const std::string& where) {
  try {
    socket.recv_all(out.data(), out.size(), deadline);
  } catch (const DistNetworkTimeoutError& e) {
    throw DistNetworkTimeoutError(where + ": the greeting's reply stopped short: " + e.what());
  } catch (const DistNetworkError& e) {
    throw DistNetworkError(where + ": the connection closed in the greeting's reply: " + e.what());
  }
}

std::string short_id(const Identity& id) {
  return identity_hex(id).substr(0, 16);
}

}  // namespace

void greet_acceptor(const Socket& socket, const Hello& hello, const std::optional<std::string>& token,
                    Deadline deadline, const std::string& where) {
  socket.send_all(&hello, sizeof(hello), deadline);
  const ReplyHeader first = read_reply(socket, deadline, where, "a reply to the greeting");
  if (static_cast<ReplyKind>(first.kind) == ReplyKind::kAccept) {
    // The attack this stops: a listener that took over the peer's address in
    // the store would otherwise receive this rank's data.
    if (token) {
      throw DistNetworkError(where +
                             ": the listener accepted the connection without proving the job's token "
                             "(TDIST_AUTH_TOKEN is set here): it is not rank " +
                             std::to_string(hello.peer) +
                             " of this job, or that rank has no token; refusing it");
    }
    if (first.length != 0) throw DistNetworkError(where + ": the listener sent a proof nobody asked for");
    return;
  }
  // A challenge.
  if (!token) {
    throw DistNetworkError(where + ": rank " + std::to_string(hello.peer) +
                           " demands the job's token, and this rank has none (set TDIST_AUTH_TOKEN or "
                           "TDIST_AUTH_TOKEN_FILE on every rank)");
  }
  auth::Nonce server_nonce{};
  read_body(socket, server_nonce, deadline, where);
  const auth::Nonce client_nonce = auth::make_nonce();
  const std::string context = handshake_context(hello);
  const auth::Proof mine = auth::client_proof(*token, context, server_nonce, client_nonce);
  std::array<uint8_t, auth::kNonceBytes + auth::kProofBytes> answer{};
  std::memcpy(answer.data(), client_nonce.data(), client_nonce.size());
  std::memcpy(answer.data() + client_nonce.size(), mine.data(), mine.size());
  socket.send_all(answer.data(), answer.size(), deadline);
  const ReplyHeader last = read_reply(socket, deadline, where, "the listener's proof of the token");
  if (static_cast<ReplyKind>(last.kind) != ReplyKind::kAccept || last.length != auth::kProofBytes) {
    throw DistNetworkError(where + ": the listener answered the proof with kind " +
                           std::to_string(last.kind) + " of " + std::to_string(last.length) +
                           " bytes instead of its own proof");
  }
  auth::Proof theirs{};
  read_body(socket, theirs, deadline, where);
  if (!auth::proofs_equal(theirs, auth::server_proof(*token, context, server_nonce, client_nonce))) {
    throw DistNetworkError(where + ": the listener's proof of the job's token is wrong: it is not rank " +
                           std::to_string(hello.peer) + " of this job (or holds another token); refusing it");
  }
}

GreetingDesk::GreetingDesk(Config config)
    : config_(std::move(config)), slots_(static_cast<size_t>(std::max(config_.size, 0))) {}

void GreetingDesk::add(Socket socket, Deadline group_deadline) {
  if (pending_.size() >= kMaxGreetings) {
    // A real rank sends its greeting as soon as it is connected, so it is
    // among the newest here; the oldest without a whole greeting is the
    // likeliest to be a client that will never send one.
    auto oldest =
        std::find_if(pending_.begin(), pending_.end(), [](const Pending& p) { return !p.challenged; });
    if (oldest == pending_.end()) oldest = pending_.begin();
    refuse(*oldest, "it had not completed its greeting when " + std::to_string(kMaxGreetings) +
                        " connections were in their greeting, and it was the oldest of them (" +
                        std::to_string(oldest->bytes.size()) + " bytes " +
                        (oldest->challenged ? "of its proof of the token" : "of a greeting") +
                        " came); it made room for a new connection");
    pending_.erase(oldest);
  }
  Pending p;
  p.address = socket.peer_address().to_string();
  socket.set_nonblocking(true);
  p.socket = std::move(socket);
  p.deadline = std::min(group_deadline, SocketClock::now() + kGreetingTimeout);
  p.bytes.reserve(sizeof(Hello));
  pending_.push_back(std::move(p));
}

void GreetingDesk::poll_set(std::vector<pollfd>& out) const {
  for (const Pending& p : pending_) out.push_back({p.socket.fd(), POLLIN, 0});
}

std::vector<Admitted> GreetingDesk::progress(const pollfd* results) {
  std::vector<Admitted> admitted;
  const auto now = SocketClock::now();
  std::vector<Pending> still;
  still.reserve(pending_.size());
  for (size_t i = 0; i < pending_.size(); ++i) {
    Pending& p = pending_[i];
    bool done = false;
    if (results[i].revents != 0) done = advance(p, &admitted);
    if (!done && now >= p.deadline) {
      refuse(p, "it did not complete its greeting in time (" + std::to_string(p.bytes.size()) + " bytes " +
                    (p.challenged ? "of its proof of the token" : "of a greeting") + " came)");
      done = true;
    }
    if (!done) still.push_back(std::move(p));
  }
  pending_ = std::move(still);
  return admitted;
}

void GreetingDesk::close_all(const std::string& reason) {
  for (Pending& p : pending_) refuse(p, reason);
  pending_.clear();
}

bool GreetingDesk::advance(Pending& p, std::vector<Admitted>* out) {
  const size_t want = p.challenged ? auth::kNonceBytes + auth::kProofBytes : sizeof(Hello);
  // Only what this step needs: nothing beyond it is read before the verdict.
  const size_t have = p.bytes.size();
  p.bytes.resize(want);
  const Socket::IoResult r = p.socket.try_recv(p.bytes.data() + have, want - have);
  p.bytes.resize(have + r.bytes);
  if (r.error != 0 && r.error != EAGAIN && r.error != EWOULDBLOCK) {
    refuse(p, "reading its greeting failed: " + errno_text(r.error), false);
    return true;
  }
  if (!p.challenged) {
    const bool done = on_greeting(p, out);
    if (!done && r.eof)
      refuse(p, "it closed after " + std::to_string(p.bytes.size()) + " bytes of a greeting", false);
    return done || r.eof;
  }
  if (p.bytes.size() == want) return on_proof(p, out);
  if (r.eof) {
    refuse(p,
           "it closed instead of proving the job's token (" + std::to_string(p.bytes.size()) + " bytes came)",
           false);
    return true;
  }
  return false;
}

bool GreetingDesk::on_greeting(Pending& p, std::vector<Admitted>* out) {
  Hello hello{};
  const GreetingCheck check =
      check_greeting(p.bytes.data(), p.bytes.size(), config_.rank, config_.size, &hello);
  if (check.status == GreetingStatus::kIncomplete) return false;
  if (check.status == GreetingStatus::kInvalid) {
    refuse(p, check.reason);
    return true;
  }
  p.hello = hello;
  const std::string claims = "rank " + std::to_string(hello.rank);
  if (hello.to != config_.me) {
    refuse(p,
           "it is not of this generation of the group: it names listener identity " + short_id(hello.to) +
               "..., this rank's is " + short_id(config_.me) +
               "... (a rank of another job, or of the group before reinit_process_group, or one that read a "
               "stale address)");
    return true;
  }
  std::optional<Identity> published;
  try {
    published = config_.published(static_cast<int>(hello.rank));
  } catch (const DistError& e) {
    refuse(p, "reading " + claims + "'s identity from the store failed: " + e.what());
    return true;
  }
  if (!published) {
    refuse(p, "it says it is " + claims + ", which has not published an address in this group's store");
    return true;
  }
  if (*published != hello.from) {
    refuse(p, "it says it is " + claims + " but its identity " + short_id(hello.from) +
                  "... is not the one " + claims + " published (" + short_id(*published) + "...)");
    return true;
  }
  // Authentication comes before anything about the group's state: a
  // connection that cannot prove the token learns nothing more.
  const bool offers = (hello.flags & kHelloAuth) != 0;
  if (config_.token && !offers) {
    refuse(p, "this rank requires the job's token (TDIST_AUTH_TOKEN is set here) and " + claims +
                  " offers none");
    return true;
  }
  if (!config_.token && offers) {
    refuse(p, claims +
                  " requires authentication, and this rank has no token (set TDIST_AUTH_TOKEN or "
                  "TDIST_AUTH_TOKEN_FILE on every rank)");
    return true;
  }
  if (!config_.token) return admit(p, out, {});
  p.server_nonce = auth::make_nonce();
  p.challenged = true;
  p.bytes.clear();
  try {
    const std::string challenge = encode_reply(
        ReplyKind::kChallenge,
        std::string_view(reinterpret_cast<const char*>(p.server_nonce.data()), p.server_nonce.size()));
    p.socket.send_all(challenge.data(), challenge.size(), p.deadline);
  } catch (const DistError& e) {
    refuse(p, std::string("sending the challenge failed: ") + e.what(), false);
    return true;
  }
  return false;
}

bool GreetingDesk::on_proof(Pending& p, std::vector<Admitted>* out) {
  auth::Nonce client_nonce{};
  auth::Proof proof{};
  std::memcpy(client_nonce.data(), p.bytes.data(), client_nonce.size());
  std::memcpy(proof.data(), p.bytes.data() + client_nonce.size(), proof.size());
  const std::string context = handshake_context(p.hello);
  if (!auth::proofs_equal(proof, auth::client_proof(*config_.token, context, p.server_nonce, client_nonce))) {
    refuse(p, "rank " + std::to_string(p.hello.rank) +
                  "'s proof of the job's token is wrong (does it have another TDIST_AUTH_TOKEN?)");
    return true;
  }
  const auth::Proof answer = auth::server_proof(*config_.token, context, p.server_nonce, client_nonce);
  return admit(p, out, std::string_view(reinterpret_cast<const char*>(answer.data()), answer.size()));
}

bool GreetingDesk::admit(Pending& p, std::vector<Admitted>* out, std::string_view body) {
  // Checked here, as the slot is taken, and not against the caller's table:
  // that learns of the connections admitted in this poll only after
  // progress() returns, and a second greeting for the same slot in the same
  // poll would otherwise be admitted too.
  if (auto taken = slot_taken(p.hello)) {
    refuse(p, *taken);
    return true;
  }
  try {
    const std::string accept = encode_reply(ReplyKind::kAccept, body);
    p.socket.send_all(accept.data(), accept.size(), p.deadline);
  } catch (const DistError& e) {
    refuse(p, std::string("sending the acceptance failed: ") + e.what(), false);
    return true;
  }
  RankSlots& slots = slots_[p.hello.rank];
  if (slots.connections == 0) {
    slots.connections = p.hello.connections;
    slots.taken.assign(p.hello.connections, false);
  }
  slots.taken[p.hello.connection] = true;
  out->push_back(Admitted{std::move(p.socket), p.hello, p.address});
  return true;
}

std::optional<std::string> GreetingDesk::slot_taken(const Hello& hello) const {
  // check_greeting guaranteed rank < size and connection < connections.
  const RankSlots& slots = slots_[hello.rank];
  const std::string rank = "rank " + std::to_string(hello.rank);
  if (slots.connections == 0) return std::nullopt;
  if (slots.connections != hello.connections) {
    return rank + " announced " + std::to_string(slots.connections) + " connections before and " +
           std::to_string(hello.connections) + " now";
  }
  if (slots.taken[hello.connection]) {
    return rank + "'s connection " + std::to_string(hello.connection) +
           " is already established (a duplicate of that rank)";
  }
  return std::nullopt;
}

void GreetingDesk::refuse(Pending& p, const std::string& reason, bool tell) const {
  if (tell) {
    // Best effort: a client that does not read is not waited for.
    const std::string reply = encode_reply(ReplyKind::kRefuse, reason);
    (void)p.socket.try_send(reply.data(), reply.size());
  }
  TDIST_LOG(WARNING) << config_.where << ": refused a connection from " << p.address << ": " << reason;
  p.socket.close();
}

}  // namespace tdist::transport::tcp
