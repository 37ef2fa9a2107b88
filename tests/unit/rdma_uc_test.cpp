// UC queue pairs (IB spec 9.8) between two ports on a fake wire: SENDs and WRITEs of every size
// arrive whole and complete on the sender once on the wire, READs and atomics are refused at
// post, a lost packet loses its message and no other, a message with no receive posted is
// dropped with nothing sent back, the kernel's required attributes, and the frames as rxe
// writes and reads them (UC opcodes 0x20-0x2B, no AckReq, a FIRST or ONLY taken at any PSN).
#include <gmock/gmock.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "rdma_connect.hpp"
#include "rdma_frames.hpp"

namespace vfab::rdma::test {
namespace {

using ::testing::HasSubstr;
using namespace wire;

constexpr uint32_t kUcAccess = uint32_t(dma::Access::local_write | dma::Access::remote_write);
// ibv_modify_qp's masks for UC: the kernel's required attributes, nothing more.
constexpr uint32_t kInitMask = attr_state | attr_pkey_index | attr_port | attr_access_flags;
constexpr uint32_t kRtrMask = attr_state | attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn;
constexpr uint32_t kRtsMask = attr_state | attr_sq_psn;
constexpr size_t kBthOff = kRoceHeadroom;

std::string error_of(const Result<void>& r) { return r ? std::string("(no error)") : r.error().message; }

bool is_roce(const uint8_t* f, uint32_t len) {
    return len > kBthOff + kBth && load16(f + 12) == kEtherTypeIpv4 && load16(f + kEthHeader + kIpv4Header + 2) == kRoceUdpPort;
}

// INIT -> RTR -> RTS towards `peer` with what ibv_uc_pingpong gives.
void connect_uc(Side& me, const Side& peer, uint32_t my_psn, uint32_t peer_psn) {
    QpAttr a;
    a.qp_state = RdmaQpState::init;
    a.qp_access_flags = kUcAccess;
    ASSERT_TRUE(me.qp->modify(a, kInitMask));
    a.qp_state = RdmaQpState::rtr;
    a.path_mtu = 3;
    a.dest_qp_num = peer.qp->qp_num();
    a.rq_psn = peer_psn;
    a.ah_attr.dgid = peer.port->gid();
    auto r = me.qp->modify(a, kRtrMask);
    ASSERT_TRUE(r) << r.error().message;
    a.qp_state = RdmaQpState::rts;
    a.sq_psn = my_psn;
    r = me.qp->modify(a, kRtsMask);
    ASSERT_TRUE(r) << r.error().message;
}

// Drops the nth frame (1: the first) that carries `opcode`.
struct DropNth {
    uint8_t opcode = 0;
    int nth = 1;
    int seen = 0;
    static bool hook(void* ctx, const uint8_t* f, uint32_t len) {
        auto& d = *static_cast<DropNth*>(ctx);
        return is_roce(f, len) && f[kBthOff] == d.opcode && ++d.seen == d.nth;
    }
};

class UcTest : public ::testing::Test {
protected:
    void SetUp() override {
        ma.assign(1 << 20, 0);
        mb.assign(1 << 20, 0);
        a = make_side(*pair.a, QpType::uc, ma);
        b = make_side(*pair.b, QpType::uc, mb);
        ASSERT_NO_FATAL_FAILURE(connect_uc(a, b, 100, 200));
        ASSERT_NO_FATAL_FAILURE(connect_uc(b, a, 200, 100));
        // B must never answer: count the RoCEv2 frames it sends (ARP replies are not).
        pair.b->set_tx_drop_hook(
            [](void* ctx, const uint8_t* f, uint32_t len) {
                *static_cast<uint32_t*>(ctx) += is_roce(f, len);
                return false;
            },
            &b_roce_sent);
        progress_both(4);   // each side's ARP answered
    }
    void TearDown() override {
        pair.a->set_rx_drop_hook(nullptr, nullptr);
        pair.b->set_rx_drop_hook(nullptr, nullptr);
        pair.a->set_tx_drop_hook(nullptr, nullptr);
        pair.b->set_tx_drop_hook(nullptr, nullptr);
        EXPECT_EQ(b_roce_sent, 0u) << "a UC responder sends nothing back: no ACK, NAK or RNR NAK";
    }
    void progress_both(int rounds = 20) {
        for (int i = 0; i < rounds; ++i) {
            pair.a->progress();
            pair.b->progress();
        }
    }
    Sge sge_a(uint64_t off, uint32_t len) { return {reinterpret_cast<uint64_t>(ma.data() + off), len, a.mr.lkey}; }
    Sge sge_b(uint64_t off, uint32_t len) { return {reinterpret_cast<uint64_t>(mb.data() + off), len, b.mr.lkey}; }
    void post_recv_b(uint64_t id, uint64_t off, uint32_t len) {
        Sge s = sge_b(off, len);
        RecvWr r{id, &s, 1, 0};
        ASSERT_TRUE(b.qp->post_recv(std::span(&r, 1)));
    }
    void fill_a(uint64_t off, uint32_t len, uint8_t seed) {
        for (uint32_t i = 0; i < len; ++i) ma[off + i] = uint8_t(seed + i * 7);
    }
    // Posts one WR of `len` bytes from A's memory at `off` (WRITEs to B's memory at `remote_off`).
    void post_a(WrOpcode op, uint64_t id, uint64_t off, uint32_t len, uint64_t remote_off = 0, uint32_t imm = 0,
                uint32_t flags = wr_signaled) {
        Sge s = sge_a(off, len);
        RdmaSendWr w = wr_of(op, id, &s);
        w.send_flags = flags;
        w.imm_data = imm;
        w.remote_addr = reinterpret_cast<uint64_t>(mb.data() + remote_off);
        w.rkey = b.mr.rkey;
        const PostResult r = a.qp->post_send(std::span(&w, 1));
        ASSERT_EQ(r.error, 0);
        ASSERT_EQ(r.posted, 1u);
    }
    bool same(uint64_t a_off, uint64_t b_off, uint32_t len) const {
        return std::equal(ma.begin() + a_off, ma.begin() + a_off + len, mb.begin() + b_off);
    }
    // Every send WR posted so far completes at once, successfully: UC waits for nothing.
    void expect_sent(size_t n) {
        std::vector<Wc> out(n + 1);
        ASSERT_EQ(a.cq->poll(std::span(out)), int(n));
        for (size_t i = 0; i < n; ++i) EXPECT_EQ(out[i].status, RdmaWcStatus::success) << to_string(out[i].status);
    }
    RdmaPair pair;
    std::vector<uint8_t> ma, mb;
    Side a, b;
    uint32_t b_roce_sent = 0;
};

TEST_F(UcTest, SendsOfEverySizeCompleteOnTheWireAndArriveWhole) {
    for (uint32_t len : {0u, 1u, 1023u, 1024u, 1025u, 4096u, 65537u}) {
        SCOPED_TRACE(len);
        fill_a(0, len, uint8_t(len));
        std::fill(mb.begin(), mb.begin() + len + 16, 0xEE);
        post_recv_b(len, 0, 1 << 17);
        post_a(WrOpcode::send, 1000 + len, 0, len);
        // Its completion is there before B ran at all: the packets are on the wire.
        Wc tx;
        ASSERT_EQ(a.cq->poll(std::span(&tx, 1)), 1);
        EXPECT_EQ(tx.status, RdmaWcStatus::success) << to_string(tx.status);
        EXPECT_EQ(tx.opcode, RdmaWcOpcode::send);
        EXPECT_EQ(tx.wr_id, 1000 + len);
        EXPECT_EQ(tx.byte_len, len);
        auto rx = wait_wc(b, a, 1);
        ASSERT_EQ(rx.size(), 1u);
        EXPECT_EQ(rx[0].status, RdmaWcStatus::success) << to_string(rx[0].status);
        EXPECT_EQ(rx[0].opcode, RdmaWcOpcode::recv);
        EXPECT_EQ(rx[0].wr_id, len);
        EXPECT_EQ(rx[0].byte_len, len);
        EXPECT_EQ(rx[0].qp_num, b.qp->qp_num());
        EXPECT_EQ(rx[0].wc_flags, 0u);
        EXPECT_TRUE(same(0, 0, len));
        EXPECT_EQ(mb[len], 0xEE);
    }
    EXPECT_EQ(pair.a->stats().retransmits, 0u);
    EXPECT_EQ(a.qp->state(), RdmaQpState::rts);
    EXPECT_EQ(b.qp->state(), RdmaQpState::rts);
}

TEST_F(UcTest, SendWithImmediateAndScatterGather) {
    fill_a(0, 3000, 9);
    post_recv_b(1, 0, 8192);
    Sge s[3] = {sge_a(0, 1000), sge_a(1000, 1000), sge_a(2000, 1000)};
    RdmaSendWr w = wr_of(WrOpcode::send_with_imm, 2, s, 3);
    w.imm_data = 0x78563412;
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    expect_sent(1);
    auto rx = wait_wc(b, a, 1);
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].status, RdmaWcStatus::success);
    EXPECT_EQ(rx[0].wc_flags, uint32_t(wc_with_imm));
    EXPECT_EQ(rx[0].imm_data, 0x78563412u);
    EXPECT_EQ(rx[0].byte_len, 3000u);
    EXPECT_TRUE(same(0, 0, 3000));
}

TEST_F(UcTest, WriteAndWriteWithImmediate) {
    const uint32_t len = 100000;
    fill_a(0, len, 3);
    post_a(WrOpcode::rdma_write, 1, 0, len, 4096);
    Wc tx;
    ASSERT_EQ(a.cq->poll(std::span(&tx, 1)), 1);
    EXPECT_EQ(tx.status, RdmaWcStatus::success);
    EXPECT_EQ(tx.opcode, RdmaWcOpcode::rdma_write);
    for (int i = 0; i < 1000 && !same(0, 4096, len); ++i) progress_both(1);
    EXPECT_TRUE(same(0, 4096, len));

    // With immediate: the data lands, then a receive WR completes with the immediate (its
    // buffer untouched), for a multi-packet WRITE and for an empty one.
    fill_a(200000, 5000, 77);
    std::fill(mb.begin() + 600000, mb.begin() + 600016, 0xEE);
    post_recv_b(7, 600000, 16);
    post_recv_b(8, 600000, 16);
    post_a(WrOpcode::rdma_write_with_imm, 2, 200000, 5000, 300000, 0x01020304);
    post_a(WrOpcode::rdma_write_with_imm, 3, 200000, 0, 400000, 0x05060708);
    expect_sent(2);
    auto rx = wait_wc(b, a, 2);
    ASSERT_EQ(rx.size(), 2u);
    EXPECT_EQ(rx[0].status, RdmaWcStatus::success);
    EXPECT_EQ(rx[0].opcode, RdmaWcOpcode::recv_rdma_with_imm);
    EXPECT_EQ(rx[0].wr_id, 7u);
    EXPECT_EQ(rx[0].byte_len, 5000u);
    EXPECT_EQ(rx[0].wc_flags, uint32_t(wc_with_imm));
    EXPECT_EQ(rx[0].imm_data, 0x01020304u);
    EXPECT_EQ(rx[1].opcode, RdmaWcOpcode::recv_rdma_with_imm);
    EXPECT_EQ(rx[1].wr_id, 8u);
    EXPECT_EQ(rx[1].byte_len, 0u);
    EXPECT_EQ(rx[1].imm_data, 0x05060708u);
    EXPECT_TRUE(same(200000, 300000, 5000));
    EXPECT_EQ(mb[600000], 0xEE) << "a WRITE's receive WR gets no data";
}

TEST_F(UcTest, ReadsAtomicsAndSendWithInvalidateAreRefusedAtPost) {
    Sge s = sge_a(0, 8);
    for (WrOpcode op : {WrOpcode::rdma_read, WrOpcode::atomic_cmp_and_swp, WrOpcode::atomic_fetch_and_add,
                        WrOpcode::masked_atomic_cmp_and_swp, WrOpcode::masked_atomic_fetch_and_add,
                        WrOpcode::send_with_inv}) {
        SCOPED_TRACE(int(op));
        RdmaSendWr w = wr_of(op, 1, &s);
        w.remote_addr = reinterpret_cast<uint64_t>(mb.data());
        w.rkey = b.mr.rkey;
        const PostResult r = a.qp->post_send(std::span(&w, 1));
        EXPECT_EQ(r.error, EINVAL);
        EXPECT_EQ(r.posted, 0u);
    }
    // In a list, the WRs before the READ go and the rest do not.
    fill_a(0, 64, 5);
    post_recv_b(1, 0, 64);
    post_recv_b(2, 64, 64);
    Sge d = sge_a(0, 64);
    RdmaSendWr list[3] = {wr_of(WrOpcode::send, 10, &d), wr_of(WrOpcode::rdma_read, 11, &d), wr_of(WrOpcode::send, 12, &d)};
    const PostResult r = a.qp->post_send(list);
    EXPECT_EQ(r.error, EINVAL);
    EXPECT_EQ(r.posted, 1u);
    EXPECT_EQ(a.qp->state(), RdmaQpState::rts) << "a refused post leaves the queue pair as it was";
    expect_sent(1);
    auto rx = wait_wc(b, a, 2, std::chrono::milliseconds(200));
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].wr_id, 1u);
    EXPECT_TRUE(same(0, 0, 64));
}

// SEND of 4 packets whose second is lost: the rest of it is dropped; the receive WR it was
// filling takes the next message, and the one after goes on as usual.
TEST_F(UcTest, ALostMiddlePacketLosesThatMessageOnly) {
    DropNth drop{uint8_t(op::kUcBase | op::send_middle)};
    pair.b->set_rx_drop_hook(DropNth::hook, &drop);
    post_recv_b(1, 0, 8192);
    post_recv_b(2, 8192, 8192);
    fill_a(0, 4096, 1);
    fill_a(8192, 4096, 2);
    fill_a(16384, 3000, 3);
    const uint64_t dropped = pair.b->stats().rx_dropped;
    post_a(WrOpcode::send, 1, 0, 4096);
    post_a(WrOpcode::send, 2, 8192, 4096);
    expect_sent(2);   // both on the wire: UC never knows
    auto rx = wait_wc(b, a, 2, std::chrono::milliseconds(300));
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].status, RdmaWcStatus::success);
    EXPECT_EQ(rx[0].wr_id, 1u);
    EXPECT_EQ(rx[0].byte_len, 4096u);
    EXPECT_TRUE(same(8192, 0, 4096)) << "the second message, in the first receive WR";
    EXPECT_EQ(pair.b->stats().rx_dropped - dropped, 2u) << "the third and last packets of the first";
    EXPECT_EQ(drop.seen, 4) << "two MIDDLEs a message";

    post_a(WrOpcode::send, 3, 16384, 3000);
    expect_sent(1);
    rx = wait_wc(b, a, 1);
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].wr_id, 2u);
    EXPECT_EQ(rx[0].byte_len, 3000u);
    EXPECT_TRUE(same(16384, 8192, 3000));
    EXPECT_EQ(b.qp->state(), RdmaQpState::rts);
}

// The FIRST lost: its MIDDLE and LAST are dropped at the PSN check; the next message arrives.
TEST_F(UcTest, ALostFirstPacketLosesThatMessageOnly) {
    DropNth drop{uint8_t(op::kUcBase | op::send_first)};
    pair.b->set_rx_drop_hook(DropNth::hook, &drop);
    post_recv_b(1, 0, 8192);
    fill_a(0, 3000, 1);
    fill_a(8192, 2500, 2);
    const uint64_t dropped = pair.b->stats().rx_dropped;
    post_a(WrOpcode::send, 1, 0, 3000);
    post_a(WrOpcode::send, 2, 8192, 2500);
    expect_sent(2);
    auto rx = wait_wc(b, a, 2, std::chrono::milliseconds(300));
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].byte_len, 2500u);
    EXPECT_TRUE(same(8192, 0, 2500));
    EXPECT_EQ(pair.b->stats().rx_dropped - dropped, 2u);
}

// The LAST lost: the next message's FIRST or ONLY abandons the one in progress (its PSN says a
// packet is missing) and starts anew in the same receive WR.
TEST_F(UcTest, ALostLastPacketLosesThatMessageOnly) {
    DropNth drop{uint8_t(op::kUcBase | op::send_last)};
    pair.b->set_rx_drop_hook(DropNth::hook, &drop);
    post_recv_b(1, 0, 8192);
    post_recv_b(2, 8192, 8192);
    fill_a(0, 2000, 1);
    fill_a(8192, 100, 2);
    fill_a(16384, 2100, 3);
    post_a(WrOpcode::send, 1, 0, 2000);
    post_a(WrOpcode::send, 2, 8192, 100);     // ONLY
    post_a(WrOpcode::send, 3, 16384, 2100);   // FIRST, MIDDLE, LAST
    expect_sent(3);
    auto rx = wait_wc(b, a, 3, std::chrono::milliseconds(300));
    ASSERT_EQ(rx.size(), 2u);
    EXPECT_EQ(rx[0].wr_id, 1u);
    EXPECT_EQ(rx[0].byte_len, 100u);
    EXPECT_TRUE(same(8192, 0, 100));
    EXPECT_EQ(rx[1].wr_id, 2u);
    EXPECT_EQ(rx[1].byte_len, 2100u);
    EXPECT_TRUE(same(16384, 8192, 2100));
}

// A WRITE's MIDDLE lost: what came before it landed, nothing after it; the next WRITE lands whole.
TEST_F(UcTest, ALostWritePacketLosesTheRestOfThatWrite) {
    DropNth drop{uint8_t(op::kUcBase | op::write_middle)};
    pair.b->set_rx_drop_hook(DropNth::hook, &drop);
    fill_a(0, 4096, 1);
    fill_a(8192, 3000, 2);
    post_recv_b(1, 200000, 16);
    post_a(WrOpcode::rdma_write, 1, 0, 4096, 0);
    post_a(WrOpcode::rdma_write_with_imm, 2, 8192, 3000, 100000, 0x11223344);
    expect_sent(2);
    auto rx = wait_wc(b, a, 1);
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].opcode, RdmaWcOpcode::recv_rdma_with_imm);
    EXPECT_EQ(rx[0].imm_data, 0x11223344u);
    EXPECT_TRUE(same(8192, 100000, 3000));
    EXPECT_TRUE(same(0, 0, 1024)) << "the FIRST landed";
    EXPECT_TRUE(std::all_of(mb.begin() + 1024, mb.begin() + 4096, [](uint8_t x) { return x == 0; }))
        << "nothing from the lost MIDDLE on";
}

// No receive WR: the message is dropped, no RNR NAK goes back (TearDown checks), the queue pair
// goes on, and the next message finds the receive posted meanwhile.
TEST_F(UcTest, AMessageWithNoReceivePostedIsDropped) {
    fill_a(0, 3000, 1);
    fill_a(8192, 500, 2);
    const uint64_t dropped = pair.b->stats().rx_dropped;
    post_a(WrOpcode::send, 1, 0, 3000);                                // 3 packets
    post_a(WrOpcode::send_with_imm, 2, 0, 10, 0, 1);                  // ONLY
    post_a(WrOpcode::rdma_write_with_imm, 3, 0, 2000, 50000, 2);     // needs one too: 2 packets
    expect_sent(3);
    progress_both();
    Wc wc;
    EXPECT_EQ(b.cq->poll(std::span(&wc, 1)), 0);
    EXPECT_EQ(pair.b->stats().rx_dropped - dropped, 5u) << "the SEND's 3, the ONLY, the WRITE's LAST";
    EXPECT_TRUE(same(0, 50000, 1024)) << "the WRITE's FIRST landed before its LAST found no receive";
    EXPECT_EQ(b.qp->state(), RdmaQpState::rts);

    post_recv_b(9, 0, 4096);
    post_a(WrOpcode::send, 4, 8192, 500);
    expect_sent(1);
    auto rx = wait_wc(b, a, 1);
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].wr_id, 9u);
    EXPECT_EQ(rx[0].byte_len, 500u);
    EXPECT_TRUE(same(8192, 0, 500));
}

// A message longer than its receive WR completes that WR with loc_len_err, is dropped, and the
// queue pair goes on (no error state: nothing tells the requester).
TEST_F(UcTest, AReceiveTooShortFailsThatReceiveOnly) {
    fill_a(0, 2000, 1);
    post_recv_b(1, 0, 100);
    post_recv_b(2, 4096, 4096);
    post_a(WrOpcode::send, 1, 0, 2000);
    post_a(WrOpcode::send, 2, 0, 50);
    expect_sent(2);
    auto rx = wait_wc(b, a, 2);
    ASSERT_EQ(rx.size(), 2u);
    EXPECT_EQ(rx[0].wr_id, 1u);
    EXPECT_EQ(rx[0].status, RdmaWcStatus::loc_len_err) << to_string(rx[0].status);
    EXPECT_EQ(rx[1].wr_id, 2u);
    EXPECT_EQ(rx[1].status, RdmaWcStatus::success);
    EXPECT_EQ(rx[1].byte_len, 50u);
    EXPECT_TRUE(same(0, 4096, 50));
    EXPECT_EQ(b.qp->state(), RdmaQpState::rts);
}

// The kernel's table for UC: INIT needs pkey_index, port and qp_access_flags; RTR ah_attr,
// path_mtu, dest_qp_num and rq_psn; RTS sq_psn — and nothing else (no retry counts, timeout,
// read depths or RNR timer).
TEST_F(UcTest, ModifyNeedsTheKernelsAttributesForUc) {
    std::vector<uint8_t> mem(4096);
    Side u = make_side(*pair.a, QpType::uc, mem);
    EXPECT_EQ(u.qp->type(), QpType::uc);
    QpAttr x;
    x.qp_state = RdmaQpState::init;
    x.qp_access_flags = kUcAccess;
    EXPECT_THAT(error_of(u.qp->modify(x, attr_state | attr_pkey_index | attr_port)), HasSubstr("qp_access_flags must be given"));
    ASSERT_TRUE(u.qp->modify(x, kInitMask)) << "no qkey";

    x.qp_state = RdmaQpState::rtr;
    x.path_mtu = 3;
    x.dest_qp_num = b.qp->qp_num();
    x.rq_psn = 7;
    x.ah_attr.dgid = pair.b->gid();
    const std::pair<uint32_t, const char*> rtr_needs[] = {
        {attr_av, "ah_attr"}, {attr_path_mtu, "path_mtu"}, {attr_dest_qpn, "dest_qp_num"}, {attr_rq_psn, "rq_psn"}};
    for (auto [bit, name] : rtr_needs) {
        const std::string msg = error_of(u.qp->modify(x, kRtrMask & ~bit));
        EXPECT_THAT(msg, HasSubstr("INIT -> RTR")) << name;
        EXPECT_THAT(msg, HasSubstr(name));
        EXPECT_EQ(u.qp->state(), RdmaQpState::init);
    }
    auto r = u.qp->modify(x, kRtrMask);
    ASSERT_TRUE(r) << r.error().message;

    x.qp_state = RdmaQpState::rts;
    x.sq_psn = 9;
    EXPECT_THAT(error_of(u.qp->modify(x, attr_state)), HasSubstr("sq_psn must be given"));
    r = u.qp->modify(x, kRtsMask);
    ASSERT_TRUE(r) << r.error().message;
    const QpAttr q = u.qp->query();
    EXPECT_EQ(q.qp_state, RdmaQpState::rts);
    EXPECT_EQ(q.sq_psn, 9u);
    EXPECT_EQ(q.rq_psn, 7u);
    EXPECT_EQ(q.dest_qp_num, b.qp->qp_num());
    EXPECT_EQ(q.qp_access_flags, kUcAccess);

    EXPECT_TRUE(pair.a->query_device().vfab_caps & vfab_cap_uc);
}

// What A puts on the wire, against rxe's table (rxe_opcode.c): the UC opcodes, the extension
// headers each carries (RETH on a WRITE's FIRST and ONLY, ImmDt on LAST/ONLY with immediate),
// consecutive PSNs, SE on a solicited message's last packet, and no AckReq (rxe sets none on UC).
TEST_F(UcTest, FramesCarryRxesUcEncoding) {
    struct Frames {
        std::vector<std::vector<uint8_t>> f;
    } sent;
    pair.a->set_tx_drop_hook(
        [](void* ctx, const uint8_t* f, uint32_t len) {
            if (is_roce(f, len)) static_cast<Frames*>(ctx)->f.emplace_back(f, f + len);
            return false;
        },
        &sent);
    for (uint64_t i = 0; i < 6; ++i) post_recv_b(i, i * 4096, 4096);
    fill_a(0, 2500, 1);
    post_a(WrOpcode::send, 1, 0, 2500);
    post_a(WrOpcode::send_with_imm, 2, 0, 2500, 0, 0xAABBCCDD, wr_signaled | wr_solicited);
    post_a(WrOpcode::send, 3, 0, 0);
    post_a(WrOpcode::send_with_imm, 4, 0, 8, 0, 0x01020304);
    post_a(WrOpcode::rdma_write, 5, 0, 2500, 100000);
    post_a(WrOpcode::rdma_write_with_imm, 6, 0, 2500, 200000, 0x0A0B0C0D);
    post_a(WrOpcode::rdma_write, 7, 0, 8, 300000);
    post_a(WrOpcode::rdma_write_with_imm, 8, 0, 8, 400000, 0x0E0F1011);
    expect_sent(8);
    struct Expect {
        uint8_t opcode;
        size_t ext;         // extension header bytes (rxe_opcode.c: .length - BTH)
        uint32_t payload;
        uint64_t remote_off; // RETH: the WRITE's target; its length is the whole message's
        uint32_t reth_len;
    };
    constexpr uint8_t uc = op::kUcBase;
    const Expect expect[] = {
        {uc | op::send_first, 0, 1024, 0, 0},        {uc | op::send_middle, 0, 1024, 0, 0},
        {uc | op::send_last, 0, 452, 0, 0},          {uc | op::send_first, 0, 1024, 0, 0},
        {uc | op::send_middle, 0, 1024, 0, 0},       {uc | op::send_last_imm, kImmDt, 452, 0, 0},
        {uc | op::send_only, 0, 0, 0, 0},            {uc | op::send_only_imm, kImmDt, 8, 0, 0},
        {uc | op::write_first, kReth, 1024, 100000, 2500}, {uc | op::write_middle, 0, 1024, 0, 0},
        {uc | op::write_last, 0, 452, 0, 0},         {uc | op::write_first, kReth, 1024, 200000, 2500},
        {uc | op::write_middle, 0, 1024, 0, 0},      {uc | op::write_last_imm, kImmDt, 452, 0, 0},
        {uc | op::write_only, kReth, 8, 300000, 8},  {uc | op::write_only_imm, kReth + kImmDt, 8, 400000, 8},
    };
    static_assert(uint8_t(op::kUcBase | op::send_first) == 0x20 && uint8_t(op::kUcBase | op::write_only_imm) == 0x2B);
    ASSERT_EQ(sent.f.size(), std::size(expect));
    const uint32_t imms[] = {0xAABBCCDD, 0x01020304, 0x0A0B0C0D, 0x0E0F1011};
    size_t imm_i = 0;
    for (size_t k = 0; k < sent.f.size(); ++k) {
        SCOPED_TRACE(k);
        const std::vector<uint8_t>& f = sent.f[k];
        const Expect& e = expect[k];
        const uint8_t* bth = f.data() + kBthOff;
        EXPECT_EQ(bth[0], e.opcode);
        EXPECT_EQ(bth[1] & 0x0F, 0) << "TVer";
        EXPECT_EQ(bth[1] >> 4 & 3, (4 - e.payload % 4) % 4) << "pad count";
        EXPECT_EQ(bool(bth[1] & kBthSolicited), k == 5) << "SE on the solicited SEND's last packet only";
        EXPECT_EQ(load16(bth + 2), kDefaultPkey);
        EXPECT_EQ(load24(bth + 5), b.qp->qp_num());
        EXPECT_EQ(bth[8] & kBthAckReq, 0) << "no AckReq on UC";
        EXPECT_EQ(load24(bth + 9), 100u + k) << "one PSN a packet from sq_psn";
        EXPECT_EQ(f.size(), kBthOff + kBth + e.ext + e.payload + (4 - e.payload % 4) % 4 + kIcrc);
        const uint8_t* x = bth + kBth;
        if (e.reth_len) {
            EXPECT_EQ(load64(x), reinterpret_cast<uint64_t>(mb.data() + e.remote_off));
            EXPECT_EQ(load32(x + 8), b.mr.rkey);
            EXPECT_EQ(load32(x + 12), e.reth_len);
            x += kReth;
        }
        if (e.ext == kImmDt || e.ext == kReth + kImmDt) {
            uint32_t imm;
            std::memcpy(&imm, x, 4);
            EXPECT_EQ(imm, imms[imm_i++]) << "ImmDt as posted (network order)";
        }
        Packet p;
        ASSERT_EQ(parse_frame(f.data(), uint32_t(f.size()), pair.b->gid().ipv4(), p), ParseResult::roce) << "ICRC and all";
        EXPECT_TRUE(p.uc);
        EXPECT_EQ(p.opcode, e.opcode & 0x1F);
        EXPECT_EQ(p.payload_len, e.payload);
    }
    EXPECT_EQ(imm_i, 4u);
    EXPECT_EQ(wait_wc(b, a, 6).size(), 6u) << "and B took them: the SENDs and the WRITEs with immediate";
}

// Frames as rxe sends them (its own PSNs, AckReq clear, any UDP source port): a FIRST or ONLY
// is taken at whatever PSN it carries, as rxe's responder takes them.
class UcInjectTest : public UcTest {
protected:
    // A frame from A's address to B's queue pair `qpn`: `opcode` is the full BTH opcode.
    std::vector<uint8_t> frame(uint8_t opcode, uint32_t psn, uint32_t qpn, const uint8_t* data, uint32_t len,
                               uint32_t imm_be = 0) {
        PacketHeader h;
        h.src_port = 0xd7df;
        h.opcode = opcode;
        h.dest_qp = qpn;
        h.psn = psn;
        h.imm_be = imm_be;
        return frame_a_to_b(h, data, len);
    }
    void inject(const std::vector<uint8_t>& f) { pair.wire.inject(1, f.data(), uint32_t(f.size())); }
};

TEST_F(UcInjectTest, RxeFramesAreTakenFromAnyStartingPsn) {
    post_recv_b(1, 0, 4096);
    post_recv_b(2, 4096, 4096);
    fill_a(0, 1124, 6);
    const uint32_t psn = 0x9b8c66;   // not the rq_psn B was given
    inject(frame(op::kUcBase | op::send_first, psn, b.qp->qp_num(), ma.data(), 1024));
    inject(frame(op::kUcBase | op::send_last, psn + 1, b.qp->qp_num(), ma.data() + 1024, 100));
    inject(frame(op::kUcBase | op::send_only_imm, 0x000010, b.qp->qp_num(), ma.data(), 3, 0x44332211));
    auto rx = wait_wc(b, a, 2);
    ASSERT_EQ(rx.size(), 2u);
    EXPECT_EQ(rx[0].status, RdmaWcStatus::success);
    EXPECT_EQ(rx[0].byte_len, 1124u);
    EXPECT_TRUE(same(0, 0, 1124));
    EXPECT_EQ(rx[1].byte_len, 3u);
    EXPECT_EQ(rx[1].imm_data, 0x44332211u);
    EXPECT_TRUE(same(0, 4096, 3));
}

// Each queue pair takes its own transport's opcodes: an RC SEND to a UC queue pair, and a UC
// SEND to an RC one, are dropped (as rxe drops an opcode that does not fit the QP type).
TEST_F(UcInjectTest, OpcodesOfAnotherTransportAreIgnored) {
    std::vector<uint8_t> mem_a(1 << 16), mem_b(1 << 16);
    Side rc_a = make_side(*pair.a, QpType::rc, mem_a), rc_b = make_side(*pair.b, QpType::rc, mem_b);
    ASSERT_NO_FATAL_FAILURE(connect_rc(rc_a, rc_b, 1, 2));
    ASSERT_NO_FATAL_FAILURE(connect_rc(rc_b, rc_a, 2, 1));
    post_recv_b(1, 0, 4096);
    Sge s{reinterpret_cast<uint64_t>(mem_b.data()), 4096, rc_b.mr.lkey};
    RecvWr r{2, &s, 1, 0};
    ASSERT_TRUE(rc_b.qp->post_recv(std::span(&r, 1)));
    const uint8_t data[4] = {1, 2, 3, 4};
    inject(frame(op::send_only, 200, b.qp->qp_num(), data, 4));                   // RC's, to UC
    inject(frame(op::kUcBase | op::send_only, 2, rc_b.qp->qp_num(), data, 4));    // UC's, to RC
    EXPECT_TRUE(wait_wc(b, a, 1, std::chrono::milliseconds(100)).empty());
    EXPECT_TRUE(wait_wc(rc_b, rc_a, 1, std::chrono::milliseconds(100)).empty());
    // Both still take their own.
    inject(frame(op::kUcBase | op::send_only, 200, b.qp->qp_num(), data, 4));
    auto rx = wait_wc(b, a, 1);
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].wr_id, 1u);
    EXPECT_EQ(rc_b.qp->state(), RdmaQpState::rts);
    EXPECT_EQ(b.qp->state(), RdmaQpState::rts);
}

}  // namespace
}  // namespace vfab::rdma::test
