// Models by name through the Hugging Face hub cache (host/io/hub_cache.h): the cache directory's
// environment variables in huggingface_hub's order, refs/main and @revision (a ref, or a commit hash
// or its prefix), local paths first, values that are no Hub id, and the one-line errors that say
// where they looked and which command fetches the model.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "host/core/files.h"
#include "host/io/hub_cache.h"
#include "tests/cpp/test_util.h"

using namespace luatune;
namespace fs = std::filesystem;

namespace {

// All the variables that choose the cache, unset for the test; HOME set to a fresh directory.
struct CleanEnv {
  EnvGuard hub{"HF_HUB_CACHE", nullptr};
  EnvGuard legacy{"HUGGINGFACE_HUB_CACHE", nullptr};
  EnvGuard home_hf{"HF_HOME", nullptr};
  EnvGuard xdg{"XDG_CACHE_HOME", nullptr};
  EnvGuard home;
  explicit CleanEnv(const std::string& home_dir) : home("HOME", home_dir.c_str()) {}
};

const char* const kMain = "0123456789abcdef0123456789abcdef01234567";
const char* const kOld = "fedcba9876543210fedcba9876543210fedcba98";
const char* const kOther = "fe00000000000000000000000000000000000000";

void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

class HubCache : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("luatune_hub_cache_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    cache_ = (root_ / "hub").string();
    env_ = std::make_unique<CleanEnv>((root_ / "home").string());
    // models--org--name: refs/main -> kMain (with a trailing newline), refs/v1 -> kOld; blobs as
    // huggingface_hub writes them, snapshot files symlinks into blobs/.
    const std::string repo = cache_ + "/models--org--name";
    write(repo + "/refs/main", std::string(kMain) + "\n");
    write(repo + "/refs/v1", kOld);
    write(repo + "/blobs/aaaa", "{\"model_type\": \"llama\"}");
    for (const char* commit : {kMain, kOld, kOther}) {
      fs::create_directories(repo + "/snapshots/" + commit);
      fs::create_symlink("../../blobs/aaaa", repo + "/snapshots/" + commit + "/config.json");
    }
  }
  void TearDown() override {
    env_.reset();
    fs::remove_all(root_);
  }
  std::string snapshot(const char* commit) const { return cache_ + "/models--org--name/snapshots/" + commit; }
  fs::path root_;
  std::string cache_;
  std::unique_ptr<CleanEnv> env_;
};

}  // namespace

TEST_F(HubCache, CacheDirFollowsHuggingFaceHubOrder) {
  const std::string home = (root_ / "home").string();
  EXPECT_EQ(hub_cache_dir(), home + "/.cache/huggingface/hub");
  EXPECT_EQ(hub_cache_dir_source(), "default");
  {
    EnvGuard xdg("XDG_CACHE_HOME", "/x/cache");
    EXPECT_EQ(hub_cache_dir(), "/x/cache/huggingface/hub");
    EXPECT_EQ(hub_cache_dir_source(), "XDG_CACHE_HOME");
    EnvGuard hf_home("HF_HOME", "/h/hf/");
    EXPECT_EQ(hub_cache_dir(), "/h/hf/hub");
    EXPECT_EQ(hub_cache_dir_source(), "HF_HOME");
    EnvGuard legacy("HUGGINGFACE_HUB_CACHE", "/legacy");
    EXPECT_EQ(hub_cache_dir(), "/legacy");
    EXPECT_EQ(hub_cache_dir_source(), "HUGGINGFACE_HUB_CACHE");
    EnvGuard hub("HF_HUB_CACHE", "~/hubcache");
    EXPECT_EQ(hub_cache_dir(), home + "/hubcache");
    EXPECT_EQ(hub_cache_dir_source(), "HF_HUB_CACHE");
    EnvGuard empty("HF_HUB_CACHE", "");  // set but empty counts as unset
    EXPECT_EQ(hub_cache_dir(), "/legacy");
  }
  EXPECT_EQ(hub_cache_dir(), home + "/.cache/huggingface/hub");  // every variable put back
}

TEST_F(HubCache, RefsMainGivesTheSnapshot) {
  EnvGuard hub("HF_HUB_CACHE", cache_.c_str());
  EXPECT_EQ(model_path_resolve("org/name"), snapshot(kMain));
  EXPECT_EQ(model_path_from_hub("org/name"), snapshot(kMain));
  std::string why = "unchanged?";
  EXPECT_TRUE(model_path_available("org/name", &why));
  EXPECT_EQ(why, "");
  // The same cache found through HF_HOME (<HF_HOME>/hub).
  EnvGuard unset("HF_HUB_CACHE", nullptr);
  EnvGuard hf_home("HF_HOME", root_.string().c_str());
  EXPECT_EQ(model_path_resolve("org/name"), snapshot(kMain));
}

TEST_F(HubCache, RevisionByRefOrCommitHash) {
  EnvGuard hub("HF_HUB_CACHE", cache_.c_str());
  EXPECT_EQ(model_path_resolve("org/name@v1"), snapshot(kOld));                        // refs/v1
  EXPECT_EQ(model_path_resolve("org/name@main"), snapshot(kMain));                     // refs/main, named
  EXPECT_EQ(model_path_resolve(std::string("org/name@") + kOther), snapshot(kOther));  // a full hash
  EXPECT_EQ(model_path_resolve("org/name@0123456"), snapshot(kMain));                  // a unique prefix
  std::string e = error_of([] { model_path_resolve("org/name@fe"); });  // kOld and kOther both start so
  EXPECT_NE(e.find("'fe' is the start of 2 snapshots (fe00000000000000000000000000000000000000, "
                   "fedcba9876543210fedcba9876543210fedcba98); give more of the commit hash"),
            std::string::npos)
      << e;
  e = error_of([] { model_path_resolve("org/name@v2"); });
  EXPECT_NE(e.find("no refs/v2 and no snapshots/v2*"), std::string::npos) << e;
  EXPECT_NE(e.find("huggingface-cli download org/name --revision v2"), std::string::npos) << e;
}

TEST_F(HubCache, MissingModelErrorSaysWhereAndHowToFetch) {
  EnvGuard hub("HF_HUB_CACHE", cache_.c_str());
  const std::string e = error_of([] { model_path_resolve("org/missing"); });
  EXPECT_EQ(e,
            "'org/missing' is not a local directory, and the Hugging Face cache has no usable snapshot of it "
            "(looked in " +
                cache_ +
                "/models--org--missing: no such directory; cache dir from HF_HUB_CACHE); "
                "fetch it with: huggingface-cli download org/missing");
  EXPECT_EQ(e.find('\n'), std::string::npos);
  std::string why;
  EXPECT_FALSE(model_path_available("org/missing", &why));
  EXPECT_EQ(why, e);
  EXPECT_FALSE(model_path_available("org/missing", nullptr));
  EXPECT_EQ(error_of([] { model_path_from_hub("org/missing"); }), e);
  // The default cache says so, and how to look elsewhere.
  EnvGuard unset("HF_HUB_CACHE", nullptr);
  const std::string d = error_of([] { model_path_resolve("org/missing"); });
  EXPECT_NE(d.find("looked in " + (root_ / "home").string() + "/.cache/huggingface/hub/models--org--missing"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("the default cache dir; set HF_HUB_CACHE or HF_HOME to look elsewhere"), std::string::npos)
      << d;
}

TEST_F(HubCache, BrokenCacheEntriesFailWithTheReason) {
  EnvGuard hub("HF_HUB_CACHE", cache_.c_str());
  const std::string repo = cache_ + "/models--org--name";
  // refs/main names a snapshot that is not there.
  write(repo + "/refs/main", "1111111111111111111111111111111111111111");
  std::string e = error_of([] { model_path_resolve("org/name"); });
  EXPECT_NE(e.find("(looked in " + repo +
                   ": refs/main names commit '1111111111111111111111111111111111111111', "
                   "but snapshots/1111111111111111111111111111111111111111 is missing;"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("fetch it with: huggingface-cli download org/name"), std::string::npos) << e;
  // A snapshot without config.json or tokenizer files (a download interrupted before them).
  fs::remove(snapshot(kOld) + "/config.json");
  e = error_of([] { model_path_resolve("org/name@v1"); });
  EXPECT_NE(e.find(std::string("snapshots/") + kOld +
                   " holds no config.json, tokenizer.json or tokenizer_config.json"),
            std::string::npos)
      << e;
  write(snapshot(kOld) + "/tokenizer_config.json", "{}");  // tokenizer files alone are enough
  EXPECT_EQ(model_path_resolve("org/name@v1"), snapshot(kOld));
  // No refs/main at all.
  fs::remove(repo + "/refs/main");
  e = error_of([] { model_path_resolve("org/name"); });
  EXPECT_NE(e.find(repo + ": no refs/main;"), std::string::npos) << e;
}

TEST_F(HubCache, LocalPathWins) {
  EnvGuard hub("HF_HUB_CACHE", cache_.c_str());
  // A local directory named like a Hub id is taken as it is.
  const fs::path cwd = fs::current_path();
  fs::create_directories(root_ / "work" / "org" / "name");
  fs::current_path(root_ / "work");
  const std::string got = model_path_resolve("org/name");
  const std::string from_hub = model_path_from_hub("org/name");
  const bool available = model_path_available("org/name", nullptr);
  fs::current_path(cwd);
  EXPECT_EQ(got, "org/name");
  EXPECT_EQ(from_hub, "org/name");
  EXPECT_TRUE(available);
  // Absolute paths and files too (a tokenizer.json path).
  EXPECT_EQ(model_path_resolve(snapshot(kMain)), snapshot(kMain));
  EXPECT_EQ(model_path_resolve(snapshot(kMain) + "/config.json"), snapshot(kMain) + "/config.json");
}

TEST_F(HubCache, ValuesThatAreNoHubId) {
  EnvGuard hub("HF_HUB_CACHE", cache_.c_str());
  for (const char* v :
       {"no/such/dir", "/abs/missing", "./org/name", "../org/name", "~/org/name", "org/na me", "org/-name",
        "org--x/name", "org/name.git", "org/name@", "org/name@../../x", "", "justaname"}) {
    SCOPED_TRACE(v);
    EXPECT_FALSE(hub_name_shaped(v));
    const std::string e = error_of([&] { model_path_resolve(v); });
    EXPECT_EQ(e, "'" + std::string(v) +
                     "' does not exist (expected a local Hugging Face model directory, or a Hub model id "
                     "org/name[@revision] in the Hugging Face cache)");
    EXPECT_EQ(model_path_from_hub(v), v);  // the caller's own check names it
  }
  EXPECT_TRUE(hub_name_shaped("meta-llama/Llama-3.1-8B-Instruct"));
  EXPECT_TRUE(hub_name_shaped("org/name@refs/pr/1"));
  EXPECT_TRUE(hub_name_shaped("Org_1/name.v2@0123abc"));
  // A bare name (legacy repos without an org) resolves only when the cache holds it.
  write(cache_ + "/models--gpt2/refs/main", kMain);
  write(cache_ + "/models--gpt2/snapshots/" + kMain + "/tokenizer.json", "{}");
  EXPECT_EQ(model_path_resolve("gpt2"), cache_ + "/models--gpt2/snapshots/" + kMain);
}

TEST_F(HubCache, HubNameOfSnapshotDirectory) {
  EXPECT_EQ(hub_model_name_of(snapshot(kMain)), "org/name");
  EXPECT_EQ(hub_model_name_of(snapshot(kMain) + "/"), "org/name");
  EXPECT_EQ(hub_model_name_of("/c/models--gpt2/snapshots/abc"), "gpt2");
  EXPECT_EQ(hub_model_name_of("/models/Llama-3.1-8B"), "");
  EXPECT_EQ(hub_model_name_of("out/snapshots/abc"), "");
  EXPECT_EQ(hub_model_name_of(""), "");
}
