// PrefixStore: a namespace on top of another store.

#include <gtest/gtest.h>

#include "tdist/errors.h"
#include "tdist/store.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;

TEST(PrefixStore, KeysLandUnderThePrefixInTheUnderlyingStore) {
  auto base = std::make_shared<HashStore>();
  PrefixStore store("job7", base);
  store.set("k", "v");
  EXPECT_EQ(to_string(base->get("job7/k")), "v");
  EXPECT_FALSE(base->check({"k"}));
  EXPECT_EQ(store.add("c", 2), 2);
  EXPECT_EQ(to_string(base->get("job7/c")), "2");
}

TEST(PrefixStore, TwoPrefixesDoNotCollide) {
  auto base = std::make_shared<HashStore>();
  PrefixStore a("a", base);
  PrefixStore b("b", base);
  a.set("k", "from a");
  b.set("k", "from b");
  EXPECT_EQ(to_string(a.get("k")), "from a");
  EXPECT_EQ(to_string(b.get("k")), "from b");
  EXPECT_TRUE(a.delete_key("k"));
  EXPECT_FALSE(a.check({"k"}));
  EXPECT_TRUE(b.check({"k"}));
}

TEST(PrefixStore, NestedPrefixesCompose) {
  auto base = std::make_shared<HashStore>();
  auto outer = std::make_shared<PrefixStore>("outer", base);
  PrefixStore inner("inner", outer);
  inner.set("k", "v");
  EXPECT_EQ(to_string(base->get("outer/inner/k")), "v");
  EXPECT_EQ(inner.prefix(), "inner");
  EXPECT_EQ(inner.underlying_store(), outer);
}

TEST(PrefixStore, WaitAndCheckArePrefixed) {
  auto base = std::make_shared<HashStore>();
  PrefixStore store("p", base);
  base->set("k", "unprefixed");
  EXPECT_FALSE(store.check({"k"}));
  EXPECT_THROW(store.wait({"k"}, 30ms), DistStoreTimeoutError);
  base->set("p/k", "prefixed");
  store.wait({"k"}, 30ms);
}

TEST(PrefixStore, SetTimeoutReachesTheUnderlyingStore) {
  auto base = std::make_shared<HashStore>();
  PrefixStore store("p", base);
  store.set_timeout(40ms);
  EXPECT_EQ(base->timeout(), 40ms);
  EXPECT_THROW(store.get("missing"), DistStoreTimeoutError);
}

TEST(PrefixStore, NullStoreIsRejected) {
  EXPECT_THROW(PrefixStore("p", nullptr), DistInvalidArgument);
}

}  // namespace
}  // namespace tdist::testing
