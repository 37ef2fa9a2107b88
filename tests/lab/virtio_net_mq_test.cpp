// Several queue pairs and receive-side scaling on the lab's multi-queue virtio-net (00:08.0:
// mq=on, rss=on, 4 queue pairs over a multi-queue tap), with the single-queue virtio-net on
// the bridged tap (00:09.0) as the far end. RSS is checked frame by frame: each UDP flow must
// arrive on the queue that vfab's own Toeplitz hash and the configured table predict.
#include <gtest/gtest.h>
#include <poll.h>

#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "lab_env.hpp"
#include "mq_port.hpp"
#include "vfab/drivers/virtio_net.hpp"

namespace vfab::lab {
namespace {

using virtio_net::RingFormat;
using Port = MqPort<virtio_net::Driver>;
constexpr uint32_t kSlots = kMqSlots, kFrameLen = kMqFrameLen;

class VirtioMq : public ::testing::TestWithParam<std::tuple<vfio::IommuBackend, RingFormat>> {
protected:
    void SetUp() override {
        if (!present("virtio-net-mq")) GTEST_SKIP() << "no multi-queue virtio-net in this lab (no network namespace on the host)";
        virtio_net::DeviceOptions o;
        o.vfio.backend = std::get<0>(GetParam());
        o.ring = std::get<1>(GetParam());
        ASSERT_NO_FATAL_FAILURE(mq.open("virtio-net-mq", o, 4));
        ASSERT_NO_FATAL_FAILURE(tap.open("virtio-net-tap", o, 1));
    }
    std::vector<uint32_t> check_rss(const RssConfig& cfg, uint32_t n) { return lab::check_rss(tap, mq, cfg, n); }
    Port mq, tap;
};

TEST_P(VirtioMq, RssSpreadsFlowsAsTheTableSays) {
    const DeviceAttr& a = mq.dev->attr();
    EXPECT_EQ(a.max_qp, 4u);
    EXPECT_GE(a.rss_key_size, 40u);
    EXPECT_GE(a.rss_table_size, 128u);
    ASSERT_TRUE(a.rss_hash_types & rss_udp_ipv4) << std::hex << a.rss_hash_types;
    std::array<uint16_t, 128> table;
    for (uint32_t i = 0; i < table.size(); ++i) table[i] = uint16_t((i * 3 + i / 8) % 4);
    const RssConfig cfg{std::span(net::kDefaultRssKey).first(a.rss_key_size), table, rss_ipv4 | rss_udp_ipv4};
    auto r = mq.dev->configure_rss(cfg);
    ASSERT_TRUE(r.ok()) << r.error().message;
    mq.fill_receives();
    tap.fill_receives();
    const auto per_queue = check_rss(cfg, 1024);
    for (uint32_t q = 0; q < 4; ++q) {
        EXPECT_GT(per_queue[q], 0u) << "queue " << q << " got nothing";
        EXPECT_EQ(mq.qps[q]->stats().rx_packets, per_queue[q]);
    }
    std::printf("frames per queue: %u %u %u %u\n", per_queue[0], per_queue[1], per_queue[2], per_queue[3]);

    // Another table moves the flows: everything to queue 2, then half to 0 and half to 3.
    const uint16_t only2[1] = {2};
    ASSERT_TRUE(mq.dev->configure_rss({{}, only2, rss_udp_ipv4}).ok());
    EXPECT_EQ(check_rss({net::kDefaultRssKey, only2, rss_udp_ipv4}, 128)[2], 128u);
    const uint16_t halves[2] = {0, 3};
    const RssConfig cfg2{{}, halves, rss_udp_ipv4};
    ASSERT_TRUE(mq.dev->configure_rss(cfg2).ok());
    const auto split = check_rss({net::kDefaultRssKey, halves, rss_udp_ipv4}, 256);
    EXPECT_GT(split[0], 0u);
    EXPECT_GT(split[3], 0u);
    EXPECT_EQ(split[1] + split[2], 0u);
}

TEST_P(VirtioMq, EveryQueuePairTransmits) {
    mq.fill_receives();
    tap.fill_receives();
    for (uint32_t q = 0; q < 4; ++q) {
        ASSERT_NO_FATAL_FAILURE(send_frames(mq, q, tap.dev->attr().mac, q * 1000, 100, flow_of_seq));
        const auto got = receive(tap, 100);
        ASSERT_EQ(got.size(), 100u) << "from queue " << q;
        for (uint32_t i = 0; i < got.size(); ++i) {
            EXPECT_EQ(got[i].seq, q * 1000 + i) << "order from queue " << q;
            EXPECT_EQ(got[i].frame[46], q);
        }
        EXPECT_EQ(mq.qps[q]->stats().tx_packets, 100u);
    }
    EXPECT_EQ(mq.dev->stats().tx_packets, 400u);
}

TEST_P(VirtioMq, EachQueueWakesItsOwnChannel) {
    const uint16_t table[4] = {0, 1, 2, 3};
    const RssConfig cfg{net::kDefaultRssKey, table, rss_udp_ipv4};
    ASSERT_TRUE(mq.dev->configure_rss(cfg).ok());
    mq.fill_receives();
    tap.fill_receives();
    // A flow for each queue, found with the same hash the device uses.
    std::array<uint32_t, 4> flow_for{};
    std::array<bool, 4> found{};
    uint8_t probe[kFrameLen];
    for (uint32_t flow = 0; flow < 1000; ++flow) {
        build_udp(probe, mq.dev->attr().mac, tap.dev->attr().mac, flow, 0, 0);
        const uint16_t q = net::rss_queue(probe, kFrameLen, cfg);
        if (!found[q]) found[q] = true, flow_for[q] = flow;
    }
    for (uint32_t q = 0; q < 4; ++q) {
        ASSERT_TRUE(found[q]);
        for (auto* cq : mq.cqs) {
            cq->take_events();
            ASSERT_TRUE(cq->arm().ok());
        }
        static uint32_t target;
        target = flow_for[q];
        ASSERT_NO_FATAL_FAILURE(send_frames(tap, 0, mq.dev->attr().mac, 5000 + q, 1, [](uint32_t) { return target; }));
        pollfd fds[4];
        for (uint32_t i = 0; i < 4; ++i) fds[i] = {mq.cqs[i]->channel_fd(), POLLIN, 0};
        ASSERT_GT(::poll(&fds[q], 1, 5000), 0) << "queue " << q << "'s channel did not fire";
        Completion wc[4];
        int n = 0;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (n == 0 && std::chrono::steady_clock::now() < deadline) n = mq.cqs[q]->poll(wc);
        ASSERT_EQ(n, 1);
        EXPECT_EQ(seq_of(mq.rx_buf(q, uint32_t(wc[0].wr_id))), 5000 + q);
        mq.post_recv(q, uint32_t(wc[0].wr_id));
        for (uint32_t i = 0; i < 4; ++i)
            if (i != q) {
                EXPECT_EQ(mq.cqs[i]->poll(wc), 0) << "queue " << i << " got queue " << q << "'s frame";
            }
    }
}

INSTANTIATE_TEST_SUITE_P(Lab, VirtioMq,
                         ::testing::Combine(::testing::ValuesIn(backends()),
                                            ::testing::Values(RingFormat::split, RingFormat::packed)),
                         [](const auto& info) {
                             return std::string(vfio::to_string(std::get<0>(info.param))) + "_" +
                                    virtio_net::to_string(std::get<1>(info.param));
                         });

class VirtioMqErrors : public ::testing::TestWithParam<vfio::IommuBackend> {
protected:
    void SetUp() override {
        if (!present("virtio-net-mq")) GTEST_SKIP() << "no multi-queue virtio-net in this lab (no network namespace on the host)";
    }
};

TEST_P(VirtioMqErrors, LimitsAndBadRssTablesAreRefusedAndLeaveTheDeviceWorking) {
    Port mq, tap;
    virtio_net::DeviceOptions o;
    o.vfio.backend = GetParam();
    o.ring = RingFormat::split;
    ASSERT_NO_FATAL_FAILURE(mq.open("virtio-net-mq", o, 3));
    ASSERT_NO_FATAL_FAILURE(tap.open("virtio-net-tap", o, 1));
    auto& dev = *mq.dev;

    // A completion queue already serving a queue pair.
    virtio_net::QpInitAttr shared;
    shared.send_cq = shared.recv_cq = mq.cqs[0];
    auto busy = dev.create_qp(shared);
    ASSERT_FALSE(busy.ok());
    EXPECT_EQ(busy.error().code, EBUSY) << busy.error().message;

    // RSS tables: wrong sizes, a queue with no queue pair, a short key, an unknown hash type.
    std::vector<uint16_t> table(128, 0);
    const uint16_t three[3] = {0, 1, 2};
    const uint16_t names3[4] = {0, 1, 2, 3};
    const uint8_t short_key[16] = {};
    struct Bad {
        RssConfig cfg;
        const char* what;
    } bad[] = {
        {{{}, three, rss_udp_ipv4}, "not a power of 2"},
        {{{}, {}, rss_udp_ipv4}, "empty"},
        {{{}, names3, rss_udp_ipv4}, "names queue 3"},
        {{short_key, table, rss_udp_ipv4}, "16-byte key"},
        {{{}, table, 1u << 20}, "unknown hash type"},
    };
    std::vector<uint16_t> huge(dev.attr().rss_table_size * 2, 0);
    for (const Bad& b : bad) {
        auto r = dev.configure_rss(b.cfg);
        ASSERT_FALSE(r.ok()) << b.what;
        EXPECT_EQ(r.error().code, EINVAL) << b.what << ": " << r.error().message;
        std::printf("%s: %s\n", b.what, r.error().message.c_str());
    }
    auto r = dev.configure_rss({{}, huge, rss_udp_ipv4});
    EXPECT_EQ(r.ok() ? 0 : r.error().code, EINVAL);

    // The fourth queue pair is the last; a fifth is refused.
    ASSERT_NO_FATAL_FAILURE(mq.add_qp());
    auto c = dev.create_cq(16);
    ASSERT_TRUE(c.ok());
    virtio_net::QpInitAttr fifth;
    fifth.send_cq = fifth.recv_cq = *c;
    auto q5 = dev.create_qp(fifth);
    ASSERT_FALSE(q5.ok());
    EXPECT_EQ(q5.error().code, EBUSY) << q5.error().message;
    std::printf("fifth queue pair: %s\n", q5.error().message.c_str());

    // Destroying one while the others are idle: they keep working; a new one takes its place
    // only while nothing is outstanding.
    ASSERT_TRUE(mq.qps[1]->destroy().ok());
    mq.post_recv(0, 0);
    auto again = dev.create_qp(fifth);
    ASSERT_FALSE(again.ok());
    EXPECT_EQ(again.error().code, EBUSY) << again.error().message;
    std::printf("queue pair while another is busy: %s\n", again.error().message.c_str());

    const uint16_t to0[1] = {0};
    ASSERT_TRUE(dev.configure_rss({{}, to0, rss_udp_ipv4}).ok());
    for (uint32_t s = 1; s < kSlots; ++s) mq.post_recv(0, s);
    tap.fill_receives();
    ASSERT_NO_FATAL_FAILURE(send_frames(tap, 0, dev.attr().mac, 0, 32, flow_of_seq));
    mq.qps.erase(mq.qps.begin() + 1);
    mq.cqs.erase(mq.cqs.begin() + 1);
    const auto got = receive(mq, 32);
    EXPECT_EQ(got.size(), 32u);
    for (const Arrival& a : got) EXPECT_EQ(a.queue, 0u);
}

TEST_P(VirtioMqErrors, RssNeedsADeviceThatOffersIt) {
    virtio_net::DeviceOptions o;
    o.vfio.backend = GetParam();
    auto d = virtio_net::Device::open(address_of("virtio-net"), o);
    ASSERT_TRUE(d.ok()) << d.error().message;
    EXPECT_EQ((*d)->attr().max_qp, 1u);
    EXPECT_EQ((*d)->attr().rss_table_size, 0u);
    const uint16_t t[1] = {0};
    auto r = (*d)->configure_rss({{}, t, rss_udp_ipv4});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, ENOTSUP);
    std::printf("%s\n", r.error().message.c_str());
}

INSTANTIATE_TEST_SUITE_P(Lab, VirtioMqErrors, ::testing::ValuesIn(backends()), BackendName{});

}  // namespace
}  // namespace vfab::lab
