// transport::Request on its own: callbacks run once, on completion or at
// once if it came first, and the owner handed to on_complete lives until
// they have run (a work's callback holds only a plain pointer to it).

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>

#include "transport/transport.h"

namespace tdist::transport {
namespace {

struct Owner {
  int completions = 0;
};

TEST(Request, TheOwnerLivesUntilTheCallbacksHaveRunAndIsReleasedAfter) {
  auto request = std::make_shared<Request>(Request::Kind::kRecv, 1, 7, 8);
  auto owner = std::make_shared<Owner>();
  const std::weak_ptr<Owner> weak = owner;
  Owner* raw = owner.get();
  request->on_complete([raw](Request& r) { raw->completions += r.received_bytes() == 8 && r.source() == 1; },
                       std::move(owner));
  ASSERT_FALSE(weak.expired());  // the request holds it
  request->complete(1, 8);
  EXPECT_TRUE(weak.expired());  // ran, then released
  EXPECT_TRUE(request->done());
  EXPECT_EQ(request->source(), 1);
  EXPECT_EQ(request->received_bytes(), 8U);
  EXPECT_EQ(request->error(), nullptr);
}

TEST(Request, ACallbackAddedAfterCompletionRunsAtOnceAndKeepsNoOwner) {
  auto request = std::make_shared<Request>(Request::Kind::kSend, 2, 7, 8);
  request->fail(std::make_exception_ptr(std::runtime_error("peer gone")));
  auto owner = std::make_shared<Owner>();
  const std::weak_ptr<Owner> weak = owner;
  Owner* raw = owner.get();
  request->on_complete([raw](Request& r) { raw->completions += r.error() != nullptr; }, std::move(owner));
  EXPECT_TRUE(weak.expired());
  EXPECT_THROW(request->wait_until(Clock::now()), std::runtime_error);
}

TEST(Request, EveryCallbackRunsOnceWithTheFirstOwnerAlive) {
  auto request = std::make_shared<Request>(Request::Kind::kRecv, 0, 1, 4);
  auto owner = std::make_shared<Owner>();
  const std::weak_ptr<Owner> weak = owner;
  Owner* raw = owner.get();
  request->on_complete([raw](Request&) { ++raw->completions; }, std::move(owner));
  request->on_complete([raw](Request&) { ++raw->completions; });  // no owner of its own
  request->on_complete([raw](Request&) { ++raw->completions; });
  const auto keep = weak.lock();  // to read the count afterwards
  request->complete(0, 4);
  request->run_callbacks();  // a second run finds none
  EXPECT_EQ(keep->completions, 3);
}

TEST(Request, ASecondOwnerIsRefusedAndTheFirstStays) {
  auto request = std::make_shared<Request>(Request::Kind::kSend, 1, 1, 4);
  auto first = std::make_shared<Owner>();
  const std::weak_ptr<Owner> weak = first;
  Owner* raw = first.get();
  request->on_complete([raw](Request&) { ++raw->completions; }, std::move(first));
  EXPECT_THROW(request->on_complete([](Request&) {}, std::make_shared<Owner>()), std::logic_error);
  ASSERT_FALSE(weak.expired());
  const auto keep = weak.lock();
  request->complete(1, 4);
  EXPECT_EQ(keep->completions, 1);
}

}  // namespace
}  // namespace tdist::transport
