// PciSysfs against a fake sysfs tree built in a temporary directory.
#include "vfab/vfio/pci_sysfs.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace vfab::vfio {
namespace {
namespace fs = std::filesystem;

class FakeSysfs : public ::testing::Test {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/vfab-sysfs.XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        root_ = tmpl;
        add_device("0000:00:02.0", "0x8086", "0x10d3", "0x020000", "vfio-pci", 5, "0");
        add_device("0000:00:03.0", "0x8086", "0x10d3", "0x020000", "", 5, "-1");
        add_device("0000:00:04.0", "0x1af4", "0x1041", "0x020000", "", -1, "1");
        fs::create_directories(root_ / "bus/pci/devices/0000:00:02.0/vfio-dev/vfio3");
    }
    void TearDown() override { fs::remove_all(root_); }

    void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text << "\n"; }

    void add_device(const std::string& bdf, const char* vendor, const char* device, const char* cls,
                    const std::string& driver, int group, const char* node) {
        fs::path dir = root_ / "devices/pci0000:00" / bdf;
        fs::create_directories(dir);
        fs::create_directories(root_ / "bus/pci/devices");
        fs::create_directory_symlink(dir, root_ / "bus/pci/devices" / bdf);
        write(dir / "vendor", vendor);
        write(dir / "device", device);
        write(dir / "subsystem_vendor", "0x8086");
        write(dir / "subsystem_device", "0x0000");
        write(dir / "class", cls);
        write(dir / "numa_node", node);
        if (!driver.empty()) {
            fs::create_directories(root_ / "bus/pci/drivers" / driver);
            fs::create_directory_symlink(root_ / "bus/pci/drivers" / driver, dir / "driver");
        }
        if (group >= 0) {
            fs::path g = root_ / "kernel/iommu_groups" / std::to_string(group);
            fs::create_directories(g / "devices");
            fs::create_directory_symlink(g, dir / "iommu_group");
            fs::create_directory_symlink(dir, g / "devices" / bdf);
        }
    }

    PciAddress addr(const char* s) { return *PciAddress::parse(s); }
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
