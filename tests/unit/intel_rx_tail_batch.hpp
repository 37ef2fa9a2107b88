// The receive tail batching of the Intel queue core (intel/queue_pair.hpp, kRxTailBatch), one
// check for every driver on it: buffers are held back for the batch only while the device has
// a batch of others to receive into, so none is stranded while the application waits. `H` is a driver's FastPathHarness (its qp, cq,
// register_memory, device_step and the tail register as rdt_of(h)).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "vfab/drivers/intel/queue_pair.hpp"

namespace vfab::intel::test {

template <class H, class Rdt>
void check_rx_tail_batch(H& h, Rdt rdt_of) {
    const uint32_t kBatch = h.qp.recv_tail_batch();
    ASSERT_GT(kBatch, 1u);
    ASSERT_LE(kBatch, kRxTailBatch);
    std::vector<uint8_t> mem(size_t(2 * kBatch + 8) * 2048);
    const uint32_t lkey = h.register_memory(mem.data(), mem.size());
    uint32_t next = 0;   // buffers posted so far
    auto post = [&](uint32_t n) {
        for (uint32_t i = 0; i < n; ++i, ++next) {
            Sge s{reinterpret_cast<uint64_t>(mem.data()) + uint64_t(next % (2 * kBatch)) * 2048, 2048, lkey};
            RecvWr w{next, &s, 1, 0};
            ASSERT_TRUE(h.qp.post_recv({&w, 1}));
        }
    };
    Completion wc[4];

    // While the device holds fewer than a batch, every post writes the tail at once: a ring
    // that is filling (or nearly dry) is never held back.
    post(1);
    EXPECT_EQ(rdt_of(h), 1u) << "the device held nothing: the tail must go at once";
    post(kBatch);
    EXPECT_EQ(rdt_of(h), kBatch) << "the device held a batch when the last one came: it should wait";
    // The device holds a batch or more: another buffer waits for the batch too...
    post(1);
    EXPECT_EQ(rdt_of(h), kBatch) << "buffers short of a batch should wait for it";
    // ...and a poll that finds nothing leaves it there while the device still holds a batch:
    // a frame the application then waits for has a buffer to arrive in.
    EXPECT_EQ(h.cq.poll(wc), 0);
    EXPECT_EQ(rdt_of(h), kBatch) << "an empty poll wrote the tail while the device held a batch";
    // A frame takes one of the device's buffers, leaving it short of a batch: the poll that
    // reaps it finds the ring empty behind it and hands the held buffer over.
    Sge t{reinterpret_cast<uint64_t>(mem.data()) + uint64_t(2 * kBatch) * 2048, 60, lkey};
    SendWr sw{1000, &t, 1, 0};
    ASSERT_TRUE(h.qp.post_send({&sw, 1}));
    h.device_step();
    ASSERT_EQ(h.cq.poll(wc), 1);
    EXPECT_EQ(wc[0].opcode, WcOpcode::recv);
    EXPECT_EQ(rdt_of(h), kBatch + 2) << "the device ran short of a batch and a held buffer stayed back";
    // arm() too, before anyone sleeps (this completion queue has no device: arm() fails after).
    post(1);
    EXPECT_EQ(rdt_of(h), kBatch + 2);
    (void)h.cq.arm();
    EXPECT_EQ(rdt_of(h), kBatch + 3) << "arm() left a buffer the device never saw";
    // A whole batch waiting goes without any poll.
    post(kBatch - 1);
    EXPECT_EQ(rdt_of(h), kBatch + 3);
    post(1);
    EXPECT_EQ(rdt_of(h), 2 * kBatch + 3) << "a full batch must be written";
    // flush_recv_tail() on demand; nothing to do is no write.
    post(1);
    h.qp.flush_recv_tail();
    EXPECT_EQ(rdt_of(h), 2 * kBatch + 4);
    EXPECT_EQ(h.qp.recv_outstanding(), 2 * kBatch + 3);
}

// The device takes buffers until it holds fewer than a batch: the next post writes the tail
// at once, and every frame sent is received, none waiting behind a tail not written.
template <class H, class Rdt>
void check_rx_tail_never_strands(H& h, Rdt rdt_of) {
    const uint32_t kBatch = h.qp.recv_tail_batch();
    std::vector<uint8_t> mem(size_t(4 * kBatch) * 2048);
    const uint32_t lkey = h.register_memory(mem.data(), mem.size());
    const uint64_t base = reinterpret_cast<uint64_t>(mem.data());
    for (uint32_t i = 0; i < 2 * kBatch; ++i) {
        Sge s{base + uint64_t(i) * 2048, 2048, lkey};
        RecvWr w{i, &s, 1, 0};
        ASSERT_TRUE(h.qp.post_recv({&w, 1}));
    }
    // Loop frames through one at a time and give each buffer straight back, as a busy-polling
    // receiver does: every frame must arrive, whatever the tail's batching holds back.
    uint32_t received = 0;
    Completion wc[4];
    for (uint32_t f = 0; f < 8 * kBatch; ++f) {
        Sge t{base + uint64_t(2 * kBatch + f % kBatch) * 2048, 60, lkey};
        SendWr sw{1000 + f, &t, 1, 0};
        ASSERT_TRUE(h.qp.post_send({&sw, 1}));
        h.device_step();
        int n = 0;
        for (int tries = 0; tries < 3 && n == 0; ++tries) {
            n = h.cq.poll(wc);
            if (n == 0) h.device_step();   // an empty poll hands held buffers over: try again
        }
        ASSERT_EQ(n, 1) << "frame " << f << " was dropped: the device had no buffer (tail " << rdt_of(h) << ")";
        ASSERT_EQ(wc[0].opcode, WcOpcode::recv);
        ++received;
        Sge s{base + (wc[0].wr_id % (2 * kBatch)) * 2048, 2048, lkey};
        RecvWr w{wc[0].wr_id, &s, 1, 0};
        ASSERT_TRUE(h.qp.post_recv({&w, 1}));
    }
    EXPECT_EQ(received, 8 * kBatch);
}

}  // namespace vfab::intel::test
