// DMA memory and arenas through real VFIO: hugepage memory on demand, clear errors when
// hugepages run out, and QEMU's edu device DMAing in and out of an arena by IOVA arithmetic.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstring>

#include "caps.hpp"
#include "edu.hpp"
#include "lab_env.hpp"
#include "vfab/dma/dma_arena.hpp"
#include "vfab/vfio/device.hpp"

namespace vfab::lab {
namespace {
using namespace vfab::dma;
using vfio::IommuBackend;

TEST(DmaMemory, HugepagesZeroedLockedAndShareable) {
    auto m = DmaMemory::allocate(3 << 20);   // rounds up to two 2 MiB pages
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_TRUE(m->huge());
    EXPECT_EQ(m->page_size(), 2u << 20);
    EXPECT_EQ(m->size(), 4u << 20);
    EXPECT_GE(m->fd(), 0);
    for (size_t i = 0; i < m->size(); i += 4096) ASSERT_EQ(m->data()[i], 0) << i;
    std::memset(m->data(), 0xab, m->size());
}

TEST(DmaMemory, RunningOutOfHugepagesSaysHowToReserveThem) {
    // The lab reserves 64 x 2 MiB; 1 GiB of them is not there.
    DmaMemoryOptions opts;
    opts.page_size = PageSize::m2;
    auto m = DmaMemory::allocate(1u << 30, opts);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.error().message.find("not enough free 2 MiB hugepages"), std::string::npos) << m.error().message;
    EXPECT_NE(m.error().message.find("vfio-devctl hugepages --reserve 512 --size 2M"), std::string::npos)
        << m.error().message;
    opts.page_size = PageSize::g1;
    auto g = DmaMemory::allocate(1u << 30, opts);
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.error().message.find("1 GiB hugepages"), std::string::npos) << g.error().message;
}

TEST(DmaMemory, FallsBackTo4KiBWhenHugepagesRunOut) {
    auto m = DmaMemory::allocate(256u << 20);   // more than the 128 MiB of hugepages
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_FALSE(m->huge());
    EXPECT_EQ(m->page_size(), 4096u);
}

TEST(DmaMemory, MemlockLimitTooLowNamesTheLimitAndTheSize) {
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {   // dropping CAP_IPC_LOCK cannot be undone
        rlimit rl{1 << 20, 1 << 20};
        if (!drop_ipc_lock() || setrlimit(RLIMIT_MEMLOCK, &rl) != 0) _exit(2);
        DmaMemoryOptions opts;
        opts.page_size = PageSize::k4;
        auto m = DmaMemory::allocate(4 << 20, opts);
        if (m) _exit(3);
        std::fprintf(stderr, "child: got: %s\n", m.error().message.c_str());
        const std::string& msg = m.error().message;
        bool ok = msg.find("cannot lock 4194304 bytes") != std::string::npos &&
                  msg.find("RLIMIT_MEMLOCK is 1048576 bytes") != std::string::npos &&
                  msg.find("ulimit -l") != std::string::npos;
        _exit(ok ? 0 : 4);
    }
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child exit " << WEXITSTATUS(status);
}

TEST(DmaMemory, OnTheDevicesNumaNode) {
    DmaMemoryOptions opts;
    opts.numa_node = 0;
    auto m = DmaMemory::allocate(2 << 20, opts);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->numa_node(), 0);
}

class Arena : public ::testing::TestWithParam<IommuBackend> {};

TEST_P(Arena, EduDmasThroughArenaIovas) {
    vfio::DeviceOptions o;
    o.backend = GetParam();
    auto dev = vfio::Device::open(address_of("edu"), o);
    ASSERT_TRUE(dev.ok()) << dev.error().message;
    ASSERT_TRUE((*dev)->enable_bus_master().ok());
    vfio::Region* bar = *(*dev)->region(0);

    // On the edu's NUMA node (the lab's single node 0, or -1 where sysfs says nothing).
    auto arena = DmaArena::create((*dev)->iommu_shared(), 2 << 20, near_device((*dev)->address()));
    ASSERT_TRUE(arena.ok()) << arena.error().message;
    EXPECT_EQ((*dev)->iommu().mappings().size(), 1u) << "one IOMMU mapping for the whole arena";
    uint8_t* src = arena->data() + 8192;
    uint8_t* dst = arena->data() + (1 << 20) + 64;
    for (int i = 0; i < 1024; ++i) src[i] = static_cast<uint8_t>(i ^ 0x5a);
    ASSERT_TRUE(arena->contains(src, 1024));
    EXPECT_FALSE(arena->contains(arena->data() + arena->size() - 10, 11));
    edu::dma(bar, arena->iova_of(src).value, edu::kBuffer, 1024, false);
    edu::dma(bar, edu::kBuffer, arena->iova_of(dst).value, 1024, true);
    EXPECT_EQ(std::memcmp(src, dst, 1024), 0);

    // Once the arena is gone, so is its mapping (dma_mr_test shows the device's DMA then faults).
    arena = Error{ENOENT, "destroyed"};
    EXPECT_TRUE((*dev)->iommu().mappings().empty());
}

INSTANTIATE_TEST_SUITE_P(Backends, Arena, ::testing::ValuesIn(backends()), BackendName());

}  // namespace
}  // namespace vfab::lab
