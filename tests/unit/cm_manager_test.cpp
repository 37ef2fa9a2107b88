// Two ports' connection managers on the fake wire (cm/manager.hpp): a REQ to a service nobody
// listens on is rejected (REJ 8); a listened one becomes a connect request, its accept a REP,
// the RTU establishes both sides; a peer that never answers is unreachable after the retries;
// a DREQ ends the connection on both sides.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "cm/manager.hpp"
#include "cm/qp_attrs.hpp"
#include "rdma_connect.hpp"
#include "rdma_fake_link.hpp"

namespace vfab::cm {
namespace {

using vfab::test::kIpA;
using vfab::test::kIpB;

class CmManagerTest : public ::testing::Test {
protected:
    void SetUp() override {
        ManagerConfig ca, cb;
        ca.ca_guid = 0x0200000000000001ull;
        cb.ca_guid = 0x0200000000000002ull;
        ca.retry_ns = cb.retry_ns = 20'000'000;   // 20 ms between sends
        ca.max_retries = cb.max_retries = 3;
        auto x = Manager::open(*pair.a, ca);
        ASSERT_TRUE(x) << x.error().message;
        a = std::move(*x);
        auto y = Manager::open(*pair.b, cb);
        ASSERT_TRUE(y) << y.error().message;
        b = std::move(*y);
    }
    // Runs both until `m` has an event or two seconds passed.
    bool event_of(Manager& m, Event& out) {
        for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2); std::chrono::steady_clock::now() < end;) {
            a->progress();
            b->progress();
            if (m.next_event(out)) return true;
        }
        return false;
    }
    Req request(uint16_t port) {
        Req r;
        r.service_id = service_id(kPsTcp, port);
        r.local_qpn = 0x100;
        r.starting_psn = 0x12345;
        r.responder_resources = 4;
        r.initiator_depth = 4;
        r.private_data[36] = 0x77;   // after the IP CM header
        return r;
    }
    vfab::test::RdmaPair pair;
    std::unique_ptr<Manager> a, b;
};

TEST_F(CmManagerTest, AReqNobodyListensForIsRejected) {
    auto id = a->connect(kIpB, request(18515));
    ASSERT_TRUE(id);
    Event e;
    ASSERT_TRUE(event_of(*a, e));
    EXPECT_EQ(e.type, EventType::rejected);
    EXPECT_EQ(e.conn, *id);
    EXPECT_EQ(e.reason, uint16_t(RejReason::invalid_service_id));
    EXPECT_FALSE(b->next_event(e)) << "the passive side hears of nothing";
}

TEST_F(CmManagerTest, ConnectAcceptEstablishesBothSidesThenADreqEndsThem) {
    ASSERT_TRUE(b->listen(service_id(kPsTcp, 18515)));
    EXPECT_EQ(b->listen(service_id(kPsTcp, 18515)).error().code, EEXIST);
    auto id = a->connect(kIpB, request(18515));
    ASSERT_TRUE(id);
    Event req;
    ASSERT_TRUE(event_of(*b, req));
    ASSERT_EQ(req.type, EventType::connect_request);
    EXPECT_EQ(req.peer_ip, kIpA);
    EXPECT_EQ(req.req.local_qpn, 0x100u);
    EXPECT_EQ(req.req.starting_psn, 0x12345u);
    EXPECT_EQ(req.req.local_ca_guid, 0x0200000000000001ull);
    EXPECT_EQ(req.req.private_data[36], 0x77);
    Rep rep;
    rep.local_qpn = 0x200;
    rep.starting_psn = 0x54321;
    rep.private_data[0] = 0x99;
    ASSERT_TRUE(b->accept(req.conn, rep));
    Event est_a, est_b;
    ASSERT_TRUE(event_of(*a, est_a));
    ASSERT_EQ(est_a.type, EventType::established);
    EXPECT_EQ(est_a.conn, *id);
    EXPECT_EQ(est_a.rep.local_qpn, 0x200u);
    EXPECT_EQ(est_a.rep.starting_psn, 0x54321u);
    EXPECT_EQ(est_a.rep.private_data[0], 0x99);
    EXPECT_EQ(est_a.rep.local_ca_guid, 0x0200000000000002ull);
    ASSERT_TRUE(event_of(*b, est_b));
    EXPECT_EQ(est_b.type, EventType::established);
    EXPECT_EQ(est_b.conn, req.conn);

    ASSERT_TRUE(a->disconnect(*id));
    Event d_a, d_b;
    ASSERT_TRUE(event_of(*b, d_b));
    EXPECT_EQ(d_b.type, EventType::disconnected);
    ASSERT_TRUE(event_of(*a, d_a));
    EXPECT_EQ(d_a.type, EventType::disconnected);
    EXPECT_FALSE(a->disconnect(*id)) << "gone";
}

TEST_F(CmManagerTest, ARejectedRequestTellsTheActiveSide) {
    ASSERT_TRUE(b->listen(service_id(kPsTcp, 7)));
    ASSERT_TRUE(a->connect(kIpB, request(7)));
    Event req, rej;
    ASSERT_TRUE(event_of(*b, req));
    ASSERT_TRUE(b->reject(req.conn, uint16_t(RejReason::consumer)));
    ASSERT_TRUE(event_of(*a, rej));
    EXPECT_EQ(rej.type, EventType::rejected);
    EXPECT_EQ(rej.reason, uint16_t(RejReason::consumer));
}

// Nobody at that address: the REQ goes 1 + 3 times, 20 ms apart, then the connection is unreachable.
TEST_F(CmManagerTest, APeerThatNeverAnswersIsUnreachable) {
    auto id = a->connect(0x0A000063, request(1));
    ASSERT_TRUE(id);
    Event e;
    ASSERT_TRUE(event_of(*a, e));
    EXPECT_EQ(e.type, EventType::unreachable);
    EXPECT_EQ(e.conn, *id);
}

void apply(rdma::Qp& qp, const QpTransition& t) { ASSERT_TRUE(qp.modify(t.attr, t.mask)); }

// Two RC queue pairs connected by nothing but the CM's exchange: the attributes each side takes
// from the REQ and REP (qp_attrs.hpp) let A WRITE into B's memory and READ it back.
TEST_F(CmManagerTest, QueuePairsConnectedThroughTheCmWriteAndRead) {
    std::vector<uint8_t> ma(1 << 16, 0), mb(1 << 16, 0);
    rdma::test::Side qa = rdma::test::make_side(*pair.a, rdma::QpType::rc, ma);
    rdma::test::Side qb = rdma::test::make_side(*pair.b, rdma::QpType::rc, mb);
    ASSERT_TRUE(b->listen(service_id(kPsTcp, 20000)));
    Req req = request(20000);
    req.local_qpn = qa.qp->qp_num();
    req.starting_psn = 0x111;
    req.path_mtu = 3;
    auto id = a->connect(kIpB, req);
    ASSERT_TRUE(id);
    Event in;
    ASSERT_TRUE(event_of(*b, in));
    ASSERT_EQ(in.type, EventType::connect_request);
    Rep rep;
    rep.local_qpn = qb.qp->qp_num();
    rep.starting_psn = 0x222;
    rep.responder_resources = 4;
    rep.initiator_depth = 4;
    // As rdma_accept: the QP through RTR and RTS before the REP goes.
    apply(*qb.qp, to_init(in.req, rep, Side::passive));
    apply(*qb.qp, to_rtr(in.req, rep, Side::passive, in.peer_ip));
    apply(*qb.qp, to_rts(in.req, rep, Side::passive));
    ASSERT_TRUE(b->accept(in.conn, rep));
    Event est;
    ASSERT_TRUE(event_of(*a, est));
    ASSERT_EQ(est.type, EventType::established);
    apply(*qa.qp, to_init(req, est.rep, Side::active));
    apply(*qa.qp, to_rtr(req, est.rep, Side::active, kIpB));
    apply(*qa.qp, to_rts(req, est.rep, Side::active));
    EXPECT_EQ(qa.qp->query().dest_qp_num, qb.qp->qp_num());
    EXPECT_EQ(qb.qp->query().dest_qp_num, qa.qp->qp_num());
    // A message's starting PSN is where its sender receives from (the kernel's ib_cm): the
    // active side receives from the REQ's and sends from the REP's, the passive the other way.
    EXPECT_EQ(qa.qp->query().rq_psn, 0x111u);
    EXPECT_EQ(qa.qp->query().sq_psn, 0x222u);
    EXPECT_EQ(qb.qp->query().rq_psn, 0x222u);
    EXPECT_EQ(qb.qp->query().sq_psn, 0x111u);

    for (size_t i = 0; i < 4096; ++i) ma[i] = uint8_t(i * 7 + 1);
    Sge s{reinterpret_cast<uint64_t>(ma.data()), 4096, qa.mr.lkey};
    rdma::RdmaSendWr w = rdma::test::wr_of(rdma::WrOpcode::rdma_write, 1, &s);
    w.remote_addr = reinterpret_cast<uint64_t>(mb.data());
    w.rkey = qb.mr.rkey;
    ASSERT_TRUE(qa.qp->post_send(std::span(&w, 1)));
    auto wc = rdma::test::wait_wc(qa, qb, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, rdma::RdmaWcStatus::success) << rdma::to_string(wc[0].status);
    EXPECT_TRUE(std::equal(ma.begin(), ma.begin() + 4096, mb.begin()));
    Sge back{reinterpret_cast<uint64_t>(ma.data() + 8192), 4096, qa.mr.lkey};
    rdma::RdmaSendWr r = rdma::test::wr_of(rdma::WrOpcode::rdma_read, 2, &back);
    r.remote_addr = reinterpret_cast<uint64_t>(mb.data());
    r.rkey = qb.mr.rkey;
    ASSERT_TRUE(qa.qp->post_send(std::span(&r, 1)));
    wc = rdma::test::wait_wc(qa, qb, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, rdma::RdmaWcStatus::success) << rdma::to_string(wc[0].status);
    EXPECT_TRUE(std::equal(ma.begin(), ma.begin() + 4096, ma.begin() + 8192));
}

// Service ID resolution (12.11), as rdma_connect on a UD id: the SIDR_REQ reaches the listener,
// its answer comes back with the QP number and Q_Key; a service nobody listens on is answered
// "not supported" at once; the application's refusal is "rejected".
TEST_F(CmManagerTest, SidrResolvesAServiceToItsQpAndRefusesOthers) {
    SidrReq q;
    q.service_id = service_id(kPsUdp, 7000);
    q.private_data[36] = 0x55;
    auto none = a->resolve(kIpB, q);
    ASSERT_TRUE(none);
    Event e;
    ASSERT_TRUE(event_of(*a, e));
    EXPECT_EQ(e.type, EventType::sidr_reply);
    EXPECT_EQ(e.conn, *none);
    EXPECT_EQ(e.sidr_rep.status, uint8_t(SidrStatus::unsupported_sid));

    ASSERT_TRUE(b->listen(service_id(kPsUdp, 7000)));
    auto id = a->resolve(kIpB, q);
    ASSERT_TRUE(id);
    Event in;
    ASSERT_TRUE(event_of(*b, in));
    ASSERT_EQ(in.type, EventType::sidr_request);
    EXPECT_EQ(in.peer_ip, kIpA);
    EXPECT_EQ(in.sidr_req.service_id, q.service_id);
    EXPECT_EQ(in.sidr_req.private_data[36], 0x55);
    SidrRep rep;
    rep.status = uint8_t(SidrStatus::success);
    rep.qpn = 0x123;
    rep.qkey = kRdmaUdpQkey;
    rep.private_data[0] = 0x66;
    ASSERT_TRUE(b->sidr_answer(in.conn, rep));
    EXPECT_FALSE(b->sidr_answer(in.conn, rep)) << "answered once";
    ASSERT_TRUE(event_of(*a, e));
    ASSERT_EQ(e.type, EventType::sidr_reply);
    EXPECT_EQ(e.conn, *id);
    EXPECT_EQ(e.sidr_rep.status, uint8_t(SidrStatus::success));
    EXPECT_EQ(e.sidr_rep.qpn, 0x123u);
    EXPECT_EQ(e.sidr_rep.qkey, kRdmaUdpQkey);
    EXPECT_EQ(e.sidr_rep.service_id, q.service_id);
    EXPECT_EQ(e.sidr_rep.private_data[0], 0x66);

    ASSERT_TRUE(a->resolve(kIpB, q));
    ASSERT_TRUE(event_of(*b, in));
    rep.status = uint8_t(SidrStatus::reject);
    ASSERT_TRUE(b->sidr_answer(in.conn, rep));
    ASSERT_TRUE(event_of(*a, e));
    EXPECT_EQ(e.sidr_rep.status, uint8_t(SidrStatus::reject));
}

// The active side abandons a connection being set up (rdma_destroy_id): the passive side hears a
// REJ ("timeout", as the kernel sends before a REP); the abandoned side gets no more events.
TEST_F(CmManagerTest, AReleasedConnectionIsRejectedAndSilent) {
    ASSERT_TRUE(b->listen(service_id(kPsTcp, 18515)));
    auto id = a->connect(kIpB, request(18515));
    ASSERT_TRUE(id);
    Event in;
    ASSERT_TRUE(event_of(*b, in));
    ASSERT_EQ(in.type, EventType::connect_request);
    a->release(*id);
    Event e;
    ASSERT_TRUE(event_of(*b, e));
    EXPECT_EQ(e.type, EventType::rejected);
    EXPECT_EQ(e.conn, in.conn);
    EXPECT_EQ(e.reason, uint16_t(RejReason::timeout));
    EXPECT_FALSE(event_of(*a, e)) << "no event for a released connection";
}

}  // namespace
}  // namespace vfab::cm

namespace vfab::cm {
namespace {

// A process killed with a connection open (its Manager dropped without a DREQ; the ledger file
// keeps the connection): the next manager on the port disconnects it, and the peer hears of it.
// A clean disconnect leaves nothing for the next one.
TEST_F(CmManagerTest, TheNextProcessDisconnectsWhatAKilledOneLeftConnected) {
    char dir[] = "/tmp/vfab-ledger-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    const std::string path = std::string(dir) + "/port";
    ManagerConfig ca;
    ca.ca_guid = 0x0200000000000011ull;
    ca.retry_ns = 20'000'000;
    ca.max_retries = 3;
    ca.ledger_path = path;
    a.reset();
    auto x = Manager::open(*pair.a, ca);
    ASSERT_TRUE(x) << x.error().message;
    a = std::move(*x);
    EXPECT_EQ(a->ledger_error(), "");
    auto connect_one = [&](uint16_t port) {
        ASSERT_TRUE(b->listen(service_id(kPsTcp, port)));
        ASSERT_TRUE(a->connect(kIpB, request(port)));
        Event req, est;
        ASSERT_TRUE(event_of(*b, req));
        ASSERT_TRUE(b->accept(req.conn, Rep{}));
        ASSERT_TRUE(event_of(*a, est));
        ASSERT_EQ(est.type, EventType::established);
        ASSERT_TRUE(event_of(*b, est));
        ASSERT_EQ(est.type, EventType::established);
    };
    ASSERT_NO_FATAL_FAILURE(connect_one(21));
    a.reset();   // killed: no DREQ
    x = Manager::open(*pair.a, ca);
    ASSERT_TRUE(x) << x.error().message;
    a = std::move(*x);
    EXPECT_EQ(a->stale_disconnected(), 1u);
    Event d;
    ASSERT_TRUE(event_of(*b, d));
    EXPECT_EQ(d.type, EventType::disconnected) << "the peer sees the disconnect";
    EXPECT_FALSE(a->next_event(d)) << "nobody here to tell";

    // Another left open; the DREQ's answer clears it from the ledger: the one after finds nothing.
    ASSERT_NO_FATAL_FAILURE(connect_one(22));
    a.reset();
    x = Manager::open(*pair.a, ca);
    ASSERT_TRUE(x);
    a = std::move(*x);
    ASSERT_EQ(a->stale_disconnected(), 1u) << "the second connection, left open";
    ASSERT_TRUE(event_of(*b, d));
    for (int i = 0; i < 20; ++i) a->progress(), b->progress();   // the DREP; the ledger cleared
    a.reset();
    x = Manager::open(*pair.a, ca);
    ASSERT_TRUE(x);
    EXPECT_EQ((*x)->stale_disconnected(), 0u);
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace vfab::cm
