// String and file helpers: splitting, trimming, edit distance, hints, numbers, whole numbers,
// Markdown tables, paths, atomic writes, directories made with their parents.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/number.h"
#include "host/core/strings.h"
#include "test_util.h"

using namespace luatune;

TEST(Strings, SplitKeepsEmptyParts) {
  EXPECT_EQ(str_split("a,,b", ','), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(str_split("", ','), (std::vector<std::string>{""}));
}

TEST(Strings, TrimAndAffixes) {
  EXPECT_EQ(str_trim("  x y \n"), "x y");
  EXPECT_TRUE(str_starts_with("lora.r", "lora."));
  EXPECT_FALSE(str_ends_with("a", "abc"));
}

TEST(Strings, EditDistance) {
  EXPECT_EQ(str_edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(str_edit_distance("", "abc"), 3u);
  EXPECT_EQ(str_edit_distance("same", "same"), 0u);
}

TEST(Strings, NearestIgnoresFarWords) {
  std::vector<std::string> keys = {"learning_rate", "batch_size", "steps"};
  EXPECT_EQ(str_nearest("lerning_rate", keys), "learning_rate");
  EXPECT_EQ(str_nearest("step", keys), "steps");
  EXPECT_EQ(str_nearest("completely_different", keys), "");
}

TEST(Strings, NumbersParseWholeStringOnly) {
  double v = 0;
  EXPECT_TRUE(str_to_number("2e-4", &v));
  EXPECT_DOUBLE_EQ(v, 2e-4);
  EXPECT_TRUE(str_to_number(" 12 ", &v));
  EXPECT_EQ(v, 12);
  EXPECT_FALSE(str_to_number("12abc", &v));
  EXPECT_FALSE(str_to_number("abc", &v));
  EXPECT_FALSE(str_to_number("", &v));
}

TEST(Strings, NumbersPrintShortestRoundTrip) {
  EXPECT_EQ(str_from_number(200), "200");
  EXPECT_EQ(str_from_number(0.0002), "0.0002");
  EXPECT_EQ(str_from_number(0.1), "0.1");
  for (double v : {1.0 / 3.0, 2e-4, 123456.789, -7.25e-12}) {
    double back = 0;
    ASSERT_TRUE(str_to_number(str_from_number(v), &back));
    EXPECT_EQ(back, v) << str_from_number(v);
  }
}

// Every place that turns a double into an integer asks this one question (host/core/number.h).
TEST(Number, WholeNumbersBelowTwoTo53AreIntegers) {
  EXPECT_TRUE(number_is_whole(480));
  EXPECT_TRUE(number_is_whole(0));
  EXPECT_TRUE(number_is_whole(-0.0));
  EXPECT_TRUE(number_is_whole(-3));
  EXPECT_TRUE(number_is_whole(9007199254740991.0));   // 2^53 - 1
  EXPECT_TRUE(number_is_whole(-9007199254740991.0));  // -(2^53 - 1)
  EXPECT_FALSE(number_is_whole(9007199254740992.0));  // 2^53: 2^53 + 1 reads the same
  EXPECT_FALSE(number_is_whole(-9007199254740992.0));
  EXPECT_FALSE(number_is_whole(1e300));
  EXPECT_FALSE(number_is_whole(2.5));
  EXPECT_FALSE(number_is_whole(-0.5));
  EXPECT_FALSE(number_is_whole(std::nan("")));
  EXPECT_FALSE(number_is_whole(HUGE_VAL));
  EXPECT_FALSE(number_is_whole(-HUGE_VAL));
}

TEST(Markdown, CellEscapesPipesAndFoldsNewlines) {
  EXPECT_EQ(md_cell("a|b\nc\r\nd"), "a\\|b c  d");
  EXPECT_EQ(md_cell("<b> & `x`"), "<b> & `x`");  // HTML and code are the caller's concern
  EXPECT_EQ(md_cell(""), "");
}

TEST(Markdown, TextAlsoEscapesHtml) {
  EXPECT_EQ(md_text("<think> a|b & W&B &lt; &#60;\n"), "&lt;think&gt; a\\|b & W&B &amp;lt; &amp;#60; ");
  EXPECT_EQ(md_text("</b> <!-- <?x <a:b"), "&lt;/b&gt; &lt;!-- &lt;?x &lt;a:b");
}

// Only a "<" that could open a tag or an autolink is escaped: a cost "$<0.01", "< 5" and "<=" read
// as written in the raw file (issue 32: hw_compare's report.md said "$&lt;0.01").
TEST(Markdown, TextKeepsALessThanThatOpensNoTag) {
  EXPECT_EQ(md_text("costs $<0.01, < 5, <= 2, x<"), "costs $<0.01, < 5, <= 2, x<");
}

TEST(Markdown, TableAlignsNumbersAndPadsShortRows) {
  EXPECT_EQ(md_table({{"name"}, {"n", true}}, {{"a", "1"}, {"b"}, {"c", "3", "dropped"}}),
            "| name | n |\n|---|---:|\n| a | 1 |\n| b |  |\n| c | 3 |\n");
  EXPECT_EQ(md_table({{"x"}}, {}), "| x |\n|---|\n");
}

TEST(Files, PathParts) {
  EXPECT_EQ(path_dirname("recipes/quickstart.lua"), "recipes");
  EXPECT_EQ(path_dirname("quickstart.lua"), ".");
  EXPECT_EQ(path_dirname("/runner"), "/");
  EXPECT_EQ(path_basename("a/b/c.lua"), "c.lua");
  EXPECT_EQ(path_basename("c.lua"), "c.lua");
}

TEST(Files, AtomicWriteReplacesWholeFile) {
  std::string path = ::testing::TempDir() + "/lt_atomic.txt";
  file_write_atomic(path, "first version, longer");
  file_write_atomic(path, "second");
  EXPECT_EQ(file_read(path), "second");
  EXPECT_THROW(file_write_atomic("/no/such/dir/x.txt", "x"), Error);
  EXPECT_THROW(file_read("/no/such/file"), Error);
  std::remove(path.c_str());
}

// What recipes call through metrics.mkdir instead of os.execute("mkdir -p ..."): nested directories,
// an existing one fine, a file in the way refused in one line naming it.
TEST(Files, DirCreateMakesParentsAndRefusesAFileInTheWay) {
  TempDir tmp;
  const std::string nested = tmp.path + "/a/b/c";
  dir_create(nested);
  EXPECT_TRUE(dir_exists(nested));
  dir_create(nested + "/");  // again, with a trailing slash: nothing to do
  dir_create(tmp.path + "/a//b/d");
  EXPECT_TRUE(dir_exists(tmp.path + "/a/b/d"));
  const std::string file = tmp.path + "/a/file";
  file_write_atomic(file, "x");
  EXPECT_EQ(error_of([&] { dir_create(file + "/sub/dir"); }),
            "cannot create directory '" + file + "/sub/dir': '" + file + "' is a file, not a directory");
  EXPECT_EQ(error_of([&] { dir_create(file); }),
            "cannot create directory '" + file + "': '" + file + "' is a file, not a directory");
  EXPECT_FALSE(dir_exists(file + "/sub"));
  EXPECT_EQ(error_of([] { dir_create(""); }), "cannot create a directory with an empty name");
}
