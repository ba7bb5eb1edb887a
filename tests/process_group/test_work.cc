// Work and Future (tdist/work.h) on their own: a work's future lives inside
// the work and keeps it alive, then() callbacks see the outcome, and a
// future's progress function lets the waiting thread finish the work.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <vector>

#include "tdist/errors.h"
#include "tdist/work.h"

namespace tdist {
namespace {

Tensor small_tensor(std::vector<float>& storage) {
  return Tensor::wrap(storage.data(), DType::kFloat32, {static_cast<int64_t>(storage.size())});
}

TEST(Work, ItsFutureKeepsItAliveAndCompletesWithItsOutputs) {
  std::vector<float> storage{1.0F, 2.0F, 3.0F};
  auto work = std::make_shared<Work>("recv", std::vector<Tensor>{small_tensor(storage)});
  const std::weak_ptr<Work> weak = work;
  auto future = work->get_future();
  EXPECT_EQ(future, work->get_future());  // one future per work
  Work* raw = work.get();
  work.reset();
  ASSERT_FALSE(weak.expired());  // the future holds it
  EXPECT_FALSE(future->completed());
  raw->finish(nullptr, 4);
  EXPECT_EQ(raw->source_rank(), 4);
  ASSERT_TRUE(future->completed());
  const auto values = future->value();
  ASSERT_EQ(values.size(), 1U);
  EXPECT_EQ(values[0].data(), storage.data());
  future.reset();
  EXPECT_TRUE(weak.expired());
}

TEST(Work, AWorkMadeFinishedIsWhatFinishLeaves) {
  // Work::finished: a message that moved inside its post. Everything a
  // caller can ask must read as after finish(): done, its outputs, its
  // source, callbacks run at once, a later finish() ignored.
  std::vector<float> storage{5.0F, 6.0F};
  auto work = Work::finished("recv", std::vector<Tensor>{small_tensor(storage)}, nullptr, 3);
  EXPECT_EQ(work->op(), "recv");
  EXPECT_TRUE(work->is_completed());
  EXPECT_TRUE(work->is_success());
  EXPECT_EQ(work->exception(), nullptr);
  EXPECT_EQ(work->source_rank(), 3);
  EXPECT_TRUE(work->wait(std::chrono::milliseconds(1)));
  auto future = work->get_future();
  const auto values = future->value();
  ASSERT_EQ(values.size(), 1U);
  EXPECT_EQ(values[0].data(), storage.data());
  EXPECT_EQ(values[0].numel(), 2);
  int ran = 0;
  auto next = future->then([&](Future& f) {
    ++ran;
    EXPECT_EQ(f.error(), nullptr);
    return f.value();
  });
  EXPECT_EQ(ran, 1);
  EXPECT_TRUE(next->completed());
  work->finish(std::make_exception_ptr(std::runtime_error("late")), 7);
  EXPECT_TRUE(work->is_success());
  EXPECT_EQ(work->source_rank(), 3);
}

TEST(Work, ThenCallbacksSeeTheOutcomeWhetherAddedBeforeOrAfterIt) {
  auto work = std::make_shared<Work>("send");
  int before = 0;
  auto chained_before = work->get_future()->then([&](Future& f) {
    before += f.error() ? 10 : 1;
    return std::vector<Tensor>{};
  });
  EXPECT_EQ(before, 0);
  work->finish(std::make_exception_ptr(DistError("send: refused")));
  EXPECT_EQ(before, 10);
  EXPECT_THROW(chained_before->wait(), DistError);  // the work's error carries on
  EXPECT_FALSE(work->is_success());

  int after = 0;
  auto chained_after = work->get_future()->then([&](Future& f) {
    after += f.error() ? 10 : 1;
    return std::vector<Tensor>{};
  });
  EXPECT_EQ(after, 10);  // ran at once
  EXPECT_TRUE(chained_after->completed());
}

// What a point-to-point work does: the thread that waits moves the
// operation along itself, through the future's progress function.
class DrivenWork final : public Work {
 public:
  DrivenWork() : Work("recv") { future().set_progress(&DrivenWork::drive, this); }
  int drives = 0;

 private:
  static void drive(void* context, std::chrono::steady_clock::time_point /*deadline*/) {
    auto* work = static_cast<DrivenWork*>(context);
    ++work->drives;
    work->finish(nullptr, 2);
  }
};

TEST(Work, AWaitDrivesTheOperationThroughTheProgressFunctionOnlyWhileItIsPending) {
  auto work = std::make_shared<DrivenWork>();
  EXPECT_TRUE(work->wait());
  EXPECT_EQ(work->drives, 1);
  EXPECT_EQ(work->source_rank(), 2);
  EXPECT_TRUE(work->wait());  // completed: no second drive
  EXPECT_EQ(work->drives, 1);
}

}  // namespace
}  // namespace tdist
