// The queue pair's state machine (modify: transitions, required attributes, their ranges, the
// path MTU against the port's), the error state and its flush, destroy, the CQ's refusals and
// overrun count, and the CQ channel (arm, poll(2) on channel_fd(), take_events).
#include <gmock/gmock.h>
#include <poll.h>

#include <string>

#include "../../transport/engine.hpp"
#include "rdma_connect.hpp"

namespace vfab::rdma::test {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kInitMask = attr_state | attr_pkey_index | attr_port | attr_access_flags;
constexpr uint32_t kRtrMask =
    attr_state | attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn | attr_max_dest_rd_atomic | attr_min_rnr_timer;
constexpr uint32_t kRtsMask = attr_state | attr_sq_psn | attr_timeout | attr_retry_cnt | attr_rnr_retry | attr_max_qp_rd_atomic;

std::string error_of(const Result<void>& r) { return r ? std::string("(no error)") : r.error().message; }

bool readable(int fd, int timeout_ms) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

class StateTest : public ::testing::Test {
protected:
    void SetUp() override {
        ma.assign(1 << 16, 0);
        mb.assign(1 << 16, 0);
        a = make_side(*pair.a, QpType::rc, ma);
        b = make_side(*pair.b, QpType::rc, mb);
    }
    QpAttr rtr_attr() const {
        QpAttr x;
        x.qp_state = RdmaQpState::rtr;
        x.path_mtu = 3;
        x.dest_qp_num = b.qp->qp_num();
        x.rq_psn = 7;
        x.max_dest_rd_atomic = 4;
        x.min_rnr_timer = 1;
        x.ah_attr.dgid = pair.b->gid();
        return x;
    }
    QpAttr rts_attr() const {
        QpAttr x;
        x.qp_state = RdmaQpState::rts;
        x.sq_psn = 9;
        x.timeout = 8;
        x.retry_cnt = 7;
        x.rnr_retry = 7;
        x.max_rd_atomic = 4;
        return x;
    }
    Sge sge_a(uint64_t off, uint32_t len) { return {reinterpret_cast<uint64_t>(ma.data() + off), len, a.mr.lkey}; }
    void post_recv_a(uint64_t id) {
        Sge s = sge_a(0, 256);
        RecvWr r{id, &s, 1, 0};
        ASSERT_TRUE(a.qp->post_recv(std::span(&r, 1)));
    }
    // Both ends connected and each other's MAC learnt (ARP answered), as after connect_rc and
    // the first exchange of an application.
    void connect_both(uint8_t timeout_a = 8) {
        connect_rc(a, b, 100, 200, 3, timeout_a);
        connect_rc(b, a, 200, 100);
        for (int i = 0; i < 4; ++i) {
            pair.a->progress();
            pair.b->progress();
        }
    }
    void progress_both(int rounds = 10) {
        for (int i = 0; i < rounds; ++i) {
            pair.a->progress();
            pair.b->progress();
        }
    }
    std::vector<Wc> drain(Side& s) {
        std::vector<Wc> out;
        Wc wc[16];
        for (int n; (n = s.cq->poll(wc)) > 0;) out.insert(out.end(), wc, wc + n);
        return out;
    }
    RdmaPair pair;
    std::vector<uint8_t> ma, mb;
    Side a, b;
};

TEST_F(StateTest, ResetInitRtrRtsWithTheirRequiredAttributes) {
    QpAttr x;
    EXPECT_EQ(a.qp->state(), RdmaQpState::reset);
    x.qp_state = RdmaQpState::rtr;
    auto r = a.qp->modify(rtr_attr(), kRtrMask);
    EXPECT_THAT(error_of(r), HasSubstr("RESET -> RTR is not a transition"));
    x.qp_state = RdmaQpState::init;
    x.qp_access_flags = kAllRemote;
    r = a.qp->modify(x, attr_state | attr_pkey_index | attr_port);
    EXPECT_THAT(error_of(r), HasSubstr("qp_access_flags must be given"));
    EXPECT_EQ(a.qp->state(), RdmaQpState::reset) << "a refused modify changes nothing";
    ASSERT_TRUE(a.qp->modify(x, kInitMask));
    EXPECT_EQ(a.qp->state(), RdmaQpState::init);
    ASSERT_TRUE(a.qp->modify(x, kInitMask)) << "INIT -> INIT";
    EXPECT_THAT(error_of(a.qp->modify(rts_attr(), kRtsMask)), HasSubstr("INIT -> RTS is not a transition"));

    // INIT -> RTR: each required attribute missing in turn is named.
    const std::pair<uint32_t, const char*> rtr_needs[] = {
        {attr_av, "ah_attr"}, {attr_path_mtu, "path_mtu"}, {attr_dest_qpn, "dest_qp_num"},
        {attr_rq_psn, "rq_psn"}, {attr_max_dest_rd_atomic, "max_dest_rd_atomic"}, {attr_min_rnr_timer, "min_rnr_timer"}};
    for (auto [bit, name] : rtr_needs) {
        r = a.qp->modify(rtr_attr(), kRtrMask & ~bit);
        EXPECT_THAT(error_of(r), HasSubstr("INIT -> RTR")) << name;
        EXPECT_THAT(error_of(r), HasSubstr(name));
        EXPECT_EQ(a.qp->state(), RdmaQpState::init);
    }
    ASSERT_TRUE(a.qp->modify(rtr_attr(), kRtrMask));
    EXPECT_EQ(a.qp->state(), RdmaQpState::rtr);
    {
        Sge s = sge_a(0, 8);
        RdmaSendWr w = wr_of(WrOpcode::send, 1, &s);
        EXPECT_EQ(a.qp->post_send(std::span(&w, 1)).error, EINVAL) << "no sends before RTS";
    }
    const std::pair<uint32_t, const char*> rts_needs[] = {{attr_sq_psn, "sq_psn"},
                                                          {attr_timeout, "timeout"},
                                                          {attr_retry_cnt, "retry_cnt"},
                                                          {attr_rnr_retry, "rnr_retry"},
                                                          {attr_max_qp_rd_atomic, "max_rd_atomic"}};
    for (auto [bit, name] : rts_needs) {
        r = a.qp->modify(rts_attr(), kRtsMask & ~bit);
        EXPECT_THAT(error_of(r), HasSubstr("RTR -> RTS")) << name;
        EXPECT_THAT(error_of(r), HasSubstr(name));
    }
    EXPECT_THAT(error_of(a.qp->modify(rtr_attr(), kRtrMask)), HasSubstr("RTR -> RTR is not a transition"));
    ASSERT_TRUE(a.qp->modify(rts_attr(), kRtsMask));
    EXPECT_EQ(a.qp->state(), RdmaQpState::rts);

    // RTS -> RTS changes attributes; the rest stay as given.
    QpAttr t = rts_attr();
    t.timeout = 12;
    ASSERT_TRUE(a.qp->modify(t, attr_state | attr_timeout));
    const QpAttr q = a.qp->query();
    EXPECT_EQ(q.qp_state, RdmaQpState::rts);
    EXPECT_EQ(q.timeout, 12);
    EXPECT_EQ(q.sq_psn, 9u);
    EXPECT_EQ(q.rq_psn, 7u);
    EXPECT_EQ(q.dest_qp_num, b.qp->qp_num());
    EXPECT_EQ(q.path_mtu, 3u);
    EXPECT_EQ(q.qp_access_flags, kAllRemote);
    EXPECT_EQ(q.max_dest_rd_atomic, 4);
    EXPECT_EQ(q.ah_attr.dgid, pair.b->gid());

    EXPECT_THAT(error_of(a.qp->modify(x, kInitMask)), HasSubstr("RTS -> INIT is not a transition"));
    QpAttr e;
    e.qp_state = RdmaQpState::error;
    ASSERT_TRUE(a.qp->modify(e, attr_state));
    EXPECT_EQ(a.qp->state(), RdmaQpState::error);
    ASSERT_TRUE(a.qp->modify(e, attr_state)) << "ERR -> ERR";
    EXPECT_THAT(error_of(a.qp->modify(rts_attr(), kRtsMask)), HasSubstr("ERR -> RTS is not a transition"));
    QpAttr z;
    z.qp_state = RdmaQpState::reset;
    ASSERT_TRUE(a.qp->modify(z, attr_state));
    EXPECT_EQ(a.qp->state(), RdmaQpState::reset);
    ASSERT_TRUE(a.qp->modify(x, kInitMask)) << "a reset queue pair starts again";
}

TEST_F(StateTest, AttributeRangesAndPathMtu) {
    QpAttr x;
    x.qp_state = RdmaQpState::init;
    x.qp_access_flags = kAllRemote;
    ASSERT_TRUE(a.qp->modify(x, kInitMask));
    EXPECT_EQ(pair.a->active_mtu(), 3u) << "a 1500-byte link carries 1024-byte RoCE packets";
    for (uint32_t mtu : {4u, 5u}) {
        QpAttr r = rtr_attr();
        r.path_mtu = mtu;
        const std::string msg = error_of(a.qp->modify(r, kRtrMask));
        EXPECT_THAT(msg, HasSubstr(str_cat("path MTU ", 128u << mtu, " is more than the link carries (1024)")));
        EXPECT_THAT(msg, HasSubstr("active_mtu()"));
    }
    for (uint32_t mtu : {0u, 6u, 100u}) {
        QpAttr r = rtr_attr();
        r.path_mtu = mtu;
        EXPECT_THAT(error_of(a.qp->modify(r, kRtrMask)), HasSubstr("path_mtu must be 1 (256) to 5 (4096)")) << mtu;
    }
    QpAttr r = rtr_attr();
    r.ah_attr.dgid.raw[0] = 0xfe;   // a link-local IPv6 GID
    EXPECT_THAT(error_of(a.qp->modify(r, kRtrMask)), HasSubstr("IPv4-mapped"));
    r = rtr_attr();
    r.min_rnr_timer = 32;
    EXPECT_THAT(error_of(a.qp->modify(r, kRtrMask)), HasSubstr("min_rnr_timer is 0 to 31"));
    r = rtr_attr();
    r.max_dest_rd_atomic = 129;
    EXPECT_THAT(error_of(a.qp->modify(r, kRtrMask)), HasSubstr("max_dest_rd_atomic is at most 128"));
    EXPECT_EQ(a.qp->state(), RdmaQpState::init);
    r = rtr_attr();
    r.path_mtu = 1;
    ASSERT_TRUE(a.qp->modify(r, kRtrMask)) << "256 is below the link's";
    QpAttr t = rts_attr();
    t.timeout = 32;
    EXPECT_THAT(error_of(a.qp->modify(t, kRtsMask)), HasSubstr("timeout is 0 to 31"));
    t = rts_attr();
    t.retry_cnt = 8;
    EXPECT_THAT(error_of(a.qp->modify(t, kRtsMask)), HasSubstr("retry_cnt is 0 to 7"));
    t = rts_attr();
    t.rnr_retry = 8;
    EXPECT_THAT(error_of(a.qp->modify(t, kRtsMask)), HasSubstr("rnr_retry is 0 to 7"));
    t = rts_attr();
    t.max_rd_atomic = 129;
    EXPECT_THAT(error_of(a.qp->modify(t, kRtsMask)), HasSubstr("max_rd_atomic is at most 128"));
    EXPECT_EQ(a.qp->state(), RdmaQpState::rtr);
}

TEST_F(StateTest, UdTransitions) {
    std::vector<uint8_t> mem(4096);
    Side u = make_side(*pair.a, QpType::ud, mem);
    QpAttr x;
    x.qp_state = RdmaQpState::init;
    x.qkey = 0x11111111;
    EXPECT_THAT(error_of(u.qp->modify(x, attr_state | attr_pkey_index | attr_port)), HasSubstr("qkey must be given"));
    ASSERT_TRUE(u.qp->modify(x, attr_state | attr_pkey_index | attr_port | attr_qkey));
    x.qp_state = RdmaQpState::rtr;
    ASSERT_TRUE(u.qp->modify(x, attr_state)) << "UD needs nothing more for RTR";
    x.qp_state = RdmaQpState::rts;
    EXPECT_THAT(error_of(u.qp->modify(x, attr_state)), HasSubstr("sq_psn must be given"));
    ASSERT_TRUE(u.qp->modify(x, attr_state | attr_sq_psn));
    EXPECT_EQ(u.qp->type(), QpType::ud);
    EXPECT_EQ(u.qp->query().qkey, 0x11111111u);
}

TEST_F(StateTest, ReceivesArePostedFromInitOn) {
    Sge s = sge_a(0, 64);
    RecvWr r{1, &s, 1, 0};
    EXPECT_EQ(a.qp->post_recv(std::span(&r, 1)).error, EINVAL) << "RESET takes no receive";
    QpAttr x;
    x.qp_state = RdmaQpState::init;
    x.qp_access_flags = kAllRemote;
    ASSERT_TRUE(a.qp->modify(x, kInitMask));
    EXPECT_TRUE(a.qp->post_recv(std::span(&r, 1)));
    RdmaSendWr w = wr_of(WrOpcode::send, 1, &s);
    EXPECT_EQ(a.qp->post_send(std::span(&w, 1)).error, EINVAL) << "INIT takes no send";
}

TEST_F(StateTest, ErrorFlushesEverySendAndReceiveInOrder) {
    connect_both();
    pair.wire.faults.drop = 100;   // nothing is acknowledged: the sends stay outstanding
    for (uint64_t id = 1; id <= 7; ++id) post_recv_a(1000 + id);
    std::vector<Sge> sges(5, sge_a(4096, 2000));
    std::vector<RdmaSendWr> wrs;
    for (uint64_t id = 1; id <= 5; ++id) {
        wrs.push_back(wr_of(id == 3 ? WrOpcode::rdma_write : WrOpcode::send, id, &sges[id - 1]));
        wrs.back().remote_addr = reinterpret_cast<uint64_t>(mb.data());
        wrs.back().rkey = b.mr.rkey;
        if (id % 2 == 0) wrs.back().send_flags = 0;   // unsignaled: flushed all the same
    }
    ASSERT_TRUE(a.qp->post_send(wrs));
    pair.a->progress();
    EXPECT_TRUE(drain(a).empty());

    QpAttr e;
    e.qp_state = RdmaQpState::error;
    ASSERT_TRUE(a.qp->modify(e, attr_state));
    const std::vector<Wc> wc = drain(a);
    ASSERT_EQ(wc.size(), 12u);
    std::vector<uint64_t> sends, recvs;
    for (const Wc& c : wc) {
        EXPECT_EQ(c.status, RdmaWcStatus::wr_flush_err) << c.wr_id;
        EXPECT_EQ(c.qp_num, a.qp->qp_num());
        (c.opcode == RdmaWcOpcode::recv ? recvs : sends).push_back(c.wr_id);
        if (c.wr_id == 3) { EXPECT_EQ(c.opcode, RdmaWcOpcode::rdma_write); }
    }
    EXPECT_EQ(sends, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
    EXPECT_EQ(recvs, (std::vector<uint64_t>{1001, 1002, 1003, 1004, 1005, 1006, 1007}));

    // Posting in ERR: accepted and flushed at once.
    post_recv_a(2001);
    RdmaSendWr w = wr_of(WrOpcode::send, 3001, &sges[0]);
    w.send_flags = 0;
    EXPECT_TRUE(a.qp->post_send(std::span(&w, 1)));
    const std::vector<Wc> more = drain(a);
    ASSERT_EQ(more.size(), 2u);
    EXPECT_EQ(more[0].wr_id, 2001u);
    EXPECT_EQ(more[0].status, RdmaWcStatus::wr_flush_err);
    EXPECT_EQ(more[1].wr_id, 3001u);
    EXPECT_EQ(more[1].status, RdmaWcStatus::wr_flush_err);
    pair.a->progress();
    EXPECT_TRUE(drain(a).empty()) << "nothing completes twice";
}

TEST_F(StateTest, ResetAndConnectAgain) {
    connect_both();
    auto send_once = [&](uint64_t id) {
        Sge r{reinterpret_cast<uint64_t>(mb.data()), 64, b.mr.lkey};
        RecvWr rw{id, &r, 1, 0};
        ASSERT_TRUE(b.qp->post_recv(std::span(&rw, 1)));
        Sge s = sge_a(0, 64);
        RdmaSendWr w = wr_of(WrOpcode::send, id, &s);
        ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
        auto rx = wait_wc(b, a, 1);
        ASSERT_EQ(rx.size(), 1u);
        EXPECT_EQ(rx[0].wr_id, id);
        EXPECT_EQ(rx[0].status, RdmaWcStatus::success);
        auto tx = wait_wc(a, b, 1);
        ASSERT_EQ(tx.size(), 1u);
        EXPECT_EQ(tx[0].status, RdmaWcStatus::success);
    };
    send_once(1);
    QpAttr z;
    z.qp_state = RdmaQpState::reset;
    ASSERT_TRUE(a.qp->modify(z, attr_state));
    ASSERT_TRUE(b.qp->modify(z, attr_state));
    connect_rc(a, b, 0xFFFFF0, 0x123);   // PSNs that wrap soon
    connect_rc(b, a, 0x123, 0xFFFFF0);
    for (uint64_t id = 2; id < 40; ++id) send_once(id);
}

TEST_F(StateTest, DestroyAndTheCqsRefusals) {
    connect_both();
    auto r = a.cq->destroy();
    EXPECT_EQ(r.error().code, EBUSY);
    EXPECT_THAT(error_of(r), HasSubstr("queue pair(s) still use it"));

    // A send in flight when the QP goes; its slot taken by a new QP at once.
    Sge s = sge_a(0, 3000);
    RdmaSendWr w = wr_of(WrOpcode::send, 1, &s);
    pair.wire.faults.drop = 100;
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    const uint32_t old_qpn = a.qp->qp_num();
    ASSERT_TRUE(a.qp->destroy());
    EXPECT_EQ(a.qp->destroy().error().code, ENODEV);
    Cq* cq2 = *pair.a->create_cq(16);
    RdmaQpInitAttr ia;
    ia.send_cq = ia.recv_cq = cq2;
    Qp* fresh = *pair.a->create_qp(ia);
    EXPECT_EQ(fresh->qp_num() % 256, old_qpn % 256) << "the slot is reused (max_qp 256)";
    EXPECT_NE(fresh->qp_num(), old_qpn) << "with a number of its own";
    for (int i = 0; i < 10; ++i) pair.a->progress();
    EXPECT_TRUE(drain(a).empty()) << "a destroyed QP's WRs are dropped, not completed";
    EXPECT_EQ(fresh->state(), RdmaQpState::reset);

    ASSERT_TRUE(a.cq->destroy()) << "no QP uses it any more";
    Wc wc[4];
    EXPECT_EQ(a.cq->poll(wc), -ENODEV);
    EXPECT_FALSE(a.cq->arm());
    EXPECT_EQ(a.cq->destroy().error().code, ENODEV);
    // A destroyed CQ is no CQ for a new QP.
    ia.send_cq = ia.recv_cq = a.cq;
    EXPECT_FALSE(pair.a->create_qp(ia));

    // b's frames to the old QP number meet the new QP in RESET: dropped.
    pair.wire.faults.drop = 0;
    const uint64_t dropped = pair.a->stats().rx_dropped;
    Sge sb{reinterpret_cast<uint64_t>(mb.data()), 64, b.mr.lkey};
    RdmaSendWr wb = wr_of(WrOpcode::send, 9, &sb);
    ASSERT_TRUE(b.qp->post_send(std::span(&wb, 1)));
    progress_both();
    EXPECT_GE(pair.a->stats().rx_roce + pair.a->stats().rx_dropped, dropped + 1);
    Wc fwc[4];
    EXPECT_EQ(cq2->poll(fwc), 0);
}

TEST_F(StateTest, CreateRefusals) {
    EXPECT_FALSE(pair.a->create_cq(0));
    EXPECT_FALSE(pair.a->create_cq((1u << 20) + 1));
    RdmaQpInitAttr ia;
    auto q = pair.a->create_qp(ia);
    ASSERT_FALSE(q);
    EXPECT_THAT(q.error().message, HasSubstr("completion queues of this port"));
    ia.send_cq = ia.recv_cq = b.cq;   // the other port's
    EXPECT_FALSE(pair.a->create_qp(ia));
    ia.send_cq = ia.recv_cq = a.cq;
    ia.cap.max_send_wr = 0;
    EXPECT_FALSE(pair.a->create_qp(ia));
    ia.cap.max_send_wr = 16;
    ia.qp_type = QpType(1);   // IBV_QPT_RC's neighbour: no transport
    EXPECT_FALSE(pair.a->create_qp(ia));
    ia.qp_type = QpType::raw_packet;
    ia.srq = *pair.a->create_srq({});
    EXPECT_FALSE(pair.a->create_qp(ia)) << "a raw-packet queue pair has its own receive queue";
    AhAttr ah;
    EXPECT_FALSE(pair.a->create_ah(ah)) << "an all-zero GID is not IPv4-mapped";
}

TEST_F(StateTest, CqOverrunIsCounted) {
    Cq* small = *pair.a->create_cq(4);
    RdmaQpInitAttr ia;
    ia.send_cq = ia.recv_cq = small;
    Qp* qp = *pair.a->create_qp(ia);
    QpAttr x;
    x.qp_state = RdmaQpState::init;
    x.qp_access_flags = kAllRemote;
    ASSERT_TRUE(qp->modify(x, kInitMask));
    for (uint64_t id = 0; id < 10; ++id) {
        Sge s = sge_a(0, 64);
        RecvWr r{id, &s, 1, 0};
        ASSERT_TRUE(qp->post_recv(std::span(&r, 1)));
    }
    x.qp_state = RdmaQpState::error;
    ASSERT_TRUE(qp->modify(x, attr_state));
    Wc wc[16];
    EXPECT_EQ(small->poll(wc), 4);
    EXPECT_EQ(wc[0].wr_id, 0u);
    EXPECT_EQ(wc[3].wr_id, 3u);
    EXPECT_EQ(small->overruns(), 6u);
    EXPECT_EQ(small->poll(wc), 0);
}

// ---- the channel -----------------------------------------------------------------------------------

TEST_F(StateTest, ChannelWakesForACompletion) {
    connect_both();
    Sge r{reinterpret_cast<uint64_t>(mb.data()), 256, b.mr.lkey};
    RecvWr rw{1, &r, 1, 0};
    ASSERT_TRUE(b.qp->post_recv(std::span(&rw, 1)));
    const int fd = b.cq->channel_fd();
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(b.cq->arm());
    EXPECT_FALSE(readable(fd, 0)) << "nothing has happened";
    EXPECT_EQ(b.cq->take_events(), 0u);
    ASSERT_TRUE(b.cq->arm());

    Sge s = sge_a(0, 100);
    RdmaSendWr w = wr_of(WrOpcode::send, 1, &s);
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    ASSERT_TRUE(readable(fd, 1000)) << "the frame's arrival wakes the channel";
    EXPECT_EQ(b.cq->take_events(), 1u) << "taking the events runs the protocol: one completion notified";
    EXPECT_FALSE(readable(fd, 0)) << "and clears the channel";
    Wc wc[4];
    ASSERT_EQ(b.cq->poll(wc), 1);
    EXPECT_EQ(wc[0].status, RdmaWcStatus::success);
    EXPECT_EQ(wc[0].byte_len, 100u);

    // Not armed: a completion does not notify.
    ASSERT_TRUE(b.qp->post_recv(std::span(&rw, 1)));
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    EXPECT_EQ(b.cq->take_events(), 0u);
    ASSERT_EQ(b.cq->poll(wc), 1);
    // Armed with a completion already waiting: readable at once.
    ASSERT_TRUE(b.qp->post_recv(std::span(&rw, 1)));
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    b.port->progress();
    ASSERT_TRUE(b.cq->arm());
    EXPECT_TRUE(readable(fd, 0));
    EXPECT_EQ(b.cq->take_events(), 1u);
    ASSERT_EQ(b.cq->poll(wc), 1);
}

TEST_F(StateTest, SolicitedOnlyChannel) {
    connect_both();
    Sge r{reinterpret_cast<uint64_t>(mb.data()), 256, b.mr.lkey};
    RecvWr rw[2] = {{1, &r, 1, 0}, {2, &r, 1, 0}};
    ASSERT_TRUE(b.qp->post_recv(rw));
    ASSERT_TRUE(b.cq->arm(true));
    Sge s = sge_a(0, 10);
    RdmaSendWr w = wr_of(WrOpcode::send, 1, &s);
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    EXPECT_EQ(b.cq->take_events(), 0u) << "an unsolicited receive does not notify";
    w.send_flags |= wr_solicited;
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    ASSERT_TRUE(readable(b.cq->channel_fd(), 1000));
    EXPECT_EQ(b.cq->take_events(), 1u);
    Wc wc[4];
    EXPECT_EQ(b.cq->poll(wc), 2);
}

TEST_F(StateTest, ChannelWakesForARetransmission) {
    connect_both(/*timeout_a=*/10);   // 4.2 ms
    pair.wire.faults.drop = 100;
    Sge s = sge_a(0, 10);
    RdmaSendWr w = wr_of(WrOpcode::send, 1, &s);
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    ASSERT_TRUE(a.cq->arm());
    const uint64_t before = pair.a->stats().retransmits;
    ASSERT_TRUE(readable(a.cq->channel_fd(), 2000)) << "the retransmission deadline wakes a sleeper";
    a.cq->take_events();
    EXPECT_EQ(pair.a->stats().retransmits, before + 1);
    EXPECT_FALSE(readable(a.cq->channel_fd(), 0));
}

}  // namespace
}  // namespace vfab::rdma::test
