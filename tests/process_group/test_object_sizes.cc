// Object collectives check the sizes peers send before sizing buffers by
// them: a group whose broadcast delivers a negative size (a corrupt or
// foreign peer) makes broadcast_object_list raise instead of wrapping the
// total.

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tdist/distributed.h"
#include "tdist/errors.h"
#include "tdist/process_group.h"

namespace tdist::testing {
namespace {

// Rank 1 of 2 whose broadcasts deliver -5 in every int64 element, as a
// corrupt peer would.
class CorruptSizes final : public ProcessGroup {
 public:
  CorruptSizes() : ProcessGroup(1, 2, ProcessGroupOptions{}) {}
  std::string backend_name() const override { return "corrupt-sizes"; }
  WorkPtr broadcast(const Tensor& tensor, int) override {
    auto* values = static_cast<int64_t*>(tensor.data());
    for (int64_t i = 0; i < tensor.numel(); ++i) values[i] = -5;
    return nullptr;
  }
};

TEST(ObjectSizes, ANegativeSizeFromAPeerIsRefused) {
  auto group = std::make_shared<CorruptSizes>();
  std::vector<Bytes> objects(2);
  try {
    broadcast_object_list(objects, 0, group);
  } catch (const DistBackendError& e) {
    EXPECT_NE(std::string(e.what()).find("broadcast_object_list: object 0 has a size of -5 bytes"),
              std::string::npos)
        << e.what();
    return;
  }
  ADD_FAILURE() << "a negative object size was accepted";
}

}  // namespace
}  // namespace tdist::testing
