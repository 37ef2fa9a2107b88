// Split virtqueue specifics (§2.7): layout, descriptor and ring encoding, the EVENT_IDX
// formula at the edges of the 16-bit indices, interrupt suppression fields and what the queue
// does with a device that returns nonsense.
#include <gtest/gtest.h>

#include "virtio_model.hpp"

namespace vfab::virtio {
namespace {

using model::SplitRig;

const uint16_t& field16(const void* base, size_t off) {
    return *reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(base) + off);
}
const SplitDesc* descs(const SplitRig& r) { return static_cast<const SplitDesc*>(r.q.memory().desc); }

// One single-descriptor chain through the queue and the device and back.
void round_trip(SplitRig& r, uint32_t token) {
    const Buffer b{0x1000, 64, true};
    ASSERT_TRUE(r.q.add({&b, 1}, token));
    r.q.publish();
    (void)r.q.needs_notify();
    ASSERT_EQ(r.dev.fetch(), 1u);
    r.dev.use(0, 64);
    uint32_t t, len;
    ASSERT_TRUE(r.q.poll_used(t, len));
    ASSERT_EQ(t, token);
}

TEST(SplitQueue, Layout) {
    constexpr RingLayout l = SplitQueue::layout(256);
    static_assert(l.desc.bytes == 4096 && l.desc.align == 16);
    static_assert(l.driver.bytes == 6 + 2 * 256 && l.driver.align == 2);
    static_assert(l.device.bytes == 6 + 8 * 256 && l.device.align == 4);
    EXPECT_EQ(l.driver_offset(), 4096u);
    EXPECT_EQ(l.device_offset(), 4096u + 576);   // 518 rounded up to a cache line
    EXPECT_EQ(l.total_bytes(), 4096u + 576 + 2112);
    model::RingMemory mem(SplitQueue::layout(32768));
    EXPECT_TRUE(SplitQueue::create(32768, mem.queue_memory(), {}));
    EXPECT_TRUE(SplitQueue::create(1, mem.queue_memory(), {}));
    auto r = SplitQueue::create(100, mem.queue_memory(), {});
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("power of 2"), std::string::npos);
}

TEST(SplitQueue, DescriptorsAndAvailableRing) {
    SplitRig r(8, {});
    const Buffer bufs[] = {{0x1000, 12, false}, {0x2000, 1500, false}, {0x3000, 64, true}};
    ASSERT_TRUE(r.q.add(bufs, 1));
    const SplitDesc* d = descs(r);
    uint16_t i = 0;   // the free list starts at descriptor 0
    EXPECT_EQ(d[i].addr, 0x1000u);
    EXPECT_EQ(d[i].flags, desc_flags::NEXT);
    i = d[i].next;
    EXPECT_EQ(d[i].len, 1500u);
    EXPECT_EQ(d[i].flags, desc_flags::NEXT);
    i = d[i].next;
    EXPECT_EQ(d[i].addr, 0x3000u);
    EXPECT_EQ(d[i].flags, desc_flags::WRITE);
    const void* avail = r.q.memory().driver;
    EXPECT_EQ(field16(avail, avail::kRingOffset), 0) << "the head in the available ring";
    EXPECT_EQ(field16(avail, avail::kIdxOffset), 0) << "idx waits for publish()";
    ASSERT_TRUE(r.q.add({bufs, 1}, 2));
    EXPECT_EQ(field16(avail, avail::kRingOffset + 2), 3);
    r.q.publish();
    EXPECT_EQ(field16(avail, avail::kIdxOffset), 2) << "one store for the batch";
    EXPECT_EQ(r.q.notify_data(), 2);
}

TEST(SplitQueue, InOrderUsesTheTableInOrder) {
    SplitRig r(4, {false, true});
    const Buffer three[] = {{0x1000, 10, false}, {0x2000, 20, false}, {0x3000, 30, true}};
    ASSERT_TRUE(r.q.add(three, 1));
    r.q.publish();
    ASSERT_EQ(r.dev.fetch(), 1u);
    r.dev.use(0, 30);
    uint32_t t, len;
    ASSERT_TRUE(r.q.poll_used(t, len));
    ASSERT_TRUE(r.q.add(three, 2));   // descriptors 3, 0, 1 (§2.7.5.2: next wraps to 0)
    const SplitDesc* d = descs(r);
    EXPECT_EQ(field16(r.q.memory().driver, avail::kRingOffset + 2), 3);
    EXPECT_EQ(d[3].next, 0);
    EXPECT_EQ(d[0].next, 1);
    EXPECT_EQ(d[1].flags, desc_flags::WRITE);
    EXPECT_EQ(d[1].next, 0);
    r.q.publish();
    ASSERT_EQ(r.dev.fetch(), 1u);
    EXPECT_TRUE(r.dev.errors().empty()) << r.dev.errors().front();
}

// needs_notify() for `count` chains published from available index `start`, with the device's
// avail_event at `event` (§2.7.10: notify iff an entry just written had index avail_event).
bool decide(uint16_t start, uint16_t count, uint16_t event) {
    SplitRig r(8, {true, false});
    for (uint32_t i = 0; i < start; ++i) round_trip(r, i);
    r.dev.set_avail_event(event);
    const Buffer b{0x1000, 64, false};
    for (uint16_t i = 0; i < count; ++i) EXPECT_TRUE(r.q.add({&b, 1}, i));
    r.q.publish();
    return r.q.needs_notify();
}

TEST(SplitQueue, EventIdxFormula) {
    EXPECT_TRUE(decide(0, 3, 0));
    EXPECT_TRUE(decide(0, 3, 2));
    EXPECT_FALSE(decide(0, 3, 3)) << "the next entry, not one just written";
    EXPECT_FALSE(decide(0, 3, 0xffff)) << "an entry written long ago";
    EXPECT_TRUE(decide(5, 1, 5));
    EXPECT_FALSE(decide(5, 1, 4));
    // Across the 16-bit wrap: entries 65534, 65535, 0, 1.
    EXPECT_TRUE(decide(65534, 4, 65534));
    EXPECT_TRUE(decide(65534, 4, 65535));
    EXPECT_TRUE(decide(65534, 4, 0));
    EXPECT_TRUE(decide(65534, 4, 1));
    EXPECT_FALSE(decide(65534, 4, 2));
    EXPECT_FALSE(decide(65534, 4, 65533));
    EXPECT_TRUE(need_event(0, 1, 0));      // the formula itself (vring_need_event)
    EXPECT_FALSE(need_event(1, 1, 0));
    EXPECT_TRUE(need_event(65535, 0, 65535));
    EXPECT_FALSE(need_event(0, 0, 0));
}

TEST(SplitQueue, NoNotifyFlag) {
    SplitRig r(8, {});
    const Buffer b{0x1000, 64, false};
    r.dev.set_no_notify(true);
    ASSERT_TRUE(r.q.add({&b, 1}, 1));
    r.q.publish();
    EXPECT_FALSE(r.q.needs_notify());
    r.dev.set_avail_event(1);   // ignored without EVENT_IDX (§2.7.10.1)
    r.dev.set_no_notify(false);
    ASSERT_TRUE(r.q.add({&b, 1}, 2));
    r.q.publish();
    EXPECT_TRUE(r.q.needs_notify());
}

TEST(SplitQueue, InterruptFields) {
    SplitRig plain(8, {});
    const void* avail = plain.q.memory().driver;
    plain.q.disable_interrupts();
    EXPECT_EQ(field16(avail, avail::kFlagsOffset), avail::F_NO_INTERRUPT);
    EXPECT_TRUE(plain.q.enable_interrupts());
    EXPECT_EQ(field16(avail, avail::kFlagsOffset), 0);

    SplitRig ev(8, {true, false});
    for (uint32_t i = 0; i < 3; ++i) round_trip(ev, i);
    avail = ev.q.memory().driver;
    ev.q.disable_interrupts();
    EXPECT_EQ(field16(avail, avail::kFlagsOffset), 0) << "§2.7.7.1: flags stay 0 with EVENT_IDX";
    EXPECT_EQ(field16(avail, avail::used_event_offset(8)), 2);
    EXPECT_TRUE(ev.q.enable_interrupts());
    EXPECT_EQ(field16(avail, avail::used_event_offset(8)), 3) << "the next used entry";
}

// A device entry written by hand: (id, len) at the next used index.
void put_used(SplitRig& r, uint16_t used_idx, uint32_t id, uint32_t len) {
    auto* dev = static_cast<uint8_t*>(r.q.memory().device);
    auto* e = reinterpret_cast<UsedElem*>(dev + used::kRingOffset) + used_idx % r.q.size();
    *e = {id, len};
    *reinterpret_cast<uint16_t*>(dev + used::kIdxOffset) = uint16_t(used_idx + 1);
}

TEST(SplitQueue, LengthNeverExceedsTheWritableBytes) {
    SplitRig r(8, {});
    const Buffer bufs[] = {{0x1000, 12, false}, {0x2000, 100, true}};
    ASSERT_TRUE(r.q.add(bufs, 1));
    r.q.publish();
    put_used(r, 0, 0, 5000);
    uint32_t t, len;
    ASSERT_TRUE(r.q.poll_used(t, len));
    EXPECT_EQ(len, 100u);
}

TEST(SplitQueue, BadUsedIdBreaksTheQueue) {
    for (RingFeatures f : {RingFeatures{false, false}, RingFeatures{false, true}}) {
        SplitRig r(8, f);
        const Buffer b{0x1000, 64, true};
        ASSERT_TRUE(r.q.add({&b, 1}, 1));
        r.q.publish();
        put_used(r, 0, 5, 10);   // descriptor 5 heads no outstanding chain
        uint32_t t, len;
        EXPECT_FALSE(r.q.poll_used(t, len));
        EXPECT_TRUE(r.q.broken());
        EXPECT_FALSE(r.q.has_used());
        EXPECT_EQ(r.q.drain([](uint32_t) {}), 1u);
        EXPECT_FALSE(r.q.broken()) << "reset() clears it";
    }
    // IN_ORDER: an id past the published chains must not walk into unpublished ones; the batch
    // is checked before its first buffer is returned, so nothing is.
    SplitRig r(8, {false, true});
    const Buffer b{0x1000, 64, true};
    ASSERT_TRUE(r.q.add({&b, 1}, 1));
    r.q.publish();
    ASSERT_TRUE(r.q.add({&b, 1}, 2));   // descriptor 1, not published
    put_used(r, 0, 1, 10);
    uint32_t t, len;
    EXPECT_FALSE(r.q.poll_used(t, len));
    EXPECT_TRUE(r.q.broken());
    EXPECT_EQ(r.q.outstanding(), 2u);
}

// §2.7.9: the used index moves by every buffer of a batch. A device that names the fifth
// chain but moves idx by one has not returned five: nothing is taken, the queue is broken
// (else the entries after idx would later be read as used).
TEST(SplitQueue, InOrderBatchLargerThanIdxMovedTakesNothing) {
    for (const bool run : {false, true}) {
        SplitRig r(8, {false, true});
        const Buffer b{0x1000, 64, true};
        for (uint32_t t = 0; t < 5; ++t) ASSERT_TRUE(r.q.add({&b, 1}, t));
        r.q.publish();
        ASSERT_EQ(r.dev.fetch(), 5u);
        r.dev.use_any_id(4, 10, 1);
        EXPECT_FALSE(r.takes_something(run));
        EXPECT_TRUE(r.q.broken());
        EXPECT_EQ(r.q.outstanding(), 5u);
    }
    SplitRig r(8, {false, true});   // idx moved by all five: one batch
    const Buffer b{0x1000, 64, true};
    for (uint32_t t = 0; t < 5; ++t) ASSERT_TRUE(r.q.add({&b, 1}, t));
    r.q.publish();
    ASSERT_EQ(r.dev.fetch(), 5u);
    r.dev.use_any_id(4, 10, 5);
    EXPECT_EQ(r.q.take_used_run().count, 5u);
}

}  // namespace
}  // namespace vfab::virtio
