// Frames to the port's own address (two queue pairs of one port connected to each other) never
// reach the device, and what the drop-in verbs library hangs on the port: the CQ notify hook and
// a progress thread that sleeps when idle and wakes for a frame or an application's call.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "rdma_connect.hpp"

namespace vfab::rdma::test {
namespace {

using namespace std::chrono_literals;

// Runs one port until `cq` gave `n` completions.
std::vector<Wc> wait_own(Port& port, Cq& cq, size_t n, std::chrono::milliseconds limit = 10s) {
    std::vector<Wc> out;
    const auto end = std::chrono::steady_clock::now() + limit;
    Wc wc[16];
    while (out.size() < n && std::chrono::steady_clock::now() < end) {
        port.progress();
        const int k = cq.poll(std::span(wc, std::min<size_t>(16, n - out.size())));
        for (int i = 0; i < k; ++i) out.push_back(wc[i]);
    }
    return out;
}

class LoopbackTest : public ::testing::Test {
protected:
    void SetUp() override {
        pair = std::make_unique<RdmaPair>();
        m1.assign(1 << 17, 0);
        m2.assign(1 << 17, 0);
        s1 = make_side(*pair->a, QpType::rc, m1);
        s2 = make_side(*pair->a, QpType::rc, m2);
        connect_rc(s1, s2, 100, 200);
        connect_rc(s2, s1, 200, 100);
    }
    Sge sge(Side& s, uint64_t off, uint32_t len) { return {reinterpret_cast<uint64_t>(s.mem->data() + off), len, s.mr.lkey}; }
    std::unique_ptr<RdmaPair> pair;
    std::vector<uint8_t> m1, m2;
    Side s1, s2;
};

TEST_F(LoopbackTest, RcSendWriteReadAndAtomicNeverLeaveThePort) {
    for (uint32_t i = 0; i < 5000; ++i) m1[i] = uint8_t(i * 13 + 1);
    Sge r = sge(s2, 0, 8192);
    RecvWr rwr{7, &r, 1, 0};
    ASSERT_TRUE(s2.qp->post_recv(std::span(&rwr, 1)));
    Sge a = sge(s1, 0, 5000);
    RdmaSendWr w = wr_of(WrOpcode::send, 1, &a);
    ASSERT_TRUE(s1.qp->post_send(std::span(&w, 1)));
    auto rx = wait_own(*pair->a, *s2.cq, 1);
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].status, RdmaWcStatus::success);
    EXPECT_EQ(rx[0].byte_len, 5000u);
    EXPECT_TRUE(std::equal(m1.begin(), m1.begin() + 5000, m2.begin()));

    // WRITE into s2's memory, READ it back into s1's, then FETCH_ADD on it.
    w = wr_of(WrOpcode::rdma_write, 2, &a);
    w.remote_addr = reinterpret_cast<uint64_t>(m2.data() + 10000);
    w.rkey = s2.mr.rkey;
    ASSERT_TRUE(s1.qp->post_send(std::span(&w, 1)));
    Sge back = sge(s1, 20000, 5000);
    RdmaSendWr rd = wr_of(WrOpcode::rdma_read, 3, &back);
    rd.remote_addr = reinterpret_cast<uint64_t>(m2.data() + 10000);
    rd.rkey = s2.mr.rkey;
    ASSERT_TRUE(s1.qp->post_send(std::span(&rd, 1)));
    Sge orig = sge(s1, 40000, 8);
    RdmaSendWr fa = wr_of(WrOpcode::atomic_fetch_and_add, 4, &orig);
    fa.remote_addr = reinterpret_cast<uint64_t>(m2.data() + 30000);
    fa.rkey = s2.mr.rkey;
    fa.compare_add = 5;
    ASSERT_TRUE(s1.qp->post_send(std::span(&fa, 1)));
    auto tx = wait_own(*pair->a, *s1.cq, 4);
    ASSERT_EQ(tx.size(), 4u);
    for (const Wc& c : tx) EXPECT_EQ(c.status, RdmaWcStatus::success) << c.wr_id << ": " << to_string(c.status);
    EXPECT_TRUE(std::equal(m1.begin(), m1.begin() + 5000, m2.begin() + 10000));
    EXPECT_TRUE(std::equal(m1.begin(), m1.begin() + 5000, m1.begin() + 20000));
    uint64_t v;
    std::memcpy(&v, m2.data() + 30000, 8);
    EXPECT_EQ(v, 5u);

    // Nothing went to the device: no frame on the wire toward the other port, no ARP asked.
    EXPECT_TRUE(pair->wire.in_flight[1].empty());
    const PortStats st = pair->a->stats();
    EXPECT_EQ(st.arp_requests, 0u);
    EXPECT_GT(st.tx_frames, 0u);
    EXPECT_EQ(st.rx_frames, st.tx_frames) << "every frame sent was received by the same port";
}

TEST(LoopbackUd, ADatagramToAQueuePairOfTheSamePort) {
    RdmaPair pair;
    std::vector<uint8_t> m1(4096), m2(4096);
    Side s1 = make_side(*pair.a, QpType::ud, m1), s2 = make_side(*pair.a, QpType::ud, m2);
    for (Side* s : {&s1, &s2}) connect_ud(*s, 0x1111);
    Sge r{reinterpret_cast<uint64_t>(m2.data()), 2048, s2.mr.lkey};
    RecvWr rwr{9, &r, 1, 0};
    ASSERT_TRUE(s2.qp->post_recv(std::span(&rwr, 1)));
    AhAttr ah;
    ah.dgid = pair.a->gid();
    AddressHandle* h = *pair.a->create_ah(ah);
    std::memcpy(m1.data(), "loopback", 8);
    Sge s{reinterpret_cast<uint64_t>(m1.data()), 8, s1.mr.lkey};
    RdmaSendWr w = wr_of(WrOpcode::send, 1, &s);
    w.ah = h;
    w.remote_qpn = s2.qp->qp_num();
    w.remote_qkey = 0x1111;
    ASSERT_TRUE(s1.qp->post_send(std::span(&w, 1)));
    auto rx = wait_own(*pair.a, *s2.cq, 1);
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].status, RdmaWcStatus::success);
    EXPECT_EQ(rx[0].byte_len, 8u + 40u);   // the GRH first
    EXPECT_EQ(rx[0].src_qp, s1.qp->qp_num());
    EXPECT_EQ(rx[0].sl, kWcSlIpv4) << "the network header type, as UCX's ud_verbs reads it";
    EXPECT_EQ(std::memcmp(m2.data() + 40, "loopback", 8), 0);
    EXPECT_TRUE(pair.wire.in_flight[1].empty());
}

// ---- the CQ's notify hook ----------------------------------------------------------------------

TEST_F(LoopbackTest, NotifyHookRunsOncePerArmedNotification) {
    std::atomic<int> calls{0};
    s2.cq->set_notify_hook([](void* c) { ++*static_cast<std::atomic<int>*>(c); }, &calls);
    Sge r = sge(s2, 0, 64);
    RecvWr rwr[2] = {{1, &r, 1, 0}, {2, &r, 1, 0}};
    ASSERT_TRUE(s2.qp->post_recv(std::span(rwr, 2)));
    Sge a = sge(s1, 0, 16);
    RdmaSendWr w = wr_of(WrOpcode::send, 1, &a);
    ASSERT_TRUE(s1.qp->post_send(std::span(&w, 1)));
    ASSERT_EQ(wait_own(*pair->a, *s2.cq, 1).size(), 1u);
    EXPECT_EQ(calls, 0) << "not armed: no notification";
    ASSERT_TRUE(s2.cq->arm());
    ASSERT_TRUE(s1.qp->post_send(std::span(&w, 1)));
    ASSERT_EQ(wait_own(*pair->a, *s2.cq, 1).size(), 1u);
    EXPECT_EQ(calls, 1);
    s2.cq->set_notify_hook(nullptr, nullptr);
}

// ibv_resize_cq: the completions waiting stay, in order; less room than they take is refused.
TEST_F(LoopbackTest, ACqGrowsAndShrinksKeepingWhatWaits) {
    Sge r = sge(s2, 0, 64);
    RecvWr rwr[3] = {{1, &r, 1, 0}, {2, &r, 1, 0}, {3, &r, 1, 0}};
    ASSERT_TRUE(s2.qp->post_recv(std::span(rwr, 3)));
    Sge a = sge(s1, 0, 16);
    RdmaSendWr w = wr_of(WrOpcode::send, 9, &a);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(s1.qp->post_send(std::span(&w, 1)));
    for (int i = 0; i < 50; ++i) pair->a->progress();
    auto big = s2.cq->resize(10000);
    ASSERT_TRUE(big) << big.error().message;
    EXPECT_EQ(*big, 16384u);
    EXPECT_FALSE(s2.cq->resize(2)) << "three completions wait";
    auto small = s2.cq->resize(3);
    ASSERT_TRUE(small) << small.error().message;
    EXPECT_EQ(*small, 4u);
    Wc wc[4];
    ASSERT_EQ(s2.cq->poll(std::span(wc, 4)), 3);
    for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(wc[i].wr_id, i + 1);
    EXPECT_FALSE(s2.cq->resize(0));
}

// ---- threads of the program's own --------------------------------------------------------------

// Two threads of the program, each with its own pair of RC queue pairs on one port, post, poll
// and run the port's progress at once: after share_between_threads() every call takes the
// port's lock, and every message arrives whole (without it they would share the port's
// loopback queue, buffers and timers unlocked).
TEST(ProgramThreads, ShareOnePortAfterShareBetweenThreads) {
    RdmaPair pair;
    pair.a->share_between_threads();
    struct Lane {
        std::vector<uint8_t> ms, mr;
        Side s, r;
    };
    Lane lanes[2];
    for (int i = 0; i < 2; ++i) {
        lanes[i].ms.assign(4096, 0);
        lanes[i].mr.assign(4096, 0);
        lanes[i].s = make_side(*pair.a, QpType::rc, lanes[i].ms);
        lanes[i].r = make_side(*pair.a, QpType::rc, lanes[i].mr);
        connect_rc(lanes[i].s, lanes[i].r, uint32_t(10 + i), uint32_t(20 + i));
        connect_rc(lanes[i].r, lanes[i].s, uint32_t(20 + i), uint32_t(10 + i));
    }
    constexpr int kMessages = 3000;
    std::atomic<int> delivered[2] = {0, 0};
    auto run_lane = [&](int i) {
        Lane& l = lanes[i];
        for (int m = 0; m < kMessages; ++m) {
            const uint8_t seed = uint8_t(m * 7 + i);
            for (uint32_t b = 0; b < 2000; ++b) l.ms[b] = uint8_t(seed + b);
            Sge r{reinterpret_cast<uint64_t>(l.mr.data()), 4096, l.r.mr.lkey};
            RecvWr rwr{uint64_t(m), &r, 1, 0};
            if (!l.r.qp->post_recv(std::span(&rwr, 1))) return;
            Sge s{reinterpret_cast<uint64_t>(l.ms.data()), 2000, l.s.mr.lkey};
            RdmaSendWr w = wr_of(WrOpcode::send, uint64_t(m), &s);
            if (!l.s.qp->post_send(std::span(&w, 1))) return;
            if (wait_own(*pair.a, *l.r.cq, 1).size() != 1 || wait_own(*pair.a, *l.s.cq, 1).size() != 1) return;
            for (uint32_t b = 0; b < 2000; ++b)
                if (l.mr[b] != uint8_t(seed + b)) return;
            delivered[i].fetch_add(1);
        }
    };
    std::thread other(run_lane, 1);
    run_lane(0);
    other.join();
    EXPECT_EQ(delivered[0].load(), kMessages);
    EXPECT_EQ(delivered[1].load(), kMessages);
}

// ---- the progress thread that sleeps ----------------------------------------------------------

TEST(ProgressThread, SleepsWhenIdleAndServesAPassiveTarget) {
    RdmaPair pair;
    std::vector<uint8_t> ma(8192), mb(8192);
    Side a = make_side(*pair.a, QpType::rc, ma), b = make_side(*pair.b, QpType::rc, mb);
    connect_rc(a, b, 1, 2);
    connect_rc(b, a, 2, 1);
    ASSERT_TRUE(pair.a->start_progress_thread(ProgressThreadOptions{-1, 200}));
    std::this_thread::sleep_for(50ms);   // past the 200 µs of idle polling
    const PortStats before = pair.a->stats();

    // b writes into a's memory; a's application makes no call at all.
    std::vector<uint8_t> src(3000);
    for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 3);
    std::memcpy(mb.data(), src.data(), src.size());
    Sge s{reinterpret_cast<uint64_t>(mb.data()), uint32_t(src.size()), b.mr.lkey};
    RdmaSendWr w = wr_of(WrOpcode::rdma_write, 1, &s);
    w.remote_addr = reinterpret_cast<uint64_t>(ma.data() + 100);
    w.rkey = a.mr.rkey;
    ASSERT_TRUE(b.qp->post_send(std::span(&w, 1)));
    Wc wc;
    int got = 0;
    const auto end = std::chrono::steady_clock::now() + 10s;
    while (!got && std::chrono::steady_clock::now() < end) got = b.cq->poll(std::span(&wc, 1));
    ASSERT_EQ(got, 1) << "the sleeping thread did not wake for the WRITE";
    EXPECT_EQ(wc.status, RdmaWcStatus::success);
    EXPECT_TRUE(std::equal(src.begin(), src.end(), ma.begin() + 100));
    EXPECT_GT(pair.a->stats().rx_roce, before.rx_roce);
    pair.a->stop_progress_thread();
}

// The program busy-polls `cq` until the port's counters satisfy `done` or 10 s passed; the
// counters last read.
template <class Done>
PortStats poll_until(Port& port, Cq& cq, Done done) {
    Wc wc;
    PortStats s = port.stats();
    const auto end = std::chrono::steady_clock::now() + 10s;
    while (!done(s) && std::chrono::steady_clock::now() < end) {
        for (int i = 0; i < 1000; ++i) (void)cq.poll(std::span(&wc, 1));
        s = port.stats();
    }
    return s;
}

// While the program busy-polls, it runs the progress itself: the thread naps instead of arming
// the device's interrupt; once the program stops calling, the thread sleeps on the interrupt.
TEST(ProgressThread, NapsWhileTheProgramPollsAndSleepsWhenItStops) {
    RdmaPair pair;
    std::vector<uint8_t> ma(4096);
    Side a = make_side(*pair.a, QpType::rc, ma);
    ASSERT_TRUE(pair.a->start_progress_thread(ProgressThreadOptions{-1, 200}));
    // Until the thread napped (a loaded machine may let it sleep on the interrupt once first).
    const PortStats busy = poll_until(*pair.a, *a.cq, [](const PortStats& s) { return s.thread_naps > 0; });
    EXPECT_GT(busy.thread_naps, 0u) << "the thread never napped while the program polled";
    // The program is quiet now: one stats() call each 10 ms is not polling.
    PortStats quiet = busy;
    const auto quiet_end = std::chrono::steady_clock::now() + 5s;
    while (quiet.thread_sleeps == busy.thread_sleeps && std::chrono::steady_clock::now() < quiet_end) {
        std::this_thread::sleep_for(10ms);
        quiet = pair.a->stats();
    }
    EXPECT_GT(quiet.thread_sleeps, busy.thread_sleeps) << "the thread never slept after the program stopped calling";
    pair.a->stop_progress_thread();
}

// A program that arms its CQ is about to block on the channel: the napping thread sleeps on the
// interrupt next, so a frame wakes it (and the program) without waiting out naps.
TEST(ProgressThread, ArmingACqEndsTheNaps) {
    RdmaPair pair;
    std::vector<uint8_t> ma(4096);
    Side a = make_side(*pair.a, QpType::rc, ma);
    ASSERT_TRUE(pair.a->start_progress_thread(ProgressThreadOptions{-1, 200}));
    const PortStats s = poll_until(*pair.a, *a.cq, [](const PortStats& st) { return st.thread_naps > 0; });
    ASSERT_GT(s.thread_naps, 0u);
    // Still polling busily: without the arm the thread would only nap.
    ASSERT_TRUE(a.cq->arm());
    const PortStats after = poll_until(*pair.a, *a.cq, [&](const PortStats& st) { return st.thread_sleeps > s.thread_sleeps; });
    EXPECT_GT(after.thread_sleeps, s.thread_sleeps) << "the thread kept napping after the CQ was armed";
    pair.a->stop_progress_thread();
}

}  // namespace
}  // namespace vfab::rdma::test
