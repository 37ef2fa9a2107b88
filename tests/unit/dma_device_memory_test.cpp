// Registering another device's memory for peer-to-peer DMA (ProtectionDomain::
// register_device_memory, docs/rdma-p2p.md) against a fake kernel: the BAR's mmap is mapped
// through the NIC's legacy container (one MAP_DMA), the MR's CPU address is the BAR's, the
// device stays open until the registration goes and is unmapped before it closes; iommufd,
// no-IOMMU and dma-bufs say what to do; bad input leaves nothing behind.
#include <gtest/gtest.h>

#include "fake_kernel.hpp"
#include "fake_sysfs.hpp"
#include "vfab/dma/protection_domain.hpp"
#include "vfab/vfio/device.hpp"

namespace vfab::dma {
namespace {
using vfab::testing::FakeSysfsTree;
using vfab::vfio::testing::FakeKernel;

constexpr Access kRw = Access::local_write | Access::remote_write | Access::remote_read;

class DeviceMemory : public ::testing::Test {
protected:
    void SetUp() override {
        tree_.add_device("0000:00:04.0", "0x8086", "0x10d3", "vfio-pci", 6);   // the NIC
        tree_.add_device("0000:00:0b.0", "0x1af4", "0x1110", "vfio-pci", 9);   // memory behind BAR 0
        unsetenv("VFAB_IOMMU_BACKEND");
        nic_ = open("0000:00:04.0");
        gpu_ = open("0000:00:0b.0");
        ASSERT_TRUE(nic_ && gpu_);
        auto pd = ProtectionDomain::create(nic_->iommu_shared());
        ASSERT_TRUE(pd) << pd.error().message;
        pd_ = std::move(*pd);
    }
    void TearDown() override {
        pd_.reset();
        gpu_.reset();
        nic_.reset();
        EXPECT_TRUE(kernel_.open_fds.empty()) << kernel_.open_fds.size() << " fd(s) left open";
        EXPECT_TRUE(kernel_.mmaps.empty()) << kernel_.mmaps.size() << " mapping(s) left";
    }
    std::shared_ptr<vfio::Device> open(const char* bdf) {
        vfio::DeviceOptions o;
        o.backend = vfio::IommuBackend::legacy;
        o.sys = &kernel_;
        o.sysfs_root = tree_.root();
        auto d = vfio::Device::open(*PciAddress::parse(bdf), o);
        EXPECT_TRUE(d) << d.error().message;
        return d ? std::shared_ptr<vfio::Device>(std::move(*d)) : nullptr;
    }
    FakeSysfsTree tree_;
    FakeKernel kernel_;
    std::shared_ptr<vfio::Device> nic_, gpu_;
    std::unique_ptr<ProtectionDomain> pd_;
};

TEST_F(DeviceMemory, TheBarIsMappedForTheNicAndItsDeviceKeptOpenUntilDeregistered) {
    EXPECT_TRUE(pd_->maps_device_memory());
    volatile uint8_t* bar = (*gpu_->region(0))->base();
    const int maps = kernel_.map_calls, unmaps = kernel_.unmap_calls;
    auto mr = pd_->register_device_memory(gpu_, 0, 4096, 8192, kRw);
    ASSERT_TRUE(mr) << mr.error().message;
    EXPECT_TRUE(mr->device_memory);
    EXPECT_EQ(mr->addr, bar + 4096);
    EXPECT_EQ(kernel_.map_calls, maps + 1);
    const Translation t = pd_->translate(mr->lkey, reinterpret_cast<uint64_t>(bar) + 4096 + 100, 64, Access::local_write);
    ASSERT_EQ(t.status, MrStatus::ok);
    EXPECT_EQ(t.host, reinterpret_cast<uint64_t>(bar) + 4096 + 100);
    EXPECT_TRUE(pd_->iova_of(const_cast<uint8_t*>(bar) + 4096, 8192));   // fast registration finds it too

    std::weak_ptr<vfio::Device> held = gpu_;
    gpu_.reset();
    EXPECT_FALSE(held.expired()) << "the domain must keep the device whose memory it maps";
    ASSERT_TRUE(pd_->deregister(*mr));
    EXPECT_EQ(kernel_.unmap_calls, unmaps + 1);
    EXPECT_TRUE(held.expired()) << "unmapped, the device may close";
}

TEST_F(DeviceMemory, BadInputIsRefusedAndMapsNothing) {
    const int maps = kernel_.map_calls;
    auto r = pd_->register_device_memory(nullptr, 0, 0, 4096, kRw);
    EXPECT_EQ(r.error().code, EINVAL);
    r = pd_->register_device_memory(gpu_, 1, 0, 4096, kRw);   // region 1: the device has none
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("does not implement"), std::string::npos) << r.error().message;
    r = pd_->register_device_memory(gpu_, VFIO_PCI_CONFIG_REGION_INDEX, 0, 64, kRw);   // not mmappable
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("not mmapped"), std::string::npos) << r.error().message;
    r = pd_->register_device_memory(gpu_, 0, 0x1F000, 0x2000, kRw);   // past the 128 KiB region
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("do not fit"), std::string::npos) << r.error().message;
    r = pd_->register_device_memory(gpu_, 0, 0, 0, kRw);
    EXPECT_EQ(r.error().code, EINVAL);
    EXPECT_EQ(kernel_.map_calls, maps);
    kernel_.map_dma_errno = EFAULT;   // the kernel refuses: nothing kept
    r = pd_->register_device_memory(gpu_, 0, 0, 4096, kRw);
    EXPECT_FALSE(r);
    kernel_.map_dma_errno = 0;
    std::weak_ptr<vfio::Device> held = gpu_;
    gpu_.reset();
    EXPECT_TRUE(held.expired());
}

TEST_F(DeviceMemory, DmaBufsNeedIommufdAndAKernelThatMapsThem) {
    auto r = pd_->register_dmabuf(-1, 0, 4096, kRw);
    EXPECT_EQ(r.error().code, EINVAL);
    r = pd_->register_dmabuf(0, 0, 4096, kRw);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ENOTSUP);
    EXPECT_NE(r.error().message.find("iommufd"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace vfab::dma
