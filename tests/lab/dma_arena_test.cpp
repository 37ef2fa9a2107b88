// DMA memory and arenas through real VFIO: hugepage memory on demand, clear errors when
// hugepages run out, and QEMU's edu device DMAing in and out of an arena by IOVA arithmetic.
#include <gtest/gtest.h>

#include <numa.h>
#include <numaif.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

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

// The node each page of [p, p + len) lies on, as the kernel says (get_mempolicy with
// MPOL_F_NODE | MPOL_F_ADDR).
std::vector<int> nodes_of(const uint8_t* p, size_t len, size_t page) {
    std::vector<int> nodes;
    for (size_t off = 0; off < len; off += page) {
        int node = -1;
        if (syscall(SYS_get_mempolicy, &node, nullptr, 0, p + off, MPOL_F_NODE | MPOL_F_ADDR) != 0) node = -2;
        nodes.push_back(node);
    }
    return nodes;
}

// The lab guest has two NUMA nodes (scripts/lab.d/qemu.sh: CPU 0 and half the memory on node
// 0, CPU 1 and the other half on node 1). Running on CPU 0, memory asked for on node 1 must lie
// on node 1 — where the kernel would have put it by first touch is node 0, so the option has
// to have worked — and memory asked for on node 0 from CPU 1 on node 0.
TEST(DmaMemory, LiesOnTheNumaNodeAskedFor) {
    ASSERT_GE(numa_available(), 0) << "the lab kernel has no NUMA";
    ASSERT_EQ(numa_max_node(), 1) << "the lab guest should have two NUMA nodes (scripts/lab.d/qemu.sh)";
    for (auto [cpu, node] : {std::pair{0, 1}, std::pair{1, 0}}) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        ASSERT_EQ(sched_setaffinity(0, sizeof set, &set), 0);
        ASSERT_EQ(numa_node_of_cpu(cpu), 1 - node);
        for (PageSize ps : {PageSize::k4, PageSize::automatic}) {
            DmaMemoryOptions opts;
            opts.numa_node = node;
            opts.page_size = ps;
            auto m = DmaMemory::allocate(4 << 20, opts);
            ASSERT_TRUE(m.ok()) << m.error().message;
            EXPECT_EQ(m->numa_node(), node);
            const std::vector<int> nodes = nodes_of(m->data(), m->size(), m->page_size());
            EXPECT_EQ(std::count(nodes.begin(), nodes.end(), node), ptrdiff_t(nodes.size()))
                << "CPU " << cpu << ", node " << node << ", " << m->page_size() << "-byte pages: " << nodes.size() - std::count(nodes.begin(), nodes.end(), node)
                << " pages elsewhere (first: node " << nodes[0] << ")";
        }
    }
    cpu_set_t all;
    CPU_ZERO(&all);
    CPU_SET(0, &all);
    CPU_SET(1, &all);
    sched_setaffinity(0, sizeof all, &all);
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
