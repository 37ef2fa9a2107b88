// Packed virtqueue specifics (§2.8): layout, AVAIL/USED flags and the wrap counters, the
// first descriptor of a chain written last, the event suppression structures (off_wrap events
// across the ring's end) and what the queue does with a device that returns nonsense.
#include <gtest/gtest.h>

#include "virtio_model.hpp"

namespace vfab::virtio {
namespace {

using model::PackedRig;
namespace df = desc_flags;

const PackedDesc* ring(const PackedRig& r) { return static_cast<const PackedDesc*>(r.q.memory().desc); }
const EventSuppress& driver_event(const PackedRig& r) { return *static_cast<const EventSuppress*>(r.q.memory().driver); }

void round_trip(PackedRig& r, uint32_t token, uint32_t ndesc = 1) {
    std::vector<Buffer> bufs(ndesc, Buffer{0x1000, 64, false});
    ASSERT_TRUE(r.q.add(bufs, token));
    r.q.publish();
    (void)r.q.needs_notify();
    ASSERT_EQ(r.dev.fetch(), 1u);
    r.dev.use(0, 0);
    uint32_t t, len;
    ASSERT_TRUE(r.q.poll_used(t, len));
    ASSERT_EQ(t, token);
}

TEST(PackedQueue, Layout) {
    constexpr RingLayout l = PackedQueue::layout(256);
    static_assert(l.desc.bytes == 4096 && l.desc.align == 16);
    static_assert(l.driver.bytes == 4 && l.driver.align == 4);
    static_assert(l.device.bytes == 4 && l.device.align == 4);
    EXPECT_EQ(l.driver_offset(), 4096u);
    EXPECT_EQ(l.device_offset(), 4096u + 64);
    EXPECT_EQ(l.total_bytes(), 4096u + 128);
    model::RingMemory mem(PackedQueue::layout(32768));
    for (uint32_t size : {1u, 13u, 100u, 32768u}) EXPECT_TRUE(PackedQueue::create(size, mem.queue_memory(), {})) << size;
    EXPECT_FALSE(PackedQueue::create(32769, mem.queue_memory(), {}));
}

TEST(PackedQueue, FlagsFollowTheWrapCounter) {
    PackedRig r(5, {});
    const Buffer three[] = {{0x1000, 10, false}, {0x2000, 20, false}, {0x3000, 30, true}};
    ASSERT_TRUE(r.q.add(three, 1));
    r.q.publish();
    const PackedDesc* d = ring(r);
    // Lap 1 (wrap counter 1): AVAIL set, USED clear; NEXT on all but the last.
    EXPECT_EQ(d[0].flags, df::AVAIL | df::NEXT);
    EXPECT_EQ(d[1].flags, df::AVAIL | df::NEXT);
    EXPECT_EQ(d[2].flags, df::AVAIL | df::WRITE);
    EXPECT_EQ(d[2].id, d[0].id) << "the buffer ID in the last descriptor";
    ASSERT_EQ(r.dev.fetch(), 1u);
    r.dev.use(0, 30);
    uint32_t t, len;
    ASSERT_TRUE(r.q.poll_used(t, len));
    EXPECT_EQ(len, 30u);
    // The next chain runs over the end: positions 3, 4, then 0 in lap 2 (AVAIL clear, USED set).
    ASSERT_TRUE(r.q.add(three, 2));
    r.q.publish();
    EXPECT_EQ(d[3].flags, df::AVAIL | df::NEXT);
    EXPECT_EQ(d[4].flags, df::AVAIL | df::NEXT);
    EXPECT_EQ(d[0].flags, df::USED | df::WRITE);
    EXPECT_EQ(r.q.notify_data(), 1) << "next_off 1, next_wrap 0";
    ASSERT_EQ(r.dev.fetch(), 1u);
    r.dev.use(0, 0);
    ASSERT_TRUE(r.q.poll_used(t, len));
    EXPECT_EQ(t, 2u);
    EXPECT_EQ(len, 0u);
    EXPECT_TRUE(r.dev.errors().empty()) << r.dev.errors().front();
}

// Each chain is available as soon as add() returns: its head's flags are written last, after
// the rest of the chain (§2.8.21.1.1); publish() writes nothing.
TEST(PackedQueue, EachChainIsAvailableAtOnceItsHeadWrittenLast) {
    PackedRig r(8, {});
    const Buffer two[] = {{0x1000, 10, false}, {0x2000, 20, false}};
    ASSERT_TRUE(r.q.add(two, 1));
    const PackedDesc* d = ring(r);
    EXPECT_EQ(d[0].flags, df::AVAIL | df::NEXT);
    EXPECT_EQ(d[1].flags, df::AVAIL);
    EXPECT_EQ(r.dev.fetch(), 1u) << "the device may use the first chain while the driver writes the next";
    ASSERT_TRUE(r.q.add(two, 2));
    EXPECT_EQ(d[2].flags, df::AVAIL | df::NEXT);
    r.q.publish();
    EXPECT_EQ(r.dev.fetch(), 1u);
}

// needs_notify() with the device's event at (off, wrap) for `count` descriptors published
// from ring position `start` of a ring of 8.
bool decide(uint32_t start, uint32_t count, uint16_t off, bool wrap, RingFeatures f = {true, false},
            uint16_t flags = event_flags::DESC) {
    PackedRig r(8, f);
    for (uint32_t i = 0; i < start; ++i) round_trip(r, i);
    r.dev.set_device_event(flags, off, wrap);
    std::vector<Buffer> bufs(count, Buffer{0x1000, 64, false});
    EXPECT_TRUE(r.q.add(bufs, 99));
    r.q.publish();
    return r.q.needs_notify();
}

TEST(PackedQueue, DescEventAcrossTheRingEnd) {
    EXPECT_TRUE(decide(0, 3, 0, true));
    EXPECT_TRUE(decide(0, 3, 2, true));
    EXPECT_FALSE(decide(0, 3, 3, true)) << "the next descriptor, not one just made available";
    EXPECT_FALSE(decide(0, 3, 0, false)) << "position 0 of the other lap";
    // From position 6: 6 and 7 in lap 1 (wrap 1), then 0 and 1 in lap 2 (wrap 0).
    EXPECT_TRUE(decide(6, 4, 6, true));
    EXPECT_TRUE(decide(6, 4, 7, true));
    EXPECT_TRUE(decide(6, 4, 0, false));
    EXPECT_TRUE(decide(6, 4, 1, false));
    EXPECT_FALSE(decide(6, 4, 2, false));
    EXPECT_FALSE(decide(6, 4, 5, true));
    EXPECT_FALSE(decide(6, 4, 1, true)) << "position 1 of lap 1 was made available long ago";
    // Many laps later: 8 * 9 + 6 = 78 descriptors in, wrap counter 0 (lap 10).
    EXPECT_TRUE(decide(78, 4, 7, false));
    EXPECT_TRUE(decide(78, 4, 0, true));
    EXPECT_FALSE(decide(78, 4, 0, false));
    // Flags other than DESC.
    EXPECT_TRUE(decide(0, 1, 5, true, {true, false}, event_flags::ENABLE));
    EXPECT_FALSE(decide(0, 1, 0, true, {true, false}, event_flags::DISABLE));
    EXPECT_TRUE(decide(0, 1, 5, true, {false, false}, event_flags::DESC)) << "DESC needs EVENT_IDX: treated as enabled";
}

TEST(PackedQueue, DriverEventSuppression) {
    PackedRig plain(8, {});
    EXPECT_EQ(driver_event(plain).flags, event_flags::ENABLE);
    plain.q.disable_interrupts();
    EXPECT_EQ(driver_event(plain).flags, event_flags::DISABLE);
    EXPECT_TRUE(plain.q.enable_interrupts());
    EXPECT_EQ(driver_event(plain).flags, event_flags::ENABLE);

    PackedRig ev(8, {true, false});
    for (uint32_t i = 0; i < 5; ++i) round_trip(ev, i, 2);   // 10 descriptors: position 2, wrap 0
    ev.q.disable_interrupts();
    EXPECT_EQ(driver_event(ev).flags, event_flags::DISABLE);
    EXPECT_TRUE(ev.q.enable_interrupts());
    EXPECT_EQ(driver_event(ev).flags, event_flags::DESC);
    EXPECT_EQ(driver_event(ev).off_wrap, 2) << "next used position 2, wrap counter 0";
    EXPECT_TRUE(ev.dev.errors().empty()) << ev.dev.errors().front();
}

// A used descriptor written by hand at ring position `pos`.
void put_used(PackedRig& r, uint32_t pos, bool wrap, uint16_t id, uint32_t len, bool write) {
    auto* d = static_cast<PackedDesc*>(r.q.memory().desc) + pos;
    d->id = id;
    d->len = len;
    d->flags = uint16_t((wrap ? df::AVAIL | df::USED : 0) | (write ? df::WRITE : 0));
}

TEST(PackedQueue, UsedLength) {
    PackedRig r(8, {});
    const Buffer bufs[] = {{0x1000, 12, false}, {0x2000, 100, true}};
    for (uint32_t t = 0; t < 3; ++t) ASSERT_TRUE(r.q.add(bufs, t));
    r.q.publish();
    uint32_t t, len;
    // No WRITE flag: §2.8.4 says len is reserved, but QEMU's device (and Linux's driver) put
    // and take the written length there regardless: it is read.
    put_used(r, 0, true, ring(r)[1].id, 77, false);
    ASSERT_TRUE(r.q.poll_used(t, len));
    EXPECT_EQ(t, 0u);
    EXPECT_EQ(len, 77u);
    put_used(r, 2, true, ring(r)[3].id, 5000, true);   // more than the chain holds
    ASSERT_TRUE(r.q.poll_used(t, len));
    EXPECT_EQ(t, 1u);
    EXPECT_EQ(len, 100u);
}

TEST(PackedQueue, BadBufferIdBreaksTheQueue) {
    for (RingFeatures f : {RingFeatures{false, false}, RingFeatures{false, true}}) {
        PackedRig r(8, f);
        const Buffer b{0x1000, 64, true};
        ASSERT_TRUE(r.q.add({&b, 1}, 1));
        r.q.publish();
        put_used(r, 0, true, 6, 10, true);   // ID 6 is not in flight
        uint32_t t, len;
        EXPECT_FALSE(r.q.poll_used(t, len));
        EXPECT_TRUE(r.q.broken());
        EXPECT_FALSE(r.q.has_used());
        EXPECT_EQ(r.q.drain([](uint32_t) {}), 1u);
        EXPECT_FALSE(r.q.broken());
    }
    // A used descriptor with the wrong wrap is not used at all.
    PackedRig r(8, {});
    const Buffer b{0x1000, 64, true};
    ASSERT_TRUE(r.q.add({&b, 1}, 1));
    r.q.publish();
    put_used(r, 0, false, 0, 10, true);
    EXPECT_FALSE(r.q.has_used());
}

TEST(PackedQueue, InOrderBatchOverTheRingEnd) {
    PackedRig r(7, {true, true});
    for (uint32_t t = 0; t < 2; ++t) round_trip(r, t, 2);   // start at position 4
    const Buffer two[] = {{0x1000, 10, false}, {0x2000, 20, true}};
    for (uint32_t t = 10; t < 13; ++t) ASSERT_TRUE(r.q.add(two, t));   // positions 4-5, 6-0, 1-2
    r.q.publish();
    ASSERT_EQ(r.dev.fetch(), 3u);
    r.dev.use_batch(3, 9);
    EXPECT_EQ(ring(r)[4].flags & (df::AVAIL | df::USED), df::AVAIL | df::USED) << "written where the batch began";
    uint32_t t, len;
    for (uint32_t want : {10u, 11u, 12u}) {
        ASSERT_TRUE(r.q.poll_used(t, len));
        EXPECT_EQ(t, want);
        EXPECT_EQ(len, want == 12 ? 9u : 20u);
    }
    EXPECT_FALSE(r.q.poll_used(t, len));
    EXPECT_EQ(r.q.free_count(), 7u);
    round_trip(r, 20, 3);   // positions 3-5: the used position followed the batch
    EXPECT_TRUE(r.dev.errors().empty()) << r.dev.errors().front();
}

}  // namespace
}  // namespace vfab::virtio
