// vfab's e1000e driver (direct API) on the lab's two 82574L NICs, wired to each other through
// QEMU's hub: link, frames NIC0 -> NIC1 verified one by one, checksum offload, interrupt mode,
// statistics.
#include <gtest/gtest.h>

#include <cstdio>

#include "e1000e_pair.hpp"
#include "vfab/net/checksum.hpp"
#include "vfab/vfio/event_wait.hpp"

namespace vfab::lab {
namespace {
using vfio::IommuBackend;

class E1000eDriver : public ::testing::TestWithParam<IommuBackend> {
protected:
    void SetUp() override {
        ASSERT_NO_FATAL_FAILURE(nic0.open("e1000e-0", GetParam()));
        ASSERT_NO_FATAL_FAILURE(nic1.open("e1000e-1", GetParam()));
    }
    E1000eNic nic0, nic1;
};

TEST_P(E1000eDriver, AttributesAndLink) {
    const DeviceAttr& a = nic0.dev->attr();
    EXPECT_EQ(a.provider, "e1000e");
    EXPECT_EQ(a.vendor_id, 0x8086);
    EXPECT_EQ(a.device_id, 0x10d3);
    const uint8_t mac0[6] = {0x52, 0x54, 0, 0, 0, 1};
    EXPECT_EQ(std::memcmp(a.mac, mac0, 6), 0);
    EXPECT_EQ(nic1.dev->attr().mac[5], 2);
    EXPECT_EQ(a.recv_buffer_size, 2048u);
    EXPECT_GE(a.max_send_sge, 2u);
    LinkState l = nic0.dev->link();
    EXPECT_TRUE(l.up);
    EXPECT_EQ(l.speed_mbps, 1000u);
    EXPECT_EQ(nic0.qp->state(), QpState::ready);
}

TEST_P(E1000eDriver, HundredThousandFramesArriveIntactAndInOrder) {
    TrafficResult r = run_traffic(*nic0.qp, *nic0.cq, *nic1.qp, *nic1.cq, nic0.sender(), nic1.receiver(), 100000);
    ASSERT_TRUE(r.error.empty()) << r.error;
    EXPECT_EQ(r.frames, 100000u);
    std::printf("e1000e direct: %lu frames NIC0 -> NIC1 in %.2f s (%.0f frames/s)\n", (unsigned long)r.frames,
                r.seconds, double(r.frames) / r.seconds);
    DeviceStats tx = nic0.dev->stats(), rx = nic1.dev->stats();
    EXPECT_EQ(tx.tx_packets, 100000u);
    EXPECT_EQ(rx.rx_packets, 100000u);
    EXPECT_EQ(rx.rx_missed, 0u);
    EXPECT_GT(rx.rx_bytes, 100000u * 60);
}

// UDP/IPv4 frames sent with wrong checksums and send_ip_csum: the device fills both, and the
// receiving NIC verifies them (wc_ip_csum_ok); the software check agrees.
TEST_P(E1000eDriver, ChecksumOffloadBothWays) {
    uint8_t* f = nic0.send_buffers();
    const uint32_t len = 14 + 20 + 8 + 100;
    std::memcpy(f, nic1.dev->attr().mac, 6);
    std::memcpy(f + 6, nic0.dev->attr().mac, 6);
    f[12] = 0x08, f[13] = 0x00;
    uint8_t* ip = f + 14;
    const uint8_t iphdr[20] = {0x45, 0, 0, 128, 0x12, 0x34, 0x40, 0, 64, 17, 0xde, 0xad, 10, 0, 0, 1, 10, 0, 0, 2};
    std::memcpy(ip, iphdr, 20);
    uint8_t* udp = ip + 20;
    net::store_be16(udp, 4000);
    net::store_be16(udp + 2, 5000);
    net::store_be16(udp + 4, 108);
    net::store_be16(udp + 6, 0xbeef);
    for (int i = 0; i < 100; ++i) udp[8 + i] = uint8_t(i);

    uint8_t* rbuf = nic1.recv_buffers();
    Sge rsge{reinterpret_cast<uint64_t>(rbuf), 2048, nic1.mr.lkey};
    RecvWr rwr{7, &rsge, 1, 0};
    ASSERT_TRUE(nic1.qp->post_recv({&rwr, 1}));
    Sge sge{reinterpret_cast<uint64_t>(f), len, nic0.mr.lkey};
    SendWr wr{9, &sge, 1, send_signaled | send_ip_csum};
    ASSERT_TRUE(nic0.qp->post_send({&wr, 1}));

    Completion wc{};
    for (int spin = 0; spin < 2000000 && nic1.cq->poll({&wc, 1}) == 0; ++spin) {
    }
    ASSERT_EQ(wc.wr_id, 7u);
    ASSERT_EQ(wc.status, WcStatus::success);
    EXPECT_EQ(wc.byte_len, len);
    EXPECT_TRUE(wc.flags & wc_ip_csum_ok) << "the receiving 82574L did not verify the checksums";
    const uint8_t* rip = rbuf + 14;
    EXPECT_EQ(net::load_be16(rip + 10), net::ipv4_header_checksum(rip));
    // TCP/UDP: the sum over pseudo-header + segment, checksum field included, folds to 0xffff.
    net::L4Offsets o;
    ASSERT_TRUE(net::parse_l4(rbuf, len, o));
    uint32_t acc = net::pseudo_header_sum(rbuf, o, 108);
    acc = net::sum16(rbuf + o.l4, 108, acc);
    EXPECT_EQ(net::fold(acc), 0xffff) << "UDP checksum 0x" << std::hex << net::load_be16(rbuf + o.csum);
    while (nic0.cq->poll({&wc, 1}) == 0) {
    }
    EXPECT_EQ(wc.wr_id, 9u);
    EXPECT_EQ(wc.status, WcStatus::success);
}

// Interrupt mode: arm, sleep on the channel fd, wake for the completion.
TEST_P(E1000eDriver, InterruptModeDeliversCompletionsThroughTheChannel) {
    TrafficSide tx = nic0.sender(), rx = nic1.receiver();
    int spurious = 0;
    for (uint32_t round = 0; round < 20; ++round) {
        Sge rsge{reinterpret_cast<uint64_t>(rx.buffers), 2048, rx.lkey};
        RecvWr rwr{round, &rsge, 1, 0};
        ASSERT_TRUE(nic1.qp->post_recv({&rwr, 1}));
        Completion wc[4];
        ASSERT_EQ(nic1.cq->poll(wc), 0);
        ASSERT_TRUE(nic1.cq->arm().ok());
        int fd[] = {nic1.cq->channel_fd()};
        // Nothing has arrived: a wake-up now may only be spurious (QEMU's 82574L sometimes
        // signals a vector a second time for one cause), never a completion.
        auto quiet = vfio::wait_any(fd, 20);
        ASSERT_TRUE(quiet.ok());
        if (*quiet == 0) {
            ++spurious;
            ASSERT_EQ(nic1.cq->poll(wc), 0) << "round " << round;
            nic1.cq->take_events();
            ASSERT_TRUE(nic1.cq->arm().ok());
        }

        build_frame(tx.buffers, frame_size(round), rx.mac, tx.mac, round);
        Sge sge{reinterpret_cast<uint64_t>(tx.buffers), frame_size(round), tx.lkey};
        SendWr wr{round, &sge, 1, send_signaled};
        ASSERT_TRUE(nic0.qp->post_send({&wr, 1}));
        auto woke = vfio::wait_any(fd, 5000);
        ASSERT_TRUE(woke.ok());
        ASSERT_EQ(*woke, 0) << "round " << round << ": no notification within 5 s";
        EXPECT_GE(nic1.cq->take_events(), 1u);
        ASSERT_EQ(nic1.cq->poll(wc), 1);
        EXPECT_EQ(wc[0].wr_id, round);
        EXPECT_EQ(check_frame(rx.buffers, wc[0].byte_len, round), "");
        int got = 0;
        for (int spin = 0; spin < 1000000 && got == 0; ++spin) got = nic0.cq->poll(wc);
        ASSERT_EQ(got, 1);
    }
    // Spurious wake-ups cost a poll and a re-arm, nothing else; QEMU's model produces a number
    // that depends on timing (0-18 of 20 seen), so they are reported, not limited.
    std::printf("20 notifications, %d spurious wake-ups\n", spurious);
}

// Separate completion queues for sending and receiving: each has its own MSI-X vector, and
// each channel wakes for its own queue only (the link's "other" vector stays quiet).
TEST_P(E1000eDriver, SendAndReceiveCompleteOnTheirOwnVectors) {
    ASSERT_TRUE(nic1.qp->destroy().ok());
    auto scq = nic1.dev->create_cq(64);
    auto rcq = nic1.dev->create_cq(64);
    ASSERT_TRUE(scq.ok() && rcq.ok());
    EXPECT_NE((*scq)->vector(), (*rcq)->vector());
    EXPECT_NE((*scq)->channel_fd(), (*rcq)->channel_fd());
    e1000e::QpInitAttr attr;
    attr.send_cq = *scq;
    attr.recv_cq = *rcq;
    auto qp = nic1.dev->create_qp(attr);
    ASSERT_TRUE(qp.ok()) << qp.error().message;
    TrafficSide me = nic1.sender(), peer = nic0.receiver();
    uint8_t* rbuf = nic1.recv_buffers();

    // NIC1 receives from NIC0: only the receive channel wakes.
    Sge rsge{reinterpret_cast<uint64_t>(rbuf), 2048, nic1.mr.lkey};
    RecvWr rwr{1, &rsge, 1, 0};
    ASSERT_TRUE((*qp)->post_recv({&rwr, 1}));
    ASSERT_TRUE((*scq)->arm().ok());
    ASSERT_TRUE((*rcq)->arm().ok());
    int fds[] = {(*scq)->channel_fd(), (*rcq)->channel_fd(), nic1.dev->event_fd()};
    TrafficSide tx0 = nic0.sender();
    build_frame(tx0.buffers, 100, me.mac, tx0.mac, 5);
    Sge s0{reinterpret_cast<uint64_t>(tx0.buffers), 100, tx0.lkey};
    SendWr w0{5, &s0, 1, send_signaled};
    ASSERT_TRUE(nic0.qp->post_send({&w0, 1}));
    auto woke = vfio::wait_any(fds, 5000);
    ASSERT_TRUE(woke.ok());
    EXPECT_EQ(*woke, 1) << "the receive CQ's channel should wake";
    Completion wc[4];
    ASSERT_EQ((*rcq)->poll(wc), 1);
    EXPECT_EQ(wc[0].opcode, WcOpcode::recv);
    EXPECT_EQ((*scq)->poll(wc), 0);
    (*rcq)->take_events();

    // NIC1 sends: only the send channel wakes.
    ASSERT_TRUE((*scq)->arm().ok());
    int send_only[] = {(*scq)->channel_fd(), (*rcq)->channel_fd()};
    build_frame(me.buffers, 100, peer.mac, me.mac, 6);
    Sge s1{reinterpret_cast<uint64_t>(me.buffers), 100, me.lkey};
    SendWr w1{6, &s1, 1, send_signaled};
    ASSERT_TRUE((*qp)->post_send({&w1, 1}));
    // QEMU's 82574L sometimes signals a vector a second time (docs/e1000e.md): a late repeat
    // of the receive above may wake the receive channel with nothing to poll. Such a wake-up
    // is skipped; a receive completion there, or no send wake-up, still fails.
    for (int late = 0;; ++late) {
        woke = vfio::wait_any(send_only, 5000);
        ASSERT_TRUE(woke.ok());
        if (*woke != 1 || late > 0) break;
        ASSERT_EQ((*rcq)->poll(wc), 0) << "the receive CQ completed something nobody sent";
        (*rcq)->take_events();
        std::printf("a late repeat of the receive vector woke its channel; skipped\n");
    }
    EXPECT_EQ(*woke, 0) << "the send CQ's channel should wake";
    ASSERT_EQ((*scq)->poll(wc), 1);
    EXPECT_EQ(wc[0].wr_id, 6u);
    EXPECT_EQ(wc[0].opcode, WcOpcode::send);
    EXPECT_EQ((*rcq)->poll(wc), 0);
}

// The "other" vector: no event while nothing changes; next_event() reports none.
TEST_P(E1000eDriver, NoSpuriousAsyncEvents) {
    EXPECT_GE(nic0.dev->event_fd(), 0);
    EXPECT_EQ(nic0.dev->next_event().type, EventType::none);
}

INSTANTIATE_TEST_SUITE_P(Lab, E1000eDriver, ::testing::ValuesIn(backends()), BackendName());

}  // namespace
}  // namespace vfab::lab
