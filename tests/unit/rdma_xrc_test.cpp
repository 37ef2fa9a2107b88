// XRC between two ports on a fake wire (docs/rdma-xrc.md): an XRC send queue pair on A,
// connected to an XRC receive queue pair on B, whose messages land in the XRC SRQ each names
// (RdmaSendWr::remote_srqn) and complete on that SRQ's CQ; RDMA WRITE and READ through it; a
// message naming an SRQ of another domain is NAKed with nothing written; the packets carry
// XRC opcodes and the XRCETH; bad input is refused.
#include <cstring>

#include "rdma_connect.hpp"

namespace vfab::rdma::test {
namespace {

constexpr uint32_t kSlot = 4096;

class XrcTest : public ::testing::Test {
protected:
    void SetUp() override {
        ma.assign(1 << 16, 0);
        mb.assign(1 << 18, 0);
        cq_a = *pair.a->create_cq(256);
        cq_b = *pair.b->create_cq(256);
        xrcd = *pair.b->create_xrcd();
        other_xrcd = *pair.b->create_xrcd();
        s1 = *pair.b->create_xrc_srq(SrqAttr{16, 1, 0}, xrcd, cq_b);
        s2 = *pair.b->create_xrc_srq(SrqAttr{16, 1, 0}, xrcd, cq_b);
        foreign = *pair.b->create_xrc_srq(SrqAttr{16, 1, 0}, other_xrcd, cq_b);
        RdmaQpInitAttr ia;
        ia.qp_type = QpType::xrc_send;
        ia.send_cq = cq_a;
        auto ini_qp = pair.a->create_qp(ia);
        ASSERT_TRUE(ini_qp) << ini_qp.error().message;
        ini = *ini_qp;
        RdmaQpInitAttr ta;
        ta.qp_type = QpType::xrc_recv;
        ta.xrcd = xrcd;
        auto tgt_qp = pair.b->create_qp(ta);
        ASSERT_TRUE(tgt_qp) << tgt_qp.error().message;
        tgt = *tgt_qp;
        mr_a = *pair.a->pd().register_memory(ma.data(), ma.size(), dma::Access(kAllRemote));
        mr_b = *pair.b->pd().register_memory(mb.data(), mb.size(), dma::Access(kAllRemote));
        connect(ini, tgt->qp_num(), *pair.b, 100, 200, true);
        connect(tgt, ini->qp_num(), *pair.a, 200, 100, false);
    }
    // INIT, RTR (and RTS for the sender), as ibv_xsrq_pingpong does.
    static void connect(Qp* qp, uint32_t peer_qpn, Port& peer, uint32_t my_psn, uint32_t peer_psn, bool rts) {
        QpAttr a;
        a.qp_state = RdmaQpState::init;
        a.qp_access_flags = kAllRemote;
        ASSERT_TRUE(qp->modify(a, attr_state | attr_pkey_index | attr_port | attr_access_flags));
        a.qp_state = RdmaQpState::rtr;
        a.path_mtu = 3;
        a.dest_qp_num = peer_qpn;
        a.rq_psn = peer_psn;
        a.max_dest_rd_atomic = 4;
        a.min_rnr_timer = 1;
        a.ah_attr.dgid = peer.gid();
        auto r = qp->modify(a, attr_state | attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn |
                                   attr_max_dest_rd_atomic | attr_min_rnr_timer);
        ASSERT_TRUE(r) << r.error().message;
        if (!rts) return;
        a.qp_state = RdmaQpState::rts;
        a.sq_psn = my_psn;
        a.timeout = 8;
        a.max_rd_atomic = 4;
        r = qp->modify(a, attr_state | attr_sq_psn | attr_timeout | attr_retry_cnt | attr_rnr_retry | attr_max_qp_rd_atomic);
        ASSERT_TRUE(r) << r.error().message;
    }
    void post(Srq* s, uint64_t id) {
        Sge r{reinterpret_cast<uint64_t>(mb.data() + id * kSlot), kSlot, mr_b.lkey};
        RecvWr rw{id, &r, 1, 0};
        ASSERT_TRUE(s->post_recv(std::span(&rw, 1)));
    }
    void send(uint64_t id, uint32_t len, uint8_t seed, uint32_t srqn) {
        std::memset(ma.data() + (id % 8) * kSlot, seed, len);
        Sge s{reinterpret_cast<uint64_t>(ma.data() + (id % 8) * kSlot), len, mr_a.lkey};
        RdmaSendWr w = wr_of(WrOpcode::send, id, &s);
        w.remote_srqn = srqn;
        ASSERT_TRUE(ini->post_send(std::span(&w, 1)));
    }
    // Runs both ports until `cq` has `n` completions.
    std::vector<Wc> wait(Cq* cq, size_t n) {
        std::vector<Wc> out;
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        Wc wc[8];
        while (out.size() < n && std::chrono::steady_clock::now() < end) {
            pair.a->progress();
            pair.b->progress();
            const int k = cq->poll(std::span(wc, std::min<size_t>(8, n - out.size())));
            out.insert(out.end(), wc, wc + k);
        }
        return out;
    }
    RdmaPair pair;
    std::vector<uint8_t> ma, mb;
    Cq *cq_a = nullptr, *cq_b = nullptr;
    XrcDomain *xrcd = nullptr, *other_xrcd = nullptr;
    Srq *s1 = nullptr, *s2 = nullptr, *foreign = nullptr;
    Qp *ini = nullptr, *tgt = nullptr;
    dma::MemoryRegion mr_a, mr_b;
};

TEST_F(XrcTest, EachMessageLandsInTheSrqItNames) {
    EXPECT_NE(s1->srq_num(), s2->srq_num());
    post(s1, 1);
    post(s2, 2);
    send(10, 3000, 0x11, s2->srq_num());   // three packets, to s2 first
    send(11, 100, 0x22, s1->srq_num());
    auto tx = wait(cq_a, 2);
    ASSERT_EQ(tx.size(), 2u);
    for (const Wc& c : tx) EXPECT_EQ(c.status, RdmaWcStatus::success) << to_string(c.status);
    auto rx = wait(cq_b, 2);
    ASSERT_EQ(rx.size(), 2u);
    EXPECT_EQ(rx[0].wr_id, 2u);   // s2's WR took the first message
    EXPECT_EQ(rx[0].byte_len, 3000u);
    EXPECT_EQ(rx[1].wr_id, 1u);
    EXPECT_EQ(rx[1].byte_len, 100u);
    for (const Wc& c : rx) {
        EXPECT_EQ(c.status, RdmaWcStatus::success);
        EXPECT_EQ(c.qp_num, tgt->qp_num());
    }
    EXPECT_EQ(mb[2 * kSlot + 2999], 0x11);
    EXPECT_EQ(mb[1 * kSlot + 99], 0x22);
}

TEST_F(XrcTest, PacketsCarryXrcOpcodesAndTheXrceth) {
    struct Seen {
        uint32_t xrc_requests = 0, xrc_acks = 0, srqn = 0;
    } seen;
    auto look = [](void* ctx, const uint8_t* f, uint32_t len) {
        auto& s = *static_cast<Seen*>(ctx);
        if (len < 58 || f[36] != 0x12 || f[37] != 0xB7) return false;   // RoCEv2 only
        const uint8_t op = f[42];
        if (op == 0xA4) {   // XRC SEND only; the XRCETH after the 12-byte BTH
            ++s.xrc_requests;
            s.srqn = uint32_t(f[55]) << 16 | uint32_t(f[56]) << 8 | f[57];
        }
        if (op == 0xB1) ++s.xrc_acks;   // XRC acknowledge
        return false;
    };
    pair.b->set_rx_drop_hook(look, &seen);
    pair.a->set_rx_drop_hook(look, &seen);
    post(s1, 1);
    send(10, 64, 0x33, s1->srq_num());
    ASSERT_EQ(wait(cq_a, 1).size(), 1u);
    ASSERT_EQ(wait(cq_b, 1).size(), 1u);
    pair.a->set_rx_drop_hook(nullptr, nullptr);
    pair.b->set_rx_drop_hook(nullptr, nullptr);
    EXPECT_EQ(seen.xrc_requests, 1u);
    EXPECT_EQ(seen.srqn, s1->srq_num());
    EXPECT_GE(seen.xrc_acks, 1u);
}

TEST_F(XrcTest, WritesAndReadsGoThroughTheReceiveQueuePair) {
    std::memset(ma.data(), 0x5c, 5000);
    Sge s{reinterpret_cast<uint64_t>(ma.data()), 5000, mr_a.lkey};
    RdmaSendWr w = wr_of(WrOpcode::rdma_write, 1, &s);
    w.remote_addr = reinterpret_cast<uint64_t>(mb.data() + 100000);
    w.rkey = mr_b.rkey;
    ASSERT_TRUE(ini->post_send(std::span(&w, 1)));
    auto tx = wait(cq_a, 1);
    ASSERT_EQ(tx.size(), 1u);
    EXPECT_EQ(tx[0].status, RdmaWcStatus::success) << to_string(tx[0].status);
    EXPECT_EQ(mb[100000 + 4999], 0x5c);
    Sge back{reinterpret_cast<uint64_t>(ma.data() + 20000), 5000, mr_a.lkey};
    RdmaSendWr r = wr_of(WrOpcode::rdma_read, 2, &back);
    r.remote_addr = w.remote_addr;
    r.rkey = mr_b.rkey;
    ASSERT_TRUE(ini->post_send(std::span(&r, 1)));
    tx = wait(cq_a, 1);
    ASSERT_EQ(tx.size(), 1u);
    EXPECT_EQ(tx[0].status, RdmaWcStatus::success);
    EXPECT_EQ(ma[20000 + 4999], 0x5c);
}

TEST_F(XrcTest, AnSrqOfAnotherDomainIsNakedAndGetsNothing) {
    post(foreign, 3);
    send(10, 200, 0x44, foreign->srq_num());
    auto tx = wait(cq_a, 1);
    ASSERT_EQ(tx.size(), 1u);
    EXPECT_EQ(tx[0].status, RdmaWcStatus::rem_inv_req_err) << to_string(tx[0].status);
    EXPECT_EQ(mb[3 * kSlot], 0);
    Wc wc;
    EXPECT_EQ(cq_b->poll(std::span(&wc, 1)), 0);   // foreign's WR was not taken
}

// The attributes each end needs are those of the kernel's state table (rdma-core's
// ibv_xsrq_pingpong gives exactly these): a sender has no responder attributes to give at RTR,
// a receiver no requester ones at RTS.
TEST_F(XrcTest, EachEndNeedsOnlyItsOwnAttributes) {
    RdmaQpInitAttr ia;
    ia.qp_type = QpType::xrc_send;
    ia.send_cq = cq_a;
    Qp* s = *pair.a->create_qp(ia);
    RdmaQpInitAttr ta;
    ta.qp_type = QpType::xrc_recv;
    ta.xrcd = xrcd;
    Qp* r = *pair.b->create_qp(ta);
    QpAttr a;
    a.qp_state = RdmaQpState::init;
    a.qp_access_flags = kAllRemote;
    for (Qp* q : {s, r}) ASSERT_TRUE(q->modify(a, attr_state | attr_pkey_index | attr_port | attr_access_flags));
    a.qp_state = RdmaQpState::rtr;
    a.ah_attr.dgid = pair.b->gid();
    a.dest_qp_num = r->qp_num();
    auto ok = s->modify(a, attr_state | attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn);
    EXPECT_TRUE(ok) << ok.error().message;
    ok = r->modify(a, attr_state | attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn);
    EXPECT_FALSE(ok) << "a receiver needs max_dest_rd_atomic and min_rnr_timer";
    ok = r->modify(a, attr_state | attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn | attr_max_dest_rd_atomic |
                          attr_min_rnr_timer);
    EXPECT_TRUE(ok) << ok.error().message;
    a.qp_state = RdmaQpState::rts;
    ok = r->modify(a, attr_state | attr_timeout);
    EXPECT_FALSE(ok) << "a receiver needs sq_psn";
    ok = r->modify(a, attr_state | attr_timeout | attr_sq_psn);
    EXPECT_TRUE(ok) << ok.error().message;
    ok = s->modify(a, attr_state | attr_timeout | attr_sq_psn);
    EXPECT_FALSE(ok) << "a sender needs retry_cnt, rnr_retry and max_rd_atomic";
    ok = s->modify(a, attr_state | attr_timeout | attr_sq_psn | attr_retry_cnt | attr_rnr_retry | attr_max_qp_rd_atomic);
    EXPECT_TRUE(ok) << ok.error().message;
}

TEST_F(XrcTest, BadInputIsRefused) {
    RdmaQpInitAttr ia;
    ia.qp_type = QpType::xrc_recv;   // no domain
    EXPECT_FALSE(pair.b->create_qp(ia));
    ia.xrcd = xrcd;
    ia.send_cq = cq_b;               // a receiver has no CQs
    EXPECT_FALSE(pair.b->create_qp(ia));
    ia = {};
    ia.qp_type = QpType::xrc_send;
    ia.send_cq = cq_a;
    ia.srq = *pair.a->create_srq(SrqAttr{4, 1, 0});   // a sender receives nothing
    EXPECT_FALSE(pair.a->create_qp(ia));
    ia = {};
    ia.send_cq = ia.recv_cq = cq_b;
    ia.srq = s1;                     // an XRC SRQ is not a QP's SRQ
    EXPECT_FALSE(pair.b->create_qp(ia));
    EXPECT_FALSE(pair.b->create_xrc_srq(SrqAttr{4, 1, 0}, xrcd, cq_a));   // another port's CQ
    Sge s{reinterpret_cast<uint64_t>(mb.data()), 8, mr_b.lkey};
    RecvWr rw{1, &s, 1, 0};
    EXPECT_EQ(tgt->post_recv(std::span(&rw, 1)).error, EINVAL);
    EXPECT_EQ(ini->post_recv(std::span(&rw, 1)).error, EINVAL);
    RdmaSendWr w = wr_of(WrOpcode::send, 1, &s);
    EXPECT_EQ(tgt->post_send(std::span(&w, 1)).error, EINVAL);
    Sge res{reinterpret_cast<uint64_t>(ma.data()), 8, mr_a.lkey};   // masked atomics are RC's only
    RdmaSendWr m = wr_of(WrOpcode::masked_atomic_fetch_and_add, 2, &res);
    m.remote_addr = reinterpret_cast<uint64_t>(mb.data());
    m.rkey = mr_b.rkey;
    EXPECT_EQ(ini->post_send(std::span(&m, 1)).error, EINVAL);
    auto busy = xrcd->destroy();
    ASSERT_FALSE(busy);
    EXPECT_EQ(busy.error().code, EBUSY);
    ASSERT_TRUE(tgt->destroy());
    for (Srq* x : {s1, s2}) ASSERT_TRUE(x->destroy());
    EXPECT_TRUE(xrcd->destroy());
    EXPECT_TRUE(pair.b->query_device().attr.device_cap_flags & device_xrc);
}

}  // namespace
}  // namespace vfab::rdma::test
