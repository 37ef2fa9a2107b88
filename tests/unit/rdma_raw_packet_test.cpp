// Raw-packet queue pairs and flows (QpType::raw_packet, Port::create_flow) on the fake wire:
// frames steered by their flow arrive whole; the lowest priority number wins, defaults take
// what no rule did; a sniffer sees RoCE too while RC goes on; a frame to the port's own MAC
// loops back, a multicast one reaches the port's flows and the wire; and bad input is refused.
#include "rdma_connect.hpp"

namespace vfab::rdma::test {
namespace {

using vfab::test::kMacA;
using vfab::test::kMacB;

// An Ethernet/IPv4/UDP frame of `len` bytes from B to `dst` with UDP destination port `port`.
std::vector<uint8_t> udp_frame(const uint8_t* dst, uint16_t port, uint32_t len = 200, uint8_t fill = 0x5a) {
    std::vector<uint8_t> f(len, fill);
    std::memcpy(f.data(), dst, 6);
    std::memcpy(f.data() + 6, kMacB, 6);
    f[12] = 0x08, f[13] = 0x00;
    f[14] = 0x45, f[20] = 0, f[21] = 0;    // IPv4, 20-byte header, not a fragment
    f[23] = 17;                            // UDP
    const uint8_t src_ip[4] = {10, 9, 0, 2}, dst_ip[4] = {10, 9, 0, 1};
    std::memcpy(f.data() + 26, src_ip, 4);
    std::memcpy(f.data() + 30, dst_ip, 4);
    f[34] = 0x30, f[35] = 0x39;            // source port 12345
    f[36] = uint8_t(port >> 8), f[37] = uint8_t(port);
    return f;
}

struct RawSide {
    Port* port = nullptr;
    Cq* cq = nullptr;
    Qp* qp = nullptr;
};

class RawPacketTest : public ::testing::Test {
protected:
    void SetUp() override {
        ma.assign(1 << 16, 0);
        mb.assign(1 << 16, 0);
        mra = *pair.a->pd().register_memory(ma.data(), ma.size(), dma::Access::local_write);
        mrb = *pair.b->pd().register_memory(mb.data(), mb.size(), dma::Access::local_write);
    }
    RawSide make_raw(Port& port, bool ready = true) {
        RawSide s;
        s.port = &port;
        s.cq = *port.create_cq(256);
        RdmaQpInitAttr ia;
        ia.qp_type = QpType::raw_packet;
        ia.send_cq = ia.recv_cq = s.cq;
        ia.cap = {64, 64, 2, 2, 128};
        auto qp = port.create_qp(ia);
        EXPECT_TRUE(qp) << qp.error().message;
        s.qp = *qp;
        for (RdmaQpState st : {RdmaQpState::init, RdmaQpState::rtr, RdmaQpState::rts}) {
            if (!ready) break;
            QpAttr a;
            a.qp_state = st;
            EXPECT_TRUE(s.qp->modify(a, attr_state | (st == RdmaQpState::init ? uint32_t(attr_port) : 0u)));
        }
        return s;
    }
    // `n` receives of 2 KiB on `s`, in A's memory from `base`, wr_ids 100 + i.
    void post_recvs(RawSide& s, uint32_t n, uint32_t base = 0) {
        for (uint32_t i = 0; i < n; ++i) {
            Sge g{reinterpret_cast<uint64_t>(ma.data() + base + i * 2048), 2048, mra.lkey};
            RecvWr r{100 + i, &g, 1, 0};
            ASSERT_TRUE(s.qp->post_recv(std::span(&r, 1)));
        }
    }
    // Sends `f` from B's raw side (copied into B's memory at `at`), signalled.
    void send(RawSide& s, const std::vector<uint8_t>& f, uint32_t at = 0, uint8_t* mem = nullptr, uint32_t lkey = 0) {
        mem = mem ? mem : mb.data();
        std::memcpy(mem + at, f.data(), f.size());
        Sge g{reinterpret_cast<uint64_t>(mem + at), uint32_t(f.size()), lkey ? lkey : mrb.lkey};
        RdmaSendWr w = wr_of(WrOpcode::send, 1, &g);
        auto r = s.qp->post_send(std::span(&w, 1));
        ASSERT_TRUE(r) << r.error;
    }
    // Runs both ports a while; the receive completions `s` got.
    std::vector<Wc> receives(RawSide& s, size_t want, int rounds = 2000) {
        std::vector<Wc> out;
        Wc wc[16];
        for (int i = 0; i < rounds && out.size() < want; ++i) {
            pair.b->progress();
            const int n = s.cq->poll(wc);
            for (int k = 0; k < n; ++k)
                if (wc[k].opcode == RdmaWcOpcode::recv) out.push_back(wc[k]);
        }
        return out;
    }
    FlowRule udp_port_rule(uint16_t port, uint16_t priority = 0) {
        FlowRule r;
        r.priority = priority;
        std::memcpy(r.dst_mac, kMacA, 6);
        std::memset(r.dst_mac_mask, 0xff, 6);
        r.ether_type = 0x0800, r.ether_type_mask = 0xffff;
        r.ip_proto = 17, r.ip_proto_mask = 0xff;
        r.dst_port = port, r.dst_port_mask = 0xffff;
        return r;
    }
    RdmaPair pair;
    std::vector<uint8_t> ma, mb;
    dma::MemoryRegion mra, mrb;
};

TEST_F(RawPacketTest, AFrameItsFlowMatchesArrivesWhole) {
    RawSide a = make_raw(*pair.a), b = make_raw(*pair.b);
    ASSERT_TRUE(pair.a->create_flow(a.qp, udp_port_rule(5000)));
    post_recvs(a, 4);
    const auto hit = udp_frame(kMacA, 5000, 300, 0x11), miss = udp_frame(kMacA, 6000, 300, 0x22);
    send(b, miss, 0);
    send(b, hit, 2048);
    auto rx = receives(a, 1);
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].status, RdmaWcStatus::success);
    EXPECT_EQ(rx[0].byte_len, 300u);
    EXPECT_EQ(rx[0].qp_num, a.qp->qp_num());
    EXPECT_EQ(std::memcmp(ma.data() + (rx[0].wr_id - 100) * 2048, hit.data(), hit.size()), 0);
    EXPECT_TRUE(receives(a, 1, 200).empty()) << "the frame to port 6000 matched no flow";
    Wc sc[4];
    EXPECT_EQ(b.cq->poll(sc), 2) << "both sends completed";
}

TEST_F(RawPacketTest, TheLowestPriorityNumberWinsAndDefaultsTakeTheRest) {
    RawSide q1 = make_raw(*pair.a), q2 = make_raw(*pair.a), b = make_raw(*pair.b);
    ASSERT_TRUE(pair.a->create_flow(q1.qp, udp_port_rule(5000, 5)));
    FlowRule any_ipv4;
    any_ipv4.priority = 1;
    any_ipv4.ether_type = 0x0800, any_ipv4.ether_type_mask = 0xffff;
    ASSERT_TRUE(pair.a->create_flow(q2.qp, any_ipv4));
    FlowRule all;
    all.kind = FlowRule::Kind::all_default;
    ASSERT_TRUE(pair.a->create_flow(q1.qp, all));
    FlowRule mc;
    mc.kind = FlowRule::Kind::mc_default;
    ASSERT_TRUE(pair.a->create_flow(q2.qp, mc));
    post_recvs(q1, 4, 0);
    post_recvs(q2, 4, 16384);

    send(b, udp_frame(kMacA, 5000));   // both normal rules match: priority 1 (q2) wins
    auto r2 = receives(q2, 1);
    ASSERT_EQ(r2.size(), 1u);
    auto other = udp_frame(kMacA, 5000);
    other[12] = 0x88, other[13] = 0xb5;   // not IPv4: only the all_default rule (q1)
    send(b, other);
    auto r1 = receives(q1, 1);
    ASSERT_EQ(r1.size(), 1u);
    EXPECT_EQ(std::memcmp(ma.data() + (r1[0].wr_id - 100) * 2048, other.data(), other.size()), 0);
    const uint8_t group[6] = {0x01, 0x00, 0x5e, 0x01, 0x02, 0x03};
    auto m = udp_frame(group, 7000);
    m[12] = 0x88, m[13] = 0xb6;
    send(b, m);   // multicast, no normal rule: mc_default (q2) before all_default
    EXPECT_EQ(receives(q2, 1).size(), 1u);
    EXPECT_TRUE(receives(q1, 1, 200).empty());
}

// A sniffer gets a copy of every frame, the RoCE ones included, and RC is not disturbed.
TEST_F(RawPacketTest, ASnifferSeesRoceAndRcGoesOn) {
    RawSide s = make_raw(*pair.a);
    FlowRule sn;
    sn.kind = FlowRule::Kind::sniffer;
    ASSERT_TRUE(pair.a->create_flow(s.qp, sn));
    post_recvs(s, 8, 32768);
    std::vector<uint8_t> ra(1 << 16), rb(1 << 16);
    Side a = make_side(*pair.a, QpType::rc, ra), b = make_side(*pair.b, QpType::rc, rb);
    connect_rc(a, b, 1, 2);
    connect_rc(b, a, 2, 1);
    Sge rs{reinterpret_cast<uint64_t>(ra.data()), 4096, a.mr.lkey};
    RecvWr rr{1, &rs, 1, 0};
    ASSERT_TRUE(a.qp->post_recv(std::span(&rr, 1)));
    Sge ss{reinterpret_cast<uint64_t>(rb.data()), 1000, b.mr.lkey};
    RdmaSendWr sw = wr_of(WrOpcode::send, 2, &ss);
    ASSERT_TRUE(b.qp->post_send(std::span(&sw, 1)));
    ASSERT_EQ(wait_wc(a, b, 1).size(), 1u);
    auto seen = receives(s, 1);
    ASSERT_GE(seen.size(), 1u);
    bool roce = false;
    for (const Wc& w : seen) {
        const uint8_t* f = ma.data() + 32768 + (w.wr_id - 100) * 2048;
        roce |= f[23] == 17 && f[36] == 0x12 && f[37] == 0xb7;   // UDP to 4791
    }
    EXPECT_TRUE(roce) << "the sniffer saw the RoCE SEND";
}

TEST_F(RawPacketTest, AFrameToItsOwnMacLoopsBack) {
    RawSide a = make_raw(*pair.a);
    ASSERT_TRUE(pair.a->create_flow(a.qp, udp_port_rule(5000)));
    post_recvs(a, 2);
    const uint64_t b_frames = pair.b->stats().rx_frames;
    send(a, udp_frame(kMacA, 5000), 8192, ma.data(), mra.lkey);
    EXPECT_EQ(receives(a, 1).size(), 1u);
    EXPECT_EQ(pair.b->stats().rx_frames, b_frames) << "nothing went on the wire";
}

// A multicast frame a raw-packet queue pair sends reaches the port's own flows, and the wire.
TEST_F(RawPacketTest, AMulticastFrameReachesTheOwnFlowsAndTheWire) {
    RawSide a = make_raw(*pair.a);
    const uint8_t group[6] = {0x01, 0x50, 0x56, 0x19, 0x20, 0xa7};
    FlowRule r;
    std::memcpy(r.dst_mac, group, 6);
    std::memset(r.dst_mac_mask, 0xff, 6);
    ASSERT_TRUE(pair.a->create_flow(a.qp, r));
    post_recvs(a, 2);
    const uint64_t b_frames = pair.b->stats().rx_frames;
    send(a, udp_frame(group, 5000), 8192, ma.data(), mra.lkey);
    EXPECT_EQ(receives(a, 1).size(), 1u);
    EXPECT_EQ(pair.b->stats().rx_frames, b_frames + 1) << "and it went on the wire";
}

TEST_F(RawPacketTest, BadInputIsRefused) {
    RawSide a = make_raw(*pair.a, false), b = make_raw(*pair.b);
    auto frame = udp_frame(kMacA, 5000);
    Sge g{reinterpret_cast<uint64_t>(mb.data()), uint32_t(frame.size()), mrb.lkey};
    RdmaSendWr w = wr_of(WrOpcode::send, 1, &g);
    EXPECT_EQ(a.qp->post_send(std::span(&w, 1)).error, EINVAL) << "RESET cannot send";
    Sge r{reinterpret_cast<uint64_t>(ma.data()), 2048, mra.lkey};
    RecvWr rw{1, &r, 1, 0};
    EXPECT_EQ(a.qp->post_recv(std::span(&rw, 1)).error, EINVAL) << "RESET takes no receives";
    QpAttr x;
    x.qp_state = RdmaQpState::rts;
    EXPECT_FALSE(a.qp->modify(x, attr_state)) << "RESET -> RTS";
    w.opcode = WrOpcode::rdma_write;
    EXPECT_EQ(b.qp->post_send(std::span(&w, 1)).error, EINVAL) << "only SEND";
    w.opcode = WrOpcode::send;
    g.length = 10;
    EXPECT_EQ(b.qp->post_send(std::span(&w, 1)).error, EINVAL) << "shorter than an Ethernet header";
    g.length = 200;
    g.lkey ^= 0x100;
    ASSERT_TRUE(b.qp->post_send(std::span(&w, 1)));
    Wc wc;
    ASSERT_EQ(b.cq->poll(std::span(&wc, 1)), 1);
    EXPECT_EQ(wc.status, RdmaWcStatus::loc_prot_err);

    std::vector<uint8_t> mem(4096);
    Side rc = make_side(*pair.a, QpType::rc, mem);
    EXPECT_EQ(pair.a->create_flow(rc.qp, udp_port_rule(1)).error().code, EINVAL) << "an RC queue pair";
    FlowRule sn = udp_port_rule(1);
    sn.kind = FlowRule::Kind::sniffer;
    EXPECT_EQ(pair.a->create_flow(a.qp, sn).error().code, EINVAL) << "a sniffer with fields";
    auto flow = pair.a->create_flow(a.qp, udp_port_rule(5000));
    ASSERT_TRUE(flow);
    EXPECT_EQ(a.qp->destroy().error().code, EBUSY) << "a flow names it";
    ASSERT_TRUE((*flow)->destroy());
    EXPECT_EQ((*flow)->destroy().error().code, ENODEV);
    EXPECT_TRUE(a.qp->destroy());
    EXPECT_EQ(a.qp->destroy().error().code, ENODEV);
}

// A queue pair not yet in RTR takes no frames: they are counted as missed.
TEST_F(RawPacketTest, FramesBeforeRtrAreMissed) {
    RawSide a = make_raw(*pair.a, false), b = make_raw(*pair.b);
    QpAttr x;
    x.qp_state = RdmaQpState::init;
    ASSERT_TRUE(a.qp->modify(x, attr_state | attr_port));
    ASSERT_TRUE(pair.a->create_flow(a.qp, udp_port_rule(5000)));
    post_recvs(a, 1);
    const uint64_t missed = pair.a->stats().rx_raw_missed;
    send(b, udp_frame(kMacA, 5000));
    EXPECT_TRUE(receives(a, 1, 300).empty());
    EXPECT_EQ(pair.a->stats().rx_raw_missed, missed + 1);
}

}  // namespace
}  // namespace vfab::rdma::test
