// Bad input to vfab's e1000e driver on the real (emulated) 82574L: every malformed or
// unauthorised work request gets a return code or an error completion, and none of them puts
// a descriptor in front of the device (the tail registers do not move). Plus destroyed
// objects, a full queue, and a reset while the queues are busy.
#include <gtest/gtest.h>

#include <thread>

#include "e1000e_pair.hpp"
#include "vfab/drivers/e1000e/regs.hpp"
#include "vfab/vfio/device.hpp"
#include "vfab/vfio/event_wait.hpp"

namespace vfab::lab {
namespace {
using vfio::IommuBackend;
namespace reg = e1000e::reg;

e1000e::QpInitAttr qp_attr(e1000e::CompletionQueue* cq, uint32_t max_recv_wr = 256) {
    e1000e::QpInitAttr a;
    a.send_cq = a.recv_cq = cq;
    a.caps.max_recv_wr = max_recv_wr;
    a.caps.max_send_sge = 2;
    return a;
}

class E1000eErrors : public ::testing::TestWithParam<IommuBackend> {
protected:
    void SetUp() override { ASSERT_NO_FATAL_FAILURE(nic.open("e1000e-0", GetParam())); }

    uint32_t tdt() { return nic.dev->bar0().read32(reg::TDT); }
    uint32_t rdt() { return nic.dev->bar0().read32(reg::RDT); }

    // Posts one send of `sges` and returns the completion it produced (after checking that
    // no descriptor reached the device).
    Completion send_expecting_error(std::span<const Sge> sges, uint64_t wr_id) {
        const uint32_t before = tdt();
        SendWr wr{wr_id, sges.data(), uint32_t(sges.size()), send_signaled};
        PostResult r = nic.qp->post_send({&wr, 1});
        EXPECT_EQ(r.error, 0);
        EXPECT_EQ(r.posted, 1u);
        EXPECT_EQ(tdt(), before) << "a descriptor went to the device";
        Completion wc{};
        EXPECT_EQ(nic.cq->poll({&wc, 1}), 1);
        return wc;
    }
    uint64_t buf(size_t off = 0) const { return nic.addr(off); }

    E1000eNic nic;
};

TEST_P(E1000eErrors, BadOrStaleKeyCompletesWithProtectionError) {
    Sge sge{buf(), 100, nic.mr.lkey ^ 0x100};   // another index
    Completion wc = send_expecting_error({&sge, 1}, 41);
    EXPECT_EQ(wc.wr_id, 41u);
    EXPECT_EQ(wc.status, WcStatus::local_protection_error);
    EXPECT_EQ(wc.opcode, WcOpcode::send);

    // A key that was valid: deregistered, then used.
    auto other = nic.dev->pd().register_memory(nic.data, 4096, dma::Access::local_write);
    ASSERT_TRUE(other.ok()) << other.error().message;
    ASSERT_TRUE(nic.dev->pd().deregister(*other).ok());
    Sge stale{buf(), 100, other->lkey};
    EXPECT_EQ(send_expecting_error({&stale, 1}, 42).status, WcStatus::local_protection_error);

    // Receive side: the buffer is refused, RDT does not move, an error completion follows.
    const uint32_t before = rdt();
    Sge rsge{buf(), 2048, 0xffffff00};
    RecvWr rwr{43, &rsge, 1, 0};
    PostResult r = nic.qp->post_recv({&rwr, 1});
    EXPECT_EQ(r.error, 0);
    EXPECT_EQ(rdt(), before);
    Completion rwc{};
    ASSERT_EQ(nic.cq->poll({&rwc, 1}), 1);
    EXPECT_EQ(rwc.wr_id, 43u);
    EXPECT_EQ(rwc.status, WcStatus::local_protection_error);
    EXPECT_EQ(rwc.opcode, WcOpcode::recv);
}

TEST_P(E1000eErrors, SgeOutsideItsRegionCompletesWithProtectionError) {
    const uint64_t end = buf(nic.size);
    Sge past{end - 50, 100, nic.mr.lkey};   // straddles the end
    EXPECT_EQ(send_expecting_error({&past, 1}, 1).status, WcStatus::local_protection_error);
    Sge before{buf() - 64, 100, nic.mr.lkey};
    EXPECT_EQ(send_expecting_error({&before, 1}, 2).status, WcStatus::local_protection_error);
    // The second SGE bad, the first fine: still nothing reaches the device.
    Sge two[2] = {{buf(), 14, nic.mr.lkey}, {end, 60, nic.mr.lkey}};
    EXPECT_EQ(send_expecting_error(two, 3).status, WcStatus::local_protection_error);

    // A receive buffer must lie wholly (2048 bytes) inside memory registered for local write.
    auto ro = nic.dev->pd().register_memory(nic.data, 8192, dma::Access::none);
    ASSERT_TRUE(ro.ok()) << ro.error().message;
    for (Sge rsge : {Sge{buf(), 2048, ro->lkey}, Sge{end - 1024, 2048, nic.mr.lkey}}) {
        RecvWr rwr{5, &rsge, 1, 0};
        const uint32_t was = rdt();
        EXPECT_TRUE(nic.qp->post_recv({&rwr, 1}));
        EXPECT_EQ(rdt(), was);
        Completion wc{};
        ASSERT_EQ(nic.cq->poll({&wc, 1}), 1);
        EXPECT_EQ(wc.status, WcStatus::local_protection_error);
    }
}

TEST_P(E1000eErrors, MalformedRequestsAreRefusedWithEinval) {
    const uint32_t before = tdt();
    auto post = [&](SendWr wr) { return nic.qp->post_send({&wr, 1}); };
    Sge many[e1000e::kMaxSendSge + 1];
    for (auto& s : many) s = {buf(), 60, nic.mr.lkey};
    const uint32_t max = nic.qp->caps().max_send_sge;
    PostResult r = post({1, many, max + 1, 0});
    EXPECT_EQ(r.error, EINVAL) << "too many SGEs";
    EXPECT_EQ(r.posted, 0u);
    EXPECT_EQ(post({1, many, 0, 0}).error, EINVAL) << "no SGE";
    Sge zero{buf(), 0, nic.mr.lkey};
    EXPECT_EQ(post({1, &zero, 1, 0}).error, EINVAL) << "length 0";
    Sge with_empty[2] = {{buf(), 60, nic.mr.lkey}, {buf(64), 0, nic.mr.lkey}};
    EXPECT_EQ(post({1, with_empty, 2, 0}).error, EINVAL) << "an empty SGE";
    Sge tiny{buf(), 13, nic.mr.lkey};
    EXPECT_EQ(post({1, &tiny, 1, 0}).error, EINVAL) << "shorter than an Ethernet header";
    Sge jumbo{buf(), 1515, nic.mr.lkey};
    EXPECT_EQ(post({1, &jumbo, 1, 0}).error, EINVAL) << "over the MTU";
    Sge split[2] = {{buf(), 1000, nic.mr.lkey}, {buf(1000), 515, nic.mr.lkey}};
    EXPECT_EQ(post({1, split, 2, 0}).error, EINVAL) << "over the MTU in two SGEs";
    Sge not_ip{buf(), 100, nic.mr.lkey};   // zeroed memory: no IPv4/IPv6 header to offload
    EXPECT_EQ(post({1, &not_ip, 1, send_ip_csum}).error, EINVAL) << "checksum offload of a non-IP frame";
    EXPECT_EQ(tdt(), before);

    auto recv = [&](RecvWr wr) { return nic.qp->post_recv({&wr, 1}); };
    Sge small{buf(), 2047, nic.mr.lkey};
    EXPECT_EQ(recv({1, &small, 1, 0}).error, EINVAL) << "smaller than the device's buffer size";
    Sge two[2] = {{buf(), 2048, nic.mr.lkey}, {buf(4096), 2048, nic.mr.lkey}};
    EXPECT_EQ(recv({1, two, 2, 0}).error, EINVAL) << "two SGEs";
    Completion wc{};
    EXPECT_EQ(nic.cq->poll({&wc, 1}), 0) << "refused WRs leave no completion";

    // A batch stops at the first bad WR; the ones before it are posted.
    Sge ok{buf(), 2048, nic.mr.lkey};
    RecvWr batch[3] = {{1, &ok, 1, 0}, {2, &small, 1, 0}, {3, &ok, 1, 0}};
    r = nic.qp->post_recv(batch);
    EXPECT_EQ(r.error, EINVAL);
    EXPECT_EQ(r.posted, 1u);
    EXPECT_EQ(nic.qp->recv_outstanding(), 1u);
}

TEST_P(E1000eErrors, FullQueuesReturnEnomem) {
    const uint32_t depth = nic.qp->caps().max_recv_wr;
    std::vector<RecvWr> wrs(depth + 1);
    Sge sge{buf(), 2048, nic.mr.lkey};
    for (uint32_t i = 0; i <= depth; ++i) wrs[i] = {i, &sge, 1, 0};   // one buffer, never filled
    PostResult r = nic.qp->post_recv(wrs);
    EXPECT_EQ(r.error, ENOMEM);
    EXPECT_EQ(r.posted, depth);
    EXPECT_EQ(nic.qp->post_recv({wrs.data(), 1}).error, ENOMEM);

    // Sends leave the NIC at once, so fill the send queue in one batch, unsignaled.
    const uint32_t sdepth = nic.qp->caps().max_send_wr;
    std::vector<SendWr> swrs(sdepth + 1);
    Sge ssge{buf(), 60, nic.mr.lkey};
    for (uint32_t i = 0; i <= sdepth; ++i) swrs[i] = {i, &ssge, 1, 0};
    r = nic.qp->post_send(swrs);
    EXPECT_EQ(r.error, ENOMEM);
    EXPECT_EQ(r.posted, sdepth);
}

TEST_P(E1000eErrors, DestroyedObjectsReturnErrorsAndNeverCrash) {
    EXPECT_EQ(nic.cq->destroy().error().code, EBUSY) << "the QP still uses it";
    ASSERT_TRUE(nic.qp->destroy().ok());
    EXPECT_EQ(nic.qp->destroy().error().code, ENODEV);
    Sge sge{buf(), 60, nic.mr.lkey};
    SendWr wr{1, &sge, 1, 0};
    EXPECT_EQ(nic.qp->post_send({&wr, 1}).error, ENODEV);
    RecvWr rwr{1, &sge, 1, 0};
    EXPECT_EQ(nic.qp->post_recv({&rwr, 1}).error, ENODEV);
    EXPECT_EQ(nic.qp->state(), QpState::destroyed);

    ASSERT_TRUE(nic.cq->destroy().ok());
    Completion wc[4];
    EXPECT_EQ(nic.cq->poll(wc), -ENODEV);
    EXPECT_EQ(nic.cq->arm().error().code, ENODEV);
    EXPECT_EQ(nic.cq->destroy().error().code, ENODEV);
    auto q = nic.dev->create_qp(qp_attr(nic.cq));
    ASSERT_FALSE(q.ok());
    EXPECT_EQ(q.error().code, ENODEV);

    // The device goes on: new CQ and QP.
    auto cq = nic.dev->create_cq(64);
    ASSERT_TRUE(cq.ok()) << cq.error().message;
    auto qp = nic.dev->create_qp(qp_attr(*cq));
    ASSERT_TRUE(qp.ok()) << qp.error().message;
}

TEST_P(E1000eErrors, ControlPathLimitsAreExplained) {
    auto second = nic.dev->create_qp(qp_attr(nic.cq));
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.error().code, EBUSY);
    EXPECT_NE(second.error().message.find("one queue pair"), std::string::npos) << second.error().message;
    std::vector<e1000e::CompletionQueue*> cqs;
    for (int i = 0; i < 3; ++i) cqs.push_back(*nic.dev->create_cq(16));
    auto fifth = nic.dev->create_cq(16);
    ASSERT_FALSE(fifth.ok());
    EXPECT_EQ(fifth.error().code, ENOSPC);
    EXPECT_EQ(nic.dev->create_cq(0).error().code, EINVAL);

    e1000e::DeviceOptions opts;
    opts.vfio.backend = GetParam();
    auto other = e1000e::Device::open(address_of("edu"), opts);
    ASSERT_FALSE(other.ok());
    EXPECT_EQ(other.error().code, ENODEV);
    EXPECT_NE(other.error().message.find("not an Intel 82574L"), std::string::npos) << other.error().message;
}

// A reset while receive buffers and sends are outstanding: the QP goes to the error state,
// every outstanding WR completes (flushed), a sleeper on the channel wakes, nothing hangs;
// a new QP then carries traffic.
TEST_P(E1000eErrors, ResetWhileBusyFlushesAndRecovers) {
    const uint32_t depth = nic.qp->caps().max_recv_wr;
    for (uint32_t i = 0; i < depth; ++i) {
        Sge sge{nic.addr(size_t(i % 8) * 2048), 2048, nic.mr.lkey};
        RecvWr wr{i, &sge, 1, 0};
        ASSERT_TRUE(nic.qp->post_recv({&wr, 1}));
    }
    ASSERT_TRUE(nic.cq->arm().ok());
    std::atomic<int> woke{-2};
    std::thread sleeper([&] {
        int fd[] = {nic.cq->channel_fd()};
        auto r = vfio::wait_any(fd, 10000);
        woke = r.ok() ? *r : -3;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto r = nic.dev->reset();
    ASSERT_TRUE(r.ok()) << r.error().message;
    sleeper.join();
    EXPECT_EQ(woke.load(), 0) << "the sleeper was not woken by the reset";
    EXPECT_EQ(nic.qp->state(), QpState::error);

    std::vector<Completion> wc(depth + 8);
    uint32_t flushed = 0;
    for (int pass = 0; pass < 4; ++pass) {
        int n = nic.cq->poll(wc);
        ASSERT_GE(n, 0);
        for (int i = 0; i < n; ++i) {
            EXPECT_EQ(wc[i].status, WcStatus::wr_flush_error);
            EXPECT_EQ(wc[i].wr_id, flushed);
            ++flushed;
        }
    }
    EXPECT_EQ(flushed, depth);
    Sge sge{buf(), 2048, nic.mr.lkey};
    RecvWr wr{1, &sge, 1, 0};
    EXPECT_EQ(nic.qp->post_recv({&wr, 1}).error, EIO);

    ASSERT_TRUE(nic.qp->destroy().ok());
    auto qp = nic.dev->create_qp(qp_attr(nic.cq, 511));
    ASSERT_TRUE(qp.ok()) << qp.error().message;
    nic.qp = *qp;
    E1000eNic peer;
    ASSERT_NO_FATAL_FAILURE(peer.open("e1000e-1", GetParam()));
    TrafficResult t = run_traffic(*nic.qp, *nic.cq, *peer.qp, *peer.cq, nic.sender(), peer.receiver(), 2000);
    EXPECT_TRUE(t.error.empty()) << t.error;
    t = run_traffic(*peer.qp, *peer.cq, *nic.qp, *nic.cq, peer.sender(), nic.receiver(), 2000);
    EXPECT_TRUE(t.error.empty()) << t.error;
}

INSTANTIATE_TEST_SUITE_P(Lab, E1000eErrors, ::testing::ValuesIn(backends()), BackendName());

}  // namespace
}  // namespace vfab::lab
