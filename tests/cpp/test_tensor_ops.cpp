// The index rule and tensor construction behind the torch Lua module, against plain ATen calls.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "host/core/error.h"
#include "host/core/tensor_ops.h"
#include "host/io/tensor_file.h"

using namespace luatune;

TEST(TensorOps, ParseItems) {
  auto items = index_parse("0, 1:3, ::2, ..., none, -1");
  ASSERT_EQ(items.size(), 6u);
  EXPECT_EQ(items[0].kind, IndexItem::Kind::select);
  EXPECT_EQ(items[1].kind, IndexItem::Kind::slice);
  EXPECT_EQ(*items[1].start, 1);
  EXPECT_EQ(*items[1].stop, 3);
  EXPECT_FALSE(items[2].start.has_value());
  EXPECT_EQ(items[2].step, 2);
  EXPECT_EQ(items[3].kind, IndexItem::Kind::ellipsis);
  EXPECT_EQ(items[4].kind, IndexItem::Kind::newaxis);
  EXPECT_EQ(items[5].index, -1);
  EXPECT_THROW(index_parse("1.5"), Error);
  EXPECT_THROW(index_parse("::-1"), Error);
  EXPECT_THROW(index_parse("1:2:3:4"), Error);
}

TEST(TensorOps, IndexMatchesATen) {
  at::Tensor t = at::arange(24).reshape({2, 3, 4});
  EXPECT_TRUE(at::equal(tensor_index(t, index_parse("1")), t[1]));
  EXPECT_TRUE(at::equal(tensor_index(t, index_parse("-1, 1:3")), t[1].slice(0, 1, 3)));
  EXPECT_TRUE(at::equal(tensor_index(t, index_parse("..., ::2")), t.slice(2, 0, 4, 2)));
  EXPECT_EQ(tensor_index(t, index_parse("none")).sizes(), (std::vector<int64_t>{1, 2, 3, 4}));
  IndexItem mask;
  mask.kind = IndexItem::Kind::tensor;
  mask.tensor = at::tensor({1, 0}).to(at::kBool);
  EXPECT_TRUE(at::equal(tensor_index(t, {mask}), t.slice(0, 0, 1)));
}

TEST(TensorOps, IndexPutWritesThrough) {
  at::Tensor t = at::zeros({3, 3});
  tensor_index_put(t, index_parse(":, 1"), at::scalar_tensor(7.0));
  EXPECT_EQ(t.sum().item<double>(), 21.0);
  EXPECT_EQ(t[2][1].item<double>(), 7.0);
}

TEST(TensorOps, FromValues) {
  at::Tensor t = tensor_from_values({1, 2, 3, 4, 5, 6}, {2, 3}, at::kFloat);
  EXPECT_EQ(t.scalar_type(), at::kFloat);
  EXPECT_EQ(t[1][2].item<float>(), 6.0f);
  at::Tensor s = tensor_from_values({5}, {}, at::kLong);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item<int64_t>(), 5);
}

TEST(TensorOps, Describe) {
  EXPECT_EQ(tensor_describe(at::zeros({2, 3})), "Tensor(float32, [2, 3], cpu)");
  EXPECT_EQ(tensor_describe(at::Tensor()), "Tensor(released)");
  EXPECT_EQ(tensor_describe(at::zeros({1}, at::kBFloat16).requires_grad_(true)),
            "Tensor(bfloat16, [1], cpu, requires_grad)");
}

TEST(TensorFile, RoundTripsExactlyAndAtomically) {
  std::string path = ::testing::TempDir() + "/lt_tensor_file.pt";
  at::Tensor t = at::randn({4, 5}).to(at::kBFloat16);
  tensor_file_save(path, t);
  TensorFile back = tensor_file_load(path);
  ASSERT_FALSE(back.is_dict);
  EXPECT_TRUE(at::equal(back.tensor, t));
  tensor_file_save(path, NamedTensors{{"a", at::arange(3)}, {"b", at::ones({2})}});
  back = tensor_file_load(path);
  ASSERT_TRUE(back.is_dict);
  ASSERT_EQ(back.dict.size(), 2u);
  EXPECT_EQ(back.dict[0].first, "a");
  EXPECT_TRUE(at::equal(back.dict[0].second, at::arange(3)));
  std::remove(path.c_str());
}

TEST(TensorFile, GarbageFailsWithThePath) {
  std::string path = ::testing::TempDir() + "/lt_garbage.pt";
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fputs("not a tensor", f);
  std::fclose(f);
  try {
    tensor_file_load(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot load '" + path + "': not a PyTorch tensor file"),
              std::string::npos)
        << e.what();
    EXPECT_EQ(std::string(e.what()).find("Exception raised from"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}
