// The "kernel keeps the PF, the application takes a VF" deployment up to VFIO: the guest
// kernel's igb driver takes the 82576 at 00:0a.0 (dca, i2c-algo-bit, igb), creates a virtual
// function through sriov_numvfs, the VF (8086:10ca) is alone in its IOMMU group and binds to
// vfio-pci, and vfab's VFIO layer opens it and reads its registers. The PF driver refuses the
// VF with a message naming igbvf; the multiplexed API picks the igbvf provider, which cannot
// start while the PF's interface is down and says so. The igbvf driver itself: igbvf_test.
// Everything goes back as it was (VFs removed, the PF on vfio-pci) for the tests after this.
#include <gtest/gtest.h>

#include <filesystem>

#include "lab_env.hpp"
#include "sriov_vf.hpp"
#include "vfab/drivers/igb.hpp"
#include "vfab/vfab.hpp"
#include "vfab/vfio/device.hpp"

namespace vfab::lab {
namespace {

namespace fs = std::filesystem;

class IgbSriov : public ::testing::Test {
protected:
    void SetUp() override {
        if (!iommu_on()) GTEST_SKIP() << "SR-IOV with the IOMMU on (no-IOMMU VFs: not tested)";
    }
    void TearDown() override { EXPECT_EQ(env_.restore(), ""); }
    SriovVf env_;
};

TEST_F(IgbSriov, TheKernelsPfMakesAVfThatVfioAndVfabCanOpen) {
    ASSERT_EQ(env_.create(), "");
    const std::string& vf = env_.vf();
    const std::string vf_dir = "/sys/bus/pci/devices/" + vf;
    std::printf("PF %s on igb, sriov_totalvfs %s; VF %s on vfio-pci\n", SriovVf::kPf,
                read_line(SriovVf::pf_dir() + "/sriov_totalvfs").c_str(), vf.c_str());
    EXPECT_EQ(read_line(vf_dir + "/vendor"), "0x8086");
    EXPECT_EQ(read_line(vf_dir + "/device"), "0x10ca");
    if (iommu_on()) {   // alone in its group: a VF can be handed to one application
        size_t members = 0;
        for (const auto& e : fs::directory_iterator(fs::path(vf_dir) / "iommu_group" / "devices")) members += !e.path().empty();
        EXPECT_EQ(members, 1u) << vf << " shares its IOMMU group";
    }

    const PciAddress addr = *PciAddress::parse(vf);
    {
        vfio::DeviceOptions o;
        o.backend = backends().front();
        auto dev = vfio::Device::open(addr, o);
        ASSERT_TRUE(dev.ok()) << dev.error().message;
        auto bar = (*dev)->region(0);
        ASSERT_TRUE(bar.ok()) << bar.error().message;
        ASSERT_NE((*bar)->base(), nullptr);
        // VTSTATUS (0x0008) reads the PF's STATUS, with IOV_MODE (bit 18) set: the VF's BAR
        // reaches the device (a VF BAR QEMU does not decode reads 0).
        const uint32_t status = (*bar)->read32(0x0008);
        EXPECT_NE(status, 0xffffffffu);
        EXPECT_TRUE(status & (1u << 18)) << "VTSTATUS " << std::hex << status;
        auto msix = (*dev)->irq_info(vfio::IrqIndex::msix);
        ASSERT_TRUE(msix.ok());
        EXPECT_EQ(msix->count, 3u);   // the 82576 VF's three MSI-X vectors (two queues, mailbox)
        std::printf("VF VTSTATUS %#x, %u MSI-X vectors\n", status, msix->count);
    }
    // The PF driver refuses a VF, and says what it is.
    auto pf_drv = igb::Device::open(addr);
    ASSERT_FALSE(pf_drv.ok());
    EXPECT_NE(pf_drv.error().message.find("virtual function (igbvf)"), std::string::npos) << pf_drv.error().message;
    // The multiplexed API takes the igbvf provider; the PF's interface is down (never brought
    // up here), so the PF holds the VF in reset, and the error says what to do.
    auto mux = vfab::Device::open(vf);
    ASSERT_FALSE(mux.ok());
    EXPECT_EQ(mux.error().code, EAGAIN) << mux.error().message;
    EXPECT_NE(mux.error().message.find("ip link set " + env_.pf().ifname() + " up"), std::string::npos) << mux.error().message;
    std::printf("%s\n%s\n", pf_drv.error().message.c_str(), mux.error().message.c_str());
}

}  // namespace
}  // namespace vfab::lab
