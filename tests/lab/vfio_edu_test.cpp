// The VFIO layer on QEMU's edu device, through real VFIO: BAR access by mmap and by pread,
// DMA both ways through an IOMMU mapping, INTx and MSI as eventfds, and the IOMMU blocking a
// DMA to an IOVA that is no longer mapped. Each test runs on every backend the boot offers.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "edu.hpp"
#include "lab_env.hpp"
#include "vfab/vfio/device.hpp"
#include "vfab/vfio/event_wait.hpp"
#include "vfab/vfio/pci_sysfs.hpp"

namespace vfab::lab {
namespace {
using namespace vfio;

using namespace edu;

// Anonymous page-aligned memory that unmaps itself.
struct Pages {
    explicit Pages(size_t n) : len(n) {
        ptr = static_cast<uint8_t*>(mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
    }
    ~Pages() { munmap(ptr, len); }
    uint8_t* ptr;
    size_t len;
};

class Edu : public ::testing::TestWithParam<IommuBackend> {
protected:
    void SetUp() override {
        DeviceOptions opts;
        opts.backend = GetParam();
        auto d = Device::open(address_of("edu"), opts);
        ASSERT_TRUE(d.ok()) << d.error().message;
        dev = std::move(*d);
        auto b = dev->region(0);
        ASSERT_TRUE(b.ok()) << b.error().message;
        bar = *b;
        ASSERT_TRUE(dev->enable_bus_master().ok());
    }

    // Runs one edu DMA and waits for it (QEMU's edu takes ~100 ms per transfer).
    void dma(uint64_t src, uint64_t dst, uint64_t len, uint64_t cmd) { edu::dma(bar, src, dst, len, cmd & kDmaToRam); }

    Iova iova_for(void* va) { return Iova(reinterpret_cast<uintptr_t>(va)); }   // IOVA = VA

    std::unique_ptr<Device> dev;
    Region* bar = nullptr;
};

TEST_P(Edu, ReportsItsBackend) { EXPECT_EQ(dev->iommu().backend(), GetParam()); }

TEST_P(Edu, IdRegisterThroughMmapAndThroughPread) {
    ASSERT_TRUE(bar->base()) << "BAR0 should be mmappable";
    EXPECT_EQ(bar->read32(kId), 0x010000edu);
    auto v = bar->pread_value(kId, 4);
    ASSERT_TRUE(v.ok()) << v.error().message;
    EXPECT_EQ(*v, 0x010000edu);
    // The liveness register returns the inverse of what was written to it.
    bar->write32(kLiveness, 0x12345678);
    EXPECT_EQ(bar->read32(kLiveness), ~0x12345678u);
    ASSERT_TRUE(bar->pwrite_value(kLiveness, 4, 0xa5a5a5a5).ok());
    EXPECT_EQ(bar->read32(kLiveness), 0x5a5a5a5au);
}

TEST_P(Edu, ConfigSpaceAndCapabilities) {
    auto id = dev->config_read(pci::kVendorId, 4);
    ASSERT_TRUE(id.ok());
    EXPECT_EQ(*id, 0x11e81234u);
    auto caps = dev->capabilities();
    ASSERT_TRUE(caps.ok()) << caps.error().message;
    EXPECT_TRUE(pci::find_capability(*caps, pci::kCapMsi)) << "edu has an MSI capability";
    auto cmd = dev->config_read(pci::kCommand, 2);
    EXPECT_TRUE(*cmd & pci::kCommandBusMaster);
}

TEST_P(Edu, DmaIntoTheDeviceAndBack) {
    Pages src(4096), dst(4096);
    for (size_t i = 0; i < 4096; ++i) src.ptr[i] = static_cast<uint8_t>(i * 7 + 3);
    std::memset(dst.ptr, 0, 4096);
    auto s = dev->iommu().map_dma(src.ptr, 4096, iova_for(src.ptr), kDmaRead);
    ASSERT_TRUE(s.ok()) << s.error().message;
    auto d = dev->iommu().map_dma(dst.ptr, 4096, iova_for(dst.ptr), kDmaWrite);
    ASSERT_TRUE(d.ok()) << d.error().message;

    const uint64_t len = 2048;   // inside edu's 4 KiB buffer, clear of its last byte
    dma(s->value, kBuffer, len, 0);
    dma(kBuffer, d->value, len, kDmaToRam);
    EXPECT_EQ(std::memcmp(src.ptr, dst.ptr, len), 0) << "DMA'd data differs";
    EXPECT_EQ(dst.ptr[len], 0) << "the device wrote past the transfer";
    EXPECT_TRUE(dev->iommu().unmap_dma(*s, 4096).ok());
    EXPECT_TRUE(dev->iommu().unmap_dma(*d, 4096).ok());
    EXPECT_TRUE(dev->iommu().mappings().empty());
}

TEST_P(Edu, DmaToAnUnmappedIovaIsBlocked) {
    if (GetParam() == IommuBackend::noiommu) GTEST_SKIP() << "no IOMMU, no protection";
    Pages buf(4096);
    std::memset(buf.ptr, 0x11, 4096);
    auto m = dev->iommu().map_dma(buf.ptr, 4096, iova_for(buf.ptr), kDmaReadWrite);
    ASSERT_TRUE(m.ok()) << m.error().message;
    dma(kBuffer, m->value, 64, kDmaToRam);   // allowed: proves the path works
    EXPECT_NE(buf.ptr[0], 0x11);
    std::memset(buf.ptr, 0x11, 4096);
    ASSERT_TRUE(dev->iommu().unmap_dma(*m, 4096).ok());

    clear_kernel_log();
    dma(kBuffer, m->value, 64, kDmaToRam);   // no longer mapped: the IOMMU must stop it
    for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(buf.ptr[i], 0x11) << "byte " << i << " was written";
    EXPECT_TRUE(dmar_write_fault_logged()) << "expected a DMAR write fault in the kernel log";
    // The process and the device carry on.
    EXPECT_EQ(bar->read32(kId), 0x010000edu);
}

// Raises `n` edu interrupts one at a time and checks each arrives on the eventfd.
void expect_interrupts(Region* bar, Interrupts* irq, bool intx, int n) {
    int fd = irq->eventfd(0);
    ASSERT_GE(fd, 0);
    int seen = 0;
    for (int i = 0; i < n; ++i) {
        bar->write32(kIrqRaise, 1u << (i % 8));
        int fds[] = {fd};
        auto r = wait_any(fds, 2000);
        ASSERT_TRUE(r.ok()) << r.error().message;
        ASSERT_EQ(*r, 0) << "interrupt " << i << " did not arrive within 2 s";
        seen += drain_eventfd(fd) > 0;
        bar->write32(kIrqAck, bar->read32(kIrqStatus));
        if (intx) {   // INTx is masked by the kernel on each interrupt
            ASSERT_TRUE(irq->unmask().ok());
        }
    }
    EXPECT_EQ(seen, n);
}

TEST_P(Edu, IntxInterruptsAsEventfd) {
    auto info = dev->irq_info(IrqIndex::intx);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->count, 1u);
    EXPECT_TRUE(info->automasked);
    auto irq = dev->enable_interrupts(IrqIndex::intx, 1);
    ASSERT_TRUE(irq.ok()) << irq.error().message;
    expect_interrupts(bar, *irq, true, 100);
    EXPECT_TRUE(dev->disable_interrupts(IrqIndex::intx).ok());
}

TEST_P(Edu, MsiInterruptsAsEventfd) {
    auto irq = dev->enable_interrupts(IrqIndex::msi, 1);
    ASSERT_TRUE(irq.ok()) << irq.error().message;
    expect_interrupts(bar, *irq, false, 100);
    EXPECT_TRUE(dev->disable_interrupts(IrqIndex::msi).ok());
}

TEST_P(Edu, MaskedIntxIsHeldBackUntilUnmasked) {
    auto irq = dev->enable_interrupts(IrqIndex::intx, 1);
    ASSERT_TRUE(irq.ok()) << irq.error().message;
    int fds[] = {(*irq)->eventfd(0)};
    ASSERT_TRUE((*irq)->mask().ok());
    bar->write32(kIrqRaise, 1);
    auto quiet = wait_any(fds, 300);
    ASSERT_TRUE(quiet.ok());
    EXPECT_EQ(*quiet, -1) << "a masked INTx was delivered";
    ASSERT_TRUE((*irq)->unmask().ok());   // the line is still asserted: it fires now
    auto got = wait_any(fds, 2000);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, 0) << "the pending INTx did not arrive after unmask";
    bar->write32(kIrqAck, bar->read32(kIrqStatus));
}

TEST_P(Edu, MsiCannotBeMaskedThroughVfio) {
    auto irq = dev->enable_interrupts(IrqIndex::msi, 1);
    ASSERT_TRUE(irq.ok());
    auto m = (*irq)->mask();
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.error().message.find("VFIO cannot mask MSI"), std::string::npos) << m.error().message;
}

TEST_P(Edu, ErrorAndRequestIndicesAreEventfds) {
    for (IrqIndex i : {IrqIndex::err, IrqIndex::req}) {
        auto info = dev->irq_info(i);
        ASSERT_TRUE(info.ok()) << to_string(i) << ": " << info.error().message;
        if (i == IrqIndex::err) {   // edu is conventional PCI: no error (AER) interrupt
            EXPECT_EQ(info->count, 0u);
            EXPECT_FALSE(dev->enable_interrupts(i, 1).ok());
            continue;
        }
        auto irq = dev->enable_interrupts(i, 1);
        ASSERT_TRUE(irq.ok()) << to_string(i) << ": " << irq.error().message;
        EXPECT_GE((*irq)->eventfd(0), 0);
    }
}

// Unbinding vfio-pci while the device is open makes the kernel signal the request (REQ)
// eventfd and wait until the application lets go: how hot-unplug reaches a driver.
TEST_P(Edu, RequestInterruptAsksForTheDeviceBack) {
    auto irq = dev->enable_interrupts(IrqIndex::req, 1);
    ASSERT_TRUE(irq.ok()) << irq.error().message;
    int fds[] = {(*irq)->eventfd(0)};
    const std::string bdf = dev->address().to_string();
    std::thread unbind([&] { std::ofstream("/sys/bus/pci/drivers/vfio-pci/unbind") << bdf; });
    auto got = wait_any(fds, 10000);
    dev.reset();   // let go: the unbind completes
    unbind.join();
    { std::ofstream("/sys/bus/pci/drivers_probe") << bdf; }   // driver_override: back to vfio-pci
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, 0) << "no request interrupt within 10 s";
    auto drv = PciSysfs().driver(address_of("edu"));
    ASSERT_TRUE(drv.ok());
    EXPECT_EQ(drv->value_or("(none)"), "vfio-pci");
}

TEST_P(Edu, BadInterruptRequestsAreRefused) {
    auto none = dev->enable_interrupts(IrqIndex::msix, 1);
    ASSERT_FALSE(none.ok());
    auto too_many = dev->enable_interrupts(IrqIndex::msi, 4);
    ASSERT_FALSE(too_many.ok());
    EXPECT_NE(too_many.error().message.find("does not exist"), std::string::npos) << too_many.error().message;
}

INSTANTIATE_TEST_SUITE_P(Backends, Edu, ::testing::ValuesIn(backends()), BackendName());

}  // namespace
}  // namespace vfab::lab
