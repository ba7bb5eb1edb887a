// Tensor: wrapping and owning memory, shared storage, views and their bounds,
// copies, overlap detection and zero-element tensors.

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "tdist/errors.h"
#include "tdist/tensor.h"

namespace tdist {
namespace {

// Runs `fn`, which must raise DistInvalidArgument whose message contains
// every one of `needles`.
template <typename Fn>
void expect_invalid(Fn fn, std::initializer_list<const char*> needles) {
  try {
    fn();
    ADD_FAILURE() << "no DistInvalidArgument";
  } catch (const DistInvalidArgument& e) {
    const std::string message = e.what();
    for (const char* needle : needles) {
      EXPECT_NE(message.find(needle), std::string::npos) << "\"" << needle << "\" not in: " << message;
    }
  }
}

TEST(Tensor, DefaultIsEmptyFloat32) {
  Tensor t;
  EXPECT_EQ(t.dtype(), DType::kFloat32);
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.nbytes(), 0u);
  EXPECT_EQ(t.describe(), "float32[0]");
}

TEST(Tensor, WrapVectorIsZeroCopy) {
  std::vector<float> values = {1, 2, 3, 4, 5, 6};
  Tensor t = Tensor::wrap(values);
  EXPECT_EQ(t.dtype(), DType::kFloat32);
  EXPECT_EQ(t.shape(), std::vector<int64_t>{6});
  EXPECT_EQ(t.dim(), 1);
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.element_size(), 4u);
  EXPECT_EQ(t.nbytes(), 24u);
  EXPECT_EQ(t.data(), values.data());
  EXPECT_FALSE(t.owns_memory());
  t.data<float>()[2] = 42;
  EXPECT_EQ(values[2], 42);  // the tensor writes into the vector
  values[0] = -1;
  EXPECT_EQ(t.data<float>()[0], -1);
}

TEST(Tensor, WrapWithShapeAndSpan) {
  std::vector<int32_t> values(12);
  Tensor t = Tensor::wrap(values, {4, 3});
  EXPECT_EQ(t.describe(), "int32[4, 3]");
  EXPECT_EQ(t.dim(), 2);
  EXPECT_EQ(t.numel(), 12);
  std::span<int32_t> span(values.data() + 2, 5);
  Tensor s = Tensor::wrap(span);
  EXPECT_EQ(s.data(), values.data() + 2);
  EXPECT_EQ(s.numel(), 5);
  expect_invalid([&] { Tensor::wrap(values, {5, 3}); }, {"[5, 3]", "15", "12"});
  expect_invalid([&] { Tensor::wrap(span, {2, 2}); }, {"[2, 2]"});
}

TEST(Tensor, WrapRawPointerChecks) {
  alignas(8) double storage[4] = {};
  Tensor t = Tensor::wrap(storage, DType::kFloat64, {2, 2});
  EXPECT_EQ(t.describe(), "float64[2, 2]");
  expect_invalid([] { Tensor::wrap(nullptr, DType::kInt64, {3}); }, {"null"});
  expect_invalid([&] { Tensor::wrap(storage, DType::kInt64, {2, -1}); }, {"negative", "[2, -1]"});
  expect_invalid([&] { Tensor::wrap(reinterpret_cast<char*>(storage) + 2, DType::kFloat32, {1}); },
                 {"aligned", "float32"});
  // Byte-sized types have no alignment requirement.
  Tensor bytes = Tensor::wrap(reinterpret_cast<char*>(storage) + 3, DType::kUInt8, {5});
  EXPECT_EQ(bytes.nbytes(), 5u);
  // Sizes whose byte count overflows are refused.
  const int64_t big = int64_t{1} << 40;
  expect_invalid([&] { Tensor::wrap(storage, DType::kFloat64, {big, big}); }, {"too large"});
  expect_invalid([&] { Tensor::empty(DType::kFloat64, {int64_t{1} << 61}); }, {"too large"});
}

TEST(Tensor, DataTypeChecked) {
  Tensor t = Tensor::zeros(DType::kFloat16, {3});
  EXPECT_NE(t.data<Half>(), nullptr);
  expect_invalid([&] { t.data<float>(); }, {"float32", "float16"});
  expect_invalid([&] { t.data<uint8_t>(); }, {"uint8", "float16"});
  expect_invalid([&] { t.to_vector<int16_t>(); }, {"int16", "float16"});
}

TEST(Tensor, EmptyAndZerosOwnAlignedMemory) {
  Tensor e = Tensor::empty(DType::kInt64, {5, 2});
  EXPECT_TRUE(e.owns_memory());
  EXPECT_EQ(e.numel(), 10);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(e.data()) % 64, 0u);
  for (DType d : kAllDTypes) {
    Tensor z = Tensor::zeros(d, {3, 7});
    const auto* bytes = static_cast<const unsigned char*>(z.data());
    ASSERT_NE(bytes, nullptr);
    for (size_t i = 0; i < z.nbytes(); ++i) ASSERT_EQ(bytes[i], 0) << dtype_name(d);
  }
  EXPECT_EQ(Tensor::zeros(DType::kComplex64, {2}).to_vector<std::complex<float>>()[1],
            std::complex<float>(0, 0));
}

TEST(Tensor, ScalarHasOneElement) {
  Tensor s = Tensor::zeros(DType::kInt64, {});
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.nbytes(), 8u);
  EXPECT_EQ(s.describe(), "int64[]");
  expect_invalid([&] { s.narrow(0, 1); }, {"narrow", "dimension"});
  EXPECT_EQ(s.reshape({1, 1}).describe(), "int64[1, 1]");
}

TEST(Tensor, FromVectorCopies) {
  std::vector<int16_t> values = {1, -2, 3, -4};
  Tensor t = Tensor::from_vector(values, {2, 2});
  EXPECT_TRUE(t.owns_memory());
  EXPECT_NE(t.data(), values.data());
  values[0] = 100;
  EXPECT_EQ(t.data<int16_t>()[0], 1);
  EXPECT_EQ(t.to_vector<int16_t>(), (std::vector<int16_t>{1, -2, 3, -4}));
  expect_invalid([&] { Tensor::from_vector(values, {3}); }, {"[3]", "4"});

  Tensor b = Tensor::from_vector(std::vector<bool>{true, false, true});
  EXPECT_EQ(b.dtype(), DType::kBool);
  const auto* raw = static_cast<const uint8_t*>(b.data());
  EXPECT_EQ(raw[0], 1);
  EXPECT_EQ(raw[1], 0);
  EXPECT_EQ(raw[2], 1);
  EXPECT_EQ(b.to_vector<bool>(), (std::vector<bool>{true, false, true}));
}

TEST(Tensor, CopiesShareStorage) {
  Tensor a = Tensor::zeros(DType::kInt32, {4});
  Tensor b = a;  // aliases, like torch
  b.data<int32_t>()[3] = 7;
  EXPECT_EQ(a.data<int32_t>()[3], 7);
  EXPECT_TRUE(a.overlaps(b));
}

TEST(Tensor, ViewsKeepOwnedStorageAlive) {
  Tensor v;
  {
    Tensor owner = Tensor::from_vector(std::vector<double>{1, 2, 3, 4});
    v = owner.view(1, 2);
  }
  // The owner is gone; the view still holds the allocation (ASan would flag
  // a use after free here).
  EXPECT_TRUE(v.owns_memory());
  EXPECT_EQ(v.to_vector<double>(), (std::vector<double>{2, 3}));
}

TEST(Tensor, ViewIsRangeOfFlattenedElements) {
  std::vector<int64_t> values(12);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int64_t>(i);
  Tensor t = Tensor::wrap(values, {3, 4});
  Tensor v = t.view(5, 4);
  EXPECT_EQ(v.shape(), std::vector<int64_t>{4});
  EXPECT_EQ(v.data<int64_t>(), values.data() + 5);
  EXPECT_EQ(v.to_vector<int64_t>(), (std::vector<int64_t>{5, 6, 7, 8}));
  EXPECT_FALSE(v.owns_memory());
  v.data<int64_t>()[0] = -5;
  EXPECT_EQ(values[5], -5);
  EXPECT_EQ(t.view(12, 0).numel(), 0);  // empty view at the end is fine
  EXPECT_EQ(t.view(0, 12).numel(), 12);
}

TEST(Tensor, ViewBoundsErrorsNameOffsetCountNumel) {
  std::vector<float> values(10);
  Tensor t = Tensor::wrap(values);
  for (auto [offset, count] : {std::pair<int64_t, int64_t>{8, 3},
                               {11, 0},
                               {-1, 2},
                               {0, -1},
                               {std::numeric_limits<int64_t>::max(), 2}}) {
    expect_invalid([&] { t.view(offset, count); },
                   {"offset", "count", "numel 10", std::to_string(offset).c_str()});
  }
}

TEST(Tensor, NarrowAlongFirstDimension) {
  std::vector<int32_t> values(24);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int32_t>(i);
  Tensor t = Tensor::wrap(values, {4, 3, 2});
  Tensor n = t.narrow(1, 2);
  EXPECT_EQ(n.shape(), (std::vector<int64_t>{2, 3, 2}));
  EXPECT_EQ(n.numel(), 12);
  EXPECT_EQ(n.data<int32_t>(), values.data() + 6);
  EXPECT_EQ(n.to_vector<int32_t>().back(), 17);
  EXPECT_EQ(t.narrow(4, 0).numel(), 0);
  expect_invalid([&] { t.narrow(3, 2); }, {"start 3", "length 2", "size 4"});
  expect_invalid([&] { t.narrow(-1, 1); }, {"start -1"});
}

TEST(Tensor, ReshapeAndFlatten) {
  Tensor t = Tensor::zeros(DType::kFloat32, {2, 6});
  Tensor r = t.reshape({3, 4});
  EXPECT_EQ(r.shape(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(r.data(), t.data());
  EXPECT_EQ(t.reshape({-1, 3}).shape(), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(t.reshape({2, -1, 2}).shape(), (std::vector<int64_t>{2, 3, 2}));
  EXPECT_EQ(t.flatten().shape(), std::vector<int64_t>{12});
  EXPECT_EQ(t.flatten().data(), t.data());
  expect_invalid([&] { t.reshape({5, 2}); }, {"[5, 2]", "12"});
  expect_invalid([&] { t.reshape({-1, 5}); }, {"12"});
  expect_invalid([&] { t.reshape({-1, -1}); }, {"-1"});
  expect_invalid([&] { t.reshape({-2, -6}); }, {"negative"});
  const int64_t big = int64_t{1} << 40;
  expect_invalid([&] { t.reshape({big, big, big}); }, {"12"});
}

TEST(Tensor, CloneIsDeep) {
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor c = a.clone();
  EXPECT_EQ(c.shape(), a.shape());
  EXPECT_NE(c.data(), a.data());
  EXPECT_FALSE(c.overlaps(a));
  a.data<float>()[0] = 9;
  EXPECT_EQ(c.data<float>()[0], 1);
  // Cloning a wrapped tensor owns the copy.
  std::vector<uint8_t> bytes = {1, 2, 3};
  EXPECT_TRUE(Tensor::wrap(bytes).clone().owns_memory());
}

TEST(Tensor, CopyFrom) {
  Tensor dst = Tensor::zeros(DType::kInt32, {2, 3});
  Tensor src = Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 4, 5, 6});
  dst.copy_from(src);  // shapes may differ, numel matches
  EXPECT_EQ(dst.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  expect_invalid([&] { dst.copy_from(Tensor::zeros(DType::kInt32, {5})); }, {"int32[5]", "int32[2, 3]"});
  expect_invalid([&] { dst.copy_from(Tensor::zeros(DType::kInt64, {6})); }, {"int64[6]"});
  // Overlapping views of one buffer copy like memmove.
  Tensor whole = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 3, 4});
  whole.view(1, 4).copy_from(whole.view(0, 4));
  EXPECT_EQ(whole.to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 1, 2, 3}));
}

TEST(Tensor, Overlaps) {
  std::vector<float> values(10);
  Tensor t = Tensor::wrap(values);
  EXPECT_TRUE(t.overlaps(t));
  EXPECT_FALSE(t.view(0, 5).overlaps(t.view(5, 5)));  // adjacent
  EXPECT_TRUE(t.view(0, 6).overlaps(t.view(5, 5)));   // one element shared
  EXPECT_TRUE(t.view(5, 5).overlaps(t.view(0, 6)));
  EXPECT_TRUE(t.view(2, 2).overlaps(t));   // contained
  EXPECT_FALSE(t.view(3, 0).overlaps(t));  // empty never overlaps
  // Different dtypes over the same bytes.
  Tensor bytes = Tensor::wrap(reinterpret_cast<uint8_t*>(values.data()) + 39, DType::kUInt8, {1});
  EXPECT_TRUE(bytes.overlaps(t));
  EXPECT_FALSE(bytes.overlaps(t.view(0, 9)));
  std::vector<float> other(10);
  EXPECT_FALSE(Tensor::wrap(other).overlaps(t));
}

TEST(Tensor, ZeroElementTensorsWorkEverywhere) {
  for (DType d : kAllDTypes) {
    Tensor e = Tensor::empty(d, {0, 5});
    EXPECT_EQ(e.numel(), 0);
    EXPECT_EQ(e.nbytes(), 0u);
    EXPECT_EQ(e.data(), nullptr);
    EXPECT_EQ(e.view(0, 0).numel(), 0);
    EXPECT_EQ(e.narrow(0, 0).shape(), (std::vector<int64_t>{0, 5}));
    EXPECT_EQ(e.reshape({5, 0, 3}).numel(), 0);
    EXPECT_EQ(e.flatten().shape(), std::vector<int64_t>{0});
    EXPECT_EQ(e.clone().numel(), 0);
    Tensor z = Tensor::zeros(d, {0});
    z.copy_from(e);
    EXPECT_FALSE(e.overlaps(e));
    expect_invalid([&] { e.view(0, 1); }, {"numel 0"});
    expect_invalid([&] { e.reshape({-1, 0}); }, {"-1"});
  }
  Tensor w = Tensor::wrap(nullptr, DType::kInt32, {0});
  EXPECT_EQ(w.describe(), "int32[0]");
  EXPECT_TRUE(Tensor::from_vector(std::vector<double>{}).to_vector<double>().empty());
  // A huge dimension times zero is still an empty tensor.
  EXPECT_EQ(Tensor::empty(DType::kFloat64, {int64_t{1} << 62, 0}).numel(), 0);
}

// A shape beyond the inline dimensions goes to the heap; either way it reads
// and compares as the vector it was made from, and copies stay independent.
TEST(Tensor, ShapesOfEveryRankReadAsTheirVectors) {
  for (size_t dims = 0; dims <= Shape::kInlineDims + 3; ++dims) {
    std::vector<int64_t> sizes;
    for (size_t d = 0; d < dims; ++d) sizes.push_back(static_cast<int64_t>(d % 3 + 1));
    int64_t numel = 1;
    for (int64_t s : sizes) numel *= s;
    Tensor t = Tensor::zeros(DType::kFloat32, sizes);
    SCOPED_TRACE(t.describe());
    EXPECT_EQ(t.numel(), numel);
    EXPECT_EQ(t.dim(), static_cast<int64_t>(dims));
    EXPECT_EQ(t.shape(), sizes);
    EXPECT_EQ(t.shape().to_vector(), sizes);
    const std::vector<int64_t> back = t.shape();
    EXPECT_EQ(back, sizes);
    EXPECT_EQ(std::vector<int64_t>(t.shape().begin(), t.shape().end()), sizes);
    for (size_t d = 0; d < dims; ++d) EXPECT_EQ(t.shape()[d], sizes[d]);

    Tensor copy = t;               // shares the bytes, copies the shape
    copy = copy.reshape({numel});  // so reshaping the copy leaves the original
    EXPECT_EQ(copy.shape(), std::vector<int64_t>{numel});
    EXPECT_EQ(copy.data(), t.data());
    EXPECT_EQ(t.shape(), sizes);
    EXPECT_EQ(t.clone().shape(), t.shape());
    if (dims > 0) {
      Tensor first = t.narrow(0, 1);
      std::vector<int64_t> narrowed = sizes;
      narrowed[0] = 1;
      EXPECT_EQ(first.shape(), narrowed);
      EXPECT_EQ(t.shape(), sizes);  // narrowing a copy leaves the original
    }
  }
  for (const std::vector<int64_t>& sizes : {std::vector<int64_t>{2, 3}, std::vector<int64_t>(9, 2)}) {
    Shape a = sizes;
    Shape b = a;
    b[1] = 4;
    EXPECT_EQ(a, sizes);
    EXPECT_FALSE(a == b);
    std::vector<int64_t> longer = sizes;
    longer.push_back(1);
    EXPECT_FALSE(a == longer);
  }
  EXPECT_TRUE(Shape{}.empty());
}

// A moved-from shape reads as a scalar's (a moved-from vector is empty),
// whether its sizes were inline or on the heap; the moved-to one has them.
TEST(Tensor, AMovedFromShapeIsEmpty) {
  for (const std::vector<int64_t>& sizes : {std::vector<int64_t>{2, 3}, std::vector<int64_t>(9, 2)}) {
    Shape from = sizes;
    Shape to = std::move(from);
    EXPECT_EQ(to, sizes);
    EXPECT_TRUE(from.empty());  // NOLINT(bugprone-use-after-move): what a moved-from shape reads as
    EXPECT_EQ(from.begin(), from.end());
    Shape assigned;
    assigned = std::move(to);
    EXPECT_EQ(assigned, sizes);
    EXPECT_TRUE(to.empty());  // NOLINT(bugprone-use-after-move)
  }
}

}  // namespace
}  // namespace tdist
