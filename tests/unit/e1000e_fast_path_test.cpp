// The e1000e fast path without a device: descriptor encoding (datasheet §7.2.10), the
// checksum context, completion handling, error completions and flushing. The lab tests run
// the same code against QEMU's 82574L.
#include <gtest/gtest.h>

#include "e1000e_harness.hpp"
#include "intel_rx_tail_batch.hpp"
#include "vfab/net/checksum.hpp"

namespace vfab::e1000e {
namespace {

struct Buffers {
    std::vector<uint8_t> mem = std::vector<uint8_t>(64 * 2048);
    uint64_t addr(size_t slot, size_t off = 0) { return reinterpret_cast<uint64_t>(mem.data() + slot * 2048 + off); }
};

TEST(E1000eFastPath, SendWritesOneDataDescriptorPerSgeAndOneDoorbell) {
    FastPathHarness h(16, 16);
    Buffers b;
    const uint32_t lkey = h.register_memory(b.mem.data(), b.mem.size());
    Sge two[2] = {{b.addr(0), 14, lkey}, {b.addr(1), 100, lkey}};
    Sge one{b.addr(2), 60, lkey};
    SendWr wrs[2] = {{10, two, 2, send_signaled}, {11, &one, 1, 0}};
    PostResult r = h.qp.post_send(wrs);
    ASSERT_EQ(r.error, 0);
    ASSERT_EQ(r.posted, 2u);
    EXPECT_EQ(h.reg(reg::TDT), 3u);   // three descriptors, one tail write
    const TxDataDesc& d0 = h.tx_desc(0);
    EXPECT_EQ(d0.buffer_addr, b.addr(0));
    EXPECT_EQ(d0.cmd_len & txd::kMaxDataLen, 14u);
    EXPECT_TRUE(d0.cmd_len & txd::CMD_DEXT);
    EXPECT_TRUE(d0.cmd_len & txd::DTYP_DATA);
    EXPECT_TRUE(d0.cmd_len & txd::CMD_IFCS);
    EXPECT_FALSE(d0.cmd_len & txd::CMD_EOP) << "EOP only on a frame's last descriptor";
    EXPECT_FALSE(d0.cmd_len & txd::CMD_RS);
    const TxDataDesc& d1 = h.tx_desc(1);
    EXPECT_EQ(d1.cmd_len & txd::kMaxDataLen, 100u);
    EXPECT_TRUE(d1.cmd_len & txd::CMD_EOP);
    EXPECT_FALSE(d1.cmd_len & txd::CMD_RS) << "RS only on the post's last descriptor";
    EXPECT_TRUE(h.tx_desc(2).cmd_len & txd::CMD_RS);

    Completion wc[4];
    EXPECT_EQ(h.cq.poll(wc), 0) << "nothing is done before the device writes DD";
    EXPECT_EQ(h.device_step(), 2u);
    ASSERT_EQ(h.cq.poll(wc), 1) << "the unsignaled send is reclaimed silently";
    EXPECT_EQ(wc[0].wr_id, 10u);
    EXPECT_EQ(wc[0].status, WcStatus::success);
    EXPECT_EQ(wc[0].opcode, WcOpcode::send);
    EXPECT_EQ(wc[0].byte_len, 114u);
    EXPECT_EQ(h.qp.send_outstanding(), 0u);
}

// post_send queues the usual WR (one SGE, no checksum) inline and any other out of line: one
// batch mixing them keeps their order, their descriptors, one doorbell and where it stopped.
// A poll tests the newest send's descriptor first: done, every send is (the device finishes
// the ring in order) and none is tested apart; not done, each post's last descriptor (the only
// ones the device writes back) is tested up to the first not done. Either way a small
// completion array takes the oldest first and leaves the rest.
TEST(E1000eFastPath, SendsCompleteUpToTheFirstTheDeviceHasNotFinished) {
    FastPathHarness h(16, 16);
    Buffers b;
    const uint32_t lkey = h.register_memory(b.mem.data(), b.mem.size());
    Sge two[2] = {{b.addr(0), 14, lkey}, {b.addr(1), 100, lkey}};
    Sge one{b.addr(2), 60, lkey}, bad{b.addr(2), 60, lkey + 0x1000};
    const SendWr wrs[5] = {{1, &one, 1, send_signaled}, {2, two, 2, send_signaled}, {3, &bad, 1, 0},
                           {4, &one, 1, 0}, {5, &one, 1, send_signaled}};
    // Three posts: descriptors 0; 1-2 and none; 3, 4. RS on each post's last only.
    ASSERT_TRUE(h.qp.post_send({wrs, 1}));
    ASSERT_TRUE(h.qp.post_send({wrs + 1, 2}));
    ASSERT_TRUE(h.qp.post_send({wrs + 3, 2}));
    for (uint32_t i = 0; i < 5; ++i)
        EXPECT_EQ(bool(h.tx_desc(i).cmd_len & txd::CMD_RS), i == 0 || i == 2 || i == 4) << "descriptor " << i;
    Completion wc[8];
    h.tx_desc(0).status |= txd::STA_DD;
    h.tx_desc(2).status |= txd::STA_DD;   // the second post's last
    ASSERT_EQ(h.cq.poll(wc), 3) << "the first two posts, the refused WR with them; the third is not done";
    EXPECT_EQ(wc[0].wr_id, 1u);
    EXPECT_EQ(wc[1].wr_id, 2u);
    EXPECT_EQ(wc[2].wr_id, 3u);
    EXPECT_EQ(wc[2].status, WcStatus::local_protection_error);
    EXPECT_EQ(h.qp.send_outstanding(), 2u);
    h.tx_desc(4).status |= txd::STA_DD;   // the device wrote back only the third post's last
    ASSERT_EQ(h.cq.poll({wc, 1}), 1) << "the newest is done: the rest complete, the oldest first";
    EXPECT_EQ(wc[0].wr_id, 5u) << "the 4th was unsignaled";
    EXPECT_EQ(h.qp.send_outstanding(), 0u);
    ASSERT_TRUE(h.qp.post_send(wrs));   // the descriptors wrapped back to where the model expects
    EXPECT_EQ(h.reg(reg::TDT), 10u);
}

// Only a post's last descriptor reports status, so the device writes back one per post. The
// older posts' completions come as their last descriptors are written back, in order, however
// the polls fall: a poll with room for one completion leaves the rest for the next, which
// still knows they are done; a later post not yet done holds its own sends back.
TEST(E1000eFastPath, OnlyEachPostsLastDescriptorReportsStatus) {
    FastPathHarness h(16, 16);
    Buffers b;
    const uint32_t lkey = h.register_memory(b.mem.data(), b.mem.size());
    Sge one{b.addr(0), 60, lkey};
    const SendWr post1[3] = {{1, &one, 1, send_signaled}, {2, &one, 1, send_signaled}, {3, &one, 1, send_signaled}};
    const SendWr post2[2] = {{4, &one, 1, send_signaled}, {5, &one, 1, send_signaled}};
    ASSERT_TRUE(h.qp.post_send(post1));
    ASSERT_TRUE(h.qp.post_send(post2));
    for (uint32_t i = 0; i < 5; ++i)
        EXPECT_EQ(bool(h.tx_desc(i).cmd_len & txd::CMD_RS), i == 2 || i == 4) << "descriptor " << i;
    Completion wc[8];
    EXPECT_EQ(h.cq.poll(wc), 0);
    h.tx_desc(2).status |= txd::STA_DD;
    ASSERT_EQ(h.cq.poll({wc, 1}), 1);
    EXPECT_EQ(wc[0].wr_id, 1u);
    ASSERT_EQ(h.cq.poll(wc), 2) << "the first post's rest; the second is not done";
    EXPECT_EQ(wc[0].wr_id, 2u);
    EXPECT_EQ(wc[1].wr_id, 3u);
    EXPECT_EQ(h.device_step(), 5u);   // the device: RS-only write-back, as the hardware
    ASSERT_EQ(h.cq.poll(wc), 2);
    EXPECT_EQ(wc[0].wr_id, 4u);
    EXPECT_EQ(wc[1].wr_id, 5u);
    EXPECT_EQ(h.qp.send_outstanding(), 0u);
    for (uint32_t round = 0; round < 20; ++round) {   // round the ring, posts of 1 to 4
        const uint32_t n = 1 + round % 4;
        ASSERT_TRUE(h.qp.post_send({post1, std::min<uint32_t>(n, 3)}));
        if (n == 4) {
            ASSERT_TRUE(h.qp.post_send({post2, 1}));
        }
        h.device_step();
        ASSERT_EQ(h.cq.poll(wc), int(n)) << round;
    }
    EXPECT_TRUE(h.violations.empty()) << h.violations.front();
}

TEST(E1000eFastPath, OneSgeSendsAndOthersMixInOnePost) {
    FastPathHarness h(16, 16);
    Buffers b;
    const uint32_t lkey = h.register_memory(b.mem.data(), b.mem.size());
    Sge a{b.addr(0), 60, lkey}, two[2] = {{b.addr(1), 14, lkey}, {b.addr(2), 46, lkey}}, bad{b.addr(3), 60, lkey + 0x1000},
        c{b.addr(4), 1514, lkey}, shorty{b.addr(5), 13, lkey}, d{b.addr(6), 60, lkey};
    SendWr wrs[6] = {{1, &a, 1, send_signaled}, {2, two, 2, send_signaled}, {3, &bad, 1, 0},
                     {4, &c, 1, send_signaled}, {5, &shorty, 1, send_signaled}, {6, &d, 1, send_signaled}};
    const PostResult r = h.qp.post_send(wrs);
    EXPECT_EQ(r.error, EINVAL) << "13 bytes is shorter than an Ethernet header";
    ASSERT_EQ(r.posted, 4u) << "it stops at the refused WR";
    EXPECT_EQ(h.reg(reg::TDT), 4u) << "1 + 2 descriptors, none for the bad key, 1";
    const uint64_t want[4] = {b.addr(0), b.addr(1), b.addr(2), b.addr(4)};
    for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(h.tx_desc(i).buffer_addr, want[i]) << "descriptor " << i;
    EXPECT_EQ(h.tx_desc(3).cmd_len & txd::kMaxDataLen, 1514u);
    EXPECT_EQ(h.qp.stats().tx_packets, 3u) << "the bad key's WR is not counted as sent";
    EXPECT_EQ(h.qp.stats().tx_bytes, 60u + 60u + 1514u);
    h.device_step();
    Completion wc[8];
    ASSERT_EQ(h.cq.poll(wc), 4);
    const uint64_t ids[4] = {1, 2, 3, 4};
    for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(wc[i].wr_id, ids[i]) << "completion " << i;
    EXPECT_EQ(wc[1].byte_len, 60u);
    EXPECT_EQ(wc[2].status, WcStatus::local_protection_error);
    EXPECT_EQ(h.qp.send_outstanding(), 0u);
    // The rest of the batch goes once the refused WR is left out.
    ASSERT_TRUE(h.qp.post_send({&wrs[5], 1}));
    EXPECT_EQ(h.reg(reg::TDT), 5u);
}

TEST(E1000eFastPath, ReceiveTailBatchingNeverStrandsABuffer) {
    FastPathHarness h(16, 256);
    intel::test::check_rx_tail_batch(h, [](const FastPathHarness& x) { return x.reg(reg::RDT); });
}

TEST(E1000eFastPath, ReceiveTailBatchingDropsNoFrameWhenBuffersComeBackOneByOne) {
    FastPathHarness h(512, 256);
    intel::test::check_rx_tail_never_strands(h, [](const FastPathHarness& x) { return x.reg(reg::RDT); });
}

TEST(E1000eFastPath, ReceiveCompletesWithLengthAndChecksumStatus) {
    FastPathHarness h(16, 16);
    Buffers b;
    const uint32_t lkey = h.register_memory(b.mem.data(), b.mem.size());
    for (uint64_t i = 0; i < 3; ++i) {
        Sge s{b.addr(10 + i), 2048, lkey};
        RecvWr w{100 + i, &s, 1, 0};
        ASSERT_TRUE(h.qp.post_recv({&w, 1}));
    }
    EXPECT_EQ(h.reg(reg::RDT), 3u);
    EXPECT_EQ(h.rx_desc(0).read.buffer_addr, b.addr(10));
    for (uint32_t i = 0; i < 3; ++i) {
        std::memset(b.mem.data() + i * 2048, int(i + 1), 200);
        Sge s{b.addr(i), 60 + i, lkey};
        SendWr w{i, &s, 1, 0};
        if (i == 1) h.rx_status_extra = rxd::IPCS | rxd::TCPCS;
        if (i == 2) h.rx_status_extra = 1u << 24;   // CRC error
        ASSERT_TRUE(h.qp.post_send({&w, 1}));
        h.device_step();
    }
    Completion wc[8];
    ASSERT_EQ(h.cq.poll(wc), 3);
    EXPECT_EQ(wc[0].wr_id, 100u);
    EXPECT_EQ(wc[0].opcode, WcOpcode::recv);
    EXPECT_EQ(wc[0].byte_len, 60u);
    EXPECT_EQ(wc[0].flags, 0);
    EXPECT_EQ(b.mem[10 * 2048], 1);
    EXPECT_EQ(wc[1].flags, wc_ip_csum_ok);
    EXPECT_EQ(wc[2].status, WcStatus::general_error);
    EXPECT_EQ(h.qp.stats().rx_packets, 2u) << "a frame in error is not counted";
    EXPECT_EQ(h.qp.stats().rx_bytes, 60u + 61u);
}

TEST(E1000eFastPath, ChecksumOffloadWritesAContextOnlyWhenOffsetsChange) {
    FastPathHarness h(16, 16);
    Buffers b;
    const uint32_t lkey = h.register_memory(b.mem.data(), b.mem.size());
    uint8_t* f = b.mem.data();
    f[12] = 0x08, f[13] = 0x00;
    const uint8_t ip[20] = {0x45, 0, 0, 48, 0, 0, 0, 0, 64, 17, 0x11, 0x22, 10, 0, 0, 1, 10, 0, 0, 2};
    std::memcpy(f + 14, ip, 20);
    net::store_be16(f + 34 + 4, 28);
    Sge s{b.addr(0), 62, lkey};
    SendWr w{1, &s, 1, send_ip_csum | send_signaled};
    ASSERT_TRUE(h.qp.post_send({&w, 1}));
    EXPECT_EQ(h.reg(reg::TDT), 2u) << "context + data";
    const auto& c = reinterpret_cast<const TxContextDesc&>(h.tx_desc(0));
    EXPECT_EQ(c.ipcss, 14);
    EXPECT_EQ(c.ipcso, 24);
    EXPECT_EQ(c.ipcse, 33);
    EXPECT_EQ(c.tucss, 34);
    EXPECT_EQ(c.tucso, 40);
    EXPECT_EQ(c.tucse, 0);
    EXPECT_TRUE(c.cmd_len & txd::CMD_DEXT);
    EXPECT_TRUE(c.cmd_len & txd::TUCMD_IP);
    EXPECT_FALSE(c.cmd_len & txd::TUCMD_TCP);
    EXPECT_EQ(h.tx_desc(1).popts, txd::POPTS_IXSM | txd::POPTS_TXSM);
    EXPECT_EQ(net::load_be16(f + 24), 0) << "IP checksum field cleared for the device";
    net::L4Offsets o;
    ASSERT_TRUE(net::parse_l4(f, 62, o));
    EXPECT_EQ(net::load_be16(f + 40), net::pseudo_header_sum(f, o, 28));
    ASSERT_TRUE(h.qp.post_send({&w, 1}));
    EXPECT_EQ(h.reg(reg::TDT), 3u) << "same offsets: no second context";
}

TEST(E1000eFastPath, BadKeysCompleteInOrderWithoutDescriptors) {
    FastPathHarness h(16, 16);
    Buffers b;
    const uint32_t lkey = h.register_memory(b.mem.data(), b.mem.size());
    const uint32_t ro = h.register_memory(b.mem.data(), 4096, dma::Access::none);
    Sge good{b.addr(0), 60, lkey}, bad{b.addr(0), 60, lkey + 0x1000};
    SendWr wrs[3] = {{1, &good, 1, send_signaled}, {2, &bad, 1, 0}, {3, &good, 1, send_signaled}};
    ASSERT_TRUE(h.qp.post_send(wrs));
    EXPECT_EQ(h.reg(reg::TDT), 2u);
    Completion wc[4];
    EXPECT_EQ(h.cq.poll(wc), 0) << "the error waits behind the first send";
    h.device_step();
    ASSERT_EQ(h.cq.poll(wc), 3);
    EXPECT_EQ(wc[0].wr_id, 1u);
    EXPECT_EQ(wc[1].wr_id, 2u);
    EXPECT_EQ(wc[1].status, WcStatus::local_protection_error) << "errors complete even unsignaled";
    EXPECT_EQ(wc[2].wr_id, 3u);

    Sge rsge{b.addr(0), 2048, ro};   // no local write
    RecvWr rw{9, &rsge, 1, 0};
    ASSERT_TRUE(h.qp.post_recv({&rw, 1}));
    EXPECT_EQ(h.reg(reg::RDT), 0u);
    ASSERT_EQ(h.cq.poll(wc), 1);
    EXPECT_EQ(wc[0].status, WcStatus::local_protection_error);
}

TEST(E1000eFastPath, ErrorStateFlushesWhatTheDeviceDidNotFinish) {
    FastPathHarness h(16, 16);
    Buffers b;
    const uint32_t lkey = h.register_memory(b.mem.data(), b.mem.size());
    Sge s{b.addr(0), 2048, lkey};
    RecvWr rw[4] = {{0, &s, 1, 0}, {1, &s, 1, 0}, {2, &s, 1, 0}, {3, &s, 1, 0}};
    ASSERT_TRUE(h.qp.post_recv(rw));
    Sge t{b.addr(5), 60, lkey};
    SendWr sw{7, &t, 1, send_signaled};
    ASSERT_TRUE(h.qp.post_send({&sw, 1}));
    h.device_step();   // one frame lands in buffer 0
    h.set_state(QpState::error);
    EXPECT_EQ(h.qp.post_send({&sw, 1}).error, EIO);
    EXPECT_EQ(h.qp.post_recv({rw, 1}).error, EIO);
    Completion wc[8];
    ASSERT_EQ(h.cq.poll(wc), 5);
    int flushed = 0, ok = 0;
    for (int i = 0; i < 5; ++i) (wc[i].status == WcStatus::success ? ok : flushed) += 1;
    EXPECT_EQ(ok, 2) << "the frame received and the send the device finished";
    EXPECT_EQ(flushed, 3);
    EXPECT_EQ(h.cq.poll(wc), 0);
}

// QpStats: a send counts when posted (as DPDK counts), and is taken back when it then fails
// or is flushed; one refused for its key never counts; a receive counts when it completes
// good. What stats() says once everything completed is what completed.
TEST(E1000eFastPath, StatsCountWhatWentOutAndCameIn) {
    FastPathHarness h(16, 16);
    Buffers b;
    const uint32_t lkey = h.register_memory(b.mem.data(), b.mem.size());
    Sge r{b.addr(8), 2048, lkey};
    RecvWr rw[2] = {{0, &r, 1, 0}, {1, &r, 1, 0}};
    ASSERT_TRUE(h.qp.post_recv(rw));
    Sge good{b.addr(0), 60, lkey}, bad{b.addr(0), 70, lkey + 0x1000};
    SendWr sw[3] = {{1, &good, 1, 0}, {2, &bad, 1, 0}, {3, &good, 1, 0}};
    ASSERT_TRUE(h.qp.post_send(sw));
    EXPECT_EQ(h.qp.stats().tx_packets, 2u) << "posted, the refused one not";
    EXPECT_EQ(h.qp.stats().tx_bytes, 120u);
    EXPECT_EQ(h.qp.stats().rx_packets, 0u);
    h.device_step();   // both sends go out and loop back into the two receives
    Completion wc[8];
    EXPECT_EQ(h.cq.poll(wc), 3);   // the refused send and two receives
    QpStats st = h.qp.stats();
    EXPECT_EQ(st.tx_packets, 2u);
    EXPECT_EQ(st.tx_bytes, 120u);
    EXPECT_EQ(st.rx_packets, 2u);
    EXPECT_EQ(st.rx_bytes, 120u);

    // Posted, then flushed before the device sent it: taken back.
    ASSERT_TRUE(h.qp.post_send({&sw[0], 1}));
    EXPECT_EQ(h.qp.stats().tx_packets, 3u);
    h.set_state(QpState::error);
    ASSERT_EQ(h.cq.poll(wc), 1);
    EXPECT_EQ(wc[0].status, WcStatus::wr_flush_error);
    st = h.qp.stats();
    EXPECT_EQ(st.tx_packets, 2u);
    EXPECT_EQ(st.tx_bytes, 120u);
}

TEST(E1000eFastPath, RingWrapsAroundManyTimes) {
    FastPathHarness h(8, 8);
    Buffers b;
    const uint32_t lkey = h.register_memory(b.mem.data(), b.mem.size());
    Completion wc[16];
    uint64_t received = 0;
    for (uint32_t i = 0; i < 1000; ++i) {
        Sge rs{b.addr(8 + i % 4), 2048, lkey};
        RecvWr rw{i, &rs, 1, 0};
        ASSERT_TRUE(h.qp.post_recv({&rw, 1}));
        Sge ts{b.addr(0), 60 + i % 1000, lkey};
        SendWr sw{i, &ts, 1, send_signaled};
        ASSERT_TRUE(h.qp.post_send({&sw, 1}));
        h.device_step();
        int n = h.cq.poll(wc);
        ASSERT_EQ(n, 2);
        for (int k = 0; k < n; ++k)
            if (wc[k].opcode == WcOpcode::recv) {
                EXPECT_EQ(wc[k].wr_id, i);
                EXPECT_EQ(wc[k].byte_len, 60 + i % 1000);
                ++received;
            }
    }
    EXPECT_EQ(received, 1000u);
}

}  // namespace
}  // namespace vfab::e1000e
