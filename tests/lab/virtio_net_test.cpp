// vfab's virtio-net driver on the lab's two virtio-net devices (00:04.0 and 00:06.0, both on
// QEMU hub 1, both offering VIRTIO_F_IN_ORDER), with split and with packed virtqueues: 100,000
// frames 04.0 -> 06.0 and some back, checked byte by byte and in order, zero copy from and
// into registered memory; with the header in the frames' headroom, in order and not.
#include <gtest/gtest.h>

#include <cstdio>
#include <tuple>

#include "virtio_pair.hpp"
#include "vfab/vfio/event_wait.hpp"

namespace vfab::lab {
namespace {
using vfio::IommuBackend;
using virtio_net::RingFormat;

using Param = std::tuple<IommuBackend, RingFormat>;

class VirtioNet : public ::testing::TestWithParam<Param> {
protected:
    void SetUp() override {
        ASSERT_NO_FATAL_FAILURE(a.open("virtio-net", std::get<0>(GetParam()), std::get<1>(GetParam())));
        ASSERT_NO_FATAL_FAILURE(b.open("virtio-net-1", std::get<0>(GetParam()), std::get<1>(GetParam())));
    }
    VirtioNic a, b;
};

TEST_P(VirtioNet, AttributesAndFeatures) {
    const DeviceAttr& at = a.dev->attr();
    EXPECT_EQ(at.provider, "virtio-net");
    EXPECT_EQ(at.mac[5], 3);
    EXPECT_EQ(b.dev->attr().mac[5], 6);
    EXPECT_TRUE(a.dev->link().up);
    EXPECT_TRUE(virtio::has_feature(a.dev->features(), virtio::feature::VERSION_1));
    EXPECT_TRUE(virtio::has_feature(a.dev->features(), virtio::feature::ACCESS_PLATFORM));
    EXPECT_TRUE(virtio::has_feature(a.dev->features(), virtio::feature::IN_ORDER)) << "the lab's QEMU offers it";
    EXPECT_EQ(a.qp->ring_format(), std::get<1>(GetParam()));
}

TEST_P(VirtioNet, HundredThousandFramesArriveIntactAndInOrder) {
    TrafficResult r = run_traffic(*a.qp, *a.cq, *b.qp, *b.cq, a.sender(), b.receiver(), 100000);
    ASSERT_TRUE(r.error.empty()) << r.error;
    std::printf("virtio-net %s: %lu frames in %.2f s (%.0f frames/s)\n", to_string(std::get<1>(GetParam())),
                (unsigned long)r.frames, r.seconds, double(r.frames) / r.seconds);
    r = run_traffic(*b.qp, *b.cq, *a.qp, *a.cq, b.sender(), a.receiver(), 5000);
    ASSERT_TRUE(r.error.empty()) << "the other way: " << r.error;
    EXPECT_EQ(a.dev->stats().tx_packets, 100000u);
    EXPECT_EQ(b.dev->stats().rx_packets, 100000u);
}

TEST_P(VirtioNet, InterruptModeDeliversCompletionsThroughTheChannel) {
    TrafficSide tx = a.sender(), rx = b.receiver();
    for (uint32_t round = 0; round < 10; ++round) {
        Sge rsge{reinterpret_cast<uint64_t>(rx.buffers), 2048, rx.lkey};
        RecvWr rwr{round, &rsge, 1, 0};
        ASSERT_TRUE(b.qp->post_recv({&rwr, 1}));
        ASSERT_TRUE(b.cq->arm().ok());
        build_frame(tx.buffers, frame_size(round), rx.mac, tx.mac, round);
        Sge sge{reinterpret_cast<uint64_t>(tx.buffers), frame_size(round), tx.lkey};
        SendWr wr{round, &sge, 1, send_signaled};
        ASSERT_TRUE(a.qp->post_send({&wr, 1}));
        int fd[] = {b.cq->channel_fd()};
        auto woke = vfio::wait_any(fd, 5000);
        ASSERT_TRUE(woke.ok());
        ASSERT_EQ(*woke, 0) << "round " << round << ": no notification within 5 s";
        b.cq->take_events();
        Completion wc[4];
        int got = 0;
        for (int spin = 0; spin < 1000000 && got == 0; ++spin) got = b.cq->poll(wc);
        ASSERT_EQ(got, 1);
        EXPECT_EQ(check_frame(rx.buffers, wc[0].byte_len, round), "");
        got = 0;
        for (int spin = 0; spin < 1000000 && got == 0; ++spin) got = a.cq->poll(wc);
        ASSERT_EQ(got, 1);
    }
}

TEST_P(VirtioNet, BadInputNeverReachesTheDevice) {
    Sge bad{reinterpret_cast<uint64_t>(a.data), 100, a.mr.lkey ^ 0x100};
    SendWr wr{7, &bad, 1, 0};
    PostResult r = a.qp->post_send({&wr, 1});
    ASSERT_EQ(r.error, 0);
    Completion wc{};
    ASSERT_EQ(a.cq->poll({&wc, 1}), 1);
    EXPECT_EQ(wc.status, WcStatus::local_protection_error);
    Sge big{reinterpret_cast<uint64_t>(a.data), 1515, a.mr.lkey};
    wr = {8, &big, 1, 0};
    EXPECT_EQ(a.qp->post_send({&wr, 1}).error, EINVAL);
    Sge small{reinterpret_cast<uint64_t>(a.data), 1000, a.mr.lkey};
    RecvWr rwr{9, &small, 1, 0};
    EXPECT_EQ(a.qp->post_recv({&rwr, 1}).error, EINVAL) << "a receive buffer must hold a whole frame";
    EXPECT_EQ(a.qp->send_outstanding(), 0u);
}

std::vector<Param> params() {
    std::vector<Param> p;
    for (IommuBackend b : backends())
        for (RingFormat f : {RingFormat::split, RingFormat::packed}) p.emplace_back(b, f);
    return p;
}

INSTANTIATE_TEST_SUITE_P(Lab, VirtioNet, ::testing::ValuesIn(params()), [](const auto& info) {
    return std::string(vfio::to_string(std::get<0>(info.param))) + "_" + to_string(std::get<1>(info.param));
});

// QpInitAttr::hdr_in_headroom on both sides: the header goes into the 64 bytes before each
// frame, one descriptor per one-SGE frame (every third frame is still sent as two SGEs), and
// QEMU's device must deliver the same frames — with IN_ORDER (completions a used batch at a
// time) and without (each used buffer by its ID).
using HeadroomParam = std::tuple<IommuBackend, RingFormat, bool>;

class VirtioNetHeadroom : public ::testing::TestWithParam<HeadroomParam> {
protected:
    void SetUp() override {
        const auto [backend, ring, in_order] = GetParam();
        ASSERT_NO_FATAL_FAILURE(a.open("virtio-net", backend, ring, true, in_order));
        ASSERT_NO_FATAL_FAILURE(b.open("virtio-net-1", backend, ring, true, in_order));
        ASSERT_EQ(virtio::has_feature(a.dev->features(), virtio::feature::IN_ORDER), in_order);
    }
    VirtioNic a, b;
};

TEST_P(VirtioNetHeadroom, FramesArriveIntactAndInOrder) {
    ASSERT_TRUE(a.qp->hdr_in_headroom());
    TrafficResult r = run_traffic(*a.qp, *a.cq, *b.qp, *b.cq, a.sender(), b.receiver(), 20000);
    ASSERT_TRUE(r.error.empty()) << r.error;
    std::printf("virtio-net %s, header in headroom%s: %lu frames in %.2f s (%.0f frames/s)\n",
                to_string(std::get<1>(GetParam())), std::get<2>(GetParam()) ? ", IN_ORDER" : "",
                (unsigned long)r.frames, r.seconds, double(r.frames) / r.seconds);
    r = run_traffic(*b.qp, *b.cq, *a.qp, *a.cq, b.sender(), a.receiver(), 2000);
    ASSERT_TRUE(r.error.empty()) << "the other way: " << r.error;
    EXPECT_EQ(b.dev->stats().rx_packets, 20000u);
}

std::vector<HeadroomParam> headroom_params() {
    std::vector<HeadroomParam> p;
    for (const auto& [b, f] : params())
        for (bool in_order : {true, false}) p.emplace_back(b, f, in_order);
    return p;
}

INSTANTIATE_TEST_SUITE_P(Lab, VirtioNetHeadroom, ::testing::ValuesIn(headroom_params()), [](const auto& info) {
    return std::string(vfio::to_string(std::get<0>(info.param))) + "_" + to_string(std::get<1>(info.param)) +
           (std::get<2>(info.param) ? "_in_order" : "_any_order");
});

}  // namespace
}  // namespace vfab::lab
