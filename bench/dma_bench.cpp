// Memory-registration and buffer-pool costs (Google Benchmark):
//   PdRegisterDeregisterInArena  register + deregister of a buffer inside a DMA arena
//   MrTableAddRemove             the key table alone
//   Translate                    key + address + length + access -> IOVA (the fast path)
//   PoolGetPut / PoolBulk32      BufferPool per buffer, single and in bursts of 32
#include <benchmark/benchmark.h>

#include <cstdio>
#include <random>

#include "fake_kernel.hpp"
#include "fake_sysfs.hpp"
#include "vfab/dma/buffer_pool.hpp"
#include "vfab/dma/protection_domain.hpp"
#include "vfab/vfio/device.hpp"

namespace {
using namespace vfab;
using namespace vfab::dma;

// A protection domain over a fake legacy container with one (fake) device in it.
struct Domain {
    vfab::testing::FakeSysfsTree sysfs;
    vfio::testing::FakeKernel kernel;
    std::unique_ptr<vfio::Device> dev;
    std::unique_ptr<ProtectionDomain> pd;
    DmaArena* arena = nullptr;

    Domain() {
        sysfs.add_device("0000:00:02.0", "0x8086", "0x10d3", "vfio-pci", 5);
        vfio::DeviceOptions o;
        o.backend = vfio::IommuBackend::legacy;
        o.sys = &kernel;
        o.sysfs_root = sysfs.root();
        dev = *vfio::Device::open(*PciAddress::parse("0000:00:02.0"), o);
        pd = *ProtectionDomain::create(dev->iommu_shared());
        DmaMemoryOptions m;
        m.page_size = PageSize::k4;   // no hugepages needed to run the benchmark
        arena = *pd->create_arena(16 << 20, m);
    }
    ~Domain() { pd.reset(); }
};

void PdRegisterDeregisterInArena(benchmark::State& state) {
    Domain d;
    uint8_t* p = d.arena->data();
    size_t i = 0;
    for (auto _ : state) {
        auto mr = d.pd->register_memory(p + (i++ & 4095) * 2048, 2048, Access::local_write);
        benchmark::DoNotOptimize(mr);
        (void)d.pd->deregister(*mr);
    }
    state.SetItemsProcessed(state.iterations());   // pairs
}
BENCHMARK(PdRegisterDeregisterInArena);

void MrTableAddRemove(benchmark::State& state) {
    auto t = MrTable::create(1 << 16);
    for (auto _ : state) {
        auto k = t->add(MrEntry{0x10000, 4096, Iova(0x10000), Access::local_write});
        benchmark::DoNotOptimize(k);
        t->remove(k->lkey);
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(MrTableAddRemove);

void Translate(benchmark::State& state) {
    auto t = MrTable::create(1 << 16);
    std::vector<uint32_t> keys;
    for (int i = 0; i < 1024; ++i)
        keys.push_back(t->add(MrEntry{uint64_t(i) << 20, 1 << 20, Iova(uint64_t(i) << 20), Access::local_write})->lkey);
    std::mt19937 rng(1);
    std::vector<uint32_t> order(4096);
    for (auto& k : order) k = rng() % 1024;
    size_t i = 0;
    for (auto _ : state) {
        uint32_t idx = order[i++ & 4095];
        Translation tr = t->translate(keys[idx], (uint64_t(idx) << 20) + 512, 1500, Access::local_write);
        benchmark::DoNotOptimize(tr);
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(Translate);

void PoolGetPut(benchmark::State& state) {
    static uint8_t mem[1 << 22];
    auto pool = BufferPool::create(DmaRegion{mem, Iova(0x100000), sizeof mem}, 2048, 0);
    Buffer b;
    for (auto _ : state) {
        bool ok = pool->get(b);
        benchmark::DoNotOptimize(ok);
        pool->put(b);
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(PoolGetPut);

void PoolBulk32(benchmark::State& state) {
    static uint8_t mem[1 << 22];
    auto pool = BufferPool::create(DmaRegion{mem, Iova(0x100000), sizeof mem}, 2048, 0);
    Buffer bufs[32];
    for (auto _ : state) {
        size_t n = pool->get_bulk(bufs);
        benchmark::DoNotOptimize(n);
        pool->put_bulk(std::span<const Buffer>(bufs, n));
    }
    state.SetItemsProcessed(state.iterations() * 32);   // buffers
}
BENCHMARK(PoolBulk32);

}  // namespace

BENCHMARK_MAIN();
