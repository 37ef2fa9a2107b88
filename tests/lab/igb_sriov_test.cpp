// The "kernel keeps the PF, the application takes a VF" deployment, as far as vfab goes today:
// the guest kernel's igb driver takes the 82576 at 00:0a.0 (dca, i2c-algo-bit, igb), creates a
// virtual function through sriov_numvfs, the VF (8086:10ca) is alone in its IOMMU group and
// binds to vfio-pci, and vfab's VFIO layer opens it and reads its registers. The PF driver
// refuses the VF with a message naming igbvf. Everything goes back as it was (VFs removed, the
// PF on vfio-pci) for the tests after this one.
#include <gtest/gtest.h>

#include <filesystem>

#include "kernel_nic.hpp"
#include "lab_env.hpp"
#include "vfab/drivers/igb.hpp"
#include "vfab/vfab.hpp"
#include "vfab/vfio/device.hpp"

namespace vfab::lab {
namespace {

namespace fs = std::filesystem;
constexpr const char* kPf = "0000:00:0a.0";

class IgbSriov : public ::testing::Test {
protected:
    void SetUp() override {
        if (flavor() != "debian") GTEST_SKIP() << "the iommufd lab kernel has no igb module; SR-IOV runs on debian";
        const std::string pf_dir = std::string("/sys/bus/pci/devices/") + kPf;
        ASSERT_TRUE(fs::exists(pf_dir + "/sriov_totalvfs")) << kPf << " offers no SR-IOV";
        std::string err = pf_.take("igb", {"dca", "i2c-algo-bit", "igb"});
        ASSERT_TRUE(err.empty()) << err;
    }
    void TearDown() override {
        const std::string numvfs = std::string("/sys/bus/pci/devices/") + kPf + "/sriov_numvfs";
        if (!vf_.empty() && driver_of(vf_) == "vfio-pci") (void)write_sysfs("/sys/bus/pci/devices/" + vf_ + "/driver/unbind", vf_);
        if (fs::exists(numvfs)) {
            EXPECT_EQ(write_sysfs(numvfs, "0"), "");
        }
        EXPECT_EQ(pf_.restore(), "");
    }
    KernelNic pf_{kPf};
    std::string vf_;
};

TEST_F(IgbSriov, TheKernelsPfMakesAVfThatVfioAndVfabCanOpen) {
    const std::string pf_dir = std::string("/sys/bus/pci/devices/") + kPf;
    std::printf("PF %s on igb, sriov_totalvfs %s\n", kPf, read_line(pf_dir + "/sriov_totalvfs").c_str());
    ASSERT_EQ(write_sysfs(pf_dir + "/sriov_numvfs", "1"), "");
    ASSERT_TRUE(wait_for([&] { return fs::exists(pf_dir + "/virtfn0"); }, std::chrono::seconds(5)));
    vf_ = fs::read_symlink(pf_dir + "/virtfn0").filename().string();
    const std::string vf_dir = "/sys/bus/pci/devices/" + vf_;
    EXPECT_EQ(read_line(vf_dir + "/vendor"), "0x8086");
    EXPECT_EQ(read_line(vf_dir + "/device"), "0x10ca");
    if (iommu_on()) {   // alone in its group: a VF can be handed to one application
        const std::string group = fs::read_symlink(vf_dir + "/iommu_group").string();
        size_t members = 0;
        for (const auto& e : fs::directory_iterator(fs::path(vf_dir) / "iommu_group" / "devices")) members += !e.path().empty();
        EXPECT_EQ(members, 1u) << vf_ << " shares IOMMU group " << group;
    }
    std::printf("VF %s (8086:10ca)\n", vf_.c_str());

    // To vfio-pci, as vfio-devctl bind does.
    ASSERT_EQ(write_sysfs(vf_dir + "/driver_override", "vfio-pci"), "");
    if (!driver_of(vf_).empty()) {
        ASSERT_EQ(write_sysfs(vf_dir + "/driver/unbind", vf_), "");
    }
    ASSERT_EQ(write_sysfs("/sys/bus/pci/drivers_probe", vf_), "");
    ASSERT_EQ(driver_of(vf_), "vfio-pci");

    const PciAddress addr = *PciAddress::parse(vf_);
    {
        vfio::DeviceOptions o;
        o.backend = backends().front();
        auto dev = vfio::Device::open(addr, o);
        ASSERT_TRUE(dev.ok()) << dev.error().message;
        auto bar = (*dev)->region(0);
        ASSERT_TRUE(bar.ok()) << bar.error().message;
        ASSERT_NE((*bar)->base(), nullptr);
        // VTSTATUS (0x0008) reads like the PF's STATUS: not all-ones, the VF answers.
        const uint32_t status = (*bar)->read32(0x0008);
        EXPECT_NE(status, 0xffffffffu);
        auto msix = (*dev)->irq_info(vfio::IrqIndex::msix);
        ASSERT_TRUE(msix.ok());
        EXPECT_EQ(msix->count, 3u);   // the 82576 VF's three MSI-X vectors (two queues, mailbox)
        std::printf("VF VTSTATUS %#x, %u MSI-X vectors\n", status, msix->count);
    }
    // The PF driver refuses a VF, and says what it is; so does the multiplexed API.
    auto pf_drv = igb::Device::open(addr);
    ASSERT_FALSE(pf_drv.ok());
    EXPECT_NE(pf_drv.error().message.find("virtual function (igbvf)"), std::string::npos) << pf_drv.error().message;
    auto mux = vfab::Device::open(vf_);
    ASSERT_FALSE(mux.ok());
    std::printf("%s\n%s\n", pf_drv.error().message.c_str(), mux.error().message.c_str());
}

}  // namespace
}  // namespace vfab::lab
