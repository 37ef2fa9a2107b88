// Raw frames beside RDMA on one device queue (Port::raw_queue): a UDP frame one side's raw
// queue sends lands in the other side's raw receive, while an RC SEND between the same ports
// completes; ARP shows up there too; frames with no receive posted are counted; bad keys are
// error completions.
#include "rdma_connect.hpp"

namespace vfab::rdma::test {
namespace {

std::vector<uint8_t> udp_frame(uint8_t fill, uint32_t len) {
    std::vector<uint8_t> f(len, fill);
    const uint8_t dst[6] = {0x02, 0, 0, 0, 0, 1}, src[6] = {0x02, 0, 0, 0, 0, 2};
    std::memcpy(f.data(), dst, 6);
    std::memcpy(f.data() + 6, src, 6);
    f[12] = 0x08;   // IPv4, but not to the port's address: not the transport's
    f[13] = 0x00;
    f[14] = 0x45;
    return f;
}

TEST(RawQueue, RawFramesPassBesideRdma) {
    RdmaPair pair;
    std::vector<uint8_t> ma(1 << 16), mb(1 << 16);
    Side a = make_side(*pair.a, QpType::rc, ma), b = make_side(*pair.b, QpType::rc, mb);
    connect_rc(a, b, 1, 2);
    connect_rc(b, a, 2, 1);
    auto ra = pair.a->raw_queue(16);
    auto rb = pair.b->raw_queue(16);
    ASSERT_TRUE(ra && rb);
    EXPECT_EQ(pair.a->raw_queue(64)->qp, ra->qp) << "one raw queue per port";

    // A receives raw frames into [32K, 48K).
    std::vector<vfab::Sge> sges(8);
    std::vector<vfab::RecvWr> rws(8);
    for (uint32_t i = 0; i < 8; ++i) {
        sges[i] = {reinterpret_cast<uint64_t>(ma.data() + 32768 + i * 2048), 2048, a.mr.lkey};
        rws[i] = {100 + i, &sges[i], 1, 0};
    }
    ASSERT_TRUE(ra->qp->post_recv(rws));

    // B sends one raw frame, and an RC SEND to A at the same time.
    auto frame = udp_frame(0xab, 300);
    std::memcpy(mb.data() + 50000, frame.data(), frame.size());
    vfab::Sge fs{reinterpret_cast<uint64_t>(mb.data() + 50000), 300, b.mr.lkey};
    vfab::SendWr fw{9, &fs, 1, vfab::send_signaled};
    ASSERT_TRUE(rb->qp->post_send(std::span(&fw, 1)));
    vfab::Sge rs{reinterpret_cast<uint64_t>(ma.data()), 4096, a.mr.lkey};
    RecvWr rr{1, &rs, 1, 0};
    ASSERT_TRUE(a.qp->post_recv(std::span(&rr, 1)));
    vfab::Sge ss{reinterpret_cast<uint64_t>(mb.data()), 3000, b.mr.lkey};
    RdmaSendWr sw = wr_of(WrOpcode::send, 2, &ss);
    ASSERT_TRUE(b.qp->post_send(std::span(&sw, 1)));
    ASSERT_EQ(wait_wc(a, b, 1).size(), 1u);

    vfab::Completion c[16];
    int n = 0;
    bool got_frame = false;
    for (int tries = 0; tries < 1000 && !got_frame; ++tries) {
        n = ra->cq->poll(c);
        for (int i = 0; i < n; ++i) {
            ASSERT_EQ(c[i].status, vfab::WcStatus::success);
            const uint8_t* buf = ma.data() + 32768 + (c[i].wr_id - 100) * 2048;
            if (c[i].byte_len == 300 && std::memcmp(buf, frame.data(), 300) == 0) got_frame = true;
        }
    }
    EXPECT_TRUE(got_frame) << "the raw frame reached A's raw queue";
    vfab::Completion sc;
    ASSERT_EQ(rb->cq->poll(std::span(&sc, 1)), 1);
    EXPECT_EQ(sc.wr_id, 9u);
    EXPECT_EQ(sc.opcode, vfab::WcOpcode::send);
    EXPECT_GE(pair.a->stats().rx_raw, 1u);   // the frame, and ARP
}

TEST(RawQueue, FramesWithoutReceivesAreCountedAndBadKeysFail) {
    RdmaPair pair;
    std::vector<uint8_t> mb(1 << 16);
    auto ra = pair.a->raw_queue(8);
    auto rb = pair.b->raw_queue(8);
    ASSERT_TRUE(ra && rb);
    auto mr = pair.b->pd().register_memory(mb.data(), mb.size(), dma::Access::local_write);
    ASSERT_TRUE(mr);
    auto frame = udp_frame(0x11, 100);
    std::memcpy(mb.data(), frame.data(), frame.size());
    vfab::Sge fs{reinterpret_cast<uint64_t>(mb.data()), 100, mr->lkey};
    vfab::SendWr fw{1, &fs, 1, 0};
    ASSERT_TRUE(rb->qp->post_send(std::span(&fw, 1)));
    vfab::Completion c[4];
    (void)ra->cq->poll(c);
    EXPECT_EQ(pair.a->stats().rx_raw_missed, 1u);

    vfab::Sge bad{reinterpret_cast<uint64_t>(mb.data()), 100, mr->lkey ^ 0x100};
    vfab::SendWr bw{2, &bad, 1, 0};
    ASSERT_TRUE(rb->qp->post_send(std::span(&bw, 1)));
    ASSERT_EQ(rb->cq->poll(c), 1);
    EXPECT_EQ(c[0].status, vfab::WcStatus::local_protection_error);
    vfab::Sge tiny{reinterpret_cast<uint64_t>(mb.data()), 10, mr->lkey};
    vfab::SendWr tw{3, &tiny, 1, 0};
    EXPECT_EQ(rb->qp->post_send(std::span(&tw, 1)).error, EINVAL);   // shorter than an Ethernet header
    EXPECT_TRUE(pair.a->raw_queue(4)) << "an existing raw queue is returned whatever the depth";
}

}  // namespace
}  // namespace vfab::rdma::test
