// Lab self-test: a GoogleTest binary whose only test is filtered out, so it runs none.
#include <gtest/gtest.h>
TEST(LabSelftest, NeverSelected) {}
int main(int argc, char** argv) {
    ::testing::GTEST_FLAG(filter) = "NoSuchTest.*";
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
