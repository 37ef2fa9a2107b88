// Bad input to vfab's virtio-net driver on the lab's virtio-net (split and packed rings): error
// completions and return codes, nothing reaches the device; destroyed objects; a full queue;
// a reset while receives are posted (flushed, nothing hangs, a new QP works).
#include <gtest/gtest.h>

#include <thread>

#include "virtio_pair.hpp"
#include "vfab/vfio/event_wait.hpp"

namespace vfab::lab {
namespace {
using vfio::IommuBackend;
using virtio_net::RingFormat;
using Param = std::tuple<IommuBackend, RingFormat>;

class VirtioNetErrors : public ::testing::TestWithParam<Param> {
protected:
    void SetUp() override { ASSERT_NO_FATAL_FAILURE(nic.open("virtio-net", std::get<0>(GetParam()), std::get<1>(GetParam()))); }
    uint64_t buf(size_t off = 0) const { return reinterpret_cast<uint64_t>(nic.data + off); }
    VirtioNic nic;
};

TEST_P(VirtioNetErrors, BadKeysAndBoundsCompleteWithProtectionErrors) {
    const size_t size = size_t(2 * VirtioNic::kSlots) * VirtioNic::kBuf;
    Sge bad_key{buf(), 100, nic.mr.lkey ^ 0x100};
    Sge past_end{buf(size - 50), 100, nic.mr.lkey};
    for (Sge* s : {&bad_key, &past_end}) {
        SendWr wr{1, s, 1, 0};
        PostResult r = nic.qp->post_send({&wr, 1});
        ASSERT_EQ(r.error, 0);
        Completion wc{};
        ASSERT_EQ(nic.cq->poll({&wc, 1}), 1);
        EXPECT_EQ(wc.status, WcStatus::local_protection_error);
    }
    auto ro = nic.dev->pd().register_memory(nic.data, 8192, dma::Access::none);
    ASSERT_TRUE(ro.ok()) << ro.error().message;
    Sge rsge{buf(), 2048, ro->lkey};
    RecvWr rwr{5, &rsge, 1, 0};
    ASSERT_TRUE(nic.qp->post_recv({&rwr, 1}));
    Completion wc{};
    ASSERT_EQ(nic.cq->poll({&wc, 1}), 1);
    EXPECT_EQ(wc.status, WcStatus::local_protection_error) << "receive into memory without LOCAL_WRITE";
    EXPECT_EQ(nic.qp->recv_outstanding(), 0u);
}

TEST_P(VirtioNetErrors, MalformedRequestsAreRefused) {
    auto post = [&](SendWr wr) { return nic.qp->post_send({&wr, 1}); };
    Sge many[virtio_net::kMaxSendSge + 1];
    for (auto& s : many) s = {buf(), 60, nic.mr.lkey};
    EXPECT_EQ(post({1, many, nic.qp->caps().max_send_sge + 1, 0}).error, EINVAL) << "too many SGEs";
    EXPECT_EQ(post({1, many, 0, 0}).error, EINVAL) << "no SGE";
    Sge zero{buf(), 0, nic.mr.lkey};
    EXPECT_EQ(post({1, &zero, 1, 0}).error, EINVAL) << "length 0";
    Sge tiny{buf(), 13, nic.mr.lkey};
    EXPECT_EQ(post({1, &tiny, 1, 0}).error, EINVAL) << "shorter than an Ethernet header";
    Sge jumbo{buf(), 1515, nic.mr.lkey};
    EXPECT_EQ(post({1, &jumbo, 1, 0}).error, EINVAL) << "over the MTU";
    Sge not_ip{buf(4096), 100, nic.mr.lkey};
    EXPECT_EQ(post({1, &not_ip, 1, send_ip_csum}).error, EINVAL) << "checksum offload of a non-IP frame";
    Sge small{buf(), 1513, nic.mr.lkey};
    RecvWr rwr{1, &small, 1, 0};
    EXPECT_EQ(nic.qp->post_recv({&rwr, 1}).error, EINVAL) << "a receive buffer smaller than a frame";
    EXPECT_EQ(nic.qp->send_outstanding(), 0u);
    EXPECT_EQ(nic.qp->recv_outstanding(), 0u);
}

TEST_P(VirtioNetErrors, FullQueueReturnsEnomem) {
    const uint32_t depth = nic.qp->caps().max_recv_wr;
    std::vector<RecvWr> wrs(depth + 1);
    Sge sge{buf(), 2048, nic.mr.lkey};
    for (uint32_t i = 0; i <= depth; ++i) wrs[i] = {i, &sge, 1, 0};
    PostResult r = nic.qp->post_recv(wrs);
    EXPECT_EQ(r.error, ENOMEM);
    EXPECT_EQ(r.posted, depth);
}

TEST_P(VirtioNetErrors, DestroyedObjectsReturnErrors) {
    EXPECT_EQ(nic.cq->destroy().error().code, EBUSY);
    ASSERT_TRUE(nic.qp->destroy().ok());
    Sge sge{buf(), 60, nic.mr.lkey};
    SendWr wr{1, &sge, 1, 0};
    EXPECT_EQ(nic.qp->post_send({&wr, 1}).error, ENODEV);
    EXPECT_EQ(nic.qp->destroy().error().code, ENODEV);
    ASSERT_TRUE(nic.cq->destroy().ok());
    Completion wc[2];
    EXPECT_EQ(nic.cq->poll(wc), -ENODEV);
    EXPECT_EQ(nic.cq->arm().error().code, ENODEV);
    // The device goes on.
    auto cq = nic.dev->create_cq(64);
    ASSERT_TRUE(cq.ok()) << cq.error().message;
    virtio_net::QpInitAttr a;
    a.send_cq = a.recv_cq = *cq;
    a.caps = {16, 16, 1, 1};
    auto qp = nic.dev->create_qp(a);
    ASSERT_TRUE(qp.ok()) << qp.error().message;
}

TEST_P(VirtioNetErrors, ResetWhileBusyFlushesAndRecovers) {
    const uint32_t depth = nic.qp->caps().max_recv_wr;
    for (uint32_t i = 0; i < depth; ++i) {
        Sge sge{buf(size_t(i % 8) * 2048), 2048, nic.mr.lkey};
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
    ASSERT_TRUE(nic.dev->reset().ok());
    sleeper.join();
    EXPECT_EQ(woke.load(), 0) << "the sleeper was not woken by the reset";
    EXPECT_EQ(nic.qp->state(), QpState::error);
    std::vector<Completion> wc(depth + 4);
    int n = nic.cq->poll(wc);
    ASSERT_EQ(n, int(depth));
    for (int i = 0; i < n; ++i) {
        EXPECT_EQ(wc[i].status, WcStatus::wr_flush_error);
        EXPECT_EQ(wc[i].wr_id, uint64_t(i)) << "flushed in posting order";
    }
    ASSERT_TRUE(nic.qp->destroy().ok());
    virtio_net::QpInitAttr a;
    a.send_cq = a.recv_cq = nic.cq;
    a.caps = {VirtioNic::kSlots, VirtioNic::kSlots, 2, 1};
    auto qp = nic.dev->create_qp(a);
    ASSERT_TRUE(qp.ok()) << qp.error().message;
    nic.qp = *qp;
    VirtioNic peer;
    ASSERT_NO_FATAL_FAILURE(peer.open("virtio-net-1", std::get<0>(GetParam()), std::get<1>(GetParam())));
    TrafficResult t = run_traffic(*nic.qp, *nic.cq, *peer.qp, *peer.cq, nic.sender(), peer.receiver(), 2000);
    EXPECT_TRUE(t.error.empty()) << t.error;
}

// A device that does not go through the IOMMU (no VIRTIO_F_ACCESS_PLATFORM) would DMA to
// physical addresses behind the IOMMU's back: vfab refuses it, saying how to fix QEMU's side.
TEST(VirtioNetRefusals, ADeviceWithoutAccessPlatformIsRefused) {
    virtio_net::DeviceOptions o;
    o.vfio.backend = backends().front();
    auto d = virtio_net::Device::open(address_of("virtio-net-no-platform"), o);
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.error().code, ENOTSUP);
    EXPECT_NE(d.error().message.find("VIRTIO_F_ACCESS_PLATFORM"), std::string::npos) << d.error().message;
    EXPECT_NE(d.error().message.find("iommu_platform=on"), std::string::npos) << d.error().message;
    // Nothing was left behind: the device opens again (and is refused again the same way).
    auto again = virtio_net::Device::open(address_of("virtio-net-no-platform"), o);
    ASSERT_FALSE(again.ok());
    EXPECT_EQ(again.error().code, ENOTSUP);
}

std::vector<Param> params() {
    std::vector<Param> p;
    for (IommuBackend b : backends())
        for (RingFormat f : {RingFormat::split, RingFormat::packed}) p.emplace_back(b, f);
    return p;
}

INSTANTIATE_TEST_SUITE_P(Lab, VirtioNetErrors, ::testing::ValuesIn(params()), [](const auto& info) {
    return std::string(vfio::to_string(std::get<0>(info.param))) + "_" + to_string(std::get<1>(info.param));
});

}  // namespace
}  // namespace vfab::lab
