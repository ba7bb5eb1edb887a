// The TCPStore server's memory budget holds for requests that arrive whole
// (docs/stores.md, "Limits"): a SET, ADD or COMPARE_SET whose value would
// pass it gets an error, and nothing else changes. Many small SETs used to
// be stored past it, as only frames still arriving were checked.

#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "store/tcp/memory_budget.h"
#include "store/tcp/server.h"
#include "store_attack.h"
#include "tdist/errors.h"

namespace tdist {
namespace {

using store_attack::kLong;

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kValueBytes = 8192;
constexpr int kSets = 1000;

std::string key_of(int i) {
  return "k" + std::to_string(1000 + i);
}  // 5 characters each
Bytes value_of(int i) {
  return Bytes(kValueBytes, static_cast<uint8_t>('a' + i % 26));
}

// The DistStoreError message of `fn`, or "" if it succeeded.
template <typename Fn>
std::string refusal_of(Fn fn) {
  try {
    fn();
  } catch (const DistStoreError& e) {
    return e.what();
  }
  return "";
}

bool is_budget_refusal(const std::string& message) {
  return message.find("memory budget") != std::string::npos &&
         message.find("nothing was stored") != std::string::npos;
}

// The reviewer's case: a 1 MiB budget, 1000 SETs of 8 KB. What fits is
// computed from the budget's published costs (the value and the key, each
// with MemoryBudget::kValueOverhead of bookkeeping); every SET past it is
// refused, and the table holds exactly the stored ones.
TEST(StoreBudget, ManySmallSetsStopAtTheBudget) {
  TCPServerOptions options;
  options.memory_budget = kMiB;
  auto server = TCPServer::start(options);
  TCPStoreClient client("127.0.0.1", server->port(), kLong);
  client.ping(kLong);
  EXPECT_EQ(client.add("barrier", 1, kLong), 1);
  size_t base = server->stats().memory_used;
  size_t per_key =
      kValueBytes + MemoryBudget::kValueOverhead + key_of(0).size() + MemoryBudget::kValueOverhead;
  int fit = static_cast<int>((options.memory_budget - base) / per_key);
  ASSERT_GT(fit, 100);
  ASSERT_LT(fit, kSets);

  int stored = 0;
  int first_refused = -1;
  for (int i = 0; i < kSets; ++i) {
    std::string error = refusal_of([&] { client.set(key_of(i), value_of(i), kLong); });
    if (error.empty()) {
      ++stored;
      EXPECT_EQ(first_refused, -1) << "SET " << i << " was stored after SET " << first_refused
                                   << " had been refused, with nothing freed between";
      continue;
    }
    EXPECT_TRUE(is_budget_refusal(error)) << error;
    if (first_refused == -1) first_refused = i;
  }
  std::printf("%d SETs of %zu bytes against a %zu-byte budget: %d stored, %d refused\n", kSets, kValueBytes,
              options.memory_budget, stored, kSets - stored);
  EXPECT_LE(stored, fit) << "SETs stored past the memory budget";
  EXPECT_GE(stored, fit - 1) << "SETs refused while the budget had room";
  TCPServerStats stats = server->stats();
  EXPECT_LE(stats.memory_used, options.memory_budget);
  EXPECT_EQ(stats.budget_refusals, static_cast<uint64_t>(kSets - stored));
  EXPECT_EQ(client.num_keys(kLong), stored + 1);
  for (int i = 0; i < stored; ++i) ASSERT_EQ(client.get(key_of(i), kLong), value_of(i)) << key_of(i);
  EXPECT_FALSE(client.check({key_of(stored)}, kLong)) << "a refused SET left its key";
  EXPECT_FALSE(client.check({key_of(kSets - 1)}, kLong)) << "a refused SET left its key";

  // Full to the last 100 bytes (a counter needs 20 + its key + twice the
  // overhead): a new counter and a new compare_set key are refused too...
  size_t left = options.memory_budget - server->stats().memory_used;
  std::string filler = "filler";
  client.set(filler, Bytes(left - 2 * MemoryBudget::kValueOverhead - filler.size() - 100, 'f'), kLong);
  ASSERT_LT(options.memory_budget - server->stats().memory_used, 20 + 2 * MemoryBudget::kValueOverhead);
  EXPECT_TRUE(is_budget_refusal(refusal_of([&] { client.add("counter", 1, kLong); })));
  EXPECT_TRUE(is_budget_refusal(refusal_of([&] { client.compare_set("cas", {}, value_of(1), kLong); })));
  EXPECT_FALSE(client.check({"counter"}, kLong));
  EXPECT_FALSE(client.check({"cas"}, kLong));
  // ...but what adds nothing goes on: an ADD to a counter whose text keeps
  // its length, a compare_set that does not swap, a value replaced by a
  // smaller one.
  EXPECT_EQ(client.add("barrier", 1, kLong), 2);
  EXPECT_EQ(client.compare_set(key_of(0), to_bytes("not it"), value_of(5), kLong), value_of(0));
  client.set(key_of(1), Bytes(100, 'r'), kLong);
  EXPECT_EQ(client.get(key_of(1), kLong), Bytes(100, 'r'));
  EXPECT_LE(server->stats().memory_used, options.memory_budget);

  // Deleting gives the room back.
  EXPECT_TRUE(client.delete_key(filler, kLong));
  EXPECT_TRUE(client.delete_key(key_of(2), kLong));
  client.set(key_of(stored), value_of(stored), kLong);
  EXPECT_EQ(client.get(key_of(stored), kLong), value_of(stored));
  EXPECT_LE(server->stats().memory_used, options.memory_budget);
}

}  // namespace
}  // namespace tdist
