// Proves the lab itself: every lab device is bound to vfio-pci, alone in its IOMMU group,
// with its VFIO group node (and, on the iommufd kernel, /dev/iommu and its VFIO cdev).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "lab_env.hpp"
#include "vfab/vfio/pci_sysfs.hpp"

namespace vfab::lab {
namespace {

bool is_char_device(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
}

TEST(LabHarness, RunsInsideTheLab) {
    ASSERT_TRUE(in_lab()) << "run this through scripts/lab";
    EXPECT_TRUE(flavor() == "debian" || flavor() == "iommufd") << flavor();
}

TEST(LabHarness, EveryDeviceIsBoundToVfioPciAloneInItsGroup) {
    vfio::PciSysfs sysfs;
    for (const LabDevice& d : devices()) {
        SCOPED_TRACE(d.name);
        PciAddress addr = *PciAddress::parse(d.bdf);
        auto ids = sysfs.ids(addr);
        ASSERT_TRUE(ids.ok()) << ids.error().message;
        EXPECT_EQ(ids->vendor, d.vendor);
        EXPECT_EQ(ids->device, d.device);

        auto driver = sysfs.driver(addr);
        ASSERT_TRUE(driver.ok());
        EXPECT_EQ(driver->value_or("(none)"), "vfio-pci");

        auto group = sysfs.iommu_group(addr);
        ASSERT_TRUE(group.ok()) << group.error().message;
        auto members = sysfs.group_devices(*group);
        ASSERT_TRUE(members.ok()) << members.error().message;
        ASSERT_EQ(members->size(), 1u) << "group " << *group << " is shared";
        EXPECT_EQ(members->front(), addr);

        std::string node = iommu_on() ? str_cat("/dev/vfio/", *group)
                                      : str_cat("/dev/vfio/noiommu-", *group);
        EXPECT_TRUE(is_char_device(node)) << node;
    }
    EXPECT_TRUE(is_char_device("/dev/vfio/vfio"));
}

TEST(LabHarness, IommufdKernelHasIommuAndVfioCdevs) {
    if (flavor() != "iommufd") GTEST_SKIP() << "Debian's kernel has no iommufd";
    EXPECT_TRUE(is_char_device("/dev/iommu"));
    // Linux 6.12 makes no /dev/vfio/devices node for a device in a no-IOMMU group.
    if (!iommu_on()) GTEST_SKIP() << "no VFIO cdevs in no-IOMMU mode";
    vfio::PciSysfs sysfs;
    for (const LabDevice& d : devices()) {
        SCOPED_TRACE(d.name);
        auto cdev = sysfs.vfio_cdev(*PciAddress::parse(d.bdf));
        ASSERT_TRUE(cdev.ok());
        ASSERT_TRUE(cdev->has_value());
        EXPECT_TRUE(is_char_device("/dev/vfio/devices/" + **cdev)) << **cdev;
    }
}

}  // namespace
}  // namespace vfab::lab
