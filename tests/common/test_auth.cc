#include "common/auth.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <set>

#include "tdist/errors.h"

namespace tdist::auth {
namespace {

Nonce counting(uint8_t from) {
  Nonce n{};
  for (size_t i = 0; i < n.size(); ++i) n[i] = static_cast<uint8_t>(from + i);
  return n;
}

std::string hex(const Proof& p) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : p) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

// Reference values from Python's hmac module (hmac.new(b"secret",
// b"tdist-client\0store\0" + n0..31 + n100..131, sha256)), computed apart
// from libcrypto.
TEST(Auth, ProofsAreHmacSha256OfTheLabelledNonces) {
  const Nonce server = counting(0), client = counting(100);
  EXPECT_EQ(hex(client_proof("secret", "store", server, client)),
            "4fc44485c9cdb6e572f56ce022bd0ce3604d689a19907d2379c07d9a93076efe");
  EXPECT_EQ(hex(server_proof("secret", "store", server, client)),
            "49ca7c7028fc9297d0a2696492bbc8f7aa6c4ba8b16f7165f09c8a6a409dcdf9");
}

TEST(Auth, ProofsDifferByTokenContextRoleAndNonce) {
  const Nonce a = counting(0), b = counting(100);
  const Proof base = client_proof("secret", "store", a, b);
  EXPECT_TRUE(proofs_equal(base, client_proof("secret", "store", a, b)));
  EXPECT_FALSE(proofs_equal(base, client_proof("secreT", "store", a, b)));
  EXPECT_FALSE(proofs_equal(base, client_proof("secret", "transport", a, b)));
  EXPECT_FALSE(proofs_equal(base, server_proof("secret", "store", a, b)));
  EXPECT_FALSE(proofs_equal(base, client_proof("secret", "store", b, a)));
}

TEST(Auth, NoncesAndTokensAreFresh) {
  std::set<std::string> tokens;
  for (int i = 0; i < 100; ++i) {
    const std::string t = generate_token();
    EXPECT_EQ(t.size(), 64u);
    EXPECT_EQ(t.find_first_not_of("0123456789abcdef"), std::string::npos);
    tokens.insert(t);
  }
  EXPECT_EQ(tokens.size(), 100u);
  EXPECT_NE(make_nonce(), make_nonce());
}

TEST(Auth, TokenComesFromTheVariableThenTheFile) {
  const std::string path = ::testing::TempDir() + "tdist_auth_token";
  { std::ofstream(path) << "from-file\n"; }
  unsetenv("TDIST_AUTH_TOKEN");
  unsetenv("TDIST_AUTH_TOKEN_FILE");
  EXPECT_EQ(token_from_env(), std::nullopt);
  setenv("TDIST_AUTH_TOKEN_FILE", path.c_str(), 1);
  EXPECT_EQ(token_from_env(), "from-file");
  setenv("TDIST_AUTH_TOKEN", "from-variable", 1);
  EXPECT_EQ(token_from_env(), "from-variable");
  unsetenv("TDIST_AUTH_TOKEN");
  setenv("TDIST_AUTH_TOKEN_FILE", (path + ".missing").c_str(), 1);
  EXPECT_THROW(token_from_env(), DistInvalidArgument);
  { std::ofstream(path) << "\n"; }
  setenv("TDIST_AUTH_TOKEN_FILE", path.c_str(), 1);
  EXPECT_THROW(token_from_env(), DistInvalidArgument);
  { std::ofstream(path) << std::string(kMaxTokenBytes + 1, 'x'); }
  EXPECT_THROW(token_from_env(), DistInvalidArgument);
  unsetenv("TDIST_AUTH_TOKEN_FILE");
}

}  // namespace
}  // namespace tdist::auth
