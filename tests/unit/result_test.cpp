#include "vfab/result.hpp"

#include <gtest/gtest.h>

#include <memory>

namespace vfab {
namespace {

TEST(Result, HoldsValue) {
    Result<int> r = 42;
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, 42);
}

TEST(Result, HoldsError) {
    Result<int> r = Error{ENOENT, "no such thing"};
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ENOENT);
    EXPECT_EQ(r.error().message, "no such thing");
}

TEST(Result, MovesOnlyValues) {
    Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
    ASSERT_TRUE(r.ok());
    std::unique_ptr<int> p = std::move(r).value();
    EXPECT_EQ(*p, 7);
}

TEST(Result, VoidSuccessAndFailure) {
    Result<void> ok;
    EXPECT_TRUE(ok.ok());
    Result<void> bad = Error{EPERM, "denied"};
    EXPECT_FALSE(bad.ok());
    EXPECT_EQ(bad.error().code, EPERM);
}

TEST(Error, FromErrnoNamesTheCauseAndTheHint) {
    Error e = Error::from_errno(EACCES, "open /dev/vfio/7", "run as root");
    EXPECT_EQ(e.code, EACCES);
    EXPECT_EQ(e.message, "open /dev/vfio/7: Permission denied — run as root");
}

}  // namespace
}  // namespace vfab
