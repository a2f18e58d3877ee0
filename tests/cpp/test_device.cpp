// Dtype and device names: every accepted spelling, and the errors for the rest.
#include <gtest/gtest.h>

#include "host/core/device.h"
#include "host/core/error.h"

using namespace luatune;

TEST(Device, DtypeNamesAndShortForms) {
  EXPECT_EQ(dtype_parse("bf16"), c10::kBFloat16);
  EXPECT_EQ(dtype_parse("bfloat16"), c10::kBFloat16);
  EXPECT_EQ(dtype_parse("f32"), c10::kFloat);
  EXPECT_EQ(dtype_parse("fp32"), c10::kFloat);  // the recipes' spelling (bf16 / fp16 / fp32)
  EXPECT_EQ(dtype_parse("fp16"), c10::kHalf);
  EXPECT_EQ(dtype_parse("half"), c10::kHalf);
  EXPECT_EQ(dtype_parse("int64"), c10::kLong);
  EXPECT_EQ(dtype_parse("bool"), c10::kBool);
  EXPECT_EQ(dtype_name(c10::kBFloat16), "bfloat16");
  EXPECT_EQ(dtype_name(c10::kLong), "int64");
}

TEST(Device, UnknownDtypeSuggests) {
  try {
    dtype_parse("bfloat61");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown dtype 'bfloat61' (did you mean 'bfloat16'?)"),
              std::string::npos);
  }
  c10::ScalarType t;
  EXPECT_FALSE(dtype_try_parse("cuda", &t));
}

TEST(Device, DeviceNames) {
  EXPECT_TRUE(device_parse("cpu").is_cpu());
  EXPECT_EQ(device_name(device_parse("cpu")), "cpu");
  c10::Device a = device_parse("auto");
  EXPECT_EQ(a.is_cuda(), cuda_available());
  EXPECT_THROW(device_parse("tpu"), Error);
  EXPECT_THROW(device_parse("cuda:x"), Error);
}

TEST(Device, CudaWithoutCudaFailsWithHint) {
  if (cuda_available()) GTEST_SKIP() << "this machine has CUDA";
  try {
    device_parse("cuda");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device is available"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("HINT: use device=\"auto\""), std::string::npos);
  }
}
