// BufferPool: creation checks, addresses, LIFO reuse, bulk calls, checked puts; then random
// get/put sequences checked against a model of the free stack.
#include "vfab/dma/buffer_pool.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

namespace vfab::dma {
namespace {

// Stands in for mapped DMA memory: any aligned bytes do, the pool never touches them.
struct Memory {
    alignas(4096) uint8_t bytes[64 * 1024];
    DmaRegion region(size_t len = sizeof bytes) { return {bytes, Iova(0x40000000), len}; }
};

BufferPool make(DmaRegion r, size_t size, uint32_t count, size_t align = BufferPool::kDefaultAlign) {
    auto p = BufferPool::create(r, size, count, align);
    EXPECT_TRUE(p.ok()) << p.error().message;
    return std::move(p).value();
}

TEST(BufferPool, CreateChecksItsArguments) {
    Memory m;
    EXPECT_EQ(BufferPool::create({nullptr, Iova(0), 4096}, 64, 1).error().code, EINVAL);
    EXPECT_EQ(BufferPool::create(m.region(0), 64, 1).error().code, EINVAL);
    EXPECT_EQ(BufferPool::create(m.region(), 0, 1).error().code, EINVAL);
    EXPECT_EQ(BufferPool::create(m.region(), 64, 1, 96).error().code, EINVAL);
    EXPECT_EQ(BufferPool::create({m.bytes + 8, Iova(0), 4096}, 64, 1).error().code, EINVAL);
    EXPECT_EQ(BufferPool::create({m.bytes, Iova(8), 4096}, 64, 1).error().code, EINVAL);
    EXPECT_EQ(BufferPool::create({m.bytes, Iova(UINT64_MAX - 4095), 8192}, 64, 1).error().code, EINVAL);
    EXPECT_EQ(BufferPool::create(m.region(), SIZE_MAX, 1).error().code, EINVAL);
    auto many = BufferPool::create(m.region(4096), 2048, 3);
    ASSERT_FALSE(many.ok());
    EXPECT_EQ(many.error().code, ENOSPC);
    EXPECT_NE(many.error().message.find("holds 2 buffers of 2048 bytes"), std::string::npos) << many.error().message;
    EXPECT_EQ(BufferPool::create(m.region(32), 64, 0).error().code, ENOSPC);
}

TEST(BufferPool, CountZeroMeansAsManyAsFitAndStrideIsAligned) {
    Memory m;
    BufferPool p = make(m.region(), 1500, 0, 128);
    EXPECT_EQ(p.stride(), 1536u);
    EXPECT_EQ(p.buf_size(), 1500u);
    EXPECT_EQ(p.capacity(), sizeof m.bytes / 1536);
    EXPECT_EQ(p.available(), p.capacity());
}

TEST(BufferPool, FreshPoolHandsOutBuffersInAddressOrder) {
    Memory m;
    BufferPool p = make(m.region(), 2048, 4);
    for (uint32_t i = 0; i < 4; ++i) {
        Buffer b;
        ASSERT_TRUE(p.get(b));
        EXPECT_EQ(b.index, i);
        EXPECT_EQ(b.addr, m.bytes + i * 2048);
        EXPECT_EQ(b.iova, Iova(0x40000000 + i * 2048));
    }
    Buffer none;
    EXPECT_FALSE(p.get(none));
    EXPECT_EQ(p.available(), 0u);
}

TEST(BufferPool, ReuseIsLastInFirstOut) {
    Memory m;
    BufferPool p = make(m.region(), 256, 8);
    Buffer a, b, c;
    ASSERT_TRUE(p.get(a) && p.get(b) && p.get(c));
    p.put(a);
    p.put(c.addr);
    Buffer x, y;
    ASSERT_TRUE(p.get(x) && p.get(y));
    EXPECT_EQ(x.index, c.index);   // the one put last comes back first
    EXPECT_EQ(y.index, a.index);
}

TEST(BufferPool, AddressArithmeticWorksForInteriorPointers) {
    Memory m;
    BufferPool p = make(m.region(), 1000, 10, 1024);
    const uint8_t* inside = m.bytes + 3 * 1024 + 77;
    EXPECT_TRUE(p.contains(inside));
    EXPECT_EQ(p.index_of(inside), 3u);
    EXPECT_EQ(p.iova_of(inside), Iova(0x40000000 + 3 * 1024 + 77));
    EXPECT_EQ(p.addr_of(9), m.bytes + 9 * 1024);
    EXPECT_EQ(p.buffer(9).iova, Iova(0x40000000 + 9 * 1024));
    EXPECT_FALSE(p.contains(m.bytes + 10 * 1024));   // past the last buffer, still in the region
    EXPECT_FALSE(p.contains(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(m.bytes) - 1)));
}

TEST(BufferPool, BulkCallsTakeWhatIsThereAndGiveItBack) {
    Memory m;
    BufferPool p = make(m.region(), 512, 6);
    Buffer got[4];
    EXPECT_EQ(p.get_bulk(got), 4u);
    Buffer more[4];
    EXPECT_EQ(p.get_bulk(more), 2u);   // only two left
    EXPECT_EQ(p.get_bulk(std::span<Buffer>(more, 0)), 0u);
    std::set<uint32_t> seen;
    for (const Buffer& b : got) seen.insert(b.index);
    for (int i = 0; i < 2; ++i) seen.insert(more[i].index);
    EXPECT_EQ(seen.size(), 6u);
    p.put_bulk(got);
    p.put_bulk(std::span<const Buffer>(more, 2));
    EXPECT_EQ(p.available(), 6u);
    // Put in order got[0..3], more[0..1]; the stack gives them back last first.
    const uint32_t want[4] = {more[1].index, more[0].index, got[3].index, got[2].index};
    EXPECT_EQ(p.get_bulk(more), 4u);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(more[i].index, want[i]);
}

TEST(BufferPool, CheckedPutNamesWhatIsWrong) {
    Memory m;
    BufferPool p = make(m.region(), 512, 4);
    Buffer b;
    ASSERT_TRUE(p.get(b));
    int on_stack = 0;
    EXPECT_EQ(p.put_checked(&on_stack), PutStatus::foreign);
    EXPECT_EQ(p.put_checked(m.bytes + 4 * 512), PutStatus::foreign);
    EXPECT_EQ(p.put_checked(static_cast<uint8_t*>(b.addr) + 1), PutStatus::not_buffer_start);
    EXPECT_EQ(p.put_checked(m.bytes + 512), PutStatus::double_put);   // never taken
    EXPECT_EQ(p.put_checked(b.addr), PutStatus::ok);
    EXPECT_EQ(p.put_checked(b.addr), PutStatus::double_put);
    EXPECT_EQ(p.available(), 4u);
    EXPECT_STREQ(to_string(PutStatus::double_put), "buffer returned twice");
}

TEST(BufferPoolDeathTest, UncheckedMisuseTripsAssertsInDebugBuilds) {
#ifdef NDEBUG
    GTEST_SKIP() << "asserts are compiled out";
#else
    Memory m;
    BufferPool p = make(m.region(), 512, 4);
    Buffer b;
    ASSERT_TRUE(p.get(b));
    p.put(b);
    EXPECT_DEATH(p.put(b), "returned twice");
    int elsewhere = 0;
    EXPECT_DEATH(p.put(&elsewhere), "not a buffer of this pool");
#endif
}

TEST(BufferPool, MovesKeepTheBuffers) {
    Memory m;
    BufferPool a = make(m.region(), 512, 4);
    Buffer b;
    ASSERT_TRUE(a.get(b));
    BufferPool moved = std::move(a);
    EXPECT_EQ(moved.available(), 3u);
    moved.put(b);
    EXPECT_EQ(moved.available(), 4u);
}

// ---- Random sequences against a model: the free stack, as a vector ------------------------

TEST(BufferPoolRandom, TenThousandOpsMatchAStackModel) {
    Memory m;
    BufferPool p = make(m.region(), 200, 256);   // stride 256
    std::vector<uint32_t> free_stack(256);       // back() is handed out next
    for (uint32_t i = 0; i < 256; ++i) free_stack[i] = 255 - i;
    std::vector<uint32_t> held;
    std::mt19937_64 rng(99);
    auto pick = [&](size_t lo, size_t hi) { return std::uniform_int_distribution<size_t>(lo, hi)(rng); };
    auto take_expected = [&](const Buffer& b) {
        ASSERT_FALSE(free_stack.empty());
        ASSERT_EQ(b.index, free_stack.back());
        ASSERT_EQ(b.addr, m.bytes + size_t(b.index) * 256);
        ASSERT_EQ(b.iova, Iova(0x40000000 + uint64_t(b.index) * 256));
        free_stack.pop_back();
        held.push_back(b.index);
    };
    auto give_back = [&](size_t i) {
        const uint32_t index = held[i];
        held[i] = held.back();
        held.pop_back();
        free_stack.push_back(index);
        return index;
    };
    for (int op = 0; op < 10000; ++op) {
        const size_t dice = pick(0, 99);
        if (dice < 35) {
            Buffer b;
            const bool ok = p.get(b);
            ASSERT_EQ(ok, !free_stack.empty());
            if (ok) take_expected(b);
        } else if (dice < 50) {
            Buffer bufs[16];
            const size_t want = pick(0, 16), n = p.get_bulk(std::span<Buffer>(bufs, want));
            ASSERT_EQ(n, std::min(want, free_stack.size()));
            for (size_t i = 0; i < n; ++i) take_expected(bufs[i]);
        } else if (dice < 80 && !held.empty()) {
            const uint32_t index = give_back(pick(0, held.size() - 1));
            if (dice < 65) p.put(p.buffer(index));
            else ASSERT_EQ(p.put_checked(p.addr_of(index)), PutStatus::ok);
        } else if (dice < 90 && !held.empty()) {
            Buffer bufs[8];
            const size_t n = std::min<size_t>(pick(1, 8), held.size());
            for (size_t i = 0; i < n; ++i) bufs[i] = p.buffer(give_back(pick(0, held.size() - 1)));
            p.put_bulk(std::span<const Buffer>(bufs, n));
        } else if (!free_stack.empty()) {   // a checked put of a free buffer is refused
            const uint32_t index = free_stack[pick(0, free_stack.size() - 1)];
            ASSERT_EQ(p.put_checked(p.addr_of(index)), PutStatus::double_put);
        }
        if (HasFatalFailure()) return;
        ASSERT_EQ(p.available(), free_stack.size());
    }
    // No buffer was ever out twice: held and free partition the indices.
    std::vector<uint32_t> all = held;
    all.insert(all.end(), free_stack.begin(), free_stack.end());
    std::sort(all.begin(), all.end());
    for (uint32_t i = 0; i < 256; ++i) ASSERT_EQ(all[i], i);
}

}  // namespace
}  // namespace vfab::dma
