// Lab self-test: a GoogleTest binary that fails on purpose.
#include <gtest/gtest.h>
TEST(LabSelftest, FailsOnPurpose) { EXPECT_EQ(1, 2) << "failing on purpose"; }
