// The transport's asynchronous events (IB spec 11.6.3): what a responder raises when it ends a
// connection for a reason no completion of its own reports, communication established, a CQ
// overrun and the queue pairs it fails, and the port's link going down and up.
#include <chrono>
#include <thread>

#include "rdma_connect.hpp"

namespace vfab::rdma::test {
namespace {

// The port's events so far, in order.
std::vector<AsyncEvent> events_of(Port& port) {
    std::vector<AsyncEvent> out;
    for (AsyncEvent e; port.get_async_event(e);) out.push_back(e);
    return out;
}

class EventsTest : public ::testing::Test {
protected:
    void SetUp() override {
        pair = std::make_unique<RdmaPair>();
        ma.assign(1 << 16, 0);
        mb.assign(1 << 16, 0);
        a = make_side(*pair->a, QpType::rc, ma);
    }
    void connect(uint32_t b_cqe = 4096) {
        b = make_side(*pair->b, QpType::rc, mb, b_cqe);
        connect_rc(a, b, 100, 200);
        connect_rc(b, a, 200, 100);
    }
    // A signalled WR of `op` from a to b's memory at `offset` with b's rkey.
    void post_remote(WrOpcode op, uint64_t offset, uint32_t len, uint32_t rkey) {
        Sge s{reinterpret_cast<uint64_t>(ma.data()), len, a.mr.lkey};
        RdmaSendWr w = wr_of(op, 1, &s);
        w.remote_addr = reinterpret_cast<uint64_t>(mb.data() + offset);
        w.rkey = rkey;
        ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    }
    void post_recv_b(uint64_t id) {
        Sge s{reinterpret_cast<uint64_t>(mb.data()), 256, b.mr.lkey};
        RecvWr r{id, &s, 1, 0};
        ASSERT_TRUE(b.qp->post_recv(std::span(&r, 1)));
    }
    void send_a(uint64_t id) {
        Sge s{reinterpret_cast<uint64_t>(ma.data()), 64, a.mr.lkey};
        RdmaSendWr w = wr_of(WrOpcode::send, id, &s);
        ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    }
    std::unique_ptr<RdmaPair> pair;
    std::vector<uint8_t> ma, mb;
    Side a, b;
};

// A WRITE with a key the responder does not have: the requester's WR completes in error; the
// responder has no completion to say so, hence QP_ACCESS_ERR on its queue pair, once.
TEST_F(EventsTest, AnAccessViolationIsRaisedAtTheResponder) {
    connect();
    post_remote(WrOpcode::rdma_write, 0, 100, b.mr.rkey ^ 0x100);
    auto tx = wait_wc(a, b, 1);
    ASSERT_EQ(tx.size(), 1u);
    EXPECT_EQ(tx[0].status, RdmaWcStatus::rem_access_err);
    auto eb = events_of(*b.port);
    ASSERT_EQ(eb.size(), 1u);
    EXPECT_EQ(eb[0].type, AsyncEventType::qp_access_err);
    EXPECT_EQ(eb[0].qp, b.qp);
    EXPECT_EQ(b.qp->state(), RdmaQpState::error);
    EXPECT_TRUE(events_of(*a.port).empty()) << "the requester's error is in its completion";
}

// A misaligned atomic is an invalid request (9.4.5): QP_REQ_ERR at the responder.
TEST_F(EventsTest, AnInvalidRequestIsRaisedAtTheResponder) {
    connect();
    post_remote(WrOpcode::atomic_fetch_and_add, 4, 8, b.mr.rkey);
    auto tx = wait_wc(a, b, 1);
    ASSERT_EQ(tx.size(), 1u);
    EXPECT_EQ(tx[0].status, RdmaWcStatus::rem_inv_req_err);
    auto eb = events_of(*b.port);
    ASSERT_EQ(eb.size(), 1u);
    EXPECT_EQ(eb[0].type, AsyncEventType::qp_req_err);
    EXPECT_EQ(eb[0].qp, b.qp);
}

// The first request reaching a queue pair still in RTR raises COMM_EST once; in RTS, none.
TEST_F(EventsTest, CommunicationEstablishedComesOnceInRtr) {
    b = make_side(*pair->b, QpType::rc, mb);
    connect_rc(a, b, 100, 200);
    connect_rc_rtr(b, a, 100);
    for (uint64_t id : {1, 2}) post_recv_b(id);
    send_a(11);
    send_a(12);
    auto rx = wait_wc(b, a, 2);
    ASSERT_EQ(rx.size(), 2u);
    EXPECT_EQ(rx[1].status, RdmaWcStatus::success);
    auto eb = events_of(*b.port);
    ASSERT_EQ(eb.size(), 1u);
    EXPECT_EQ(eb[0].type, AsyncEventType::comm_est);
    EXPECT_EQ(eb[0].qp, b.qp);
    EXPECT_TRUE(events_of(*a.port).empty()) << "a was in RTS";
}

// A CQ with room for one completion gets two: CQ_ERR names it, QP_FATAL its queue pair, which
// goes to the error state (its other receives flushed into the full CQ are lost too).
TEST_F(EventsTest, ACqOverrunRaisesCqErrorAndFailsItsQueuePairs) {
    connect(1);
    for (uint64_t id : {1, 2, 3}) post_recv_b(id);
    send_a(11);
    send_a(12);
    std::vector<AsyncEvent> eb;
    for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
         eb.size() < 2 && std::chrono::steady_clock::now() < end;) {
        a.port->progress();
        b.port->progress();
        for (auto e : events_of(*b.port)) eb.push_back(e);
    }
    ASSERT_EQ(eb.size(), 2u);
    EXPECT_EQ(eb[0].type, AsyncEventType::cq_error);
    EXPECT_EQ(eb[0].cq, b.cq);
    EXPECT_EQ(eb[1].type, AsyncEventType::qp_fatal);
    EXPECT_EQ(eb[1].qp, b.qp);
    EXPECT_EQ(b.qp->state(), RdmaQpState::error);
    EXPECT_GE(b.cq->overruns(), 1u);
}

// With ignore_overrun (IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN) lost completions are only counted.
TEST_F(EventsTest, AnOverrunIgnoredOnlyCounts) {
    connect(1);
    b.cq->set_ignore_overrun(true);
    for (uint64_t id : {1, 2, 3}) post_recv_b(id);
    for (uint64_t id : {11, 12, 13}) send_a(id);
    auto tx = wait_wc(a, b, 3);
    ASSERT_EQ(tx.size(), 3u);
    b.port->progress();
    EXPECT_EQ(b.cq->overruns(), 2u);
    EXPECT_TRUE(events_of(*b.port).empty());
    EXPECT_EQ(b.qp->state(), RdmaQpState::rts);
}

// The link read by the port's progress: PORT_ERR when it goes down, PORT_ACTIVE when it comes
// back, each once and naming no object.
TEST_F(EventsTest, PortEventsFollowTheLink) {
    auto wait_event = [&](AsyncEventType want) {
        for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5); std::chrono::steady_clock::now() < end;) {
            pair->b->progress();
            for (auto e : events_of(*a.port)) {
                EXPECT_EQ(e.type, want);
                EXPECT_FALSE(e.qp || e.cq || e.srq);
                return e.type == want;
            }
            a.port->progress();
        }
        return false;
    };
    pair->dev_a.link_up = false;
    EXPECT_TRUE(wait_event(AsyncEventType::port_error));
    pair->dev_a.link_up = true;
    EXPECT_TRUE(wait_event(AsyncEventType::port_active));
    for (int i = 0; i < 5000; ++i) a.port->progress();
    EXPECT_TRUE(events_of(*a.port).empty()) << "each change once";
}

}  // namespace
}  // namespace vfab::rdma::test
