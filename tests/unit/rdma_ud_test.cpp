// UD queue pairs between two ports on a fake wire: SEND and SEND_WITH_IMM through address
// handles land after the 40-byte GRH (20 zero bytes, then the IPv4 header), with the sender's
// QP number; Q_Keys are checked (and the controlled ones replaced by the QP's own); what does
// not fit the MTU is refused locally; a destination that never answers ARP fails the WR.
#include <array>
#include <cstring>

#include "../../transport/engine.hpp"
#include "rdma_connect.hpp"

namespace vfab::rdma::test {
namespace {

constexpr uint32_t kQkey = 0x11111111;

class UdTest : public ::testing::Test {
protected:
    void SetUp() override {
        ma.assign(1 << 16, 0);
        mb.assign(1 << 16, 0);
        a = make_side(*pair.a, QpType::ud, ma);
        b = make_side(*pair.b, QpType::ud, mb);
        connect_ud(a, kQkey, 0x42);
        connect_ud(b, kQkey, 0x42);
        AhAttr ah;
        ah.dgid = pair.b->gid();
        ah_b = *pair.a->create_ah(ah);
    }
    Sge sge_a(uint64_t off, uint32_t len) { return {reinterpret_cast<uint64_t>(ma.data() + off), len, a.mr.lkey}; }
    Sge sge_b(uint64_t off, uint32_t len) { return {reinterpret_cast<uint64_t>(mb.data() + off), len, b.mr.lkey}; }
    void post_recv_b(uint64_t id, uint64_t off, uint32_t len) {
        Sge s = sge_b(off, len);
        RecvWr r{id, &s, 1, 0};
        ASSERT_TRUE(b.qp->post_recv(std::span(&r, 1)));
    }
    RdmaSendWr ud_wr(WrOpcode op, uint64_t id, const Sge* s, uint32_t remote_qkey = kQkey) {
        RdmaSendWr w = wr_of(op, id, s);
        w.ah = ah_b;
        w.remote_qpn = b.qp->qp_num();
        w.remote_qkey = remote_qkey;
        return w;
    }
    void fill_a(uint64_t off, uint32_t len, uint8_t seed) {
        for (uint32_t i = 0; i < len; ++i) ma[off + i] = uint8_t(seed + i * 5);
    }
    RdmaPair pair;
    std::vector<uint8_t> ma, mb;
    Side a, b;
    AddressHandle* ah_b = nullptr;
};

TEST_F(UdTest, SendLandsAfterTheGrh) {
    for (uint32_t len : {0u, 1u, 3u, 100u, 1023u, 1024u}) {
        SCOPED_TRACE(len);
        fill_a(0, len, uint8_t(len));
        std::fill(mb.begin(), mb.begin() + 4096, 0xEE);
        post_recv_b(len, 0, 2048);
        Sge s = sge_a(0, len);
        RdmaSendWr w = ud_wr(WrOpcode::send, 500 + len, &s);
        ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
        auto rx = wait_wc(b, a, 1);
        ASSERT_EQ(rx.size(), 1u);
        EXPECT_EQ(rx[0].status, RdmaWcStatus::success) << to_string(rx[0].status);
        EXPECT_EQ(rx[0].opcode, RdmaWcOpcode::recv);
        EXPECT_EQ(rx[0].wr_id, len);
        EXPECT_EQ(rx[0].byte_len, 40 + len);
        EXPECT_EQ(rx[0].src_qp, a.qp->qp_num());
        EXPECT_EQ(rx[0].qp_num, b.qp->qp_num());
        EXPECT_EQ(rx[0].wc_flags, uint32_t(wc_grh));
        // The GRH: 20 zero bytes, then the IPv4 header as it came.
        for (int i = 0; i < 20; ++i) EXPECT_EQ(mb[i], 0) << i;
        const uint8_t* ip = mb.data() + 20;
        EXPECT_EQ(ip[0], 0x45);
        EXPECT_EQ(ip[9], wire::kIpProtoUdp);
        EXPECT_EQ(wire::load16(ip + 2), wire::kIpv4Header + wire::kUdpHeader + wire::kBth + wire::kDeth + len +
                                            ((4 - len % 4) % 4) + wire::kIcrc);
        EXPECT_EQ(wire::load32(ip + 12), 0x0a000001u);
        EXPECT_EQ(wire::load32(ip + 16), 0x0a000002u);
        EXPECT_TRUE(std::equal(ma.begin(), ma.begin() + len, mb.begin() + 40));
        EXPECT_EQ(mb[40 + len], 0xEE) << "nothing past the datagram";
        auto tx = wait_wc(a, b, 1);
        ASSERT_EQ(tx.size(), 1u);
        EXPECT_EQ(tx[0].status, RdmaWcStatus::success);
        EXPECT_EQ(tx[0].wr_id, 500 + len);
        EXPECT_EQ(tx[0].opcode, RdmaWcOpcode::send);
    }
}

TEST_F(UdTest, SendWithImmediateAndAScatteredGrh) {
    fill_a(0, 300, 3);
    // The GRH spans two SGEs, the payload two more.
    Sge rs[4] = {sge_b(0, 16), sge_b(100, 30), sge_b(200, 200), sge_b(1000, 100)};
    RecvWr r{7, rs, 4, 0};
    ASSERT_TRUE(b.qp->post_recv(std::span(&r, 1)));
    Sge s = sge_a(0, 300);
    RdmaSendWr w = ud_wr(WrOpcode::send_with_imm, 8, &s);
    w.imm_data = 0x44332211;
    w.send_flags |= wr_solicited;
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    auto rx = wait_wc(b, a, 1);
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].status, RdmaWcStatus::success);
    EXPECT_EQ(rx[0].byte_len, 340u);
    EXPECT_EQ(rx[0].wc_flags, uint32_t(wc_grh | wc_with_imm));
    EXPECT_EQ(rx[0].imm_data, 0x44332211u);
    EXPECT_EQ(rx[0].src_qp, a.qp->qp_num());
    std::vector<uint8_t> got(340);
    std::memcpy(&got[0], &mb[0], 16);
    std::memcpy(&got[16], &mb[100], 30);
    std::memcpy(&got[46], &mb[200], 200);
    std::memcpy(&got[246], &mb[1000], 94);
    for (int i = 0; i < 20; ++i) EXPECT_EQ(got[i], 0) << i;
    EXPECT_EQ(got[20], 0x45);
    EXPECT_TRUE(std::equal(ma.begin(), ma.begin() + 300, got.begin() + 40));
}

TEST_F(UdTest, DestroyedAddressHandleIsRefused) {
    Sge s = sge_a(0, 10);
    RdmaSendWr w = ud_wr(WrOpcode::send, 1, &s);
    ASSERT_TRUE(ah_b->destroy());
    EXPECT_EQ(a.qp->post_send(std::span(&w, 1)).error, EINVAL);
    EXPECT_EQ(ah_b->destroy().error().code, ENODEV);
}

TEST_F(UdTest, WrongQkeyIsDropped) {
    post_recv_b(1, 0, 2048);
    fill_a(0, 64, 1);
    Sge s = sge_a(0, 64);
    RdmaSendWr w = ud_wr(WrOpcode::send, 1, &s, 0x22222222);
    const uint64_t dropped = pair.b->stats().rx_dropped;
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    auto tx = wait_wc(a, b, 1);
    ASSERT_EQ(tx.size(), 1u);
    EXPECT_EQ(tx[0].status, RdmaWcStatus::success) << "UD: the sender never knows";
    EXPECT_TRUE(wait_wc(b, a, 1, std::chrono::milliseconds(20)).empty());
    EXPECT_EQ(pair.b->stats().rx_dropped, dropped + 1);
    // The receive is still there for the right Q_Key.
    w = ud_wr(WrOpcode::send, 2, &s);
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    auto rx = wait_wc(b, a, 1);
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].wr_id, 1u);
    EXPECT_EQ(rx[0].byte_len, 104u);
}

TEST_F(UdTest, ControlledQkeyUsesTheQpsOwn) {
    post_recv_b(1, 0, 2048);
    Sge s = sge_a(0, 32);
    // The high bit set: the WR's Q_Key is not used, the sender QP's (kQkey) is.
    RdmaSendWr w = ud_wr(WrOpcode::send, 1, &s, 0x80000000u | 0x1234);
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    auto rx = wait_wc(b, a, 1);
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].status, RdmaWcStatus::success);
    // A sender whose own Q_Key differs: its controlled sends are dropped.
    std::vector<uint8_t> mc(4096);
    Side c = make_side(*pair.a, QpType::ud, mc);
    connect_ud(c, 0x33333333, 0x42);
    post_recv_b(2, 0, 2048);
    Sge sc{reinterpret_cast<uint64_t>(mc.data()), 32, c.mr.lkey};
    RdmaSendWr wc_ = wr_of(WrOpcode::send, 2, &sc);
    wc_.ah = ah_b;
    wc_.remote_qpn = b.qp->qp_num();
    wc_.remote_qkey = 0x80000000u | kQkey;
    ASSERT_TRUE(c.qp->post_send(std::span(&wc_, 1)));
    EXPECT_TRUE(wait_wc(b, c, 1, std::chrono::milliseconds(20)).empty());
}

TEST_F(UdTest, DatagramLargerThanTheMtuIsRefusedLocally) {
    post_recv_b(1, 0, 4096);
    Sge s = sge_a(0, 1025);
    RdmaSendWr w = ud_wr(WrOpcode::send, 1, &s);
    const uint64_t tx_frames = pair.a->stats().tx_frames;
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    auto tx = wait_wc(a, b, 1);
    ASSERT_EQ(tx.size(), 1u);
    EXPECT_EQ(tx[0].status, RdmaWcStatus::loc_len_err) << to_string(tx[0].status);
    EXPECT_EQ(pair.a->stats().tx_frames, tx_frames) << "nothing went on the wire";
    EXPECT_TRUE(wait_wc(b, a, 1, std::chrono::milliseconds(10)).empty());
}

TEST_F(UdTest, ReceiveTooSmallForGrhAndPayload) {
    post_recv_b(1, 0, 40 + 99);
    Sge s = sge_a(0, 100);
    RdmaSendWr w = ud_wr(WrOpcode::send, 1, &s);
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    auto rx = wait_wc(b, a, 1);
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].status, RdmaWcStatus::loc_len_err);
    EXPECT_EQ(rx[0].wr_id, 1u);
}

TEST_F(UdTest, NoReceivePostedDropsTheDatagram) {
    Sge s = sge_a(0, 10);
    RdmaSendWr w = ud_wr(WrOpcode::send, 1, &s);
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    ASSERT_EQ(wait_wc(a, b, 1).size(), 1u);
    b.port->progress();
    post_recv_b(5, 0, 2048);
    EXPECT_TRUE(wait_wc(b, a, 1, std::chrono::milliseconds(20)).empty()) << "not kept for a later receive";
}

TEST_F(UdTest, RcOperationsAreRefusedOnUd) {
    Sge s = sge_a(0, 8);
    for (WrOpcode op : {WrOpcode::rdma_write, WrOpcode::rdma_write_with_imm, WrOpcode::rdma_read,
                        WrOpcode::atomic_cmp_and_swp, WrOpcode::atomic_fetch_and_add, WrOpcode::send_with_inv}) {
        RdmaSendWr w = ud_wr(op, 1, &s);
        EXPECT_EQ(a.qp->post_send(std::span(&w, 1)).error, EINVAL) << int(op);
    }
    RdmaSendWr w = ud_wr(WrOpcode::send, 1, &s);
    w.ah = nullptr;
    EXPECT_EQ(a.qp->post_send(std::span(&w, 1)).error, EINVAL) << "UD needs an address handle";
}

TEST_F(UdTest, DestinationThatNeverAnswersArpFailsTheWr) {
    AhAttr nobody;
    nobody.dgid = Gid::from_ipv4(0x0a000063);   // 10.0.0.99: no port has it
    AddressHandle* ah = *pair.a->create_ah(nobody);
    Sge s = sge_a(0, 10);
    RdmaSendWr w = ud_wr(WrOpcode::send, 1, &s);
    w.ah = ah;
    RdmaSendWr after = ud_wr(WrOpcode::send, 2, &s);   // to b, behind it
    RdmaSendWr both[2] = {w, after};
    post_recv_b(9, 0, 2048);
    ASSERT_TRUE(a.qp->post_send(both));
    auto tx = wait_wc(a, b, 2, std::chrono::seconds(3));
    ASSERT_EQ(tx.size(), 2u);
    EXPECT_EQ(tx[0].wr_id, 1u);
    EXPECT_EQ(tx[0].status, RdmaWcStatus::retry_exc_err) << to_string(tx[0].status);
    EXPECT_EQ(tx[0].vendor_err, detail::kVendorErrArpUnresolved);
    EXPECT_EQ(tx[1].wr_id, 2u);
    EXPECT_EQ(tx[1].status, RdmaWcStatus::success) << "a UD QP stays usable";
    EXPECT_EQ(wait_wc(b, a, 1).size(), 1u);
    EXPECT_GE(pair.a->stats().arp_requests, 4u);
}

TEST_F(UdTest, OneSenderToTwoQueuePairs) {
    std::vector<uint8_t> mc(4096);
    Side c = make_side(*pair.b, QpType::ud, mc);
    connect_ud(c, kQkey, 0x42);
    Sge rc{reinterpret_cast<uint64_t>(mc.data()), 2048, c.mr.lkey};
    RecvWr r{1, &rc, 1, 0};
    ASSERT_TRUE(c.qp->post_recv(std::span(&r, 1)));
    post_recv_b(2, 0, 2048);
    fill_a(0, 20, 9);
    Sge s = sge_a(0, 20);
    RdmaSendWr w[2] = {ud_wr(WrOpcode::send, 1, &s), ud_wr(WrOpcode::send, 2, &s)};
    w[0].remote_qpn = c.qp->qp_num();
    ASSERT_TRUE(a.qp->post_send(w));
    auto rx = wait_wc(b, a, 1);   // b and c share the port, not the CQ
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].wr_id, 2u);
    auto rxc = wait_wc(c, a, 1);
    ASSERT_EQ(rxc.size(), 1u);
    EXPECT_EQ(rxc[0].wr_id, 1u);
    EXPECT_EQ(rxc[0].byte_len, 60u);
    EXPECT_EQ(rxc[0].src_qp, a.qp->qp_num());
    EXPECT_TRUE(std::equal(ma.begin(), ma.begin() + 20, mc.begin() + 40));
}

// Inline sends are the posted bytes even when they wait for ARP: the program reuses its buffer
// the moment post_send returns (UCX builds each connection reply in the same place), so four
// sends posted before the peer's MAC is known, the buffer rewritten after each, arrive each
// with its own bytes, in order.
TEST_F(UdTest, InlineSendsWaitingForArpKeepTheirOwnBytes) {
    for (uint64_t k = 0; k < 4; ++k) post_recv_b(k, 2048 * k, 2048);
    for (uint64_t k = 0; k < 4; ++k) {
        fill_a(0, 48, uint8_t(10 * k + 1));
        Sge s = sge_a(0, 48);
        RdmaSendWr w = ud_wr(WrOpcode::send, k, &s);
        w.send_flags |= wr_inline;
        ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    }
    fill_a(0, 48, 0xAA);   // the last rewrite: nothing of it may be sent
    auto rx = wait_wc(b, a, 4);
    ASSERT_EQ(rx.size(), 4u);
    for (uint64_t k = 0; k < 4; ++k) {
        SCOPED_TRACE(k);
        EXPECT_EQ(rx[k].status, RdmaWcStatus::success);
        EXPECT_EQ(rx[k].wr_id, k);
        for (uint32_t i = 0; i < 48; ++i) ASSERT_EQ(mb[2048 * k + 40 + i], uint8_t(10 * k + 1 + i * 5)) << i;
    }
    EXPECT_GE(pair.a->stats().arp_requests, 1u) << "the sends did not wait for ARP";
}

// Runs both ports until `ah` (of either) is resolved or ARP gave up; its wait's last result.
Result<void> resolve_both(RdmaPair& pair, AddressHandle* ah) {
    Result<void> r = ah->wait_resolved(0);
    for (int i = 0; i < 100000 && !r && r.error().code == ETIMEDOUT; ++i) {
        pair.a->progress();
        pair.b->progress();
        r = ah->wait_resolved(0);
    }
    return r;
}

// create_ah starts ARP, as a RoCE device's does before it returns (the kernel resolves the
// neighbour); wait_resolved() says when it is known. The port's own address and a multicast
// group need no ARP.
TEST_F(UdTest, CreateAhStartsArpAndWaitResolvedSaysWhenTheMacIsKnown) {
    // The request goes at create_ah, before any send (a retry may follow: the timeout is 20 ms).
    EXPECT_GE(pair.a->stats().arp_requests, 1u);
    ASSERT_TRUE(resolve_both(pair, ah_b));
    const uint64_t asked = pair.a->stats().arp_requests;
    AhAttr self, group;
    self.dgid = pair.a->gid();
    group.dgid = Gid::from_ipv4(0xe0000101);   // 224.0.1.1
    for (const AhAttr& at : {self, group}) {
        AddressHandle* ah = *pair.a->create_ah(at);
        EXPECT_TRUE(ah->wait_resolved(0)) << "no ARP for the port itself or a group";
    }
    EXPECT_EQ(pair.a->stats().arp_requests, asked);
}

// A destination that never answers: the wait ends at its limit (ETIMEDOUT), or when ARP gives
// up after PortConfig::arp_attempts requests (EHOSTUNREACH), with a message naming it.
TEST_F(UdTest, WaitResolvedOnADestinationThatNeverAnswersFails) {
    AhAttr nobody;
    nobody.dgid = Gid::from_ipv4(0x0a000063);   // 10.0.0.99: no port has it
    AddressHandle* ah = *pair.a->create_ah(nobody);
    auto r = ah->wait_resolved(20);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ETIMEDOUT);
    r = ah->wait_resolved(10000);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, EHOSTUNREACH);
    EXPECT_NE(r.error().message.find("10.0.0.99 did not answer ARP"), std::string::npos) << r.error().message;
    EXPECT_GE(pair.a->stats().arp_requests, 4u);
}

// The destination MAC of the datagrams a port sends (its send hook, which drops nothing).
struct SentTo {
    uint8_t mac[6] = {};
    int datagrams = 0;
    static bool hook(void* ctx, const uint8_t* f, uint32_t len) {
        auto* self = static_cast<SentTo*>(ctx);
        if (len > 14 && f[12] == 0x08 && f[13] == 0x00) {   // IPv4: RoCEv2, not ARP
            std::memcpy(self->mac, f, 6);
            ++self->datagrams;
        }
        return false;
    }
};

// `ip` says, unasked, that it is at `mac` (an ARP reply to port a, as a peer that moved sends).
void announce(RdmaPair& pair, uint32_t ip, const uint8_t* mac) {
    uint8_t frame[64] = {};
    const uint32_t len = write_arp(frame, wire::kArpReply, mac, ip, static_cast<detail::PortImpl&>(*pair.a).mac(), vfab::test::kIpA);
    pair.wire.inject(0, frame, len);
    for (int i = 0; i < 8; ++i) pair.a->progress();
}

// An address handle keeps its destination's MAC as a RoCE device's does: when the ARP table
// (256 peers) lets the peer go to make room, sends through the handle still leave at once, with
// no new ARP request; and when the peer says it moved, the handle follows.
TEST_F(UdTest, AnAddressHandleKeepsItsMacAndFollowsAMove) {
    ASSERT_TRUE(resolve_both(pair, ah_b));
    SentTo sent;
    pair.a->set_tx_drop_hook(&SentTo::hook, &sent);
    fill_a(0, 32, 1);
    Sge s = sge_a(0, 32);
    auto send = [&](uint64_t id) {
        post_recv_b(id, 0, 2048);
        RdmaSendWr w = ud_wr(WrOpcode::send, id, &s);
        ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    };
    send(1);
    EXPECT_EQ(sent.datagrams, 1) << "it left within post_send";
    const std::array<uint8_t, 6> b_mac = std::to_array(sent.mac);

    // 256 other peers, each answering its ARP: the oldest known entry, b's, makes room.
    for (uint32_t i = 0; i < 256; ++i) {
        AhAttr other;
        other.dgid = Gid::from_ipv4(0x0a010000 + i);
        ASSERT_TRUE(pair.a->create_ah(other));
        const uint8_t mac[6] = {0x02, 0, 0, 1, uint8_t(i >> 8), uint8_t(i)};
        announce(pair, 0x0a010000 + i, mac);
    }
    const uint64_t asked = pair.a->stats().arp_requests;
    send(2);
    EXPECT_EQ(sent.datagrams, 2) << "the handle's MAC: no wait for ARP";
    EXPECT_TRUE(std::equal(b_mac.begin(), b_mac.end(), sent.mac));
    EXPECT_EQ(pair.a->stats().arp_requests, asked);

    // b says it moved. The table learns only of peers it has, so a new handle to b brings b
    // back first (a request: b had made room), pushing out the peer used longest ago, 10.1.0.0;
    // then b's announcement reaches both handles.
    AhAttr again;
    again.dgid = pair.b->gid();
    AddressHandle* ah2 = *pair.a->create_ah(again);
    EXPECT_EQ(pair.a->stats().arp_requests, asked + 1) << "b had left the table";
    ASSERT_TRUE(resolve_both(pair, ah2));
    AhAttr second;
    second.dgid = Gid::from_ipv4(0x0a010001);
    EXPECT_TRUE((*pair.a->create_ah(second))->wait_resolved(0)) << "10.1.0.1 is still known";
    EXPECT_EQ(pair.a->stats().arp_requests, asked + 1);
    const uint8_t moved[6] = {0x02, 0, 0, 0, 0, 0x99};
    announce(pair, vfab::test::kIpB, moved);
    send(3);
    EXPECT_EQ(sent.datagrams, 3);
    EXPECT_TRUE(std::equal(moved, moved + 6, sent.mac)) << "the handle follows its peer's new MAC";
    pair.a->set_tx_drop_hook(nullptr, nullptr);
}

// A handle destroyed while a WR still to be sent names it stays until that WR has left: a
// create_ah in between (which frees destroyed handles) keeps it, and the WR goes to b.
TEST_F(UdTest, ADestroyedHandleStaysWhileAWrToBeSentNamesIt) {
    AhAttr to_b;
    to_b.dgid = pair.b->gid();
    AddressHandle* h = *pair.a->create_ah(to_b);   // its ARP answer not in yet: b has not run
    post_recv_b(5, 0, 2048);
    fill_a(0, 48, 9);
    Sge s = sge_a(0, 48);
    RdmaSendWr w = ud_wr(WrOpcode::send, 5, &s);
    w.ah = h;
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    ASSERT_TRUE(h->destroy());
    AhAttr other;
    other.dgid = Gid::from_ipv4(0x0a000063);
    ASSERT_TRUE(pair.a->create_ah(other));   // frees destroyed handles no unsent WR names
    auto rx = wait_wc(b, a, 1);
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].status, RdmaWcStatus::success);
    for (uint32_t i = 0; i < 48; ++i) ASSERT_EQ(mb[40 + i], uint8_t(9 + i * 5)) << i;
    ASSERT_TRUE(pair.a->create_ah(other));   // now it goes
}

// Once its handle is resolved, a UD send leaves within post_send, before the program can see a
// datagram that came in after it: UCX's UD connection set-up frees a connection request's
// buffer when the peer's own request arrives (it takes it for an acknowledgement), and builds
// the next packet there, before that send's completion.
TEST_F(UdTest, ASendLeavesBeforeADatagramReceivedAfterItIsSeen) {
    ASSERT_TRUE(resolve_both(pair, ah_b));
    AhAttr to_a;
    to_a.dgid = pair.a->gid();
    AddressHandle* ah_a = *pair.b->create_ah(to_a);
    ASSERT_TRUE(resolve_both(pair, ah_a));

    Sge ra = sge_a(4096, 2048);
    RecvWr r{77, &ra, 1, 0};
    ASSERT_TRUE(a.qp->post_recv(std::span(&r, 1)));
    post_recv_b(1, 0, 2048);
    fill_a(0, 64, 3);
    Sge s = sge_a(0, 64);
    RdmaSendWr w = ud_wr(WrOpcode::send, 1, &s);
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    // b's datagram reaches a's wire after a's post.
    Sge sb = sge_b(8192, 16);
    RdmaSendWr wb = wr_of(WrOpcode::send, 2, &sb);
    wb.ah = ah_a;
    wb.remote_qpn = a.qp->qp_num();
    wb.remote_qkey = kQkey;
    ASSERT_TRUE(b.qp->post_send(std::span(&wb, 1)));
    for (int i = 0; i < 4; ++i) pair.b->progress();
    // a's program sees b's datagram and at once reuses its send buffer, as UCX does.
    Wc wc[4];
    bool seen = false;
    for (int i = 0; i < 100000 && !seen; ++i) {
        const int k = a.cq->poll(std::span(wc, 4));
        for (int j = 0; j < k; ++j) seen |= wc[j].wr_id == 77;
    }
    ASSERT_TRUE(seen);
    fill_a(0, 64, 0xAA);
    auto rx = wait_wc(b, a, 2);   // its receive, and its send's completion
    bool got = false;
    for (const Wc& c : rx)
        if (c.wr_id == 1 && c.opcode == RdmaWcOpcode::recv) {
            got = true;
            for (uint32_t i = 0; i < 64; ++i) ASSERT_EQ(mb[40 + i], uint8_t(3 + i * 5)) << i;
        }
    EXPECT_TRUE(got);
}

// QP1 (the GSI, IB spec 13.5.1), where the connection manager's MADs go (docs/cm.md): one per
// port, numbered 1, taking only datagrams with the well-known Q_Key 0x80010000 whatever modify
// gave it, and sending from source QP 1.
TEST(Qp1, ManagementDatagramsBetweenTwoPortsQp1s) {
    RdmaPair pair;
    std::vector<uint8_t> ma(1 << 16, 0), mb(1 << 16, 0);
    auto qp1 = [](Port& port, std::vector<uint8_t>& mem) {
        Side s;
        s.port = &port;
        s.cq = *port.create_cq(64);
        RdmaQpInitAttr ia;
        ia.qp_type = QpType::ud;
        ia.send_cq = ia.recv_cq = s.cq;
        ia.cap.max_send_wr = ia.cap.max_recv_wr = 16;
        auto qp = port.create_qp1(ia);
        EXPECT_TRUE(qp) << qp.error().message;
        s.qp = *qp;
        s.mem = &mem;
        s.mr = *port.pd().register_memory(mem.data(), mem.size(), dma::Access(kAllRemote));
        return s;
    };
    Side a = qp1(*pair.a, ma), b = qp1(*pair.b, mb);
    ASSERT_EQ(a.qp->qp_num(), wire::kGsiQpn);
    connect_ud(a, 0x1234);   // whatever it is given: QP1 keeps the well-known Q_Key
    connect_ud(b, 0x1234);
    EXPECT_EQ(b.qp->query().qkey, wire::kGsiQkey);

    RdmaQpInitAttr again;
    again.qp_type = QpType::ud;
    again.send_cq = again.recv_cq = a.cq;
    again.cap.max_send_wr = again.cap.max_recv_wr = 1;
    auto second = pair.a->create_qp1(again);
    ASSERT_FALSE(second);
    EXPECT_EQ(second.error().code, EBUSY);
    again.qp_type = QpType::rc;
    EXPECT_EQ(pair.a->create_qp1(again).error().code, EINVAL);

    AhAttr ah;
    ah.dgid = pair.b->gid();
    AddressHandle* to_b = *pair.a->create_ah(ah);
    for (uint32_t i = 0; i < 256; ++i) ma[i] = uint8_t(i);
    Sge rs{reinterpret_cast<uint64_t>(mb.data()), 40 + 256, b.mr.lkey};
    RecvWr r{7, &rs, 1, 0};
    ASSERT_TRUE(b.qp->post_recv(std::span(&r, 1)));
    Sge s{reinterpret_cast<uint64_t>(ma.data()), 256, a.mr.lkey};
    auto send = [&](uint32_t qkey) {
        RdmaSendWr w = wr_of(WrOpcode::send, qkey, &s);
        w.ah = to_b;
        w.remote_qpn = wire::kGsiQpn;
        w.remote_qkey = qkey;
        ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
        ASSERT_EQ(wait_wc(a, b, 1).size(), 1u);
    };
    const uint64_t dropped = pair.b->stats().rx_dropped;
    send(0x1234);   // another Q_Key (not a controlled one): B's QP1 takes none of it
    for (int i = 0; i < 8; ++i) pair.b->progress();
    EXPECT_EQ(pair.b->stats().rx_dropped, dropped + 1);
    send(wire::kGsiQkey);
    auto rx = wait_wc(b, a, 1);
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].status, RdmaWcStatus::success) << to_string(rx[0].status);
    EXPECT_EQ(rx[0].wr_id, 7u);
    EXPECT_EQ(rx[0].byte_len, 40u + 256u);
    EXPECT_EQ(rx[0].src_qp, wire::kGsiQpn);
    EXPECT_EQ(rx[0].qp_num, wire::kGsiQpn);
    EXPECT_TRUE(std::equal(ma.begin(), ma.begin() + 256, mb.begin() + 40));
    // Destroyed, the port makes another.
    ASSERT_TRUE(a.qp->destroy());
    again.qp_type = QpType::ud;
    EXPECT_TRUE(pair.a->create_qp1(again));
}

}  // namespace
}  // namespace vfab::rdma::test
