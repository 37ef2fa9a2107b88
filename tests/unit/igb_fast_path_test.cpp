// The igb fast path without a device: advanced descriptor encoding (82576 datasheet §7.2.2
// transmit, §7.1.5 receive), completion handling, error completions, flushing, timestamps
// and the per-queue-pair counters (checksum offload: igb_checksum_offload_test.cpp). The
// model device of igb_harness.hpp checks what the driver writes; the lab tests run the same
// code against QEMU's 82576.
#include <gtest/gtest.h>

#include "igb_test_frames.hpp"
#include "intel_rx_tail_batch.hpp"

namespace vfab::igb {
namespace {

TEST(IgbFastPath, EachSgeIsOneDataDescriptorPaylenFirstEopAndRsLast) {
    for (uint32_t n = 1; n <= kMaxSendSge; ++n) {
        SCOPED_TRACE(n);
        FastPathHarness h(16, 16, kMaxSendSge);
        Buffers b;
        const uint32_t lkey = h.register_memory(b.mem.data(), b.mem.size());
        Sge rs{b.addr(40), 2048, lkey};
        RecvWr rw{50, &rs, 1, 0};
        ASSERT_TRUE(h.qp.post_recv({&rw, 1}));
        EXPECT_EQ(h.rdt(), 1u);
        EXPECT_EQ(h.rx_desc(0).read.pkt_addr, b.addr(40));
        EXPECT_EQ(h.rx_desc(0).read.hdr_addr, 0u) << "bit 0 of the second qword is DD in the write-back";

        Sge sges[kMaxSendSge];
        std::vector<uint8_t> expect;
        uint32_t total = 0;
        for (uint32_t s = 0; s < n; ++s) {
            sges[s] = {b.addr(s, 3 * s), 20 + 13 * s, lkey};
            for (uint32_t k = 0; k < sges[s].length; ++k) b.ptr(s, 3 * s)[k] = uint8_t(s * 31 + k);
            expect.insert(expect.end(), b.ptr(s, 3 * s), b.ptr(s, 3 * s) + sges[s].length);
            total += sges[s].length;
        }
        SendWr w{7, sges, n, send_signaled};
        const PostResult r = h.qp.post_send({&w, 1});
        ASSERT_EQ(r.error, 0);
        ASSERT_EQ(r.posted, 1u);
        EXPECT_EQ(h.tdt(), n) << "one descriptor per SGE, no context without send_ip_csum";
        for (uint32_t s = 0; s < n; ++s) {
            const TxDesc& d = h.tx_desc(s);
            const bool last = s + 1 == n;
            EXPECT_EQ(d.buffer_addr, sges[s].addr);
            EXPECT_EQ(d.cmd_type_len & txd::kMaxDataLen, sges[s].length);
            EXPECT_EQ(d.cmd_type_len & kDtypMask, txd::DTYP_DATA);
            EXPECT_TRUE(d.cmd_type_len & txd::CMD_DEXT);
            EXPECT_TRUE(d.cmd_type_len & txd::CMD_IFCS);
            EXPECT_EQ(bool(d.cmd_type_len & txd::CMD_EOP), last) << "EOP only on the last descriptor";
            EXPECT_EQ(bool(d.cmd_type_len & txd::CMD_RS), last) << "RS only on the post's last descriptor";
            EXPECT_EQ(d.olinfo_status, s == 0 ? total << txd::PAYLEN_SHIFT : 0u) << "PAYLEN in the first only";
        }
        Completion wc[4];
        EXPECT_EQ(h.cq.poll(wc), 0) << "nothing is done before the device writes DD";
        EXPECT_EQ(h.device_step(), 1u);
        EXPECT_TRUE(h.violations.empty()) << h.violations.front();
        EXPECT_TRUE(h.tx_desc(n - 1).olinfo_status & txd::STA_DD);
        ASSERT_EQ(h.cq.poll(wc), 2);
        const Completion* sc = find(wc, 2, WcOpcode::send);
        const Completion* rc = find(wc, 2, WcOpcode::recv);
        ASSERT_TRUE(sc && rc);
        EXPECT_EQ(sc->wr_id, 7u);
        EXPECT_EQ(sc->status, WcStatus::success);
        EXPECT_EQ(sc->byte_len, total);
        EXPECT_EQ(sc->qp_num, 1u);
        EXPECT_EQ(rc->wr_id, 50u);
        EXPECT_EQ(rc->byte_len, total);
        EXPECT_EQ(std::memcmp(b.ptr(40), expect.data(), total), 0) << "the frame is the SGEs in order";
        expect_stats(h.qp.stats(), 1, total, 1, total);
        EXPECT_EQ(h.qp.send_outstanding() + h.qp.recv_outstanding(), 0u);
    }
}

TEST(IgbFastPath, OneDoorbellPerPostUnsignaledSendsReclaimedSilently) {
    FastPathHarness h(16, 16, 2);
    Buffers b;
    const uint32_t lkey = h.register_memory(b.mem.data(), b.mem.size());
    Sge two[2] = {{b.addr(0), 14, lkey}, {b.addr(1), 100, lkey}};
    Sge one{b.addr(2), 60, lkey};
    SendWr wrs[3] = {{10, two, 2, 0}, {11, &one, 1, send_signaled}, {12, &one, 1, 0}};
    ASSERT_TRUE(h.qp.post_send(wrs));
    EXPECT_EQ(h.tdt(), 4u);
    EXPECT_EQ(h.device_step(), 3u);
    Completion wc[4];
    ASSERT_EQ(h.cq.poll(wc), 1);
    EXPECT_EQ(wc[0].wr_id, 11u);
    EXPECT_EQ(h.qp.send_outstanding(), 0u);
    EXPECT_EQ(h.qp.stats().tx_packets, 3u) << "unsignaled sends count when reclaimed";
    EXPECT_EQ(h.qp.stats().tx_bytes, 114u + 60 + 60);

    h.signal_all();
    ASSERT_TRUE(h.qp.post_send({&wrs[2], 1}));
    h.device_step();
    ASSERT_EQ(h.cq.poll(wc), 1) << "sq_sig_all: every send completes";
    EXPECT_EQ(wc[0].wr_id, 12u);
}

TEST(IgbFastPath, ReceiveTailBatchingNeverStrandsABuffer) {
    FastPathHarness h(16, 256);
    intel::test::check_rx_tail_batch(h, [](const FastPathHarness& x) { return x.rdt(); });
}

TEST(IgbFastPath, ReceiveTailBatchingDropsNoFrameWhenBuffersComeBackOneByOne) {
    FastPathHarness h(512, 256);
    intel::test::check_rx_tail_never_strands(h, [](const FastPathHarness& x) { return x.rdt(); });
}

TEST(IgbFastPath, DoorbellsGoToTheQueuePairsOwnTailRegisters) {
    FastPathHarness h(16, 16, 1, 5);
    Buffers b;
    const uint32_t lkey = h.register_memory(b.mem.data(), b.mem.size());
    Sge rs{b.addr(8), 2048, lkey}, ts{b.addr(0), 60, lkey};
    RecvWr rw{1, &rs, 1, 0};
    SendWr sw{2, &ts, 1, send_signaled};
    ASSERT_TRUE(h.qp.post_recv({&rw, 1}));
    ASSERT_TRUE(h.qp.post_send({&sw, 1}));
    EXPECT_EQ(h.reg(reg::TDT(5)), 1u);
    EXPECT_EQ(h.reg(reg::RDT(5)), 1u);
    EXPECT_EQ(h.reg(reg::TDT(0)), 0u);
    EXPECT_EQ(h.reg(reg::RDT(0)), 0u);
    h.device_step();
    Completion wc[2];
    ASSERT_EQ(h.cq.poll(wc), 2);
    EXPECT_EQ(wc[0].qp_num, 6u) << "qp_num is the queue index + 1";
    EXPECT_EQ(wc[1].qp_num, 6u);
}

TEST(IgbFastPath, MalformedWorkRequestsAreRefusedWithEinval) {
    FastPathHarness h(64, 16, 4);
    Buffers b;
    const uint32_t lkey = h.register_memory(b.mem.data(), b.mem.size());
    Sge g{b.addr(0), 60, lkey};
    Sge five[5] = {g, g, g, g, g};
    Sge zero[2] = {g, {b.addr(1), 0, lkey}};
    Sge s13{b.addr(0), 13, lkey}, s14{b.addr(0), 14, lkey}, s1515{b.addr(0), 1515, lkey}, s1514{b.addr(0), 1514, lkey};
    Sge split1515[2] = {{b.addr(0), 1000, lkey}, {b.addr(1), 515, lkey}};
    const SendWr bad[] = {{2, &g, 0, 0},        {2, five, 5, 0},      {2, nullptr, 1, 0},
                          {2, zero, 2, 0},      {2, &s13, 1, 0},      {2, &s1515, 1, 0},
                          {2, split1515, 2, 0}};
    for (const SendWr& w : bad) {
        const uint32_t tail = h.tdt();
        const SendWr wrs[3] = {{1, &g, 1, 0}, w, {3, &g, 1, 0}};
        const PostResult r = h.qp.post_send(wrs);
        EXPECT_EQ(r.error, EINVAL);
        EXPECT_EQ(r.posted, 1u);
        EXPECT_EQ(h.tdt() - tail, 1u);
    }
    const SendWr edges[2] = {{4, &s14, 1, 0}, {5, &s1514, 1, 0}};
    EXPECT_TRUE(h.qp.post_send(edges)) << "14 and 1514 bytes are frames";

    Sge r{b.addr(8), 2048, lkey}, small{b.addr(8), 2047, lkey};
    Sge rr[2] = {r, r};
    const RecvWr rbad[] = {{2, &r, 0, 0}, {2, rr, 2, 0}, {2, nullptr, 1, 0}, {2, &small, 1, 0}};
    for (const RecvWr& w : rbad) {
        const uint32_t tail = h.rdt();
        const RecvWr wrs[3] = {{1, &r, 1, 0}, w, {3, &r, 1, 0}};
        const PostResult pr = h.qp.post_recv(wrs);
        EXPECT_EQ(pr.error, EINVAL);
        EXPECT_EQ(pr.posted, 1u);
        EXPECT_EQ(h.rdt() - tail, 1u);
    }
    h.device_step();
    EXPECT_TRUE(h.violations.empty()) << h.violations.front();
}

TEST(IgbFastPath, FullQueuesAndRingsReturnEnomem) {
    Buffers b;
    Completion wc[32];
    {
        FastPathHarness h(8, 8, 1);
        const uint32_t lkey = h.register_memory(b.mem.data(), b.mem.size());
        Sge g{b.addr(0), 60, lkey};
        std::vector<SendWr> wrs(9, SendWr{1, &g, 1, 0});
        PostResult r = h.qp.post_send(wrs);
        EXPECT_EQ(r.error, ENOMEM);
        EXPECT_EQ(r.posted, 8u) << "the send queue holds 8";
        Sge rs{b.addr(8), 2048, lkey};
        std::vector<RecvWr> rws(16, RecvWr{1, &rs, 1, 0});
        r = h.qp.post_recv(rws);
        EXPECT_EQ(r.error, ENOMEM);
        EXPECT_EQ(r.posted, 15u) << "16 descriptors, one kept empty";
        h.device_step();
        h.cq.poll(wc);
        EXPECT_TRUE(h.qp.post_send({wrs.data(), 1})) << "room again once reaped";
    }
    {
        FastPathHarness h(8, 8, 8, 0, 16);   // 15 usable transmit descriptors
        const uint32_t lkey = h.register_memory(b.mem.data(), b.mem.size());
        Sge eight[8];
        for (auto& s : eight) s = {b.addr(0), 60, lkey};
        const SendWr w[2] = {{1, eight, 8, send_signaled}, {2, eight, 7, send_ip_csum | send_signaled}};
        build_frame(b.ptr(0), false, false, 18);
        PostResult r = h.qp.post_send(w);
        EXPECT_EQ(r.error, ENOMEM);
        EXPECT_EQ(r.posted, 1u) << "7 data descriptors + a context do not fit in the 7 left";
        EXPECT_EQ(h.tdt(), 8u);
        h.device_step();
        ASSERT_EQ(h.cq.poll(wc), 1);
        r = h.qp.post_send({&w[1], 1});
        EXPECT_TRUE(r) << "the ring wraps once the first is reaped";
        EXPECT_EQ(h.tdt(), 0u);
        h.device_step();
        ASSERT_EQ(h.cq.poll(wc), 1);
        EXPECT_EQ(wc[0].wr_id, 2u);
        EXPECT_TRUE(h.violations.empty()) << h.violations.front();
    }
}

TEST(IgbFastPath, BadKeysCompleteInOrderWithoutTouchingDescriptors) {
    FastPathHarness h(16, 16, 2);
    Buffers b;
    const uint32_t lkey = h.register_memory(b.mem.data(), 64 * 2048);
    const uint32_t ro = h.register_memory(b.ptr(64), 4096, dma::Access::none);
    const size_t len = build_frame(b.ptr(0), false, false, 10);
    Sge good{b.addr(0), uint32_t(len), lkey}, stale{b.addr(0), uint32_t(len), lkey + 0x1000};
    Sge second_bad[2] = {good, {b.addr(1), 20, 999}};
    Sge outside{b.addr(63, 2000), 100, lkey};   // runs past the region's end
    const SendWr wrs[6] = {{1, &good, 1, send_signaled}, {2, &stale, 1, 0},
                           {3, second_bad, 2, send_signaled}, {4, &outside, 1, 0},
                           {5, &stale, 1, send_ip_csum}, {6, &good, 1, send_signaled}};
    ASSERT_TRUE(h.qp.post_send(wrs));
    EXPECT_EQ(h.tdt(), 2u) << "only the good WRs got descriptors";
    for (uint32_t i = 2; i < h.tx_ring_size(); ++i) EXPECT_EQ(h.tx_desc(i).cmd_type_len, 0u);
    Completion wc[8];
    EXPECT_EQ(h.cq.poll(wc), 0) << "the errors wait behind the first send";
    h.device_step();
    EXPECT_EQ(h.seen.contexts, 0u);
    ASSERT_EQ(h.cq.poll(wc), 6) << "errors complete even unsignaled";
    for (int i = 0; i < 6; ++i) {
        EXPECT_EQ(wc[i].wr_id, uint64_t(i + 1));
        EXPECT_EQ(wc[i].status, i == 0 || i == 5 ? WcStatus::success : WcStatus::local_protection_error);
    }
    expect_stats(h.qp.stats(), 2, 2 * len, 0, 0);

    Sge r{b.addr(10), 2048, lkey}, nowrite{b.addr(64), 2048, ro}, badr{b.addr(10), 2048, 12345};
    const RecvWr rws[4] = {{11, &r, 1, 0}, {12, &nowrite, 1, 0}, {13, &badr, 1, 0}, {14, &r, 1, 0}};
    ASSERT_TRUE(h.qp.post_recv(rws));
    EXPECT_EQ(h.rdt(), 2u);
    const SendWr two[2] = {{20, &good, 1, 0}, {21, &good, 1, 0}};
    ASSERT_TRUE(h.qp.post_send(two));
    h.device_step();
    ASSERT_EQ(h.cq.poll(wc), 4);
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(wc[i].wr_id, uint64_t(11 + i));
        EXPECT_EQ(wc[i].opcode, WcOpcode::recv);
        EXPECT_EQ(wc[i].status, i == 0 || i == 3 ? WcStatus::success : WcStatus::local_protection_error);
    }
    EXPECT_EQ(h.qp.stats().rx_packets, 2u);
}

// A post finds its room once and queues that many WRs unchecked, then looks again: a bad key
// takes a WR slot but no descriptor, so the descriptors it left are used in the same post,
// and the post stops where the slots or descriptors really run out.
TEST(IgbFastPath, RoomBadKeysLeaveIsUsedInTheSamePost) {
    Buffers b;
    Completion wc[32];
    FastPathHarness h(8, 15, 8, 0, 16);   // 8 send slots, 15 usable transmit descriptors
    const uint32_t lkey = h.register_memory(b.mem.data(), 64 * 2048);
    const size_t len = build_frame(b.ptr(0), false, false, 10);
    Sge seven[7];
    for (auto& g : seven) g = {b.addr(0), uint32_t(len / 7), lkey};
    seven[6].length += uint32_t(len % 7);
    const SendWr big[2] = {{1, seven, 7, 0}, {2, seven, 7, 0}};
    ASSERT_TRUE(h.qp.post_send(big));   // 14 descriptors: 1 left, 6 slots
    Sge good{b.addr(0), uint32_t(len), lkey}, stale{b.addr(0), uint32_t(len), lkey + 0x1000};
    const SendWr sends[4] = {{3, &stale, 1, 0}, {4, &stale, 1, 0}, {5, &good, 1, 0}, {6, &good, 1, 0}};
    PostResult r = h.qp.post_send(sends);
    EXPECT_EQ(r.error, ENOMEM);
    EXPECT_EQ(r.posted, 3u) << "both bad keys and the good WR after them; the last finds no descriptor";
    EXPECT_EQ(h.tdt(), 15u);
    h.device_step();
    ASSERT_EQ(h.cq.poll(wc), 2) << "the two bad keys (the rest unsignaled)";
    EXPECT_EQ(wc[0].wr_id, 3u);
    EXPECT_EQ(wc[1].wr_id, 4u);
    expect_stats(h.qp.stats(), 3, 3 * len, 0, 0);

    // Receives: 16 slots and 15 descriptors.
    Sge rs{b.addr(20), 2048, lkey}, badr{b.addr(20), 2048, 12345};
    std::vector<RecvWr> fill(14, RecvWr{1, &rs, 1, 0});
    ASSERT_TRUE(h.qp.post_recv(fill));
    const RecvWr more[4] = {{2, &badr, 1, 0}, {3, &rs, 1, 0}, {4, &badr, 1, 0}, {5, &rs, 1, 0}};
    r = h.qp.post_recv(more);
    EXPECT_EQ(r.error, ENOMEM);
    EXPECT_EQ(r.posted, 2u) << "a bad key and the 15th descriptor; then the 16 slots are full";
    EXPECT_EQ(h.qp.recv_outstanding(), 16u);
    h.qp.flush_recv_tail();
    EXPECT_EQ(h.rdt(), 15u);
    EXPECT_TRUE(h.violations.empty()) << h.violations.front();
}

// RS on each post's last descriptor only: the device writes back one descriptor per post, and
// a completion is ready when the oldest send's post is written back — whichever post that is,
// after polls that took part of the completions.
TEST(IgbFastPath, ReadinessFollowsEachPostsWrittenBackDescriptor) {
    FastPathHarness h(16, 16, 2);
    Buffers b;
    const uint32_t lkey = h.register_memory(b.mem.data(), b.mem.size());
    Sge one{b.addr(2), 60, lkey};
    const SendWr wrs[3] = {{1, &one, 1, send_signaled}, {2, &one, 1, send_signaled}, {3, &one, 1, send_signaled}};
    ASSERT_TRUE(h.qp.post_send({wrs, 2}));   // descriptors 0, 1 (RS)
    ASSERT_TRUE(h.qp.post_send({wrs + 2, 1}));   // 2 (RS)
    for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(bool(h.tx_desc(i).cmd_type_len & txd::CMD_RS), i != 0) << i;
    EXPECT_FALSE(h.cq_ready());
    h.tx_desc(1).olinfo_status |= txd::STA_DD;   // the first post written back; the second not
    EXPECT_TRUE(h.cq_ready());
    Completion wc[4];
    ASSERT_EQ(h.cq.poll({wc, 1}), 1);
    EXPECT_EQ(wc[0].wr_id, 1u);
    EXPECT_TRUE(h.cq_ready()) << "the first post's second send, known done";
    ASSERT_EQ(h.cq.poll(wc), 1);
    EXPECT_EQ(wc[0].wr_id, 2u);
    EXPECT_FALSE(h.cq_ready());
    h.tx_desc(2).olinfo_status |= txd::STA_DD;
    EXPECT_TRUE(h.cq_ready());
    ASSERT_EQ(h.cq.poll(wc), 1);
    EXPECT_EQ(wc[0].wr_id, 3u);
    EXPECT_FALSE(h.cq_ready());
}

TEST(IgbFastPath, ErrorStateFlushesWhatTheDeviceDidNotFinish) {
    FastPathHarness h(16, 16, 3);
    Buffers b;
    const uint32_t lkey = h.register_memory(b.mem.data(), b.mem.size());
    Sge s{b.addr(8), 2048, lkey};
    const RecvWr rw[4] = {{0, &s, 1, 0}, {1, &s, 1, 0}, {2, &s, 1, 0}, {3, &s, 1, 0}};
    ASSERT_TRUE(h.qp.post_recv(rw));
    const size_t len = build_frame(b.ptr(0), false, true, 100);
    Sge t{b.addr(0), uint32_t(len), lkey}, bad{b.addr(0), 60, 777};
    Sge three[3] = {{b.addr(0), 54, lkey}, {b.addr(0, 54), 50, lkey}, {b.addr(0, 104), uint32_t(len - 104), lkey}};
    const SendWr first{10, &t, 1, send_signaled};
    ASSERT_TRUE(h.qp.post_send({&first, 1}));
    h.device_step();   // one frame lands in receive buffer 0
    const SendWr later[3] = {{11, three, 3, send_ip_csum}, {12, &bad, 1, 0}, {13, &t, 1, 0}};
    ASSERT_TRUE(h.qp.post_send(later));
    h.set_state(QpState::error);
    EXPECT_TRUE(h.cq_ready());
    EXPECT_EQ(h.qp.post_send({&later[2], 1}).error, EIO);
    EXPECT_EQ(h.qp.post_recv({rw, 1}).error, EIO);
    Completion wc[2];
    std::vector<Completion> all;
    for (int n; (n = h.cq.poll(wc)) > 0;) all.insert(all.end(), wc, wc + n);
    ASSERT_EQ(all.size(), 8u) << "4 receives, the finished send, 3 errors (unsignaled ones too)";
    std::vector<uint64_t> recv_ids, send_ids;
    for (const Completion& c : all) {
        const bool rx = c.opcode == WcOpcode::recv;
        (rx ? recv_ids : send_ids).push_back(c.wr_id);
        const bool ok = (rx && c.wr_id == 0) || (!rx && c.wr_id == 10);
        const WcStatus want = ok ? WcStatus::success
                              : c.wr_id == 12 ? WcStatus::local_protection_error : WcStatus::wr_flush_error;
        EXPECT_EQ(c.status, want) << c.wr_id;
    }
    EXPECT_EQ(recv_ids, (std::vector<uint64_t>{0, 1, 2, 3}));
    EXPECT_EQ(send_ids, (std::vector<uint64_t>{10, 11, 12, 13}));
    EXPECT_EQ(h.cq.poll(wc), 0);
    EXPECT_FALSE(h.cq_ready());
    EXPECT_EQ(h.qp.send_outstanding() + h.qp.recv_outstanding(), 0u);
    expect_stats(h.qp.stats(), 1, len, 1, len);   // flushed and failed WRs are not counted
    h.set_state(QpState::destroyed);
    EXPECT_EQ(h.qp.post_send({&later[2], 1}).error, ENODEV);
    EXPECT_EQ(h.qp.post_recv({rw, 1}).error, ENODEV);
    h.destroy_cq();
    EXPECT_EQ(h.cq.poll(wc), -ENODEV);
}

// send_timestamp marks the packet's first data descriptor (TSTAMP), whatever else it carries.
TEST(IgbFastPath, SendTimestampMarksTheFirstDescriptorOnly) {
    FastPathHarness h(16, 16, kMaxSendSge);
    Buffers b;
    const uint32_t lkey = h.register_memory(b.mem.data(), b.mem.size());
    const size_t len = build_frame(b.ptr(0), false, true, 100);
    Sge one{b.addr(0), uint32_t(len), lkey};
    Sge three[3] = {{b.addr(0), 60, lkey}, {b.addr(0) + 60, 30, lkey}, {b.addr(0) + 90, uint32_t(len - 90), lkey}};
    const SendWr wrs[] = {
        {1, &one, 1, send_signaled | send_timestamp},
        {2, three, 3, send_signaled | send_timestamp | send_ip_csum},
        {3, &one, 1, send_signaled},
    };
    ASSERT_TRUE(h.qp.post_send(wrs));
    EXPECT_EQ(h.device_step(), 3u);
    EXPECT_EQ(h.seen.timestamped, 2u);
    EXPECT_TRUE(h.violations.empty()) << h.violations.front();
}

TEST(IgbFastPath, RingsWrapOverManyThousandPackets) {
    FastPathHarness h(32, 32, kMaxSendSge);
    Buffers b;
    const uint32_t lkey = h.register_memory(b.mem.data(), b.mem.size());
    constexpr uint32_t kPackets = 20000, kMaxBatch = 16;
    size_t csum_len[2];
    csum_len[0] = build_frame(b.ptr(200), false, false, 64);
    csum_len[1] = build_frame(b.ptr(201), false, true, 90);
    for (uint32_t s = 0; s < kMaxSendSge; ++s)
        for (uint32_t k = 0; k < 2048; ++k) b.ptr(100 + s)[k] = uint8_t(k + s);
    std::vector<uint32_t> length(kPackets);
    uint64_t next_send = 0, next_recv = 0, tx_bytes = 0, rx_bytes = 0, signaled = 0;
    uint32_t i = 0;
    Completion wc[8];
    for (uint32_t round = 0; i < kPackets; ++round) {
        const uint32_t batch = std::min(1 + round % kMaxBatch, kPackets - i);
        std::vector<Sge> sges(size_t(batch) * kMaxSendSge), rsges(batch);
        std::vector<SendWr> sw(batch);
        std::vector<RecvWr> rw(batch);
        for (uint32_t j = 0; j < batch; ++j, ++i) {
            uint8_t* first = b.ptr(64 + i % kMaxBatch);
            Sge* sg = &sges[size_t(j) * kMaxSendSge];
            uint32_t n = 1 + i % kMaxSendSge, flags = i % 5 == 0 ? 0u : uint32_t(send_signaled);
            if (i % 4 == 3) {   // alternating UDP and TCP: the context changes every time
                const size_t len = csum_len[(i / 4) % 2];
                std::memcpy(first, b.ptr(200 + (i / 4) % 2), len);
                sg[0] = {reinterpret_cast<uint64_t>(first), uint32_t(len), lkey};
                n = 1;
                flags |= send_ip_csum;
            } else {
                sg[0] = {reinterpret_cast<uint64_t>(first), 14 + i % 50, lkey};
                for (uint32_t s = 1; s < n; ++s) sg[s] = {b.addr(100 + s, s * 5), 1 + (i * 7 + s) % 60, lkey};
            }
            std::memcpy(first, &i, sizeof i);   // a tag in the destination MAC
            length[i] = 0;
            for (uint32_t s = 0; s < n; ++s) length[i] += sg[s].length;
            sw[j] = {i, sg, n, flags};
            signaled += flags & send_signaled ? 1 : 0;
            rsges[j] = {b.addr(128 + i % kMaxBatch), 2048, lkey};
            rw[j] = {i, &rsges[j], 1, 0};
        }
        ASSERT_TRUE(h.qp.post_recv(rw));
        ASSERT_TRUE(h.qp.post_send(sw));
        ASSERT_EQ(h.device_step(), batch);
        while (h.qp.send_outstanding() + h.qp.recv_outstanding() > 0) {
            const uint32_t before = h.qp.send_outstanding() + h.qp.recv_outstanding();
            const int n = h.cq.poll(wc);
            // 0 is fine when only unsignaled sends were reclaimed
            ASSERT_TRUE(n > 0 || h.qp.send_outstanding() + h.qp.recv_outstanding() < before);
            for (int k = 0; k < n; ++k) {
                ASSERT_EQ(wc[k].status, WcStatus::success);
                if (wc[k].opcode == WcOpcode::send) {
                    while (next_send % 5 == 0 && next_send < wc[k].wr_id) tx_bytes += length[next_send++];
                    ASSERT_EQ(wc[k].wr_id, next_send) << "sends complete in order";
                    ASSERT_EQ(wc[k].byte_len, length[next_send]);
                    tx_bytes += length[next_send++];
                    continue;
                }
                const uint64_t id = next_recv++;
                ASSERT_EQ(wc[k].wr_id, id) << "receives complete in order";
                ASSERT_EQ(wc[k].byte_len, length[id]);
                const uint8_t* got = b.ptr(128 + id % kMaxBatch);
                uint32_t tag;
                std::memcpy(&tag, got, sizeof tag);
                ASSERT_EQ(tag, id);
                if (id % 4 == 3) expect_checksums_valid(std::vector<uint8_t>(got, got + length[id]));
                rx_bytes += length[id];
            }
        }
    }
    while (next_send < kPackets) tx_bytes += length[next_send++];   // trailing unsignaled sends
    EXPECT_TRUE(h.violations.empty()) << h.violations.front();
    EXPECT_EQ(h.seen.frames, kPackets);
    EXPECT_EQ(h.seen.contexts, kPackets / 4) << "one context per checksum frame: offsets alternate";
    EXPECT_GT(h.seen.data, 10u * h.tx_ring_size()) << "the transmit ring wrapped many times";
    EXPECT_EQ(next_recv, kPackets);
    EXPECT_GT(signaled, 0u);
    expect_stats(h.qp.stats(), kPackets, tx_bytes, kPackets, rx_bytes);
}

}  // namespace
}  // namespace vfab::igb
