// Shared receive queues over two ports on a fake wire: queue pairs of one SRQ take its WRs in
// the order they were posted, a message of several packets keeps the WR it started in while
// other queue pairs take the next ones, an empty SRQ makes the sender wait (RNR) until a WR is
// posted, the limit event fires once, a queue pair that fails flushes only the WR it held and
// says it takes no more (last WQE reached), and every bad input is refused with nothing posted.
#include <poll.h>

#include <cstring>

#include "rdma_connect.hpp"

namespace vfab::rdma::test {
namespace {

constexpr uint32_t kQps = 3;
constexpr uint32_t kSlot = 4096;   // bytes of b's memory per receive WR

// A drop hook for the `drop_at`th RoCEv2 packet and (with `and_later`) the ones after it.
struct DropRoce {
    uint32_t drop_at = 0;
    bool and_later = false;
    uint32_t seen = 0;
    static bool hook(void* ctx, const uint8_t* f, uint32_t len) {
        auto& d = *static_cast<DropRoce*>(ctx);
        const bool roce = len > 42 && f[12] == 0x08 && f[13] == 0x00 && f[36] == 0x12 && f[37] == 0xB7;   // UDP 4791
        if (!roce) return false;
        ++d.seen;
        return d.seen == d.drop_at || (d.and_later && d.seen > d.drop_at);
    }
};

class SrqTest : public ::testing::Test {
protected:
    void SetUp() override {
        ma.assign(1 << 16, 0);
        mb.assign(1 << 18, 0);
        auto srq = pair.b->create_srq(SrqAttr{64, 2, 0});
        ASSERT_TRUE(srq) << srq.error().message;
        srq_ = *srq;
        for (uint32_t i = 0; i < kQps; ++i) {
            a[i] = make_side(*pair.a, QpType::rc, ma);
            b[i] = make_side(*pair.b, QpType::rc, mb, 4096, srq_);
            connect_rc(a[i], b[i], 100 + i, 200 + i, /*mtu 1024*/ 3, 8, 7, 7);
            connect_rc(b[i], a[i], 200 + i, 100 + i, 3, 8, 7, 7);
        }
    }
    // Posts WR `id` on the SRQ: slot `id` of b's memory.
    PostResult post_srq(uint64_t id, uint32_t len = kSlot) {
        Sge s{reinterpret_cast<uint64_t>(mb.data() + id * kSlot), len, b[0].mr.lkey};
        RecvWr r{id, &s, 1, 0};
        return srq_->post_recv(std::span(&r, 1));
    }
    // a[i] sends `len` bytes of `seed` (from slot `id` of a's memory).
    void send_from(uint32_t i, uint32_t len, uint8_t seed, uint64_t id) {
        uint8_t* from = ma.data() + (id % 16) * kSlot;
        std::memset(from, seed, len);
        Sge s{reinterpret_cast<uint64_t>(from), len, a[i].mr.lkey};
        RdmaSendWr w = wr_of(WrOpcode::send, id, &s);
        ASSERT_TRUE(a[i].qp->post_send(std::span(&w, 1)));
    }
    // Runs both ports until b's queue pairs have `n` receive completions between them.
    std::vector<Wc> recv_wcs(size_t n, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
        std::vector<Wc> out;
        const auto end = std::chrono::steady_clock::now() + limit;
        Wc wc[16];
        while (out.size() < n && std::chrono::steady_clock::now() < end) {
            pair.a->progress();
            for (uint32_t i = 0; i < kQps; ++i) {
                const int k = b[i].cq->poll(wc);
                for (int j = 0; j < k; ++j) out.push_back(wc[j]);
            }
            for (uint32_t i = 0; i < kQps; ++i) a[i].cq->poll(wc);   // the sends' completions
        }
        return out;
    }
    uint32_t qp_index(uint32_t qpn) const {
        for (uint32_t i = 0; i < kQps; ++i)
            if (b[i].qp->qp_num() == qpn) return i;
        return kQps;
    }

    RdmaPair pair;
    std::vector<uint8_t> ma, mb;
    Side a[kQps], b[kQps];
    Srq* srq_ = nullptr;
};

TEST_F(SrqTest, QueuePairsTakeItsWrsInPostedOrder) {
    for (uint64_t id = 0; id < 6; ++id) ASSERT_TRUE(post_srq(id));
    // Three-packet messages from every QP at once: their packets interleave on b.
    for (uint32_t i = 0; i < kQps; ++i) send_from(i, 3000, uint8_t(0x10 + i), i);
    for (uint32_t i = 0; i < kQps; ++i) send_from(i, 2500, uint8_t(0x20 + i), 10 + i);
    auto wc = recv_wcs(6);
    ASSERT_EQ(wc.size(), 6u);
    std::vector<uint32_t> per_qp(kQps);
    for (size_t k = 0; k < wc.size(); ++k) {
        ASSERT_EQ(wc[k].status, RdmaWcStatus::success) << to_string(wc[k].status);
        const uint32_t i = qp_index(wc[k].qp_num);
        ASSERT_LT(i, kQps);
        // The nth message of QP i: its length and bytes, in the slot of the WR it completed.
        const uint32_t len = per_qp[i] == 0 ? 3000 : 2500;
        const uint8_t seed = uint8_t((per_qp[i] == 0 ? 0x10 : 0x20) + i);
        ++per_qp[i];
        EXPECT_EQ(wc[k].byte_len, len);
        const uint8_t* got = mb.data() + wc[k].wr_id * kSlot;
        EXPECT_TRUE(std::all_of(got, got + len, [&](uint8_t x) { return x == seed; })) << "WR " << wc[k].wr_id;
    }
    // Every WR was used once, and they were taken oldest first: completions of one QP come in
    // the order of its messages, and the six WR ids are 0-5.
    std::vector<uint64_t> ids;
    for (auto& w : wc) ids.push_back(w.wr_id);
    std::sort(ids.begin(), ids.end());
    EXPECT_EQ(ids, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(per_qp, (std::vector<uint32_t>{2, 2, 2}));
}

TEST_F(SrqTest, AnEmptySrqMakesTheSenderWaitUntilAWrIsPosted) {
    send_from(0, 100, 0x5A, 1);
    EXPECT_TRUE(recv_wcs(1, std::chrono::milliseconds(50)).empty());   // RNR NAKs meanwhile
    ASSERT_TRUE(post_srq(7));
    auto wc = recv_wcs(1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, RdmaWcStatus::success);
    EXPECT_EQ(wc[0].wr_id, 7u);
    EXPECT_EQ(wc[0].qp_num, b[0].qp->qp_num());
    EXPECT_EQ(mb[7 * kSlot + 99], 0x5A);
    EXPECT_GT(pair.b->stats().naks_sent, 0u);
}

TEST_F(SrqTest, TheLimitEventFiresOnceWhenFewerWrsThanTheLimitStay) {
    AsyncEvent e;
    EXPECT_FALSE(pair.b->get_async_event(e));
    for (uint64_t id = 0; id < 8; ++id) ASSERT_TRUE(post_srq(id));
    ASSERT_TRUE(srq_->modify(SrqAttr{0, 0, 5}, srq_attr_limit));
    EXPECT_EQ(srq_->query().srq_limit, 5u);
    for (uint64_t n = 0; n < 3; ++n) send_from(0, 64, 1, n);
    ASSERT_EQ(recv_wcs(3).size(), 3u);   // 5 stay: not below the limit
    EXPECT_FALSE(pair.b->get_async_event(e));
    send_from(1, 64, 2, 9);
    ASSERT_EQ(recv_wcs(1).size(), 1u);   // 4 stay
    pollfd p{pair.b->async_fd(), POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 0), 1);
    ASSERT_TRUE(pair.b->get_async_event(e));
    EXPECT_EQ(e.type, AsyncEventType::srq_limit_reached);
    EXPECT_EQ(e.srq, srq_);
    EXPECT_EQ(srq_->query().srq_limit, 0u);   // disarmed
    EXPECT_FALSE(pair.b->get_async_event(e));
    EXPECT_EQ(::poll(&p, 1, 0), 0);
    send_from(2, 64, 3, 10);
    ASSERT_EQ(recv_wcs(1).size(), 1u);
    EXPECT_FALSE(pair.b->get_async_event(e));   // once, until armed again
}

// With a hook set (the drop-in verbs library's), events go to it as they are raised and are not
// queued; without it, queued again.
TEST_F(SrqTest, AnAsyncHookTakesTheEventsInsteadOfTheQueue) {
    struct Seen {
        int n = 0;
        AsyncEvent last;
    } seen;
    pair.b->set_async_hook([](void* c, const AsyncEvent& e) { ++static_cast<Seen*>(c)->n, static_cast<Seen*>(c)->last = e; },
                           &seen);
    for (uint64_t id = 0; id < 4; ++id) ASSERT_TRUE(post_srq(id));
    ASSERT_TRUE(srq_->modify(SrqAttr{0, 0, 4}, srq_attr_limit));
    send_from(0, 64, 1, 0);
    ASSERT_EQ(recv_wcs(1).size(), 1u);
    EXPECT_EQ(seen.n, 1);
    EXPECT_EQ(seen.last.type, AsyncEventType::srq_limit_reached);
    EXPECT_EQ(seen.last.srq, srq_);
    AsyncEvent e;
    EXPECT_FALSE(pair.b->get_async_event(e));
    pair.b->set_async_hook(nullptr, nullptr);
    ASSERT_TRUE(srq_->modify(SrqAttr{0, 0, 3}, srq_attr_limit));
    send_from(1, 64, 2, 1);
    ASSERT_EQ(recv_wcs(1).size(), 1u);
    EXPECT_EQ(seen.n, 1);
    EXPECT_TRUE(pair.b->get_async_event(e));
}

TEST_F(SrqTest, AFailedQpFlushesOnlyTheWrItHeldAndTakesNoMore) {
    for (uint64_t id = 0; id < 4; ++id) ASSERT_TRUE(post_srq(id));
    // b[0] gets the first two packets of a three-packet message; the last is lost.
    DropRoce drop{3};
    pair.b->set_rx_drop_hook(DropRoce::hook, &drop);
    send_from(0, 3000, 0x77, 1);
    for (int i = 0; i < 100 && drop.seen < 3; ++i) pair.a->progress(), pair.b->progress();
    pair.b->set_rx_drop_hook(nullptr, nullptr);
    ASSERT_GE(drop.seen, 3u);
    QpAttr x;
    x.qp_state = RdmaQpState::error;
    ASSERT_TRUE(b[0].qp->modify(x, attr_state));
    Wc wc[4];
    ASSERT_EQ(b[0].cq->poll(wc), 1);
    EXPECT_EQ(wc[0].status, RdmaWcStatus::wr_flush_err);
    EXPECT_EQ(wc[0].wr_id, 0u);   // the WR it held; 1-3 stay on the SRQ
    AsyncEvent e;
    ASSERT_TRUE(pair.b->get_async_event(e));
    EXPECT_EQ(e.type, AsyncEventType::qp_last_wqe_reached);
    EXPECT_EQ(e.qp, b[0].qp);
    // The other queue pairs go on with the SRQ's WRs.
    send_from(1, 500, 0x31, 2);
    auto got = recv_wcs(1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].status, RdmaWcStatus::success);
    EXPECT_EQ(got[0].wr_id, 1u);
    EXPECT_EQ(got[0].qp_num, b[1].qp->qp_num());
}

TEST_F(SrqTest, ADestroyedOrResetQpGivesItsWrBack) {
    ASSERT_TRUE(post_srq(0));
    ASSERT_TRUE(post_srq(1));
    DropRoce drop{2, true};
    pair.b->set_rx_drop_hook(DropRoce::hook, &drop);
    send_from(0, 3000, 0x77, 1);   // b[0] takes WR 0 with the first packet
    for (int i = 0; i < 100 && drop.seen < 2; ++i) pair.a->progress(), pair.b->progress();
    pair.b->set_rx_drop_hook(nullptr, nullptr);
    QpAttr x;
    x.qp_state = RdmaQpState::reset;
    ASSERT_TRUE(b[0].qp->modify(x, attr_state));
    send_from(1, 100, 0x42, 2);
    auto got = recv_wcs(1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].wr_id, 0u);   // back at the head, unused
    EXPECT_EQ(got[0].qp_num, b[1].qp->qp_num());
}

TEST_F(SrqTest, BadInputIsRefusedAndPostsNothing) {
    EXPECT_FALSE(pair.b->create_srq(SrqAttr{0, 1, 0}));
    EXPECT_FALSE(pair.b->create_srq(SrqAttr{16385, 1, 0}));
    EXPECT_FALSE(pair.b->create_srq(SrqAttr{8, 33, 0}));
    auto r = pair.b->create_srq(SrqAttr{8, 1, 9});
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("srq_limit"), std::string::npos) << r.error().message;

    // Too many SGEs, a bad key: EINVAL at that WR; a full queue: ENOMEM.
    Sge s[3] = {{reinterpret_cast<uint64_t>(mb.data()), 8, b[0].mr.lkey}, s[0], s[0]};
    RecvWr three{1, s, 3, 0};
    EXPECT_EQ(srq_->post_recv(std::span(&three, 1)).error, EINVAL);
    Sge bad{reinterpret_cast<uint64_t>(mb.data()), 8, b[0].mr.lkey ^ 0x100};
    RecvWr wrs[2] = {{1, s, 1, 0}, {2, &bad, 1, 0}};
    const PostResult pr = srq_->post_recv(wrs);
    EXPECT_EQ(pr.error, EINVAL);
    EXPECT_EQ(pr.posted, 1u);
    for (uint64_t id = 2; id <= 64; ++id) ASSERT_TRUE(post_srq(id % 16));
    EXPECT_EQ(post_srq(0).error, ENOMEM);

    // A queue pair of an SRQ has no receive queue of its own.
    RecvWr one{1, s, 1, 0};
    EXPECT_EQ(b[0].qp->post_recv(std::span(&one, 1)).error, EINVAL);

    // Grows, never shrinks; the limit at most the depth; unknown mask bits.
    EXPECT_FALSE(srq_->modify(SrqAttr{32, 0, 0}, srq_attr_max_wr));
    EXPECT_FALSE(srq_->modify(SrqAttr{0, 0, 65}, srq_attr_limit));
    EXPECT_FALSE(srq_->modify(SrqAttr{}, 4));
    ASSERT_TRUE(srq_->modify(SrqAttr{128, 0, 0}, srq_attr_max_wr));
    EXPECT_EQ(srq_->query().max_wr, 128u);
    EXPECT_EQ(srq_->query().max_sge, 2u);
    EXPECT_TRUE(post_srq(5));   // room again; the 64 posted before keep their order
    send_from(0, 10, 0x11, 1);
    auto got = recv_wcs(1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].wr_id, 1u);

    // Busy while used; a destroyed one is no queue pair's.
    auto d = srq_->destroy();
    ASSERT_FALSE(d);
    EXPECT_EQ(d.error().code, EBUSY);
    auto lone = pair.b->create_srq(SrqAttr{4, 1, 0});
    ASSERT_TRUE(lone);
    ASSERT_TRUE((*lone)->destroy());
    EXPECT_EQ((*lone)->post_recv(std::span(&one, 1)).error, ENODEV);
    RdmaQpInitAttr ia;
    ia.send_cq = ia.recv_cq = b[0].cq;
    ia.srq = *lone;
    EXPECT_FALSE(pair.b->create_qp(ia));
    ia.srq = *pair.a->create_srq(SrqAttr{4, 1, 0});   // another port's
    EXPECT_FALSE(pair.b->create_qp(ia));
    for (auto& side : b) ASSERT_TRUE(side.qp->destroy());
    EXPECT_TRUE(srq_->destroy());
}

TEST_F(SrqTest, UdQueuePairsReceiveThroughAnSrq) {
    std::vector<uint8_t> mu(1 << 14);
    Side ua = make_side(*pair.a, QpType::ud, mu);
    Side ub = make_side(*pair.b, QpType::ud, mb, 64, srq_);
    for (Side* s : {&ua, &ub}) connect_ud(*s, 0x1234);
    ASSERT_TRUE(post_srq(3));
    AhAttr ah;
    ah.dgid = pair.b->gid();
    std::memset(mu.data(), 0x66, 200);
    Sge s{reinterpret_cast<uint64_t>(mu.data()), 200, ua.mr.lkey};
    RdmaSendWr w = wr_of(WrOpcode::send, 1, &s);
    w.ah = *pair.a->create_ah(ah);
    w.remote_qpn = ub.qp->qp_num();
    w.remote_qkey = 0x1234;
    ASSERT_TRUE(ua.qp->post_send(std::span(&w, 1)));
    auto wc = wait_wc(ub, ua, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, RdmaWcStatus::success);
    EXPECT_EQ(wc[0].wr_id, 3u);
    EXPECT_EQ(wc[0].byte_len, 240u);   // after the GRH
    EXPECT_EQ(mb[3 * kSlot + 40 + 199], 0x66);
}

}  // namespace
}  // namespace vfab::rdma::test
