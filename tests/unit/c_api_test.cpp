// The C API (vfab.h), driven from C (c_api_check.c): NULL handles are argument errors with a
// message naming the function; frames loop back through the fake provider plugin; destroyed
// CQs, QPs and MRs answer ENODEV. This binary links libvfab.a: static linking and plugin
// loading into a static program are exercised too.
#include <gtest/gtest.h>

#include "c_api_check.h"
#include "c_rdma_check.h"
#include "fake_sysfs.hpp"

namespace {

TEST(CApi, NullHandlesAreArgumentErrors) {
    char why[512] = "";
    EXPECT_EQ(c_api_null_handles(why, sizeof why), 0) << why;
}

TEST(CApi, LoopbackAndUseAfterDestroy) {
    vfab::testing::FakeSysfsTree sysfs;
    sysfs.add_device("0000:00:04.0", "0x1234", "0xfa4e", "vfio-pci", 4);
    char why[512] = "";
    EXPECT_EQ(c_api_loopback("0000:00:04.0", sysfs.root().c_str(), VFAB_TEST_PROVIDERS "/fake", why, sizeof why), 0)
        << why;
}

// The RDMA transport's C API: two RC queue pairs of one port over the fake provider's loopback.
TEST(CApi, RdmaLoopback) {
    vfab::testing::FakeSysfsTree sysfs;
    sysfs.add_device("0000:00:04.0", "0x1234", "0xfa4e", "vfio-pci", 4);
    char why[512] = "";
    EXPECT_EQ(c_rdma_loopback("0000:00:04.0", sysfs.root().c_str(), VFAB_TEST_PROVIDERS "/fake", why, sizeof why), 0)
        << why;
}

}  // namespace
