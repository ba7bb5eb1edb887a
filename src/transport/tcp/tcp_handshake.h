#pragma once

// Setting up one TCP transport connection: whether it comes from a member
// of this generation of the group, and, when the job has a token, the
// mutual proof that both ends hold it (the messages are in tcp_wire.h, the
// crypto in common/auth.h). Nothing is read from a connection as data
// before both sides have passed these checks.

#include <poll.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/socket.h"
#include "transport/tcp/tcp_wire.h"

namespace tdist::transport::tcp {

/// How long an accepted connection may take to complete its greeting (a
/// real peer sends each message as soon as it can), so that a silent
/// client cannot hold a slot until the group's timeout.
inline constexpr std::chrono::seconds kGreetingTimeout{10};
/// Connections in their greeting at once. When all are taken, a new
/// connection makes room by refusing the oldest one that has not sent a
/// whole greeting (else the oldest of all), so that clients which connect
/// and say nothing cannot keep the real ranks waiting in the listen backlog.
inline constexpr size_t kMaxGreetings = 256;

/// The connector's side, on a freshly connected socket: sends `hello`, reads
/// the acceptor's verdict and, with a token, answers its challenge and
/// checks its proof. Raises DistNetworkError beginning with `where` and
/// saying why: the acceptor's refusal and reason, or an acceptor that did not
/// prove the token when this side has one (nothing more is sent to it);
/// DistNetworkTimeoutError at the deadline.
void greet_acceptor(const Socket& socket, const Hello& hello, const std::optional<std::string>& token,
                    Deadline deadline, const std::string& where);

/// A connection that passed every check.
struct Admitted {
  Socket socket;
  Hello hello;
  std::string address;  // the peer's host:port
};

/// The acceptor's side, for every accepted connection still in its greeting,
/// driven by the accept loop's poll. A connection that fails a check is sent
/// a refusal with the reason, closed and named in a warning. The desk also
/// keeps the table of slots (rank, connection) it has admitted: a slot is
/// taken at the moment its connection is admitted, so of two greetings for
/// one slot, even two handled in the same poll, only the first gets it, and
/// every connection of a rank must announce the count its first one did.
class GreetingDesk {
 public:
  struct Config {
    int rank = 0;
    int size = 0;
    Identity me{};                     // this rank's identity, as published
    std::optional<std::string> token;  // set: every connection must prove it
    std::string where;                 // the prefix of warnings
    /// What rank r published as its identity in this generation's store
    /// (nullopt: nothing yet).
    std::function<std::optional<Identity>(int rank)> published;
  };
  explicit GreetingDesk(Config config);

  /// Starts the greeting of an accepted connection. With kMaxGreetings
  /// connections already in their greeting, first refuses the oldest one
  /// that has not sent a whole greeting (else the oldest).
  void add(Socket socket, Deadline group_deadline);
  size_t pending() const { return pending_.size(); }
  /// Appends one pollfd per connection in its greeting, in order.
  void poll_set(std::vector<pollfd>& out) const;
  /// After poll: `results` are the entries poll_set appended. Reads what
  /// came, answers, refuses the connections that fail or are past their
  /// time, and returns those that passed.
  std::vector<Admitted> progress(const pollfd* results);
  /// Refuses every connection still in its greeting (the accept loop is done).
  void close_all(const std::string& reason);

 private:
  struct Pending {
    Socket socket;
    std::string address;
    Deadline deadline;
    bool challenged = false;  // the greeting passed; the proof is awaited
    std::vector<uint8_t> bytes;
    Hello hello{};
    auth::Nonce server_nonce{};
  };
  // Reads and judges; true when the connection is done with (admitted into
  // *out or refused).
  bool advance(Pending& p, std::vector<Admitted>* out);
  bool on_greeting(Pending& p, std::vector<Admitted>* out);
  bool on_proof(Pending& p, std::vector<Admitted>* out);
  bool admit(Pending& p, std::vector<Admitted>* out, std::string_view body);
  void refuse(Pending& p, const std::string& reason, bool tell = true) const;
  // Why `hello` cannot have its slot (taken, or another count than its
  // rank's first admitted connection announced), else nullopt.
  std::optional<std::string> slot_taken(const Hello& hello) const;

  // The slots of one higher rank's connections.
  struct RankSlots {
    uint32_t connections = 0;  // what its first admitted connection announced; 0: none yet
    std::vector<bool> taken;
  };

  Config config_;
  std::vector<Pending> pending_;
  std::vector<RankSlots> slots_;  // by rank
};

}  // namespace tdist::transport::tcp
