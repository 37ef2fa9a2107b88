// The multiplexed API over the generic provider adapter, with the fake loopback provider
// (plugins/fake_provider.cpp): work requests, completions, notifications and statistics pass
// through unchanged; a CQ of another device is refused; destroyed objects answer ENODEV.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "fake_sysfs.hpp"
#include "vfab/vfab.hpp"

namespace vfab {
namespace {

class Multiplexed : public ::testing::Test {
protected:
    void SetUp() override {
        sysfs.add_device("0000:00:04.0", "0x1234", "0xfa4e", "vfio-pci", 4);
        sysfs.add_device("0000:00:05.0", "0x1234", "0xfa4e", "vfio-pci", 5);
        OpenOptions o;
        o.provider_dir = VFAB_TEST_PROVIDERS "/fake";
        o.sysfs_root = sysfs.root();
        auto d = Device::open("0000:00:04.0", o);
        ASSERT_TRUE(d.ok()) << d.error().message;
        dev = std::move(*d);
        auto c = dev->create_cq(64);
        ASSERT_TRUE(c.ok()) << c.error().message;
        cq = *c;
        auto q = dev->create_qp({.send_cq = cq, .recv_cq = cq, .caps = {16, 16, 2, 1}});
        ASSERT_TRUE(q.ok()) << q.error().message;
        qp = *q;
        auto m = dev->pd().register_memory(mem.data(), mem.size(), dma::Access::local_write);
        ASSERT_TRUE(m.ok()) << m.error().message;
        mr = *m;
    }

    testing::FakeSysfsTree sysfs;
    std::vector<uint8_t> mem = std::vector<uint8_t>(8192);   // outlives the device
    std::unique_ptr<Device> dev;
    CompletionQueue* cq = nullptr;
    QueuePair* qp = nullptr;
    dma::MemoryRegion mr;
};

TEST_F(Multiplexed, FramesLoopBackThroughTheAdapter) {
    Sge rsge{reinterpret_cast<uint64_t>(mem.data() + 4096), 2048, mr.lkey};
    RecvWr rwr{11, &rsge, 1, 0};
    PostResult r = qp->post_recv({&rwr, 1});
    ASSERT_TRUE(r);
    EXPECT_EQ(r.posted, 1u);
    for (int i = 0; i < 100; ++i) mem[i] = uint8_t(i);
    Sge sges[2] = {{reinterpret_cast<uint64_t>(mem.data()), 14, mr.lkey},
                   {reinterpret_cast<uint64_t>(mem.data() + 14), 86, mr.lkey}};
    SendWr swr{22, sges, 2, send_signaled};
    ASSERT_TRUE(qp->post_send({&swr, 1}));
    Completion wc[4];
    ASSERT_EQ(cq->poll(wc), 2);
    EXPECT_EQ(wc[0].wr_id, 11u);
    EXPECT_EQ(wc[0].opcode, WcOpcode::recv);
    EXPECT_EQ(wc[0].byte_len, 100u);
    EXPECT_EQ(wc[1].wr_id, 22u);
    EXPECT_EQ(wc[1].status, WcStatus::success);
    EXPECT_EQ(std::memcmp(mem.data(), mem.data() + 4096, 100), 0);
    EXPECT_EQ(dev->stats().rx_packets, 1u);
    EXPECT_EQ(qp->caps().max_send_sge, 2u);
    EXPECT_EQ(qp->qp_num(), 7u);
    EXPECT_TRUE(dev->link().up);
    EXPECT_EQ(dev->next_event().type, EventType::none);
    EXPECT_GE(dev->event_fd(), 0);
}

TEST_F(Multiplexed, BadKeysAndFullQueuesAreReportedAsTheProviderDoes) {
    Sge bad{reinterpret_cast<uint64_t>(mem.data()), 64, mr.lkey + 0x100};
    SendWr swr{1, &bad, 1, 0};
    ASSERT_TRUE(qp->post_send({&swr, 1}));
    Completion wc[2];
    ASSERT_EQ(cq->poll(wc), 1);
    EXPECT_EQ(wc[0].status, WcStatus::local_protection_error);
    Sge rsge{reinterpret_cast<uint64_t>(mem.data()), 2048, mr.lkey};
    std::vector<RecvWr> many(20, RecvWr{0, &rsge, 1, 0});
    PostResult r = qp->post_recv(many);
    EXPECT_EQ(r.error, ENOMEM);
    EXPECT_EQ(r.posted, 16u);
}

TEST_F(Multiplexed, ArmSignalsTheChannel) {
    ASSERT_TRUE(cq->arm().ok());
    EXPECT_EQ(cq->take_events(), 0u);
    Sge sge{reinterpret_cast<uint64_t>(mem.data()), 64, mr.lkey};
    SendWr swr{1, &sge, 1, send_signaled};
    ASSERT_TRUE(qp->post_send({&swr, 1}));
    EXPECT_EQ(cq->take_events(), 1u);
    EXPECT_GE(cq->channel_fd(), 0);
}

TEST_F(Multiplexed, ACompletionQueueOfAnotherDeviceIsRefused) {
    OpenOptions o;
    o.provider_dir = VFAB_TEST_PROVIDERS "/fake";
    o.sysfs_root = sysfs.root();
    auto other = Device::open("0000:00:05.0", o);
    ASSERT_TRUE(other.ok()) << other.error().message;
    CompletionQueue* foreign = *(*other)->create_cq(8);
    QpInitAttr a;
    a.send_cq = a.recv_cq = foreign;
    auto q = dev->create_qp(a);
    ASSERT_FALSE(q.ok());
    EXPECT_EQ(q.error().code, EINVAL);
    EXPECT_NE(q.error().message.find("belongs to another device"), std::string::npos);
    auto null = dev->create_qp({});
    ASSERT_FALSE(null.ok());   // the provider's own message
    EXPECT_NE(null.error().message.find("required"), std::string::npos) << null.error().message;
}

TEST_F(Multiplexed, DestroyedObjectsAnswerEnodev) {
    EXPECT_EQ(cq->destroy().error().code, EBUSY);
    ASSERT_TRUE(qp->destroy().ok());
    EXPECT_EQ(qp->state(), QpState::destroyed);
    Sge sge{reinterpret_cast<uint64_t>(mem.data()), 64, mr.lkey};
    SendWr swr{1, &sge, 1, 0};
    EXPECT_EQ(qp->post_send({&swr, 1}).error, ENODEV);
    EXPECT_EQ(qp->destroy().error().code, ENODEV);
    ASSERT_TRUE(cq->destroy().ok());
    Completion wc[1];
    EXPECT_EQ(cq->poll(wc), -ENODEV);
    EXPECT_EQ(cq->arm().error().code, ENODEV);
    EXPECT_EQ(cq->destroy().error().code, ENODEV);
}

}  // namespace
}  // namespace vfab
