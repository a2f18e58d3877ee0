// The run's seed and deterministic mode (host/core/seed.h): seed_torch fixes LibTorch's global
// generator, seeds are whole numbers in [0, 2^53] with pinned errors, LUATUNE_SEED parses the same
// way, and seed_deterministic turns LibTorch's flag on (warn_only off) and sets CUBLAS_WORKSPACE_CONFIG.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "host/core/seed.h"
#include "tests/cpp/test_util.h"

using namespace luatune;

TEST(Seed, TorchGlobalGeneratorRepeats) {
  seed_torch(7);
  at::Tensor a = at::rand({16});
  at::Tensor d = at::dropout(at::ones({64}), 0.5, /*train=*/true);  // LoRA's dropout draws here
  seed_torch(7);
  EXPECT_TRUE(at::equal(a, at::rand({16})));
  EXPECT_TRUE(at::equal(d, at::dropout(at::ones({64}), 0.5, true)));
  seed_torch(8);
  EXPECT_FALSE(at::equal(a, at::rand({16})));
}

TEST(Seed, CheckAcceptsWholeNumbersUpTo2To53) {
  EXPECT_EQ(seed_check(0, "seed"), 0u);
  EXPECT_EQ(seed_check(42, "seed"), 42u);
  EXPECT_EQ(seed_check(kSeedMax, "seed"), 9007199254740992u);
  EXPECT_EQ(error_of([] { seed_check(-1, "config: seed"); }),
            "config: seed must be a whole number in [0, 2^53], got -1");
  EXPECT_EQ(error_of([] { seed_check(2.5, "config: seed"); }),
            "config: seed must be a whole number in [0, 2^53], got 2.5");
  EXPECT_NE(error_of([] { seed_check(kSeedMax * 2, "seed"); }), "(no error)");
  EXPECT_NE(error_of([] { seed_check(std::nan(""), "seed"); }), "(no error)");
}

TEST(Seed, FromEnv) {
  {
    EnvGuard env("LUATUNE_SEED", nullptr);
    EXPECT_EQ(seed_from_env(), 0u);
    EXPECT_EQ(seed_env_text(), "");
  }
  {
    EnvGuard env("LUATUNE_SEED", " 123 ");
    EXPECT_EQ(seed_from_env(), 123u);
    EXPECT_EQ(seed_env_text(), "123");
  }
  {
    EnvGuard env("LUATUNE_SEED", "abc");
    EXPECT_EQ(error_of([] { seed_from_env(); }),
              "LUATUNE_SEED must be a whole number in [0, 2^53], got 'abc'");
  }
  {
    EnvGuard env("LUATUNE_SEED", "1e3");  // a number as Lua and the command line read it
    EXPECT_EQ(seed_from_env(), 1000u);
  }
}

TEST(Seed, DeterministicTurnsLibTorchsFlagOn) {
  EnvGuard env("CUBLAS_WORKSPACE_CONFIG", nullptr);
  std::string line = seed_deterministic();
  EXPECT_TRUE(at::globalContext().deterministicAlgorithms());
  // warn_only off: such ops raise, and flash attention's backward takes its deterministic path
  EXPECT_FALSE(at::globalContext().deterministicAlgorithmsWarnOnly());
  EXPECT_TRUE(at::globalContext().deterministicCuDNN());
  EXPECT_FALSE(at::globalContext().benchmarkCuDNN());
  ASSERT_NE(std::getenv("CUBLAS_WORKSPACE_CONFIG"), nullptr);
  EXPECT_STREQ(std::getenv("CUBLAS_WORKSPACE_CONFIG"), ":4096:8");
  EXPECT_EQ(line.rfind("deterministic: LibTorch deterministic algorithms on", 0), 0u) << line;
  EXPECT_NE(line.find("CUBLAS_WORKSPACE_CONFIG=:4096:8;"), std::string::npos) << line;
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);  // one line
  at::globalContext().setDeterministicAlgorithms(false, false);
  at::globalContext().setDeterministicCuDNN(false);
}

TEST(Seed, DeterministicKeepsTheUsersCublasConfig) {
  EnvGuard env("CUBLAS_WORKSPACE_CONFIG", ":16:8");
  std::string line = seed_deterministic();
  EXPECT_STREQ(std::getenv("CUBLAS_WORKSPACE_CONFIG"), ":16:8");
  EXPECT_NE(line.find("CUBLAS_WORKSPACE_CONFIG=:16:8 (from the environment)"), std::string::npos) << line;
  at::globalContext().setDeterministicAlgorithms(false, false);
  at::globalContext().setDeterministicCuDNN(false);
}
