// Object collectives check the sizes peers send before sizing buffers by
// them: a group whose broadcast delivers a negative size (a corrupt or
// foreign peer) makes broadcast_object_list raise instead of wrapping the
// total.

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "process_group/object_codec.h"
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

TEST(ObjectCodec, SplitsTheBytesByTheSizesThatCame) {
  const std::vector<uint8_t> data{'a', 'b', 'c', 'h', 'e', 'l', 'l', 'o'};
  const std::vector<Bytes> objects = detail::split_objects({3, 0, 5}, data, "op");
  ASSERT_EQ(objects.size(), 3u);
  EXPECT_EQ(std::string(objects[0].begin(), objects[0].end()), "abc");
  EXPECT_TRUE(objects[1].empty());
  EXPECT_EQ(std::string(objects[2].begin(), objects[2].end()), "hello");
  EXPECT_TRUE(detail::split_objects({}, {}, "op").empty());
}

TEST(ObjectCodec, SizesThatDoNotFitTheBytesAreRefused) {
  const std::vector<uint8_t> data(4, 7);
  auto message = [&](const std::vector<int64_t>& sizes) {
    try {
      detail::split_objects(sizes, data, "all_gather_object");
    } catch (const DistBackendError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message({3}), "all_gather_object: the objects' sizes add up to 3 bytes but 4 bytes came");
  EXPECT_EQ(message({3, 2}), "all_gather_object: the objects' sizes add up to 5 bytes but 4 bytes came");
  EXPECT_NE(message({-1, 5}).find("object 0 has a size of -1 bytes"), std::string::npos);
  EXPECT_NE(message({int64_t{1} << 41}).find("(expected 0 to 2^40)"), std::string::npos);
  EXPECT_EQ(message({4}), "accepted");
}

}  // namespace
}  // namespace tdist::testing
