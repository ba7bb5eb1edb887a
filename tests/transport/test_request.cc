// transport::Request on its own: callbacks run once, on completion or at
// once if it came first, and the owner handed to on_complete lives until
// they have run (a work's callback holds only a plain pointer to it).

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>

#include "transport/transport.h"

namespace tdist::transport {
namespace {

// What a callback works on. The callbacks count through it into `runs`,
// which outlives it, so that a callback run after its owner was released
// is a use after free (ASan) and the count can be read afterwards.
struct Owner {
  int* runs;
};

// An owner to hand to on_complete, the plain pointer its callback holds,
// and whether the request still keeps it.
struct Owned {
  explicit Owned(int& runs) : owner(std::make_shared<Owner>(Owner{&runs})), weak(owner), raw(owner.get()) {}
  std::shared_ptr<Owner> owner;
  std::weak_ptr<Owner> weak;
  Owner* raw;
};

TEST(Request, TheOwnerLivesUntilTheCallbacksHaveRunAndIsReleasedAfter) {
  auto request = std::make_shared<Request>(Request::Kind::kRecv, 1, 7, 8);
  int runs = 0;
  Owned o(runs);
  request->on_complete(
      [raw = o.raw](Request& r) { *raw->runs += r.received_bytes() == 8 && r.source() == 1; },
      std::move(o.owner));
  ASSERT_FALSE(o.weak.expired());  // the request holds it
  request->complete(1, 8);
  EXPECT_EQ(runs, 1);
  EXPECT_TRUE(o.weak.expired());  // ran, then released
  EXPECT_TRUE(request->done());
  EXPECT_EQ(request->source(), 1);
  EXPECT_EQ(request->received_bytes(), 8U);
  EXPECT_EQ(request->error(), nullptr);
}

TEST(Request, ACallbackAddedAfterCompletionRunsAtOnceAndKeepsNoOwner) {
  auto request = std::make_shared<Request>(Request::Kind::kSend, 2, 7, 8);
  request->fail(std::make_exception_ptr(std::runtime_error("peer gone")));
  int runs = 0;
  Owned o(runs);
  request->on_complete([raw = o.raw](Request& r) { *raw->runs += r.error() != nullptr; }, std::move(o.owner));
  EXPECT_EQ(runs, 1);
  EXPECT_TRUE(o.weak.expired());
  EXPECT_THROW(request->wait_until(Clock::now()), std::runtime_error);
}

TEST(Request, EveryCallbackRunsOnceWithTheFirstOwnerAlive) {
  auto request = std::make_shared<Request>(Request::Kind::kRecv, 0, 1, 4);
  int runs = 0;
  Owned o(runs);
  for (int k = 0; k < 3; ++k) {  // the first with the owner, the others without one of their own
    request->on_complete([raw = o.raw](Request&) { ++*raw->runs; }, k == 0 ? std::move(o.owner) : nullptr);
  }
  request->complete(0, 4);
  request->run_callbacks();  // a second run finds none
  EXPECT_EQ(runs, 3);
  EXPECT_TRUE(o.weak.expired());
}

TEST(Request, ASecondOwnerIsRefusedAndTheFirstStays) {
  auto request = std::make_shared<Request>(Request::Kind::kSend, 1, 1, 4);
  int runs = 0;
  Owned o(runs);
  request->on_complete([raw = o.raw](Request&) { ++*raw->runs; }, std::move(o.owner));
  EXPECT_THROW(request->on_complete([](Request&) {}, std::make_shared<Owner>()), std::logic_error);
  ASSERT_FALSE(o.weak.expired());
  request->complete(1, 4);
  EXPECT_EQ(runs, 1);
}

}  // namespace
}  // namespace tdist::transport
