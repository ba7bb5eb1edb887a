#pragma once

// The shared secret that authenticates a job's connections (the TCPStore's
// clients, the TCP transport's peers) and the HMAC-SHA256 challenge-response
// built on it. The crypto is OpenSSL's libcrypto: nothing here is
// hand-written cryptography. The secret itself never travels: a connection
// proves it holds the secret by a MAC over fresh nonces of both sides, and
// each side checks the other's proof (a listener that does not know the
// secret cannot pose as the store or as a peer either).
//
// The handshake, for every authenticated connection (docs/security.md):
//   acceptor  -> connector : server nonce (kNonceBytes)
//   connector -> acceptor  : client nonce, client_proof(...)
//   acceptor  -> connector : server_proof(...)          (or a refusal)
// `context` binds a proof to its use ("store", "transport/<group>/<gen>"),
// so a proof for one can never be replayed as the other.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tdist::auth {

inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kProofBytes = 32;  // an HMAC-SHA256
/// Longest token accepted (from the variable or the file).
inline constexpr size_t kMaxTokenBytes = 4096;

using Nonce = std::array<uint8_t, kNonceBytes>;
using Proof = std::array<uint8_t, kProofBytes>;

/// The job's secret: TDIST_AUTH_TOKEN, else the contents of the file named
/// by TDIST_AUTH_TOKEN_FILE (one trailing newline dropped); nullopt when
/// neither is set (authentication off). Raises DistInvalidArgument naming the
/// variable for an unreadable or empty file, or a token longer than
/// kMaxTokenBytes.
std::optional<std::string> token_from_env();

/// A new random token (64 hex characters, 256 bits from the OS's CSPRNG),
/// as tdistrun generates for a job that gave none.
std::string generate_token();

/// Fresh random bytes for a handshake (RAND_bytes); raises DistError if the
/// generator fails.
Nonce make_nonce();

/// HMAC-SHA256(token, "tdist-client\0" context \0 server_nonce client_nonce).
Proof client_proof(std::string_view token, std::string_view context, const Nonce& server_nonce,
                   const Nonce& client_nonce);
/// HMAC-SHA256(token, "tdist-server\0" context \0 client_nonce server_nonce):
/// distinct from the client's, so a client's proof cannot be echoed back.
Proof server_proof(std::string_view token, std::string_view context, const Nonce& server_nonce,
                   const Nonce& client_nonce);

/// Compares two proofs in constant time (CRYPTO_memcmp).
bool proofs_equal(const Proof& a, const Proof& b);

}  // namespace tdist::auth
