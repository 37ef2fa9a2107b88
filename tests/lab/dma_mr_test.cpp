// Memory registration through real VFIO: an MR inside an arena and one over plain malloc'ed
// memory, each DMA'd by QEMU's edu device through the IOVA its key translates to; after
// deregistration the IOVA faults and nothing is written. Plus the registration errors.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "edu.hpp"
#include "lab_env.hpp"
#include "vfab/dma/protection_domain.hpp"
#include "vfab/vfio/device.hpp"

namespace vfab::lab {
namespace {
using namespace vfab::dma;
using vfio::IommuBackend;

class Mr : public ::testing::TestWithParam<IommuBackend> {
protected:
    void SetUp() override {
        vfio::DeviceOptions o;
        o.backend = GetParam();
        auto d = vfio::Device::open(address_of("edu"), o);
        ASSERT_TRUE(d.ok()) << d.error().message;
        dev = std::move(*d);
        ASSERT_TRUE(dev->enable_bus_master().ok());
        bar = *dev->region(0);
        auto p = ProtectionDomain::create(dev->iommu_shared());
        ASSERT_TRUE(p.ok()) << p.error().message;
        pd = std::move(*p);
    }
    void TearDown() override {
        pd.reset();   // before the device: the domain unmaps through the device's context
        dev.reset();
    }

    // Copies `len` bytes from `src` to `dst`, both inside the MR, by DMA through the device's
    // buffer, with the IOVAs the MR's key translates them to.
    void dma_copy(const MemoryRegion& mr, const void* src, void* dst, uint64_t len) {
        Translation from = pd->translate(mr.lkey, reinterpret_cast<uint64_t>(src), len, Access::none);
        Translation to = pd->translate(mr.lkey, reinterpret_cast<uint64_t>(dst), len, Access::local_write);
        ASSERT_EQ(from.status, MrStatus::ok) << to_string(from.status);
        ASSERT_EQ(to.status, MrStatus::ok) << to_string(to.status);
        edu::dma(bar, from.iova.value, edu::kBuffer, len, false);
        edu::dma(bar, edu::kBuffer, to.iova.value, len, true);
    }

    std::unique_ptr<vfio::Device> dev;
    vfio::Region* bar = nullptr;
    std::unique_ptr<ProtectionDomain> pd;
};

TEST_P(Mr, InsideAnArenaDmaThroughTheKeysIova) {
    auto arena = pd->create_arena(2 << 20);
    ASSERT_TRUE(arena.ok()) << arena.error().message;
    size_t mappings = dev->iommu().mappings().size();
    uint8_t* buf = (*arena)->data() + 12345;
    auto mr = pd->register_memory(buf, 1000, Access::local_write);
    ASSERT_TRUE(mr.ok()) << mr.error().message;
    EXPECT_FALSE(mr->pinned);
    EXPECT_EQ(dev->iommu().mappings().size(), mappings) << "registration inside an arena maps nothing";
    EXPECT_EQ(mr->iova, (*arena)->iova_of(buf));
    std::memset(buf + 600, 0x3c, 256);
    dma_copy(*mr, buf + 600, buf + 100, 256);
    for (int i = 0; i < 256; ++i) ASSERT_EQ(buf[100 + i], 0x3c) << i;
    EXPECT_EQ(buf[99], 0);
    EXPECT_EQ(buf[356], 0);
    ASSERT_TRUE(pd->deregister(*mr).ok());
    EXPECT_EQ(pd->translate(mr->lkey, reinterpret_cast<uint64_t>(buf), 8, Access::local_write).status,
              MrStatus::bad_key);
}

TEST_P(Mr, OverMallocedMemoryPinnedMappedAndUnmappedOnDeregistration) {
    if (GetParam() == IommuBackend::noiommu) GTEST_SKIP() << "malloc'ed memory is not physically contiguous";
    const size_t len = 64 * 1024;
    std::unique_ptr<uint8_t, decltype(&std::free)> heap(static_cast<uint8_t*>(std::malloc(len)), &std::free);
    uint8_t* buf = heap.get();
    std::memset(buf, 0, len);
    auto mr = pd->register_memory(buf, len, Access::local_write | Access::remote_read);
    ASSERT_TRUE(mr.ok()) << mr.error().message;
    EXPECT_TRUE(mr->pinned);
    EXPECT_EQ(pd->user_mappings(), 1u);
    std::memset(buf + 20000, 0xa7, 512);
    dma_copy(*mr, buf + 20000, buf + 4000, 512);   // the destination straddles a page boundary
    for (int i = 0; i < 512; ++i) ASSERT_EQ(buf[4000 + i], 0xa7) << i;

    // A second registration of the same pages shares the mapping.
    auto again = pd->register_memory(buf, len, Access::local_write);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(pd->user_mappings(), 1u);
    EXPECT_NE(again->lkey, mr->lkey);
    ASSERT_TRUE(pd->deregister(*again).ok());
    EXPECT_EQ(pd->user_mappings(), 1u) << "still used by the first registration";

    Iova old = mr->iova;
    ASSERT_TRUE(pd->deregister(*mr).ok());
    EXPECT_EQ(pd->user_mappings(), 0u);
    std::memset(buf, 0x11, len);
    edu::clear_kernel_log();
    edu::dma(bar, edu::kBuffer, old.value + 4000, 64, true);   // the old IOVA: must fault
    for (size_t i = 0; i < len; ++i) ASSERT_EQ(buf[i], 0x11) << "byte " << i << " was written after deregistration";
    // The bytes above are the proof; the kernel's fault message is printed rate-limited and
    // QEMU collapses faults from one device while one is pending, so it is only reported.
    if (!edu::dmar_write_fault_logged()) std::printf("note: no DMAR fault line in the kernel log this time\n");
    auto stale = pd->translate(mr->lkey, reinterpret_cast<uint64_t>(buf), 8, Access::local_write);
    EXPECT_NE(stale.status, MrStatus::ok);
}

TEST_P(Mr, RegistrationErrors) {
    auto zero = pd->register_memory(this, 0, Access::local_write);
    ASSERT_FALSE(zero.ok());
    EXPECT_NE(zero.error().message.find("must not be 0"), std::string::npos);
    auto wrap = pd->register_memory(reinterpret_cast<void*>(~uint64_t{0} - 10), 100, Access::local_write);
    ASSERT_FALSE(wrap.ok());
    EXPECT_NE(wrap.error().message.find("wraps"), std::string::npos);
    if (GetParam() != IommuBackend::noiommu) {
        // Memory that is not mapped in this process.
        void* hole = mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        munmap(hole, 1 << 20);
        auto unmapped = pd->register_memory(hole, 4096, Access::local_write);
        ASSERT_FALSE(unmapped.ok());
        EXPECT_NE(unmapped.error().message.find("not mapped in this process"), std::string::npos)
            << unmapped.error().message;
        EXPECT_EQ(pd->user_mappings(), 0u) << "a failed registration left a mapping";
    }
    MemoryRegion never;
    never.lkey = 0x4242;
    auto bad = pd->deregister(never);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("not from this protection domain"), std::string::npos);
}

TEST_P(Mr, KeyTableFullIsAClearError) {
    auto p = ProtectionDomain::create(dev->iommu_shared(), PdOptions{4});
    ASSERT_TRUE(p.ok());
    auto arena = (*p)->create_arena(2 << 20);
    ASSERT_TRUE(arena.ok()) << arena.error().message;
    for (int i = 0; i < 4; ++i) ASSERT_TRUE((*p)->register_memory((*arena)->data() + i, 1, Access::none).ok());
    auto full = (*p)->register_memory((*arena)->data(), 1, Access::none);
    ASSERT_FALSE(full.ok());
    EXPECT_EQ(full.error().code, ENOSPC) << full.error().message;
}

INSTANTIATE_TEST_SUITE_P(Backends, Mr, ::testing::ValuesIn(backends()), BackendName());

}  // namespace
}  // namespace vfab::lab
