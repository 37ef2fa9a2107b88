// igb checksum offload without a device: the context descriptor and POPTS on transmit
// (82576 datasheet §7.2.2.2), frames the driver must refuse to offload, and the
// receive status and checksum flags of the write-back descriptor (§7.1.5.2). The model device
// of igb_harness.hpp inserts and checks the checksums the way the 82576 does.
#include <gtest/gtest.h>

#include "igb_test_frames.hpp"

namespace vfab::igb {
namespace {

TEST(IgbFastPath, ChecksumContextWrittenOnlyWhenOffsetsChange) {
    FastPathHarness h(32, 32, 2);
    Buffers b;
    const uint32_t lkey = h.register_memory(b.mem.data(), b.mem.size());
    uint32_t tail = 0;
    // Posts the frame in `slot`; checks what was written and that the frame left with both
    // checksums right. Returns whether a context descriptor came first.
    auto send = [&](size_t slot, size_t len, uint32_t flags) {
        Sge s{b.addr(slot), uint32_t(len), lkey};
        SendWr w{slot, &s, 1, flags};
        const PostResult r = h.qp.post_send({&w, 1});
        EXPECT_EQ(r.error, 0);
        const bool ctx = h.tdt() - tail == 2;
        const TxDesc& d = h.tx_desc(h.tdt() - 1);
        EXPECT_EQ(d.olinfo_status >> txd::PAYLEN_SHIFT, len);
        if (ctx) {
            EXPECT_EQ(h.tx_desc(tail).cmd_type_len & 0xffu << 24, txd::CMD_DEXT) << "a context has DEXT only";
        }
        tail = h.tdt();
        EXPECT_EQ(h.device_step(), 1u);
        if (flags & send_ip_csum) expect_checksums_valid(h.last_frame);
        return ctx;
    };
    const size_t udp4 = build_frame(b.ptr(0), false, false, 20);
    EXPECT_TRUE(send(0, udp4, send_ip_csum | send_signaled));
    const TxContextDesc& c = h.ctx_desc(0);
    EXPECT_EQ(c.vlan_macip_lens, 20u | 14u << txd::MACLEN_SHIFT) << "IPLEN 8:0, MACLEN 15:9";
    EXPECT_EQ(c.type_tucmd_mlhl, txd::DTYP_CONTEXT | txd::CMD_DEXT | txd::TUCMD_IPV4) << "IPv4, L4T UDP";
    EXPECT_EQ(c.seqnum_seed, 0u);
    EXPECT_EQ(c.mss_l4len_idx, 0u) << "context slot 0, no TSO";
    constexpr uint32_t popts = txd::POPTS_IXSM | txd::POPTS_TXSM;
    // (the device has written DD back by now: bit 0)
    EXPECT_EQ(h.tx_desc(1).olinfo_status & ~txd::STA_DD, uint32_t(udp4) << txd::PAYLEN_SHIFT | popts);
    EXPECT_FALSE(send(0, udp4, send_ip_csum)) << "same offsets: no second context";
    const size_t plain = build_frame(b.ptr(1), false, false, 30);
    EXPECT_FALSE(send(1, plain, 0));
    EXPECT_EQ(h.tx_desc(tail - 1).olinfo_status & ~txd::STA_DD, uint32_t(plain) << txd::PAYLEN_SHIFT)
        << "no POPTS without send_ip_csum";
    EXPECT_FALSE(send(0, udp4, send_ip_csum)) << "the context outlives frames without offload";

    const size_t tcp4 = build_frame(b.ptr(2), false, true, 33);
    EXPECT_TRUE(send(2, tcp4, send_ip_csum));
    EXPECT_EQ(h.ctx.type_tucmd_mlhl, txd::DTYP_CONTEXT | txd::CMD_DEXT | txd::TUCMD_IPV4 | txd::TUCMD_L4T_TCP);
    EXPECT_EQ(h.ctx.vlan_macip_lens, 20u | 14u << txd::MACLEN_SHIFT);
    const size_t tagged = build_frame(b.ptr(3), false, true, 5, true);
    EXPECT_TRUE(send(3, tagged, send_ip_csum));
    EXPECT_EQ(h.ctx.vlan_macip_lens, 20u | 18u << txd::MACLEN_SHIFT) << "MACLEN includes the 802.1Q tag";
    const size_t options = build_frame(b.ptr(4), false, true, 5, false, 6);
    EXPECT_TRUE(send(4, options, send_ip_csum));
    EXPECT_EQ(h.ctx.vlan_macip_lens, 24u | 14u << txd::MACLEN_SHIFT) << "IPLEN includes IPv4 options";
    const size_t tcp6 = build_frame(b.ptr(5), true, true, 40);
    EXPECT_TRUE(send(5, tcp6, send_ip_csum));
    EXPECT_EQ(h.ctx.vlan_macip_lens, 40u | 14u << txd::MACLEN_SHIFT);
    EXPECT_EQ(h.ctx.type_tucmd_mlhl, txd::DTYP_CONTEXT | txd::CMD_DEXT | txd::TUCMD_L4T_TCP) << "IPv6: no TUCMD.IPV4";
    EXPECT_EQ(h.tx_desc(tail - 1).olinfo_status & 0x3f00, txd::POPTS_TXSM) << "no IPv4 header to fill";
    const size_t udp6 = build_frame(b.ptr(6), true, false, 17);
    EXPECT_TRUE(send(6, udp6, send_ip_csum));
    EXPECT_TRUE(send(2, tcp4, send_ip_csum)) << "back to earlier offsets: the slot holds another context";

    // Headers in the first SGE, payload in the second: the context, then two data descriptors.
    const size_t udp_big = build_frame(b.ptr(7), false, false, 300);
    std::memcpy(b.ptr(8), b.ptr(7, 42), udp_big - 42);
    Sge split[2] = {{b.addr(7), 42, lkey}, {b.addr(8), uint32_t(udp_big - 42), lkey}};
    SendWr w{99, split, 2, send_ip_csum | send_signaled};
    ASSERT_TRUE(h.qp.post_send({&w, 1}));
    EXPECT_EQ(h.tdt() - tail, 3u);
    EXPECT_EQ(h.tx_desc(tail + 1).olinfo_status, uint32_t(udp_big) << txd::PAYLEN_SHIFT | popts);
    EXPECT_EQ(h.tx_desc(tail + 2).olinfo_status, 0u);
    h.device_step();
    expect_checksums_valid(h.last_frame);
    EXPECT_EQ(h.seen.contexts, 8u);
    EXPECT_TRUE(h.violations.empty()) << h.violations.front();
    Completion wc[32];
    EXPECT_EQ(h.cq.poll(wc), 2);
    EXPECT_EQ(h.qp.stats().tx_packets, 11u);
}

TEST(IgbFastPath, ChecksumOffloadRefusesFramesItCannotParse) {
    FastPathHarness h(16, 16, 2);
    Buffers b;
    const uint32_t lkey = h.register_memory(b.mem.data(), b.mem.size());
    const size_t good = build_frame(b.ptr(0), false, false, 10);
    build_frame(b.ptr(1), false, false, 10);
    net::store_be16(b.ptr(1, 12), 0x0806);   // ARP
    build_frame(b.ptr(2), false, false, 10);
    net::store_be16(b.ptr(2, 20), 0x2000);   // IPv4 fragment: more fragments
    build_frame(b.ptr(3), false, false, 10);
    b.ptr(3)[23] = 1;                        // ICMP
    Sge g{b.addr(0), uint32_t(good), lkey};
    Sge bad[4] = {{b.addr(1), uint32_t(good), lkey}, {b.addr(2), uint32_t(good), lkey},
                  {b.addr(3), uint32_t(good), lkey}, {b.addr(0), 30, lkey}};   // the last: headers cut short
    Sge rest{b.addr(0, 30), uint32_t(good - 30), lkey};
    for (int i = 0; i < 4; ++i) {
        SCOPED_TRACE(i);
        const uint32_t tail = h.tdt();
        SendWr wrs[3] = {{1, &g, 1, send_ip_csum}, {2, &bad[i], 1, send_ip_csum}, {3, &g, 1, 0}};
        Sge pair[2] = {bad[i], rest};
        if (i == 3) wrs[1] = {2, pair, 2, send_ip_csum};
        const PostResult r = h.qp.post_send(wrs);
        EXPECT_EQ(r.error, EINVAL);
        EXPECT_EQ(r.posted, 1u);
        EXPECT_EQ(h.tdt() - tail, i == 0 ? 2u : 1u) << "the first WR only (its context once)";
    }
    h.device_step();
    EXPECT_TRUE(h.violations.empty()) << h.violations.front();
    Completion wc[8];
    EXPECT_EQ(h.cq.poll(wc), 0);
    EXPECT_EQ(h.qp.send_outstanding(), 0u);
    EXPECT_EQ(h.qp.stats().tx_packets, 4u);
}

TEST(IgbFastPath, ReceiveStatusAndChecksumFlags) {
    struct Case { uint32_t status; bool eop; WcStatus want; uint16_t flags; };
    constexpr uint32_t both = rxd::IPCS | rxd::L4CS;
    const Case cases[] = {
        {0, true, WcStatus::success, 0},
        {rxd::IPCS, true, WcStatus::success, 0},
        {rxd::L4CS, true, WcStatus::success, 0},
        {both, true, WcStatus::success, wc_ip_csum_ok},
        {both | rxd::UDPCS, true, WcStatus::success, wc_ip_csum_ok},
        {both | rxd::ERR_IPE, true, WcStatus::success, 0},
        {both | rxd::ERR_L4E, true, WcStatus::success, 0},
        {rxd::ERR_IPE | rxd::ERR_L4E, true, WcStatus::success, 0},
        {both | 1u << 24, true, WcStatus::general_error, 0},   // CE
        {both | 1u << 25, true, WcStatus::general_error, 0},   // SE
        {both | 1u << 26, true, WcStatus::general_error, 0},   // SEQ
        {both | 1u << 28, true, WcStatus::general_error, 0},   // CXE
        {both | 1u << 31, true, WcStatus::general_error, 0},   // RXE
        {both, false, WcStatus::local_length_error, 0},        // no EOP: did not fit one buffer
        {rxd::TS, true, WcStatus::success, wc_timestamped},    // IEEE 1588: the arrival was latched
        {both | rxd::TS, true, WcStatus::success, uint16_t(wc_ip_csum_ok | wc_timestamped)},
    };
    FastPathHarness h(16, 16, 1);
    Buffers b;
    const uint32_t lkey = h.register_memory(b.mem.data(), b.mem.size());
    uint64_t rx_packets = 0, rx_bytes = 0;
    for (uint32_t i = 0; i < std::size(cases); ++i) {
        SCOPED_TRACE(i);
        h.rx_status_extra = cases[i].status;
        h.rx_eop = cases[i].eop;
        Sge rs{b.addr(8), 2048, lkey}, ts{b.addr(0), 60 + i, lkey};
        RecvWr rw{i, &rs, 1, 0};
        SendWr sw{i, &ts, 1, 0};
        ASSERT_TRUE(h.qp.post_recv({&rw, 1}));
        ASSERT_TRUE(h.qp.post_send({&sw, 1}));
        h.device_step();
        Completion wc[2];
        ASSERT_EQ(h.cq.poll(wc), 1);
        EXPECT_EQ(wc[0].wr_id, i);
        EXPECT_EQ(wc[0].opcode, WcOpcode::recv);
        EXPECT_EQ(wc[0].status, cases[i].want);
        EXPECT_EQ(wc[0].flags, cases[i].flags);
        EXPECT_EQ(wc[0].byte_len, 60 + i);
        if (cases[i].want == WcStatus::success) ++rx_packets, rx_bytes += 60 + i;
        expect_stats(h.qp.stats(), i + 1, 60 * (i + 1) + i * (i + 1) / 2, rx_packets, rx_bytes);
    }
}

}  // namespace
}  // namespace vfab::igb
