// The standalone example (examples/standalone) as tests/sdk/check.sh built it against an
// installed vfab — find_package with libvfab.so.1, with libvfab.a, and pkg-config — run on the
// lab's first e1000e: each opens it, sends one frame and sees it complete. The lab copies them
// into /vfab/bin beside this test (and libvfab.so.1 from the install into /vfab/lib).
#include <gtest/gtest.h>

#include <filesystem>

#include "lab_env.hpp"
#include "spawn.hpp"

namespace vfab::lab {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr const char* kNic0 = "0000:00:02.0";

std::string beside_me(const char* name) { return (fs::read_symlink("/proc/self/exe").parent_path() / name).string(); }

class InstalledSdk : public ::testing::TestWithParam<const char*> {
protected:
    void SetUp() override {
        ASSERT_TRUE(in_lab()) << "run this through scripts/lab";
        if (!iommu_on()) ::setenv("VFAB_IOMMU_BACKEND", "noiommu", 1);
    }
};

TEST_P(InstalledSdk, SendsAFrameOnARealDevice) {
    const std::string program = beside_me(GetParam());
    ASSERT_TRUE(fs::exists(program)) << program << " is missing: ctest's fixture sdk (tests/sdk/check.sh) builds it";
    Outcome r = run_program({program, kNic0}, 60s);
    std::printf("%s%s", r.out.c_str(), r.err.c_str());
    EXPECT_EQ(r.rc, 0) << r.summary();
    EXPECT_NE(r.out.find("provider e1000e"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("sent one frame: success"), std::string::npos) << r.out;
}

INSTANTIATE_TEST_SUITE_P(ThreeWays, InstalledSdk,
                         ::testing::Values("vfab-hello-shared", "vfab-hello-static", "vfab-hello-pkgconfig"),
                         [](const auto& info) { return std::string(info.param).substr(11); });

// The e1000e driver's direct API from the install's static libraries.
TEST(InstalledSdkDirectApi, OpensTheE1000e) {
    ASSERT_TRUE(in_lab()) << "run this through scripts/lab";
    if (!iommu_on()) ::setenv("VFAB_IOMMU_BACKEND", "noiommu", 1);
    const std::string program = beside_me("vfab-hello-e1000e-static");
    ASSERT_TRUE(fs::exists(program)) << program << " is missing";
    Outcome r = run_program({program, kNic0}, 60s);
    std::printf("%s%s", r.out.c_str(), r.err.c_str());
    EXPECT_EQ(r.rc, 0) << r.summary();
    EXPECT_NE(r.out.find("82574L"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace vfab::lab
