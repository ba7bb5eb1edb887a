// The unexpected-message list's index (transport/unexpected_messages.h):
// it must find exactly the messages the old pass over every message found,
// the first in arrival order, as messages come and go.
#include "transport/unexpected_messages.h"

#include <gtest/gtest.h>

#include <iterator>
#include <random>
#include <vector>

#include "tdist/dtype.h"

namespace tdist::transport {
namespace {

using tdist::detail::CallKind;
using tdist::detail::CallSignature;

struct Message {
  int src;
  CallSignature sig;
};

CallSignature call(uint64_t seq, uint64_t count = 8, CallKind kind = CallKind::kBroadcast) {
  auto sig = tdist::detail::collective_signature(kind, DType::kFloat32, count, 0);
  sig.seq = seq;
  return sig;
}

// What conflicting_message computed before the index: a pass over all.
const Message* reference(const std::vector<Message>& all, const CallSignature& mine) {
  for (const auto& m : all) {
    if (!m.sig.empty() && m.sig.kind != CallKind::kPointToPoint &&
        (m.sig.seq < mine.seq || (m.sig.seq == mine.seq && !(m.sig == mine))))
      return &m;
  }
  return nullptr;
}

TEST(UnexpectedMessages, MessagesOfLaterCallsAreNoConflictAndAnEarlierOneIs) {
  UnexpectedMessages<Message> list;
  for (uint64_t seq = 5; seq < 1005; ++seq) list.push_back({0, call(seq)});
  EXPECT_EQ(list.first_conflict(call(4)), list.end());
  EXPECT_EQ(list.first_conflict(call(5)), list.end());  // this call's, as this rank passed it
  auto first = list.first_conflict(call(6));
  ASSERT_NE(first, list.end());
  EXPECT_EQ(first->sig.seq, 5U);
  list.erase(list.begin());
  EXPECT_EQ(list.first_conflict(call(6)), list.end());
}

TEST(UnexpectedMessages, AMessageOfThisCallWithOtherArgumentsIsAConflict) {
  UnexpectedMessages<Message> list;
  list.push_back({1, call(7)});
  list.push_back({2, call(7, 9)});
  auto it = list.first_conflict(call(7));
  ASSERT_NE(it, list.end());
  EXPECT_EQ(it->src, 2);
  // The other order: the rank passed 9 elements, the first message differs.
  it = list.first_conflict(call(7, 9));
  ASSERT_NE(it, list.end());
  EXPECT_EQ(it->src, 1);
  list.erase(list.begin());
  EXPECT_EQ(list.first_conflict(call(7, 9)), list.end());  // the differing one is gone
}

TEST(UnexpectedMessages, PointToPointAndUnsignedMessagesAreNeverConflicts) {
  UnexpectedMessages<Message> list;
  list.push_back({0, tdist::detail::p2p_signature(DType::kFloat32, 3)});
  list.push_back({0, CallSignature{}});
  EXPECT_EQ(list.first_conflict(call(9)), list.end());
  list.clear();
  EXPECT_TRUE(list.empty());
}

TEST(UnexpectedMessages, AgreesWithAPassOverEveryMessageThroughRandomArrivalsAndRemovals) {
  std::mt19937 random(12345);
  UnexpectedMessages<Message> list;
  std::vector<Message> mirror;  // the same messages, in the same order
  for (int step = 0; step < 20000; ++step) {
    const int action = static_cast<int>(random() % 3);
    if (action < 2 || mirror.empty()) {
      const uint64_t seq = 10 + random() % 20;
      const int kind = static_cast<int>(random() % 10);
      CallSignature sig = kind == 0   ? tdist::detail::p2p_signature(DType::kFloat32, 4)
                          : kind == 1 ? call(seq, 16)  // a differing count
                                      : call(seq);
      const Message message{static_cast<int>(random() % 4), sig};
      list.push_back(message);
      mirror.push_back(message);
    } else {
      const size_t at = random() % mirror.size();
      auto it = list.begin();
      std::advance(it, static_cast<std::ptrdiff_t>(at));
      list.erase(it);
      mirror.erase(mirror.begin() + static_cast<std::ptrdiff_t>(at));
    }
    const CallSignature mine = call(10 + random() % 22);
    const Message* want = reference(mirror, mine);
    const auto got = list.first_conflict(mine);
    if (want == nullptr) {
      ASSERT_EQ(got, list.end()) << "step " << step;
    } else {
      ASSERT_NE(got, list.end()) << "step " << step;
      const auto& view = list;
      ASSERT_EQ(std::distance(view.begin(), got), want - mirror.data()) << "step " << step;
    }
  }
}

}  // namespace
}  // namespace tdist::transport
