// The Store API of the spec, checked the same way on every store.

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

#include "store_worlds.h"
#include "tdist/errors.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;

class StoreConformance : public ::testing::TestWithParam<StoreKind> {
 protected:
  std::vector<std::shared_ptr<Store>> world(int n) { return GetParam().make(n); }
};

Bytes binary_value(size_t size) {
  Bytes value(size);
  for (size_t i = 0; i < size; ++i) value[i] = static_cast<uint8_t>((i * 131 + 7) % 256);
  return value;
}

TEST_P(StoreConformance, SetThenGetFromAnotherHandle) {
  auto stores = world(2);
  stores[0]->set("first_key", "first_value");
  EXPECT_EQ(to_string(stores[1]->get("first_key")), "first_value");
}

TEST_P(StoreConformance, ValuesAreArbitraryBytes) {
  auto stores = world(2);
  Bytes with_zeros = {0, 1, 0, 255, 0};
  stores[0]->set("zeros", with_zeros);
  stores[0]->set("empty", Bytes{});
  Bytes big = binary_value((1 << 20) + 3);
  stores[0]->set("big", big);
  EXPECT_EQ(stores[1]->get("zeros"), with_zeros);
  EXPECT_EQ(stores[1]->get("empty"), Bytes{});
  EXPECT_EQ(stores[1]->get("big"), big);
}

TEST_P(StoreConformance, KeysMayHoldAnyCharacters) {
  auto stores = world(2);
  std::string key = "a/b c\t\xc3\xa9\x01";
  stores[0]->set(key, "v");
  EXPECT_EQ(to_string(stores[1]->get(key)), "v");
  EXPECT_FALSE(stores[1]->check({"a/b c"}));
}

TEST_P(StoreConformance, SetOverwrites) {
  auto stores = world(2);
  stores[0]->set("k", "old");
  stores[1]->set("k", "new");
  EXPECT_EQ(to_string(stores[0]->get("k")), "new");
}

TEST_P(StoreConformance, GetWaitsForALaterSet) {
  auto stores = world(2);
  std::thread setter;
  std::atomic<bool> getter_started{false};
  std::thread getter([&] {
    getter_started = true;
    EXPECT_EQ(to_string(stores[0]->get("late")), "arrived");
  });
  // The set happens whenever the thread gets to it; get() must wait for it
  // whether it comes before or after.
  setter = std::thread([&] { stores[1]->set("late", "arrived"); });
  setter.join();
  getter.join();
  EXPECT_TRUE(getter_started);
}

TEST_P(StoreConformance, GetTimesOutWithAStoreTimeoutError) {
  auto stores = world(1);
  stores[0]->set_timeout(150ms);
  try {
    stores[0]->get("never_set_key");
    FAIL() << "get of a missing key returned";
  } catch (const DistStoreTimeoutError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("never_set_key"), std::string::npos) << what;
    EXPECT_NE(what.find("150 ms"), std::string::npos) << what;
    EXPECT_NE(what.find("get"), std::string::npos) << what;
  }
  // The same error is a DistStoreError, a DistTimeoutError and a DistError.
  EXPECT_THROW(stores[0]->get("never_set_key"), DistStoreError);
  EXPECT_THROW(stores[0]->get("never_set_key"), DistTimeoutError);
  EXPECT_THROW(stores[0]->get("never_set_key"), DistError);
  EXPECT_THROW(stores[0]->get("never_set_key"), std::runtime_error);
}

TEST_P(StoreConformance, AddCreatesACounterAndReadsBackAsText) {
  auto stores = world(2);
  EXPECT_EQ(stores[0]->add("first_key", 1), 1);
  EXPECT_EQ(stores[1]->add("first_key", 6), 7);
  EXPECT_EQ(to_string(stores[0]->get("first_key")), "7");
  EXPECT_EQ(stores[1]->add("first_key", -10), -3);
  EXPECT_EQ(stores[0]->add("first_key", 0), -3);
  EXPECT_EQ(stores[0]->add("other", 0), 0);
  EXPECT_EQ(to_string(stores[1]->get("other")), "0");
}

TEST_P(StoreConformance, AddWrapsAroundAtInt64Limits) {
  auto stores = world(1);
  EXPECT_EQ(stores[0]->add("c", INT64_MAX), INT64_MAX);
  EXPECT_EQ(stores[0]->add("c", 1), INT64_MIN);
}

TEST_P(StoreConformance, AddOnAKeyWrittenBySetRaises) {
  auto stores = world(2);
  stores[0]->set("plain", "5");
  try {
    stores[1]->add("plain", 1);
    FAIL() << "add on a set() key returned";
  } catch (const DistStoreError& e) {
    EXPECT_NE(std::string(e.what()).find("plain'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(to_string(stores[0]->get("plain")), "5");
}

TEST_P(StoreConformance, CompareSetFollowsTheSpecRules) {
  auto stores = world(2);
  // Present and equal to expected: swapped, returns desired.
  stores[0]->set("key", "first_value");
  EXPECT_EQ(to_string(stores[1]->compare_set("key", to_bytes("first_value"), to_bytes("second_value"))),
            "second_value");
  EXPECT_EQ(to_string(stores[0]->get("key")), "second_value");
  // Present and different: unchanged, returns the current value.
  EXPECT_EQ(to_string(stores[1]->compare_set("key", to_bytes("wrong"), to_bytes("third"))), "second_value");
  EXPECT_EQ(to_string(stores[0]->get("key")), "second_value");
  // Absent and expected empty: created.
  EXPECT_EQ(to_string(stores[1]->compare_set("fresh", Bytes{}, to_bytes("made"))), "made");
  EXPECT_EQ(to_string(stores[0]->get("fresh")), "made");
  // Absent and expected non-empty: nothing set, returns expected.
  EXPECT_EQ(to_string(stores[1]->compare_set("absent", to_bytes("exp"), to_bytes("des"))), "exp");
  EXPECT_FALSE(stores[0]->check({"absent"}));
  // Present, expected empty but value non-empty: unchanged.
  EXPECT_EQ(to_string(stores[1]->compare_set("fresh", Bytes{}, to_bytes("again"))), "made");
}

TEST_P(StoreConformance, CheckDoesNotWait) {
  auto stores = world(2);
  stores[0]->set_timeout(60s);
  EXPECT_FALSE(stores[1]->check({"a"}));
  stores[0]->set("a", "1");
  EXPECT_TRUE(stores[1]->check({"a"}));
  EXPECT_FALSE(stores[1]->check({"a", "b"}));
  stores[0]->add("b", 1);
  EXPECT_TRUE(stores[1]->check({"a", "b"}));
  EXPECT_TRUE(stores[1]->check({}));
}

TEST_P(StoreConformance, WaitReturnsOnceEveryKeyIsSet) {
  auto stores = world(3);
  std::thread a([&] { stores[1]->set("w1", "x"); });
  std::thread b([&] { stores[2]->add("w2", 3); });
  stores[0]->wait({"w1", "w2"});
  a.join();
  b.join();
  EXPECT_EQ(to_string(stores[0]->get("w2")), "3");
}

TEST_P(StoreConformance, WaitWithTimeoutNamesOnlyTheMissingKeys) {
  auto stores = world(1);
  stores[0]->set("here", "1");
  try {
    stores[0]->wait({"here", "bad_key"}, 120ms);
    FAIL() << "wait returned";
  } catch (const DistStoreTimeoutError& e) {
    std::string what = e.what();
    // PrefixStore errors show the full key: "'job/bad_key'".
    EXPECT_NE(what.find("bad_key'"), std::string::npos) << what;
    EXPECT_EQ(what.find("here'"), std::string::npos) << what;
    EXPECT_NE(what.find("120 ms"), std::string::npos) << what;
  }
}

TEST_P(StoreConformance, WaitWithoutTimeoutUsesSetTimeout) {
  auto stores = world(1);
  stores[0]->set_timeout(90ms);
  EXPECT_EQ(stores[0]->timeout(), 90ms);
  try {
    stores[0]->wait({"bad_key"});
    FAIL() << "wait returned";
  } catch (const DistStoreTimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("90 ms"), std::string::npos) << e.what();
  }
}

TEST_P(StoreConformance, NumKeysCountsSetAndAddKeysOnce) {
  auto stores = world(2);
  int64_t base = stores[0]->num_keys();
  EXPECT_GE(base, 0);
  stores[0]->set("a", "1");
  stores[1]->set("a", "2");
  stores[1]->add("b", 1);
  stores[0]->add("b", 1);
  stores[0]->compare_set("c", Bytes{}, to_bytes("z"));
  EXPECT_EQ(stores[0]->num_keys(), base + 3);
  EXPECT_EQ(stores[1]->num_keys(), base + 3);
}

TEST_P(StoreConformance, DeleteKeyAsTheSpecSays) {
  auto stores = world(2);
  stores[0]->set("first_key", "v");
  if (!GetParam().supports_delete) {
    EXPECT_THROW(stores[0]->delete_key("first_key"), DistStoreError);
    EXPECT_EQ(to_string(stores[1]->get("first_key")), "v");
    return;
  }
  int64_t before = stores[0]->num_keys();
  EXPECT_TRUE(stores[1]->delete_key("first_key"));
  EXPECT_FALSE(stores[0]->delete_key("first_key"));
  EXPECT_FALSE(stores[0]->delete_key("bad_key"));
  EXPECT_FALSE(stores[0]->check({"first_key"}));
  EXPECT_EQ(stores[0]->num_keys(), before - 1);
  stores[0]->set_timeout(50ms);
  EXPECT_THROW(stores[0]->get("first_key"), DistStoreTimeoutError);
  // A deleted counter starts again from zero.
  stores[0]->add("counter", 5);
  EXPECT_TRUE(stores[0]->delete_key("counter"));
  EXPECT_EQ(stores[1]->add("counter", 2), 2);
}

TEST_P(StoreConformance, ConcurrentAddsFromManyThreadsAreExact) {
  constexpr int kThreads = 8;
  constexpr int kAdds = 200;
  auto stores = world(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAdds; ++i) stores[static_cast<size_t>(t)]->add("total", t + 1);
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(stores[0]->add("total", 0), kAdds * kThreads * (kThreads + 1) / 2);
}

TEST_P(StoreConformance, CompareSetElectsExactlyOneWinner) {
  constexpr int kThreads = 6;
  auto stores = world(kThreads);
  std::vector<std::string> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      seen[static_cast<size_t>(t)] = to_string(
          stores[static_cast<size_t>(t)]->compare_set("leader", Bytes{}, to_bytes(std::to_string(t))));
    });
  }
  for (auto& thread : threads) thread.join();
  std::set<std::string> distinct(seen.begin(), seen.end());
  ASSERT_EQ(distinct.size(), 1u);
  EXPECT_EQ(to_string(stores[0]->get("leader")), *distinct.begin());
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreConformance, ::testing::ValuesIn(all_store_kinds()),
                         [](const ::testing::TestParamInfo<StoreKind>& p) { return p.param.name; });

}  // namespace
}  // namespace tdist::testing
