#include "common/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <fstream>

#include "common/env.h"
#include "tdist/errors.h"

namespace tdist::auth {
namespace {

Proof mac(std::string_view token, std::string_view label, std::string_view context, const Nonce& first,
          const Nonce& second) {
  // label \0 context \0 first second: the separators keep two different
  // (label, context) pairs from ever producing the same message.
  std::string message;
  message.reserve(label.size() + context.size() + 2 + 2 * kNonceBytes);
  message.append(label);
  message.push_back('\0');
  message.append(context);
  message.push_back('\0');
  message.append(reinterpret_cast<const char*>(first.data()), first.size());
  message.append(reinterpret_cast<const char*>(second.data()), second.size());
  Proof out{};
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), out.data(),
           &length) == nullptr ||
      length != out.size()) {
    throw DistError("authentication: HMAC-SHA256 failed in libcrypto");
  }
  return out;
}

std::string checked(std::string token, const char* source) {
  if (token.empty())
    throw DistInvalidArgument(std::string(source) + " is empty: an empty secret authenticates nobody");
  if (token.size() > kMaxTokenBytes) {
    throw DistInvalidArgument(std::string(source) + " holds " + std::to_string(token.size()) +
                              " bytes; a token may have at most " + std::to_string(kMaxTokenBytes));
  }
  return token;
}

}  // namespace

std::optional<std::string> token_from_env() {
  if (auto token = env_string("TDIST_AUTH_TOKEN")) return checked(std::move(*token), "TDIST_AUTH_TOKEN");
  auto path = env_string("TDIST_AUTH_TOKEN_FILE");
  if (!path) return std::nullopt;
  std::ifstream file(*path, std::ios::binary);
  if (!file) {
    throw DistInvalidArgument("TDIST_AUTH_TOKEN_FILE names " + *path + ", which cannot be read");
  }
  // Two bytes past the limit (a CR LF may follow) are enough to know the
  // file is too long.
  std::string token(kMaxTokenBytes + 2, '\0');
  file.read(token.data(), static_cast<std::streamsize>(token.size()));
  token.resize(static_cast<size_t>(file.gcount()));
  if (!token.empty() && token.back() == '\n') token.pop_back();
  if (!token.empty() && token.back() == '\r') token.pop_back();
  return checked(std::move(token), ("the file " + *path + " (TDIST_AUTH_TOKEN_FILE)").c_str());
}

std::string generate_token() {
  const Nonce bytes = make_nonce();
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (uint8_t b : bytes) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

Nonce make_nonce() {
  Nonce nonce{};
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1) {
    throw DistError("authentication: the random generator of libcrypto (RAND_bytes) failed");
  }
  return nonce;
}

Proof client_proof(std::string_view token, std::string_view context, const Nonce& server_nonce,
                   const Nonce& client_nonce) {
  return mac(token, "tdist-client", context, server_nonce, client_nonce);
}

Proof server_proof(std::string_view token, std::string_view context, const Nonce& server_nonce,
                   const Nonce& client_nonce) {
  return mac(token, "tdist-server", context, client_nonce, server_nonce);
}

bool proofs_equal(const Proof& a, const Proof& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace tdist::auth
