// Two ports' connection managers on the fake wire (cm/manager.hpp): a REQ to a service nobody
// listens on is rejected (REJ 8); a listened one becomes a connect request, its accept a REP,
// the RTU establishes both sides; a peer that never answers is unreachable after the retries;
// a DREQ ends the connection on both sides.
#include <gtest/gtest.h>

#include <chrono>

#include "cm/manager.hpp"
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

}  // namespace
}  // namespace vfab::cm
