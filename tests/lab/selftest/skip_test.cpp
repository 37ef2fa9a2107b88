// Lab self-test: a GoogleTest binary that passes one test and skips another, which no suite
// expects — unless the self-test points LAB_EXPECTED_SKIPS at a list that names it.
#include <gtest/gtest.h>
TEST(LabSelftest, Passes) { EXPECT_EQ(1, 1); }
TEST(LabSelftest, SkipsOnPurpose) { GTEST_SKIP() << "skipping on purpose"; }
