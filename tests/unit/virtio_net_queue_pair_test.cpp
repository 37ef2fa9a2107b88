// The virtio-net queue pair's fast path over the model rings of virtio_model.hpp (no device,
// IOVA = VA): the header in the driver's memory (a two-descriptor chain) against the header in
// the application's headroom (one descriptor), bad headroom, completions in posting order when
// the device uses buffers out of order, for split and packed rings.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "virtio_net_harness.hpp"

namespace {

using namespace vfab;
using namespace vfab::virtio_net;

constexpr uint32_t kSize = 16;
constexpr uint32_t kBuf = 2048;
constexpr uint32_t kRoom = 64;   // what the tests leave before each frame
constexpr uint32_t kFrame = 60;

template <class Q, class D>
struct Rig {
    static constexpr bool kPacked = std::is_same_v<Q, virtio::PackedQueue>;
    LoopbackRings<Q, D> rings;
    FastPathHarness h;
    std::vector<uint8_t> mem = std::vector<uint8_t>(size_t(8) * kBuf, 0xee);
    uint32_t lkey;
    explicit Rig(bool headroom, bool in_order = false)
        : rings(kSize, {true, in_order}), h(rings, kSize, {true, in_order}, headroom),
          lkey(h.register_memory(mem.data(), mem.size())) {}
    uint8_t* buf(uint32_t i) { return mem.data() + size_t(i) * kBuf + kRoom; }
    PostResult send(uint32_t i, uint64_t wr_id, uint8_t* at = nullptr) {
        Sge s{reinterpret_cast<uint64_t>(at ? at : buf(i)), kFrame, lkey};
        SendWr wr{wr_id, &s, 1, send_signaled};
        return h.qp.post_send({&wr, 1});
    }
    PostResult recv(uint32_t i, uint64_t wr_id, uint8_t* at = nullptr) {
        Sge s{reinterpret_cast<uint64_t>(at ? at : buf(i)), kBuf - kRoom, lkey};
        RecvWr wr{wr_id, &s, 1, 0};
        return h.qp.post_recv({&wr, 1});
    }
    std::vector<Completion> poll(size_t max = 32) {
        Completion wc[32];
        const int n = h.cq.poll({wc, std::min<size_t>(max, 32)});
        EXPECT_GE(n, 0);
        return {wc, wc + std::max(n, 0)};
    }
};

template <class R>
class VirtioNetQp : public ::testing::Test {};
using Rigs = ::testing::Types<Rig<virtio::SplitQueue, virtio::model::SplitDevice>,
                              Rig<virtio::PackedQueue, virtio::model::PackedDevice>>;
TYPED_TEST_SUITE(VirtioNetQp, Rigs);

TYPED_TEST(VirtioNetQp, HeaderInHeadroomIsOneDescriptorAndTheSameFrame) {
    for (const bool headroom : {false, true}) {
        SCOPED_TRACE(headroom ? "header in headroom" : "header descriptor");
        TypeParam r(headroom);
        EXPECT_EQ(r.h.qp.hdr_in_headroom(), headroom);
        ASSERT_EQ(r.recv(0, 100).error, 0);
        ASSERT_EQ(r.send(1, 200).error, 0);
        r.rings.tx_dev.fetch();
        r.rings.rx_dev.fetch();
        ASSERT_EQ(r.rings.tx_dev.pending().size(), 1u);
        ASSERT_EQ(r.rings.rx_dev.pending().size(), 1u);
        const auto& tx = r.rings.tx_dev.pending().front().bufs;
        const auto& rx = r.rings.rx_dev.pending().front().bufs;
        if (headroom) {
            // §5.1.6: header and frame in one device-readable buffer, the header 12 bytes early.
            ASSERT_EQ(tx.size(), 1u);
            EXPECT_EQ(tx[0].iova, reinterpret_cast<uint64_t>(r.buf(1) - kNetHdrSize));
            EXPECT_EQ(tx[0].len, kNetHdrSize + kFrame);
            EXPECT_FALSE(tx[0].device_writes);
            ASSERT_EQ(rx.size(), 1u);
            EXPECT_EQ(rx[0].iova, reinterpret_cast<uint64_t>(r.buf(0) - kNetHdrSize));
            EXPECT_EQ(rx[0].len, kNetHdrSize + kBuf - kRoom);
            EXPECT_TRUE(rx[0].device_writes);
            // The driver wrote a header of zeros (no offload) into the headroom, and nothing
            // before it.
            const uint8_t* hdr = r.buf(1) - kNetHdrSize;
            for (uint32_t b = 0; b < kNetHdrSize; ++b) EXPECT_EQ(hdr[b], 0) << "header byte " << b;
            EXPECT_EQ(hdr[-1], 0xee);
        } else {
            ASSERT_EQ(tx.size(), 2u);
            EXPECT_EQ(tx[0].len, kNetHdrSize);
            EXPECT_EQ(tx[1].iova, reinterpret_cast<uint64_t>(r.buf(1)));
            EXPECT_EQ(tx[1].len, kFrame);
            ASSERT_EQ(rx.size(), 2u);
            EXPECT_EQ(rx[1].iova, reinterpret_cast<uint64_t>(r.buf(0)));
            EXPECT_EQ(r.buf(1)[-1], 0xee);   // the application's bytes before the frame untouched
        }
        r.rings.tx_dev.use(0, 0);
        r.rings.rx_dev.use(0, kNetHdrSize + kFrame);
        const auto wc = r.poll();
        ASSERT_EQ(wc.size(), 2u);
        for (const Completion& c : wc) {
            EXPECT_EQ(c.status, WcStatus::success);
            if (c.opcode == WcOpcode::recv) {
                EXPECT_EQ(c.wr_id, 100u);
                EXPECT_EQ(c.byte_len, kFrame);   // what followed the header
            } else {
                EXPECT_EQ(c.wr_id, 200u);
            }
        }
    }
}

TYPED_TEST(VirtioNetQp, HeadroomOutsideTheRegionIsAnErrorCompletionAndTheDeviceSeesNothing) {
    TypeParam r(true);
    // The region's first byte: the 12 bytes before it are not the application's to give.
    ASSERT_EQ(r.send(0, 1, r.mem.data()).error, 0);
    ASSERT_EQ(r.recv(0, 2, r.mem.data()).error, 0);
    ASSERT_EQ(r.send(1, 3).error, 0);   // a good one after them still goes
    r.rings.tx_dev.fetch();
    r.rings.rx_dev.fetch();
    EXPECT_EQ(r.rings.tx_dev.pending().size(), 1u);
    EXPECT_EQ(r.rings.rx_dev.pending().size(), 0u);
    r.rings.tx_dev.use(0, 0);
    auto wc = r.poll();
    ASSERT_EQ(wc.size(), 3u);
    for (const Completion& c : wc) {
        SCOPED_TRACE(c.wr_id);
        EXPECT_EQ(c.status, c.wr_id == 3 ? WcStatus::success : WcStatus::local_protection_error);
    }
    EXPECT_EQ(r.mem[0], 0xee) << "the driver wrote a header outside the frame's region";
}

TYPED_TEST(VirtioNetQp, OutOfOrderUseCompletesInPostingOrder) {
    for (const bool headroom : {false, true}) {
        SCOPED_TRACE(headroom ? "header in headroom" : "header descriptor");
        TypeParam r(headroom);
        for (uint32_t i = 0; i < 4; ++i) ASSERT_EQ(r.send(i, 10 + i).error, 0);
        r.rings.tx_dev.fetch();
        ASSERT_EQ(r.rings.tx_dev.pending().size(), 4u);
        r.rings.tx_dev.use(2, 0);   // the third, then the first: only the first may complete
        r.rings.tx_dev.use(0, 0);
        auto wc = r.poll();
        ASSERT_EQ(wc.size(), 1u);
        EXPECT_EQ(wc[0].wr_id, 10u);
        r.rings.tx_dev.use(0, 0);   // the second: now the second and third
        wc = r.poll();
        ASSERT_EQ(wc.size(), 2u);
        EXPECT_EQ(wc[0].wr_id, 11u);
        EXPECT_EQ(wc[1].wr_id, 12u);
        r.rings.tx_dev.use(0, 0);
        wc = r.poll();
        ASSERT_EQ(wc.size(), 1u);
        EXPECT_EQ(wc[0].wr_id, 13u);
        EXPECT_EQ(r.h.qp.send_outstanding(), 0u);
    }
}

TYPED_TEST(VirtioNetQp, InOrderBatchOfOneUsedEntryCompletesEveryWr) {
    TypeParam r(true, true);
    for (uint32_t i = 0; i < 5; ++i) ASSERT_EQ(r.recv(i, 20 + i).error, 0);
    r.rings.rx_dev.fetch();
    // §2.7.9 / §2.8.8: one used entry for the last of a batch; the others are wholly used.
    r.rings.rx_dev.use_batch(3, kNetHdrSize + kFrame);
    auto wc = r.poll();
    ASSERT_EQ(wc.size(), 3u);
    for (uint32_t k = 0; k < 3; ++k) {
        EXPECT_EQ(wc[k].wr_id, 20u + k);
        EXPECT_EQ(wc[k].byte_len, k == 2 ? kFrame : kBuf - kRoom);
    }
    EXPECT_EQ(r.h.qp.recv_outstanding(), 2u);
}

// A used entry for more WRs than the poll has room for: the rest wait in their slots, done,
// and the next poll retires them — a WR with a bad key among them (never on the device) in
// its place, the batch's last with the length the device wrote.
TYPED_TEST(VirtioNetQp, InOrderBatchCutShortByThePollFinishesNextPoll) {
    TypeParam r(true, true);
    for (uint32_t i = 0; i < 2; ++i) ASSERT_EQ(r.recv(i, 20 + i).error, 0);
    {
        Sge s{reinterpret_cast<uint64_t>(r.buf(2)), kBuf - kRoom, r.lkey + 1};   // no such key
        RecvWr wr{22, &s, 1, 0};
        ASSERT_EQ(r.h.qp.post_recv({&wr, 1}).error, 0);
    }
    for (uint32_t i = 3; i < 5; ++i) ASSERT_EQ(r.recv(i, 20 + i).error, 0);
    r.rings.rx_dev.fetch();
    ASSERT_EQ(r.rings.rx_dev.pending().size(), 4u);
    r.rings.rx_dev.use_batch(4, kNetHdrSize + kFrame);
    auto wc = r.poll(1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].wr_id, 20u);
    EXPECT_EQ(wc[0].byte_len, kBuf - kRoom);
    EXPECT_EQ(r.h.cq.poll(std::span<Completion>{}), 0);
    wc = r.poll();
    ASSERT_EQ(wc.size(), 4u);
    const uint32_t want_len[] = {kBuf - kRoom, 0, kBuf - kRoom, kFrame};
    for (uint32_t k = 0; k < 4; ++k) {
        EXPECT_EQ(wc[k].wr_id, 21u + k);
        EXPECT_EQ(wc[k].status, k == 1 ? WcStatus::local_protection_error : WcStatus::success);
        EXPECT_EQ(wc[k].byte_len, want_len[k]);
    }
    EXPECT_EQ(r.h.qp.recv_outstanding(), 0u);
    // A length shorter than the header the device must write first: an error completion.
    ASSERT_EQ(r.recv(0, 30).error, 0);
    r.rings.rx_dev.fetch();
    r.rings.rx_dev.use_batch(1, kNetHdrSize - 1);
    wc = r.poll();
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, WcStatus::general_error);
    EXPECT_EQ(wc[0].byte_len, 0u);
    EXPECT_TRUE(r.rings.rx_dev.errors().empty()) << r.rings.rx_dev.errors().front();
}

// Receives returned one used element each (their lengths differ) with bad-key WRs first,
// between and last, polled two at a time: completions in posting order, each receive with its
// element's length; afterwards the queue pair goes on as before.
TYPED_TEST(VirtioNetQp, InOrderElementsAroundBadKeysCompleteInOrderAcrossPolls) {
    TypeParam r(true, true);
    const auto post_bad_key = [&](uint64_t wr_id) {
        Sge s{reinterpret_cast<uint64_t>(r.buf(7)), kBuf - kRoom, r.lkey + 1};   // no such key
        RecvWr wr{wr_id, &s, 1, 0};
        return r.h.qp.post_recv({&wr, 1}).error;
    };
    ASSERT_EQ(post_bad_key(40), 0);
    ASSERT_EQ(r.recv(0, 41).error, 0);
    ASSERT_EQ(r.recv(1, 42).error, 0);
    ASSERT_EQ(post_bad_key(43), 0);
    ASSERT_EQ(r.recv(2, 44).error, 0);
    ASSERT_EQ(post_bad_key(45), 0);
    r.rings.rx_dev.fetch();
    ASSERT_EQ(r.rings.rx_dev.pending().size(), 3u);
    for (uint32_t k = 0; k < 3; ++k) r.rings.rx_dev.use_batch(1, kNetHdrSize + 60 + k);
    std::vector<Completion> all;
    for (int polls = 0; polls < 6 && all.size() < 6; ++polls) {
        const auto wc = r.poll(2);
        all.insert(all.end(), wc.begin(), wc.end());
    }
    ASSERT_EQ(all.size(), 6u);
    const uint32_t want_len[] = {0, 60, 61, 0, 62, 0};
    for (uint32_t k = 0; k < 6; ++k) {
        SCOPED_TRACE(k);
        EXPECT_EQ(all[k].wr_id, 40u + k);
        const bool bad = want_len[k] == 0;
        EXPECT_EQ(all[k].status, bad ? WcStatus::local_protection_error : WcStatus::success);
        EXPECT_EQ(all[k].byte_len, want_len[k]);
    }
    EXPECT_EQ(r.h.qp.recv_outstanding(), 0u);
    EXPECT_EQ(r.h.cq.poll(std::span<Completion>{}), 0);
    ASSERT_EQ(r.recv(3, 50).error, 0);
    r.rings.rx_dev.fetch();
    r.rings.rx_dev.use_batch(1, kNetHdrSize + 70);
    const auto wc = r.poll();
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].wr_id, 50u);
    EXPECT_EQ(wc[0].byte_len, 70u);
    EXPECT_TRUE(r.rings.rx_dev.errors().empty()) << r.rings.rx_dev.errors().front();
}

// A post finds its room once (WR slots, and descriptors at one or two per one-SGE WR) and
// queues that many WRs unchecked, then looks again: a bad key takes a slot and no descriptor,
// so the descriptors it left serve the WRs after it in the same post, and the post stops
// exactly where the descriptors run out. The same for receives; then all complete in order.
TYPED_TEST(VirtioNetQp, PostsStopWhereTheRingIsFullAndBadKeysTakeNoDescriptor) {
    TypeParam r(false);   // the header apart: two descriptors a WR, 8 WRs in 16 descriptors
    std::vector<Sge> sges(8);
    std::vector<SendWr> sends(8);
    for (uint32_t i = 0; i < 7; ++i) {
        sges[i] = {reinterpret_cast<uint64_t>(r.buf(i % 8)), kFrame, r.lkey};
        sends[i] = {i, &sges[i], 1, send_signaled};
    }
    ASSERT_TRUE(r.h.qp.post_send({sends.data(), 7}));   // 14 of 16 descriptors
    Sge bad{reinterpret_cast<uint64_t>(r.buf(0)), kFrame, r.lkey + 1};
    const SendWr more[4] = {{7, &bad, 1, send_signaled}, {8, &bad, 1, send_signaled}, {9, &sges[0], 1, send_signaled},
                            {10, &sges[0], 1, send_signaled}};
    PostResult p = r.h.qp.post_send(more);
    EXPECT_EQ(p.error, ENOMEM);
    EXPECT_EQ(p.posted, 3u) << "both bad keys, then one WR in the last two descriptors";
    EXPECT_EQ(r.h.qp.send_outstanding(), 10u);

    Sge rs{reinterpret_cast<uint64_t>(r.buf(0)), kBuf - kRoom, r.lkey}, rbad{rs.addr, rs.length, r.lkey + 1};
    std::vector<RecvWr> recvs(7, RecvWr{100, &rs, 1, 0});
    ASSERT_TRUE(r.h.qp.post_recv(recvs));
    const RecvWr rmore[3] = {{107, &rbad, 1, 0}, {108, &rs, 1, 0}, {109, &rs, 1, 0}};
    p = r.h.qp.post_recv(rmore);
    EXPECT_EQ(p.error, ENOMEM);
    EXPECT_EQ(p.posted, 2u);

    r.rings.tx_dev.fetch();
    EXPECT_EQ(r.rings.tx_dev.pending().size(), 8u);
    for (uint32_t k = 0; k < 8; ++k) r.rings.tx_dev.use(0, 0);
    std::vector<Completion> all;
    for (int polls = 0; polls < 4 && all.size() < 10; ++polls) {
        const auto wc = r.poll();
        for (const Completion& c : wc)
            if (c.opcode == WcOpcode::send) all.push_back(c);
    }
    ASSERT_EQ(all.size(), 10u);
    for (uint32_t k = 0; k < 10; ++k) {
        EXPECT_EQ(all[k].wr_id, k);
        EXPECT_EQ(all[k].status, k == 7 || k == 8 ? WcStatus::local_protection_error : WcStatus::success);
    }
    EXPECT_TRUE(r.rings.tx_dev.errors().empty()) << r.rings.tx_dev.errors().front();
}

// A new queue pair's virtqueues ask for no used-buffer notification (an interrupt over VFIO, a
// write(2) on the back-end's core over vhost-user) until a completion queue's arm(): a
// busy-polling application gets none, in order and not.
TYPED_TEST(VirtioNetQp, NoUsedBufferNotificationBeforeArm) {
    for (const bool in_order : {false, true}) {
        SCOPED_TRACE(in_order ? "IN_ORDER" : "any order");
        TypeParam r(true, in_order);
        for (uint32_t i = 0; i < 3; ++i) {
            ASSERT_EQ(r.recv(i, 10 + i).error, 0);
            ASSERT_EQ(r.send(4 + i, 20 + i).error, 0);
        }
        r.rings.rx_dev.fetch();
        r.rings.tx_dev.fetch();
        for (uint32_t i = 0; i < 3; ++i) {
            r.rings.rx_dev.use(0, kNetHdrSize + kFrame);
            r.rings.tx_dev.use(0, 0);
        }
        EXPECT_EQ(r.poll().size(), 6u);
        EXPECT_EQ(r.rings.rx_dev.interrupts(), 0u);
        EXPECT_EQ(r.rings.tx_dev.interrupts(), 0u);
    }
}

// A device that returns a buffer it was not given breaks the virtqueue: the queue pair goes to
// the error state and its WRs flush, in order and in any order (nothing waits forever).
TYPED_TEST(VirtioNetQp, ADeviceReturningABufferItWasNotGivenFlushesTheQueuePair) {
    for (const bool in_order : {false, true}) {
        SCOPED_TRACE(in_order ? "IN_ORDER" : "any order");
        TypeParam r(true, in_order);
        for (uint32_t i = 0; i < 2; ++i) ASSERT_EQ(r.recv(i, 20 + i).error, 0);
        r.rings.rx_dev.fetch();
        r.rings.rx_dev.use_any_id(9, kNetHdrSize + kFrame);   // position 9: never posted
        EXPECT_TRUE(r.poll().empty());
        EXPECT_EQ(r.h.qp.state(), QpState::error);
        const auto wc = r.poll();
        ASSERT_EQ(wc.size(), 2u);
        for (uint32_t k = 0; k < 2; ++k) {
            EXPECT_EQ(wc[k].wr_id, 20u + k);
            EXPECT_EQ(wc[k].status, WcStatus::wr_flush_error);
            EXPECT_EQ(wc[k].byte_len, 0u);
        }
        EXPECT_EQ(r.h.qp.recv_outstanding(), 0u);
    }
}

// In order, every send at the device and none with a bad key: a poll takes all the device
// used at once (a split ring reads used->idx and no entry), in batches or one by one; a
// device that says it used more than it was given breaks the queue and the sends flush.
TYPED_TEST(VirtioNetQp, InOrderSendsTheDeviceUsedCompleteAtOnceAndTooManyFlush) {
    TypeParam r(true, true);
    for (uint32_t i = 0; i < 6; ++i) ASSERT_EQ(r.send(i, 10 + i).error, 0);
    r.rings.tx_dev.fetch();
    r.rings.tx_dev.use_batch(2, 0);
    r.rings.tx_dev.use(0, 0);
    r.rings.tx_dev.use_batch(2, 0);   // 5 of 6
    auto wc = r.poll();
    ASSERT_EQ(wc.size(), 5u);
    for (uint32_t k = 0; k < 5; ++k) {
        EXPECT_EQ(wc[k].wr_id, 10u + k);
        EXPECT_EQ(wc[k].status, WcStatus::success);
    }
    EXPECT_EQ(r.h.qp.send_outstanding(), 1u);
    EXPECT_EQ(r.h.qp.stats().tx_packets, 5u);
    ASSERT_EQ(r.send(6, 16).error, 0);
    r.rings.tx_dev.fetch();
    if constexpr (TypeParam::kPacked)
        r.rings.tx_dev.use_any_id(3, 0);   // position 3: returned long ago
    else
        r.rings.tx_dev.use_any_id(15, 0, 3);   // idx moved by 3 where 2 are out
    EXPECT_TRUE(r.poll().empty());
    EXPECT_EQ(r.h.qp.state(), QpState::error);
    wc = r.poll();
    ASSERT_EQ(wc.size(), 2u);
    EXPECT_EQ(wc[0].wr_id, 15u);
    EXPECT_EQ(wc[1].wr_id, 16u);
    EXPECT_EQ(wc[0].status, WcStatus::wr_flush_error);
    EXPECT_EQ(r.h.qp.send_outstanding(), 0u);
}

// In order, sends retire in one pass: unsignaled ones without a completion (counted all the
// same), a completion for each signaled or failed one, at most `max` a poll — the poll stops at
// the first WR that would need one more (the unsignaled ones before it retire), so nothing is
// retired unseen; receives likewise in runs of `max`. The statistics count the successful WRs
// and their bytes once.
TYPED_TEST(VirtioNetQp, InOrderSendsCompleteSignaledAndFailedOnesWithinMaxAndCountAll) {
    TypeParam r(true, true);
    const auto send = [&](uint32_t i, uint64_t wr_id, unsigned flags, uint32_t key) {
        Sge s{reinterpret_cast<uint64_t>(r.buf(i)), kFrame, key};
        SendWr wr{wr_id, &s, 1, flags};
        return r.h.qp.post_send({&wr, 1}).error;
    };
    // wr_id 0..7: 1 and 4 signaled, 5 a bad key, the rest unsignaled.
    for (uint32_t i = 0; i < 8; ++i)
        ASSERT_EQ(send(i, i, i == 1 || i == 4 ? unsigned(send_signaled) : 0u, i == 5 ? r.lkey + 1 : r.lkey), 0);
    r.rings.tx_dev.fetch();
    ASSERT_EQ(r.rings.tx_dev.pending().size(), 7u);
    r.rings.tx_dev.use_batch(7, 0);
    auto wc = r.poll(1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].wr_id, 1u);
    EXPECT_EQ(r.h.qp.send_outstanding(), 4u) << "retired up to the next that needs a completion";
    EXPECT_EQ(r.h.qp.stats().tx_packets, 4u);
    wc = r.poll(1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].wr_id, 4u);
    wc = r.poll();
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].wr_id, 5u);
    EXPECT_EQ(wc[0].status, WcStatus::local_protection_error);
    EXPECT_EQ(wc[0].opcode, WcOpcode::send);
    EXPECT_EQ(r.h.qp.send_outstanding(), 0u);
    EXPECT_EQ(r.h.qp.stats().tx_packets, 7u);
    EXPECT_EQ(r.h.qp.stats().tx_bytes, 7u * kFrame);
    // Receives: 5 in one batch, polled 2, 2, 1.
    for (uint32_t i = 0; i < 5; ++i) ASSERT_EQ(r.recv(i, 10 + i).error, 0);
    r.rings.rx_dev.fetch();
    r.rings.rx_dev.use_batch(5, kNetHdrSize + kFrame);
    std::vector<uint64_t> ids;
    for (const size_t max : {2, 2, 2}) {
        wc = r.poll(max);
        for (const Completion& c : wc) ids.push_back(c.wr_id);
    }
    EXPECT_EQ(ids, (std::vector<uint64_t>{10, 11, 12, 13, 14}));
    EXPECT_EQ(r.h.qp.stats().rx_packets, 5u);
    EXPECT_EQ(r.h.qp.stats().rx_bytes, 4u * (kBuf - kRoom) + kFrame);
    EXPECT_TRUE(r.rings.tx_dev.errors().empty()) << r.rings.tx_dev.errors().front();
}
}  // namespace
