// PciSysfs against a fake sysfs tree built in a temporary directory.
#include "vfab/vfio/pci_sysfs.hpp"

#include <gtest/gtest.h>

#include <filesystem>

#include "fake_sysfs.hpp"

namespace vfab::vfio {
namespace {
namespace fs = std::filesystem;

class FakeSysfs : public ::testing::Test {
protected:
    void SetUp() override {
        tree_.add_device("0000:00:02.0", "0x8086", "0x10d3", "vfio-pci", 5, "0");
        tree_.add_device("0000:00:03.0", "0x8086", "0x10d3", "", 5, "-1");
        tree_.add_device("0000:00:04.0", "0x1af4", "0x1041", "", -1, "1");
        tree_.add_vfio_cdev("0000:00:02.0", "vfio3");
        root_ = tree_.root();
    }
    PciAddress addr(const char* s) { return *PciAddress::parse(s); }
    vfab::testing::FakeSysfsTree tree_;
    fs::path root_;
};

TEST_F(FakeSysfs, ReadsIds) {
    PciSysfs sysfs(root_);
    auto ids = sysfs.ids(addr("0000:00:02.0"));
    ASSERT_TRUE(ids.ok()) << ids.error().message;
    EXPECT_EQ(ids->vendor, 0x8086);
    EXPECT_EQ(ids->device, 0x10d3);
    EXPECT_EQ(ids->class_code, 0x020000u);
}

TEST_F(FakeSysfs, DriverIsNulloptWhenUnbound) {
    PciSysfs sysfs(root_);
    EXPECT_EQ(*sysfs.driver(addr("0000:00:02.0")), "vfio-pci");
    EXPECT_FALSE(sysfs.driver(addr("0000:00:03.0"))->has_value());
}

TEST_F(FakeSysfs, GroupAndItsMembers) {
    PciSysfs sysfs(root_);
    EXPECT_EQ(*sysfs.iommu_group(addr("0000:00:03.0")), 5u);
    auto members = sysfs.group_devices(5);
    ASSERT_TRUE(members.ok());
    ASSERT_EQ(members->size(), 2u);
    EXPECT_EQ((*members)[0].to_string(), "0000:00:02.0");
    EXPECT_EQ((*members)[1].to_string(), "0000:00:03.0");
}

TEST_F(FakeSysfs, PhysfnOfAVirtualFunctionAndNetInterfaces) {
    tree_.add_device("0000:00:10.0", "0x8086", "0x10ca", "vfio-pci", 9);
    tree_.add_vf("0000:00:03.0", "0000:00:10.0");
    tree_.add_net_interface("0000:00:03.0", "ens3");
    tree_.add_net_interface("0000:00:03.0", "ens3d1");
    PciSysfs sysfs(root_);
    auto pf = sysfs.physfn(addr("0000:00:10.0"));
    ASSERT_TRUE(pf.ok()) << pf.error().message;
    ASSERT_TRUE(pf->has_value());
    EXPECT_EQ((*pf)->to_string(), "0000:00:03.0");
    EXPECT_FALSE(sysfs.physfn(addr("0000:00:02.0"))->has_value()) << "no VF";
    EXPECT_FALSE(sysfs.physfn(addr("0000:00:09.0")).ok()) << "no such device";
    EXPECT_EQ(*sysfs.net_interfaces(addr("0000:00:03.0")), (std::vector<std::string>{"ens3", "ens3d1"}));
    EXPECT_TRUE(sysfs.net_interfaces(addr("0000:00:02.0"))->empty());
}

TEST_F(FakeSysfs, NoGroupSaysHowToTurnTheIommuOn) {
    PciSysfs sysfs(root_);
    auto g = sysfs.iommu_group(addr("0000:00:04.0"));
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.error().message.find("intel_iommu=on"), std::string::npos);
    EXPECT_NE(g.error().message.find("0000:00:04.0"), std::string::npos);
}

TEST_F(FakeSysfs, AbsentDeviceIsNamed) {
    PciSysfs sysfs(root_);
    auto ids = sysfs.ids(addr("0000:00:09.0"));
    ASSERT_FALSE(ids.ok());
    EXPECT_EQ(ids.error().code, ENODEV);
    EXPECT_NE(ids.error().message.find("no PCI device 0000:00:09.0"), std::string::npos);
}

TEST_F(FakeSysfs, NumaNodeAndCdev) {
    PciSysfs sysfs(root_);
    EXPECT_EQ(*sysfs.numa_node(addr("0000:00:02.0")), 0);
    EXPECT_EQ(*sysfs.numa_node(addr("0000:00:03.0")), -1);
    EXPECT_EQ(*sysfs.vfio_cdev(addr("0000:00:02.0")), "vfio3");
    EXPECT_FALSE(sysfs.vfio_cdev(addr("0000:00:03.0"))->has_value());
}

}  // namespace
}  // namespace vfab::vfio
