// The VFIO layer's error paths and resource handling against a fake kernel: every failure
// names the device or group and says what to do, and leaves no fd, mapping or eventfd behind.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdlib>

#include "fake_kernel.hpp"
#include "fake_sysfs.hpp"
#include "vfab/vfio/device.hpp"

namespace vfab::vfio {
namespace {
using vfab::testing::FakeSysfsTree;
using vfab::vfio::testing::FakeKernel;

class FakeVfio : public ::testing::Test {
protected:
    void SetUp() override {
        // Group 5: a NIC on vfio-pci and its sibling on e1000e. Group 6: a NIC alone on vfio-pci.
        tree_.add_device("0000:00:02.0", "0x8086", "0x10d3", "vfio-pci", 5);
        tree_.add_device("0000:00:03.0", "0x8086", "0x10d3", "e1000e", 5);
        tree_.add_device("0000:00:04.0", "0x8086", "0x10d3", "vfio-pci", 6);
        tree_.add_device("0000:00:05.0", "0x8086", "0x10d3", "igb", 7);
        tree_.add_device("0000:00:06.0", "0x8086", "0x10d3", "", 8);
        unsetenv("VFAB_IOMMU_BACKEND");
    }
    void TearDown() override {
        dev_.reset();
        EXPECT_TRUE(kernel_.open_fds.empty()) << kernel_.open_fds.size() << " fd(s) left open";
        EXPECT_TRUE(kernel_.mmaps.empty()) << kernel_.mmaps.size() << " mapping(s) left";
    }

    Result<std::unique_ptr<Device>> open(const char* bdf, IommuBackend b = IommuBackend::legacy) {
        DeviceOptions opts;
        opts.backend = b;
        opts.sys = &kernel_;
        opts.sysfs_root = tree_.root();
        return Device::open(*PciAddress::parse(bdf), opts);
    }
    void open_ok(const char* bdf) {
        auto d = open(bdf);
        ASSERT_TRUE(d.ok()) << d.error().message;
        dev_ = std::move(*d);
    }

    static void expect_mentions(const Error& e, const std::string& what) {
        EXPECT_NE(e.message.find(what), std::string::npos) << "'" << e.message << "' should mention '" << what << "'";
    }

    FakeSysfsTree tree_;
    FakeKernel kernel_;
    std::unique_ptr<Device> dev_;
};

TEST_F(FakeVfio, OpensAndClosesCleanly) {
    open_ok("0000:00:04.0");
    EXPECT_EQ(dev_->num_regions(), VFIO_PCI_NUM_REGIONS);
    EXPECT_TRUE(dev_->can_reset());
    EXPECT_EQ(dev_->iommu().backend(), IommuBackend::legacy);
    EXPECT_EQ(dev_->iommu().info().page_sizes, 0x40201000u);
    EXPECT_EQ(kernel_.open_fds.size(), 3u);   // container, group, device
}

TEST_F(FakeVfio, GroupNotViableNamesTheCulpritAndTheFix) {
    kernel_.group_viable = false;
    auto d = open("0000:00:02.0");
    ASSERT_FALSE(d.ok());
    expect_mentions(d.error(), "IOMMU group 5 not viable");
    expect_mentions(d.error(), "0000:00:03.0 is bound to e1000e — run `vfio-devctl bind 0000:00:03.0`");
}

TEST_F(FakeVfio, DeviceOnAnotherDriverOrNone) {
    auto d = open("0000:00:05.0");
    ASSERT_FALSE(d.ok());
    expect_mentions(d.error(), "0000:00:05.0 is bound to igb, not vfio-pci — run `vfio-devctl bind 0000:00:05.0`");
    auto n = open("0000:00:06.0");
    ASSERT_FALSE(n.ok());
    expect_mentions(n.error(), "0000:00:06.0 is not bound to any driver");
}

TEST_F(FakeVfio, AbsentDevice) {
    auto d = open("0000:00:1f.0");
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.error().code, ENODEV);
    expect_mentions(d.error(), "no PCI device 0000:00:1f.0");
}

TEST_F(FakeVfio, NoVfioModule) {
    kernel_.open_errno["/dev/vfio/vfio"] = ENOENT;
    auto d = open("0000:00:04.0");
    ASSERT_FALSE(d.ok());
    expect_mentions(d.error(), "modprobe vfio-pci");
}

TEST_F(FakeVfio, WrongApiVersion) {
    kernel_.api_version = 7;
    auto d = open("0000:00:04.0");
    ASSERT_FALSE(d.ok());
    expect_mentions(d.error(), "VFIO API version 7");
}

TEST_F(FakeVfio, NoIommuSaysHowToTurnItOn) {
    kernel_.type1v2 = false;
    auto d = open("0000:00:04.0");
    ASSERT_FALSE(d.ok());
    expect_mentions(d.error(), "intel_iommu=on");
    expect_mentions(d.error(), "no-IOMMU mode");
}

TEST_F(FakeVfio, GroupBusyOrForbidden) {
    kernel_.open_errno["/dev/vfio/6"] = EBUSY;
    auto busy = open("0000:00:04.0");
    ASSERT_FALSE(busy.ok());
    EXPECT_EQ(busy.error().code, EBUSY);
    expect_mentions(busy.error(), "/dev/vfio/6 (0000:00:04.0) is busy");
    kernel_.open_errno["/dev/vfio/6"] = EACCES;
    auto denied = open("0000:00:04.0");
    ASSERT_FALSE(denied.ok());
    expect_mentions(denied.error(), "permission denied opening /dev/vfio/6");
    expect_mentions(denied.error(), "--user");
}

TEST_F(FakeVfio, DeviceFdRefusedLeavesNothingOpen) {
    kernel_.get_device_fd_errno = EBUSY;
    auto d = open("0000:00:04.0");
    ASSERT_FALSE(d.ok());
    expect_mentions(d.error(), "VFIO_GROUP_GET_DEVICE_FD(0000:00:04.0)");
    expect_mentions(d.error(), "already open");
}

TEST_F(FakeVfio, MapFailuresAreExplainedAndNotRecorded) {
    open_ok("0000:00:04.0");
    void* mem = reinterpret_cast<void*>(0x7f0000000000);
    kernel_.map_dma_errno = ENOMEM;
    auto m = dev_->iommu().map_dma(mem, 2 << 20, Iova(0x100000));
    ASSERT_FALSE(m.ok());
    expect_mentions(m.error(), "RLIMIT_MEMLOCK");
    expect_mentions(m.error(), "needs 2097152 more bytes");
    kernel_.map_dma_errno = ENOSPC;
    m = dev_->iommu().map_dma(mem, 4096, Iova(0x100000));
    ASSERT_FALSE(m.ok());
    expect_mentions(m.error(), "out of DMA mappings");
    EXPECT_TRUE(dev_->iommu().mappings().empty());
}

TEST_F(FakeVfio, MappingsAreUnmappedWhenTheLastDeviceLeaves) {
    open_ok("0000:00:04.0");
    void* mem = reinterpret_cast<void*>(0x7f0000000000);
    ASSERT_TRUE(dev_->iommu().map_dma(mem, 4096, Iova(0x100000)).ok());
    ASSERT_TRUE(dev_->iommu().map_dma(mem, 4096, Iova(0x200000)).ok());
    auto overlap = dev_->iommu().map_dma(mem, 8192, Iova(0x1ff000));
    ASSERT_FALSE(overlap.ok());
    expect_mentions(overlap.error(), "overlaps");
    dev_.reset();
    EXPECT_EQ(kernel_.unmap_calls, 2);
}

TEST_F(FakeVfio, FailedInterruptSetupClosesItsEventfds) {
    open_ok("0000:00:04.0");
    kernel_.set_irqs_errno = EINVAL;
    auto irq = dev_->enable_interrupts(IrqIndex::msix, 5);
    ASSERT_FALSE(irq.ok());
    expect_mentions(irq.error(), "VFIO_DEVICE_SET_IRQS(MSI-X, vectors 0..5)");
    EXPECT_EQ(kernel_.eventfds(), 0u);
}

TEST_F(FakeVfio, InterruptSubsetsAndTeardownOrder) {
    open_ok("0000:00:04.0");
    uint32_t vectors[] = {1, 3};
    auto irq = dev_->enable_interrupts(IrqIndex::msix, vectors);
    ASSERT_TRUE(irq.ok()) << irq.error().message;
    ASSERT_EQ(kernel_.irq_sets.size(), 1u);
    EXPECT_EQ(kernel_.irq_sets[0].start, 1u);
    EXPECT_EQ(kernel_.irq_sets[0].count, 3u);   // vectors 1..3, vector 2 without an eventfd
    EXPECT_GE((*irq)->eventfd(1), 0);
    EXPECT_EQ((*irq)->eventfd(2), -1);
    EXPECT_EQ(kernel_.eventfds(), 2u);
    auto bad = dev_->enable_interrupts(IrqIndex::msix, 6);
    ASSERT_FALSE(bad.ok());
    expect_mentions(bad.error(), "has 5 MSI-X vector(s); vector 5 does not exist");
    dev_.reset();   // disables MSI-X (count 0) before the eventfds close
    EXPECT_EQ(kernel_.irq_sets.back().count, 0u);
    EXPECT_EQ(kernel_.eventfds(), 0u);
}

TEST_F(FakeVfio, MaskingNeedsAMaskableIndexAndAnEnabledVector) {
    open_ok("0000:00:04.0");
    auto msix = dev_->enable_interrupts(IrqIndex::msix, 2);
    ASSERT_TRUE(msix.ok());
    auto m = (*msix)->mask(0);
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.error().code, ENOTSUP);
    expect_mentions(m.error(), "VFIO cannot mask MSI-X vectors");
    auto intx = dev_->enable_interrupts(IrqIndex::intx, 1);   // replaces MSI-X
    ASSERT_TRUE(intx.ok());
    EXPECT_TRUE((*intx)->mask().ok());
    EXPECT_TRUE((*intx)->unmask().ok());
    auto absent = (*intx)->unmask(3);
    ASSERT_FALSE(absent.ok());
    expect_mentions(absent.error(), "INTx vector 3 is not enabled");
}

TEST_F(FakeVfio, SparseBarIsMappedAreaByArea) {
    // BAR0 with a sparse-mmap capability (two areas around a hole), delivered only when the
    // caller retries with the larger argsz the kernel asked for.
    std::vector<uint8_t> info(sizeof(vfio_region_info) + sizeof(vfio_region_info_cap_sparse_mmap) +
                              2 * sizeof(vfio_region_sparse_mmap_area));
    auto* ri = reinterpret_cast<vfio_region_info*>(info.data());
    ri->flags = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE | VFIO_REGION_INFO_FLAG_MMAP |
                VFIO_REGION_INFO_FLAG_CAPS;
    ri->size = 0x20000;
    ri->cap_offset = sizeof(vfio_region_info);
    auto* sp = reinterpret_cast<vfio_region_info_cap_sparse_mmap*>(info.data() + sizeof(vfio_region_info));
    sp->header.id = VFIO_REGION_INFO_CAP_SPARSE_MMAP;
    sp->nr_areas = 2;
    sp->areas[0] = {0, 0x3000};
    sp->areas[1] = {0x4000, 0x1c000};
    kernel_.bar0_info = info;

    open_ok("0000:00:04.0");
    auto bar = dev_->region(0);
    ASSERT_TRUE(bar.ok()) << bar.error().message;
    EXPECT_EQ(kernel_.mmaps.size(), 2u);
    EXPECT_EQ((*bar)->mapped_length(), 0x3000u);
    EXPECT_FALSE((*bar)->fully_mapped());
    (*bar)->write32(0x5000, 0xabcd);            // inside the second area
    EXPECT_EQ((*bar)->read32(0x5000), 0xabcdu);
    EXPECT_EQ((*bar)->read32(0x3000), 0u);      // in the hole: through pread
    auto outside = (*bar)->pread_value(0x20000, 4);
    ASSERT_FALSE(outside.ok());
    expect_mentions(outside.error(), "outside region 0");
    // An offset whose end wraps past 2^64 is outside too, not a pointer into the mappings:
    // it reads as all-ones (as a failed PCI read) and its write goes nowhere.
    const uint64_t wraps = ~uint64_t{0} - 1;
    EXPECT_EQ((*bar)->read32(wraps), 0xffffffffu);
    (*bar)->write32(wraps, 0x1234);
    EXPECT_EQ((*bar)->read<uint64_t>(~uint64_t{0} - 3), ~uint64_t{0});
}

TEST_F(FakeVfio, BackendFromTheEnvironment) {
    setenv("VFAB_IOMMU_BACKEND", "quantum", 1);
    auto d = open("0000:00:04.0", IommuBackend::automatic);
    unsetenv("VFAB_IOMMU_BACKEND");
    ASSERT_FALSE(d.ok());
    expect_mentions(d.error(), "VFAB_IOMMU_BACKEND: unknown IOMMU backend 'quantum'");
}

TEST_F(FakeVfio, ConfigAccessChecksWidthAndAlignment) {
    open_ok("0000:00:04.0");
    EXPECT_TRUE(dev_->config_read(0x04, 2).ok());
    EXPECT_FALSE(dev_->config_read(0x05, 2).ok());
    EXPECT_FALSE(dev_->config_read(0x04, 3).ok());
    EXPECT_FALSE(dev_->config_read(0xfe, 4).ok());
    EXPECT_TRUE(dev_->enable_bus_master().ok());
}

}  // namespace
}  // namespace vfab::vfio
