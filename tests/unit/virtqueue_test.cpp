// The virtqueue behaviour both ring formats share, run against their model devices
// (virtio_model.hpp): chains, full queues, completion orders, IN_ORDER batches, wrap-around of
// every counter, notification decisions, interrupt suppression, reset and drain.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "virtio_model.hpp"

namespace vfab::virtio {
namespace {

using model::Chain;

template <class R>
class VirtqueueTest : public ::testing::Test {};
using Rigs = ::testing::Types<model::SplitRig, model::PackedRig>;
TYPED_TEST_SUITE(VirtqueueTest, Rigs);

constexpr RingFeatures kAllFeatures[] = {{false, false}, {true, false}, {false, true}, {true, true}};

// A size the format allows that is not a power of 2 where it may be.
template <class R>
constexpr uint32_t odd_size() { return std::is_same_v<typename R::Queue, PackedQueue> ? 13 : 16; }

// Fake IOVAs that carry the token, so a test can tell which chain the device holds.
uint64_t iova_of(uint32_t token, uint32_t element) { return (uint64_t(token) << 20) | (uint64_t(element) << 16); }
uint32_t token_of(const Chain& c) { return uint32_t(c.bufs.at(0).iova >> 20); }

std::vector<Buffer> chain(uint32_t token, uint32_t readable, uint32_t writable, uint32_t len = 100) {
    std::vector<Buffer> b;
    for (uint32_t i = 0; i < readable + writable; ++i) b.push_back({iova_of(token, i), len + i, i >= readable});
    return b;
}

TYPED_TEST(VirtqueueTest, CreateChecksSizeAndMemory) {
    using Q = typename TypeParam::Queue;
    model::RingMemory mem(Q::layout(256));
    EXPECT_TRUE(Q::create(256, mem.queue_memory(), {}));
    EXPECT_FALSE(Q::create(0, mem.queue_memory(), {}));
    EXPECT_FALSE(Q::create(65536, mem.queue_memory(), {}));
    QueueMemory m = mem.queue_memory();
    m.desc = static_cast<uint8_t*>(m.desc) + 8;   // descriptors need 16-byte alignment
    EXPECT_FALSE(Q::create(8, m, {}));
    m = mem.queue_memory();
    m.device_iova = m.device_iova + 1;
    auto r = Q::create(8, m, {});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, EINVAL);
    EXPECT_NE(r.error().message.find("device area"), std::string::npos) << r.error().message;
    m = mem.queue_memory();
    m.driver = nullptr;
    EXPECT_FALSE(Q::create(8, m, {}));
}

// A split ring's chains reach the device at publish() (avail->idx, once per batch); a packed
// ring's at add() (each chain's head flags, so that a polling device starts on the first chain
// of a post while the driver writes the next).
TYPED_TEST(VirtqueueTest, ChainsReachTheDeviceAtPublishOrAtAdd) {
    constexpr bool kPacked = std::is_same_v<typename TypeParam::Queue, PackedQueue>;
    for (RingFeatures f : kAllFeatures) {
        TypeParam r(8, f);
        const auto bufs = chain(7, 2, 1);
        ASSERT_TRUE(r.q.add(bufs, 7));
        EXPECT_EQ(r.q.free_count(), 5u);
        EXPECT_EQ(r.q.outstanding(), 1u);
        if (!kPacked) {
            EXPECT_EQ(r.dev.fetch(), 0u) << "visible before publish()";
            r.q.publish();
        }
        ASSERT_EQ(r.dev.fetch(), 1u);
        const Chain& c = r.dev.pending().front();
        ASSERT_EQ(c.bufs.size(), 3u);
        for (size_t i = 0; i < 3; ++i) {
            EXPECT_EQ(c.bufs[i].iova, bufs[i].iova);
            EXPECT_EQ(c.bufs[i].len, bufs[i].len);
            EXPECT_EQ(c.bufs[i].device_writes, bufs[i].device_writes);
        }
        uint32_t token = 0, len = 0;
        EXPECT_FALSE(r.q.has_used());
        EXPECT_FALSE(r.q.poll_used(token, len));
        r.dev.use(0, 60);
        EXPECT_TRUE(r.q.has_used());
        ASSERT_TRUE(r.q.poll_used(token, len));
        EXPECT_EQ(token, 7u);
        EXPECT_EQ(len, 60u);
        EXPECT_FALSE(r.q.poll_used(token, len));
        EXPECT_EQ(r.q.free_count(), 8u);
        EXPECT_EQ(r.q.outstanding(), 0u);
        EXPECT_TRUE(r.dev.errors().empty()) << r.dev.errors().front();
    }
}

TYPED_TEST(VirtqueueTest, DataBothWays) {
    TypeParam r(8, {});
    r.dev.write_data = true;
    std::vector<uint8_t> tx(300), rx(500, 0);
    for (size_t i = 0; i < tx.size(); ++i) tx[i] = uint8_t(i * 3);
    const Buffer bufs[] = {{reinterpret_cast<uint64_t>(tx.data()), 100, false},
                           {reinterpret_cast<uint64_t>(tx.data() + 100), 200, false},
                           {reinterpret_cast<uint64_t>(rx.data()), 200, true},
                           {reinterpret_cast<uint64_t>(rx.data() + 200), 300, true}};
    ASSERT_TRUE(r.q.add(bufs, 1));
    r.q.publish();
    ASSERT_EQ(r.dev.fetch(), 1u);
    EXPECT_EQ(r.dev.pending().front().gather(), tx);
    const uint16_t id = r.dev.pending().front().id;
    r.dev.use(0, 350);   // across both writable buffers
    uint32_t token, len;
    ASSERT_TRUE(r.q.poll_used(token, len));
    EXPECT_EQ(len, 350u);
    for (uint32_t i = 0; i < 350; ++i) ASSERT_EQ(rx[i], model::pattern(id, i)) << i;
    EXPECT_EQ(rx[350], 0);
}

TYPED_TEST(VirtqueueTest, FullQueueRefusesAndRecovers) {
    for (RingFeatures f : kAllFeatures) {
        const uint32_t size = odd_size<TypeParam>();
        TypeParam r(size, f);
        uint32_t token = 0;
        for (; token < size; ++token) ASSERT_TRUE(r.q.add(chain(token, 1, 0), token));
        EXPECT_EQ(r.q.free_count(), 0u);
        EXPECT_FALSE(r.q.add(chain(99, 1, 0), 99));
        EXPECT_FALSE(r.q.add({}, 99)) << "an empty chain";
        r.q.publish();
        ASSERT_EQ(r.dev.fetch(), size);
        r.dev.use(0, 0);
        uint32_t t, len;
        ASSERT_TRUE(r.q.poll_used(t, len));
        EXPECT_EQ(t, 0u);
        EXPECT_FALSE(r.q.add(chain(99, 1, 1), 99)) << "2 descriptors, 1 free";
        EXPECT_EQ(r.q.free_count(), 1u);
        EXPECT_EQ(r.q.outstanding(), size - 1);
        EXPECT_TRUE(r.q.add(chain(100, 0, 1), 100));
        EXPECT_FALSE(r.q.add(chain(size + 1, size + 1, 0), 101)) << "longer than the queue";
        r.q.publish();
        EXPECT_EQ(r.dev.fetch(), 1u);
        EXPECT_TRUE(r.dev.errors().empty()) << r.dev.errors().front();
    }
}

TYPED_TEST(VirtqueueTest, OutOfOrderCompletion) {
    for (RingFeatures f : {RingFeatures{false, false}, RingFeatures{true, false}}) {
        TypeParam r(16, f);
        for (uint32_t t = 0; t < 4; ++t) ASSERT_TRUE(r.q.add(chain(t, 1, t % 2 + 1), t));
        r.q.publish();
        ASSERT_EQ(r.dev.fetch(), 4u);
        EXPECT_EQ(r.q.free_count(), 16u - 2 - 3 - 2 - 3);
        for (uint32_t want : {2u, 0u, 3u, 1u}) {
            size_t i = 0;
            while (token_of(r.dev.pending()[i]) != want) ++i;
            r.dev.use(i, want);
            uint32_t t, len;
            ASSERT_TRUE(r.q.poll_used(t, len));
            EXPECT_EQ(t, want);
            EXPECT_EQ(len, want);
        }
        EXPECT_EQ(r.q.free_count(), 16u);
        EXPECT_TRUE(r.dev.errors().empty()) << r.dev.errors().front();
    }
}

TYPED_TEST(VirtqueueTest, InOrderBatchReturnsEveryBuffer) {
    for (RingFeatures f : {RingFeatures{false, true}, RingFeatures{true, true}}) {
        TypeParam r(16, f);
        // writable bytes: 0, 101, 101+102, 101+102+103, ... (chain(t, 1, t): t writable elements)
        for (uint32_t t = 0; t < 5; ++t) ASSERT_TRUE(r.q.add(chain(t, 1, t), t));
        r.q.publish();
        ASSERT_EQ(r.dev.fetch(), 5u);
        r.dev.use_batch(3, 150);   // one used entry for tokens 0, 1, 2
        const uint32_t want_len[] = {0, 101, 150};
        for (uint32_t t = 0; t < 3; ++t) {
            EXPECT_TRUE(r.q.has_used());
            uint32_t token, len;
            ASSERT_TRUE(r.q.poll_used(token, len));
            EXPECT_EQ(token, t);
            EXPECT_EQ(len, want_len[t]) << t;
        }
        uint32_t token, len;
        EXPECT_FALSE(r.q.has_used());
        EXPECT_FALSE(r.q.poll_used(token, len));
        r.dev.use_batch(2, 7);
        ASSERT_TRUE(r.q.poll_used(token, len));
        EXPECT_EQ(token, 3u);
        EXPECT_EQ(len, 101u + 102 + 103);
        ASSERT_TRUE(r.q.poll_used(token, len));
        EXPECT_EQ(token, 4u);
        EXPECT_EQ(len, 7u);
        EXPECT_EQ(r.q.free_count(), 16u);
        EXPECT_FALSE(r.q.broken());
        EXPECT_TRUE(r.dev.errors().empty()) << r.dev.errors().front();
    }
}

// take_used_run(): one used entry, every buffer of its batch at once (the oldest, in order),
// the last with its length and the others completely used; it also finishes a batch that
// poll_used() began.
TYPED_TEST(VirtqueueTest, InOrderRunTakesABatchAtOnce) {
    for (RingFeatures f : {RingFeatures{false, true}, RingFeatures{true, true}}) {
        TypeParam r(16, f);
        for (uint32_t t = 0; t < 5; ++t) ASSERT_TRUE(r.q.add(chain(t, 1, t), t));
        r.q.publish();
        ASSERT_EQ(r.dev.fetch(), 5u);
        EXPECT_EQ(r.q.take_used_run().count, 0u) << "nothing used yet";
        r.dev.use_batch(3, 150);   // tokens 0, 1, 2 (writable 0, 101, 101 + 102)
        UsedRun run = r.q.take_used_run();
        EXPECT_EQ(run.count, 3u);
        EXPECT_EQ(run.last_len, 150u);
        EXPECT_EQ(r.q.outstanding(), 2u);
        EXPECT_EQ(r.q.free_count(), 16u - (4 + 5));   // tokens 3 and 4: 1 + 3 and 1 + 4 descriptors
        EXPECT_FALSE(r.q.has_used());
        r.dev.use_batch(2, 300);
        uint32_t token, len;
        ASSERT_TRUE(r.q.poll_used(token, len));
        EXPECT_EQ(token, 3u);
        run = r.q.take_used_run();   // the rest of that batch
        EXPECT_EQ(run.count, 1u);
        EXPECT_EQ(run.last_len, 300u);
        EXPECT_EQ(r.q.free_count(), 16u);
        EXPECT_EQ(r.q.outstanding(), 0u);
        // And the ring goes on from where the batches ended.
        ASSERT_TRUE(r.q.add(chain(9, 1, 1), 9));
        r.q.publish();
        ASSERT_EQ(r.dev.fetch(), 1u);
        r.dev.use_batch(1, 5);
        run = r.q.take_used_run();
        EXPECT_EQ(run.count, 1u);
        EXPECT_EQ(run.last_len, 5u);
        EXPECT_FALSE(r.q.broken());
        EXPECT_TRUE(r.dev.errors().empty()) << r.dev.errors().front();
    }
}

// take_used_runs(): every used element in one call, a run each, up to the limit — a batch is
// taken whole even when it passes the limit — and the rest in the next call; a batch
// poll_used() began is finished first.
TYPED_TEST(VirtqueueTest, InOrderRunsTakeEveryElementUpToTheLimit) {
    for (RingFeatures f : {RingFeatures{false, true}, RingFeatures{true, true}}) {
        TypeParam r(16, f);
        for (uint32_t t = 0; t < 7; ++t) ASSERT_TRUE(r.q.add(chain(t, 0, 1), t));   // 100 writable bytes each
        r.q.publish();
        ASSERT_EQ(r.dev.fetch(), 7u);
        r.dev.use_batch(2, 5);    // tokens 0, 1
        r.dev.use_batch(1, 10);   // 2
        r.dev.use_batch(2, 20);   // 3, 4
        r.dev.use_batch(1, 30);   // 5
        uint32_t token, len;
        ASSERT_TRUE(r.q.poll_used(token, len));   // token 0: its batch is half taken
        ASSERT_EQ(token, 0u);
        std::vector<std::pair<uint32_t, uint32_t>> runs;
        const auto keep = [&](UsedRun run) { runs.emplace_back(run.count, run.last_len); };
        EXPECT_EQ(r.q.take_used_runs(3, keep), 4u);   // token 1, then 2, then 3 and 4 whole
        EXPECT_EQ(runs, (std::vector<std::pair<uint32_t, uint32_t>>{{1, 5}, {1, 10}, {2, 20}}));
        EXPECT_EQ(r.q.outstanding(), 2u);
        runs.clear();
        EXPECT_EQ(r.q.take_used_runs(16, keep), 1u);
        EXPECT_EQ(runs, (std::vector<std::pair<uint32_t, uint32_t>>{{1, 30}}));
        EXPECT_EQ(r.q.take_used_runs(16, keep), 0u) << "token 6 is not used yet";
        EXPECT_EQ(r.q.outstanding(), 1u);
        EXPECT_EQ(r.q.free_count(), 15u);
        r.dev.use_any_id(6, 500);   // token 6 (ID 6), more than its 100 writable bytes: capped
        runs.clear();
        EXPECT_EQ(r.q.take_used_runs(1, keep), 1u);
        EXPECT_EQ(runs, (std::vector<std::pair<uint32_t, uint32_t>>{{1, 100}}));
        EXPECT_EQ(r.q.free_count(), 16u);
        EXPECT_FALSE(r.q.broken());
        EXPECT_TRUE(r.dev.errors().empty()) << r.dev.errors().front();
    }
}

// An element naming no published buffer after good ones: the runs before it are taken, the
// queue breaks there, and drain() returns the buffers after them.
TYPED_TEST(VirtqueueTest, InOrderRunsStopAtABadIdAndKeepTheRunsBefore) {
    TypeParam r(8, {false, true});
    for (uint32_t t = 0; t < 3; ++t) ASSERT_TRUE(r.q.add(chain(t, 0, 1), t));
    r.q.publish();
    ASSERT_EQ(r.dev.fetch(), 3u);
    r.dev.use_batch(1, 7);      // token 0
    r.dev.use_any_id(6, 7);     // an ID past the published buffers
    std::vector<uint32_t> lens;
    EXPECT_EQ(r.q.take_used_runs(8, [&](UsedRun run) { lens.push_back(run.last_len); }), 1u);
    EXPECT_EQ(lens, std::vector<uint32_t>{7});
    EXPECT_TRUE(r.q.broken());
    EXPECT_EQ(r.q.take_used_runs(8, [](UsedRun) {}), 0u);
    std::vector<uint32_t> drained;
    EXPECT_EQ(r.q.drain([&](uint32_t t) { drained.push_back(t); }), 2u);
    EXPECT_EQ(drained, (std::vector<uint32_t>{1, 2}));
}

// take_used_run() with an ID that names no published buffer: nothing is taken (the walk looks
// before it changes anything), the queue is broken, and drain() still returns every buffer.
TYPED_TEST(VirtqueueTest, InOrderRunWithABadIdTakesNothing) {
    constexpr bool kPacked = std::is_same_v<typename TypeParam::Queue, PackedQueue>;
    // Unpublished (split; a packed chain is available from add()), never added, out of the
    // ring (a packed ID has 16 bits, a split id 32).
    for (uint32_t bad : {kPacked ? 2u : 1u, 5u, kPacked ? 9000u : 70000u}) {
        TypeParam r(8, {false, true});
        const Buffer b{0x1000, 64, true};
        ASSERT_TRUE(r.q.add({&b, 1}, 1));
        r.q.publish();
        ASSERT_TRUE(r.q.add({&b, 1}, 2));   // split: not published
        r.dev.use_any_id(bad, 10);
        EXPECT_EQ(r.q.take_used_run().count, 0u) << bad;
        EXPECT_TRUE(r.q.broken());
        EXPECT_EQ(r.q.take_used_run().count, 0u);
        EXPECT_EQ(r.q.outstanding(), 2u);
        std::vector<uint32_t> drained;
        EXPECT_EQ(r.q.drain([&](uint32_t t) { drained.push_back(t); }), 2u);
        EXPECT_EQ(drained, (std::vector<uint32_t>{1, 2}));
    }
}

// take_all_used() (a send poll's): every buffer used so far, one or two descriptors each, in
// batches and one by one, a batch poll_used() began finished first; round after round, the
// table wrapping many times; a round filling every descriptor; then the ring is whole again.
TYPED_TEST(VirtqueueTest, InOrderTakeAllUsedTakesEveryBufferUsedSoFar) {
    for (RingFeatures f : {RingFeatures{false, true}, RingFeatures{true, true}}) {
        TypeParam r(odd_size<TypeParam>(), f);
        const uint32_t size = r.q.size();
        EXPECT_EQ(r.q.take_all_used(), 0u) << "nothing added";
        uint32_t token = 0;
        for (uint32_t round = 0; round < 40; ++round) {
            const uint32_t n = 1 + round % 5;   // 1 to 5 chains, 1 or 2 descriptors each: at most 8
            for (uint32_t k = 0; k < n; ++k, ++token) ASSERT_TRUE(r.q.add(chain(token, token % 2 + 1, 0), token));
            r.q.publish();
            ASSERT_EQ(r.dev.fetch(), n);
            EXPECT_EQ(r.q.take_all_used(), 0u) << "none used yet";
            if (n >= 2 && round % 3 == 0) {   // a batch, then the rest one by one
                r.dev.use_batch(2, 0);
                uint32_t t, len;
                ASSERT_TRUE(r.q.poll_used(t, len));   // the batch half taken
                EXPECT_EQ(t, token - n);
                for (uint32_t k = 2; k < n; ++k) r.dev.use(0, 0);
                EXPECT_EQ(r.q.take_all_used(), n - 1) << round;
            } else {
                r.dev.use_batch(n, 0);
                EXPECT_EQ(r.q.take_all_used(), n) << round;
            }
            EXPECT_EQ(r.q.outstanding(), 0u);
            EXPECT_EQ(r.q.free_count(), size) << round;
        }
        // Every descriptor in flight, all returned at once (released: the whole table).
        for (uint32_t k = 0; k < size; ++k, ++token) ASSERT_TRUE(r.q.add(chain(token, 1, 0), token));
        r.q.publish();
        ASSERT_EQ(r.dev.fetch(), size);
        EXPECT_EQ(r.q.free_count(), 0u);
        r.dev.use_batch(size, 0);
        EXPECT_EQ(r.q.take_all_used(), size);
        EXPECT_EQ(r.q.free_count(), size);
        // Part of what is at the device: the rest stays.
        for (uint32_t k = 0; k < 3; ++k, ++token) ASSERT_TRUE(r.q.add(chain(token, 1, 0), token));
        r.q.publish();
        ASSERT_EQ(r.dev.fetch(), 3u);
        r.dev.use_batch(2, 0);
        EXPECT_EQ(r.q.take_all_used(), 2u);
        EXPECT_EQ(r.q.outstanding(), 1u);
        EXPECT_EQ(r.q.free_count(), size - 1);
        std::vector<uint32_t> drained;
        EXPECT_EQ(r.q.drain([&](uint32_t t) { drained.push_back(t); }), 1u);
        EXPECT_EQ(drained, std::vector<uint32_t>{token - 1});
        EXPECT_FALSE(r.q.broken());
        EXPECT_TRUE(r.dev.errors().empty()) << r.dev.errors().front();
    }
}

// A split ring's available entries live in memory the device can write: one rewritten to name
// a head further on would free descriptors still in flight — the queue breaks instead.
TEST(SplitQueueTakeAllUsed, AnAvailableEntryRewrittenToFreeMoreThanIsOutBreaksTheQueue) {
    model::SplitRig r(8, {false, true});
    for (uint32_t t = 0; t < 8; ++t) ASSERT_TRUE(r.q.add(chain(t, 1, 0), t));   // a whole round first
    r.q.publish();
    ASSERT_EQ(r.dev.fetch(), 8u);
    r.dev.use_batch(8, 0);
    ASSERT_EQ(r.q.take_all_used(), 8u);
    for (uint32_t t = 8; t < 10; ++t) ASSERT_TRUE(r.q.add(chain(t, 1, 0), t));   // heads 0, 1
    r.q.publish();
    ASSERT_EQ(r.dev.fetch(), 2u);
    r.dev.use_batch(1, 0);   // head 0
    auto* avail_ring = reinterpret_cast<uint16_t*>(static_cast<uint8_t*>(r.q.memory().driver) + avail::kRingOffset);
    avail_ring[0] = 5;   // the entry for that buffer now names head 5: 6 descriptors, 2 are out
    EXPECT_EQ(r.q.take_all_used(), 0u);
    EXPECT_TRUE(r.q.broken());
    EXPECT_EQ(r.q.free_count(), 6u) << "nothing freed";
}

// A device that returns more than it was given (a split ring's idx moved past the published
// buffers; a packed ring's ID naming none): take_all_used() takes nothing and the queue
// breaks; drain() returns every buffer.
TYPED_TEST(VirtqueueTest, InOrderTakeAllUsedPastThePublishedBuffersBreaksTheQueue) {
    constexpr bool kPacked = std::is_same_v<typename TypeParam::Queue, PackedQueue>;
    TypeParam r(8, {false, true});
    for (uint32_t t = 0; t < 2; ++t) ASSERT_TRUE(r.q.add(chain(t, 1, 0), t));
    r.q.publish();
    ASSERT_EQ(r.dev.fetch(), 2u);
    if constexpr (kPacked)
        r.dev.use_any_id(5, 0);
    else
        r.dev.use_any_id(1, 0, 3);   // idx moved by 3
    EXPECT_EQ(r.q.take_all_used(), 0u);
    EXPECT_TRUE(r.q.broken());
    EXPECT_EQ(r.q.outstanding(), 2u);
    std::vector<uint32_t> drained;
    EXPECT_EQ(r.q.drain([&](uint32_t t) { drained.push_back(t); }), 2u);
    EXPECT_EQ(drained, (std::vector<uint32_t>{0, 1}));
}

TYPED_TEST(VirtqueueTest, InOrderRunLengthNeverExceedsTheWritableBytes) {
    TypeParam r(8, {false, true});
    const Buffer bufs[] = {{0x1000, 12, false}, {0x2000, 100, true}};
    ASSERT_TRUE(r.q.add(bufs, 1));
    r.q.publish();
    r.dev.use_any_id(0, 5000);
    const UsedRun run = r.q.take_used_run();
    EXPECT_EQ(run.count, 1u);
    EXPECT_EQ(run.last_len, 100u);
}

// A buggy device naming, for a new batch, a buffer it returned before: the slot still holds
// that chain's length, but the walk from the oldest buffer does not reach it, so nothing is
// taken (through either call), the queue is broken and drain() returns the buffers it holds.
TYPED_TEST(VirtqueueTest, InOrderAStaleIdBreaksTheQueueAndTakesNothing) {
    for (const bool run : {false, true}) {
        SCOPED_TRACE(run ? "take_used_run" : "poll_used");
        TypeParam r(8, {true, true});
        for (uint32_t t = 0; t < 2; ++t) ASSERT_TRUE(r.q.add(chain(t, 0, 1), t));
        r.q.publish();
        ASSERT_EQ(r.dev.fetch(), 2u);
        r.dev.use_batch(2, 5);
        ASSERT_EQ(r.q.take_used_run().count, 2u);
        for (uint32_t t = 2; t < 4; ++t) ASSERT_TRUE(r.q.add(chain(t, 0, 1), t));
        r.q.publish();
        ASSERT_EQ(r.dev.fetch(), 2u);
        r.dev.use_any_id(0, 5);   // the first chain's ID again
        EXPECT_FALSE(r.takes_something(run));
        EXPECT_TRUE(r.q.broken());
        EXPECT_EQ(r.q.outstanding(), 2u);
        EXPECT_EQ(r.q.free_count(), 6u);
        std::vector<uint32_t> drained;
        EXPECT_EQ(r.q.drain([&](uint32_t t) { drained.push_back(t); }), 2u);
        EXPECT_EQ(drained, (std::vector<uint32_t>{2, 3}));
    }
}

// Random batches, chain lengths, completion orders and notification settings, far past every
// 16-bit counter and through many laps of the packed ring: each token comes back exactly once
// with the length the device reported, needs_notify() agrees with the device's view, and after
// enable_interrupts() returned true the next used buffer always brings a notification.
TYPED_TEST(VirtqueueTest, RandomTrafficWrapsEverything) {
    for (RingFeatures f : kAllFeatures)
        for (uint32_t size : {odd_size<TypeParam>(), 256u}) {
            SCOPED_TRACE(testing::Message() << "size " << size << " event_idx " << f.event_idx << " in_order " << f.in_order);
            TypeParam r(size, f);
            std::mt19937 rng(size * 4 + f.event_idx * 2 + f.in_order);
            // Per token: device-writable bytes, descriptors, the length the device reported.
            std::vector<uint32_t> writable, ndesc;
            std::vector<int64_t> expect;
            uint32_t done = 0, descs = 0, outstanding = 0, next_in_order = 0;
            while (done < 70000) {
                for (uint32_t k = rng() % 6; k > 0; --k) {
                    const uint32_t rd = rng() % 3, wr = rng() % 3 + (rd == 0), next = uint32_t(writable.size());
                    const auto bufs = chain(next, rd, wr, rng() % 2000 + 1);
                    if (!r.q.add(bufs, next)) {
                        ASSERT_LT(r.q.free_count(), rd + wr);
                        break;
                    }
                    writable.push_back(0);
                    for (const Buffer& b : bufs) writable.back() += b.device_writes ? b.len : 0;
                    ndesc.push_back(rd + wr);
                    expect.push_back(-1);
                    descs += rd + wr;
                    ++outstanding;
                }
                ASSERT_EQ(r.q.free_count(), size - descs);
                if (rng() % 4) r.q.publish();
                if (rng() % 8 == 0) r.dev.arm_notify();
                if (rng() % 16 == 0) r.dev.suppress_notify();
                ASSERT_EQ(r.q.needs_notify(), r.dev.notification_due());
                r.dev.fetch(rng() % 8);
                bool armed = false;   // enable_interrupts() said "nothing pending": sleep is safe
                const uint32_t irq_op = rng() % 4;
                if (irq_op == 0) r.q.disable_interrupts();
                if (irq_op == 1) armed = r.q.enable_interrupts();
                const uint32_t irqs = r.dev.interrupts();
                bool used_any = false;
                auto& pend = r.dev.pending();
                while (!pend.empty() && rng() % 3) {
                    used_any = true;
                    if (f.in_order) {
                        const size_t n = 1 + rng() % pend.size();
                        for (size_t i = 0; i + 1 < n; ++i) expect[token_of(pend[i])] = pend[i].writable();
                        const uint32_t len = rng() % (pend[n - 1].writable() + 1);
                        expect[token_of(pend[n - 1])] = len;
                        r.dev.use_batch(n, len);
                    } else {
                        const size_t i = rng() % pend.size();
                        const uint32_t len = rng() % (pend[i].writable() + 1);
                        expect[token_of(pend[i])] = len;
                        r.dev.use(i, len);
                    }
                }
                if (armed && used_any) {
                    ASSERT_GT(r.dev.interrupts(), irqs) << "a wake-up lost after enable_interrupts()";
                }
                uint32_t token, len;
                for (uint32_t k = rng() % 8; k > 0; --k) {
                    if (f.in_order && rng() % 2) {   // whole batches at once: the oldest `count` each
                        const auto check_run = [&](UsedRun run) {
                            for (uint32_t i = 0; i < run.count; ++i, ++done) {
                                const uint32_t t = next_in_order++;
                                ASSERT_LT(t, expect.size());
                                ASSERT_GE(expect[t], 0) << "token " << t << " not used by the device";
                                ASSERT_EQ(i + 1 < run.count ? writable[t] : run.last_len, expect[t]);
                                expect[t] = -2;
                                descs -= ndesc[t];
                                --outstanding;
                            }
                        };
                        if (const uint32_t how = rng() % 3; how == 0) {
                            const UsedRun run = r.q.take_used_run();
                            if (run.count == 0) break;
                            check_run(run);
                        } else if (how == 1) {   // every one, lengths unread: as complete ones
                            const uint32_t n = r.q.take_all_used();
                            if (n == 0) break;
                            for (uint32_t t = next_in_order; t < next_in_order + n; ++t) {
                                ASSERT_LT(t, expect.size());
                                ASSERT_GE(expect[t], 0) << "token " << t << " not used by the device";
                                expect[t] = int(writable[t]);
                            }
                            check_run({n, writable[next_in_order + n - 1]});
                        } else if (r.q.take_used_runs(1 + rng() % 16, check_run) == 0) {
                            break;
                        }
                        ASSERT_FALSE(::testing::Test::HasFatalFailure());
                        continue;
                    }
                    if (!r.q.poll_used(token, len)) break;
                    ++done;
                    if (f.in_order) {
                        ASSERT_EQ(token, next_in_order++);
                    }
                    ASSERT_LT(token, expect.size());
                    ASSERT_GE(expect[token], 0) << "token " << token << " not used by the device";
                    ASSERT_EQ(len, expect[token]);
                    expect[token] = -2;   // returned
                    descs -= ndesc[token];
                    --outstanding;
                }
                ASSERT_EQ(r.q.outstanding(), outstanding);
                ASSERT_TRUE(r.dev.errors().empty()) << r.dev.errors().front();
                ASSERT_FALSE(r.q.broken());
            }
            // Flush what is left: every outstanding token exactly once.
            std::vector<int> drained(writable.size());
            EXPECT_EQ(r.q.drain([&](uint32_t t) { ++drained.at(t); }), outstanding);
            for (uint32_t t = 0; t < writable.size(); ++t) ASSERT_EQ(drained[t], expect[t] == -2 ? 0 : 1) << t;
            EXPECT_EQ(r.q.free_count(), size);
        }
}

TYPED_TEST(VirtqueueTest, NotificationFollowsTheDevice) {
    constexpr bool kPacked = std::is_same_v<typename TypeParam::Queue, PackedQueue>;
    for (RingFeatures f : {RingFeatures{false, false}, RingFeatures{true, false}}) {
        TypeParam r(8, f);
        EXPECT_FALSE(r.q.needs_notify()) << "nothing published";
        r.dev.arm_notify();
        ASSERT_TRUE(r.q.add(chain(0, 1, 0), 0));
        if (!kPacked) {   // a packed chain is available from add()
            EXPECT_FALSE(r.q.needs_notify()) << "added, not published";
        }
        r.q.publish();
        EXPECT_TRUE(r.q.needs_notify());
        EXPECT_FALSE(r.q.needs_notify()) << "no new buffers since";
        ASSERT_TRUE(r.q.add(chain(1, 1, 0), 1));
        r.q.publish();
        // EVENT_IDX: the device asked about entry 0 only; flags: it never said stop.
        EXPECT_EQ(r.q.needs_notify(), !f.event_idx);
        r.dev.suppress_notify();
        ASSERT_TRUE(r.q.add(chain(2, 1, 0), 2));
        r.q.publish();
        EXPECT_FALSE(r.q.needs_notify());
        r.dev.fetch();        // the device catches up and asks for the next one
        r.dev.arm_notify();
        ASSERT_TRUE(r.q.add(chain(3, 1, 0), 3));
        ASSERT_TRUE(r.q.add(chain(4, 2, 0), 4));
        r.q.publish();
        EXPECT_TRUE(r.q.needs_notify()) << "a batch crossing the requested entry";
    }
}

TYPED_TEST(VirtqueueTest, InterruptSuppression) {
    for (RingFeatures f : {RingFeatures{false, false}, RingFeatures{true, false}}) {
        TypeParam r(8, f);
        for (uint32_t t = 0; t < 6; ++t) ASSERT_TRUE(r.q.add(chain(t, 0, 1), t));
        r.q.publish();
        ASSERT_EQ(r.dev.fetch(), 6u);
        r.dev.use(0, 1);   // enabled from the start
        EXPECT_EQ(r.dev.interrupts(), 1u);
        r.q.disable_interrupts();
        r.dev.use(0, 1);
        EXPECT_EQ(r.dev.interrupts(), 1u);
        EXPECT_FALSE(r.q.enable_interrupts()) << "two used buffers wait";
        uint32_t token, len;
        while (r.q.poll_used(token, len)) {}
        EXPECT_TRUE(r.q.enable_interrupts());
        r.dev.use(0, 1);
        EXPECT_EQ(r.dev.interrupts(), 2u);
        // Not re-armed after that interrupt: with EVENT_IDX the request was for one entry.
        r.dev.use(0, 1);
        EXPECT_EQ(r.dev.interrupts(), f.event_idx ? 2u : 3u);
        while (r.q.poll_used(token, len)) {}
        EXPECT_TRUE(r.q.enable_interrupts());
        r.dev.use(0, 1);
        EXPECT_EQ(r.dev.interrupts(), f.event_idx ? 3u : 4u);
        EXPECT_TRUE(r.dev.errors().empty()) << r.dev.errors().front();
    }
}

TYPED_TEST(VirtqueueTest, ResetForReuse) {
    for (RingFeatures f : kAllFeatures) {
        TypeParam r(8, f);
        for (uint32_t t = 0; t < 5; ++t) ASSERT_TRUE(r.q.add(chain(t, 1, 0), t));
        r.q.publish();
        r.dev.fetch();
        r.dev.use(0, 0);
        r.q.disable_interrupts();
        r.q.reset();
        EXPECT_EQ(r.q.free_count(), 8u);
        EXPECT_EQ(r.q.outstanding(), 0u);
        EXPECT_FALSE(r.q.has_used());
        const RingLayout l = TypeParam::Queue::layout(8);
        const QueueMemory m = r.q.memory();
        const std::pair<void*, size_t> parts[] = {{m.desc, l.desc.bytes}, {m.driver, l.driver.bytes}, {m.device, l.device.bytes}};
        for (auto [p, n] : parts)
            for (size_t i = 0; i < n; ++i) ASSERT_EQ(static_cast<uint8_t*>(p)[i], 0) << i;
        // A device reset too: a fresh device over the same memory.
        typename TypeParam::Device dev(m, 8, f);
        ASSERT_TRUE(r.q.add(chain(9, 1, 1), 9));
        r.q.publish();
        ASSERT_EQ(dev.fetch(), 1u);
        dev.use(0, 5);
        uint32_t token, len;
        ASSERT_TRUE(r.q.poll_used(token, len));
        EXPECT_EQ(token, 9u);
        EXPECT_EQ(len, 5u);
        EXPECT_EQ(dev.interrupts(), 1u) << "interrupts are enabled again";
        EXPECT_TRUE(dev.errors().empty()) << dev.errors().front();
    }
}

TYPED_TEST(VirtqueueTest, DrainFlushesEveryOutstandingToken) {
    for (RingFeatures f : kAllFeatures) {
        TypeParam r(8, f);
        for (uint32_t t = 10; t < 13; ++t) ASSERT_TRUE(r.q.add(chain(t, 1, 0), t));
        r.q.publish();
        ASSERT_EQ(r.dev.fetch(), 3u);
        r.dev.use(0, 0);   // used by the device, not polled: still outstanding
        for (uint32_t t = 13; t < 15; ++t) ASSERT_TRUE(r.q.add(chain(t, 2, 0), t));   // not published
        std::vector<uint32_t> got;
        EXPECT_EQ(r.q.drain([&](uint32_t t) { got.push_back(t); }), 5u);
        if (f.in_order) {
            EXPECT_EQ(got, (std::vector<uint32_t>{10, 11, 12, 13, 14}));
        } else {
            std::sort(got.begin(), got.end());
            EXPECT_EQ(got, (std::vector<uint32_t>{10, 11, 12, 13, 14}));
        }
        EXPECT_EQ(r.q.free_count(), 8u);
        EXPECT_EQ(r.q.outstanding(), 0u);
        EXPECT_EQ(r.q.drain([](uint32_t) { ADD_FAILURE(); }), 0u);
    }
}

}  // namespace
}  // namespace vfab::virtio
