// UD multicast over two ports on a fake wire (docs/rdma-multicast.md): a datagram to a group
// reaches every queue pair attached to it on the other port and on the sender's own port —
// but not a sender made with qp_create_block_self_mcast_lb — and none that left; the device
// filter follows the groups; bad input is refused.
#include <cstring>
#include <utility>

#include "rdma_connect.hpp"
#include "vfab/rdma/wire.hpp"

namespace vfab::rdma::test {
namespace {

constexpr uint32_t kQkey = 0x5eed;
constexpr uint32_t kGroup = 0xE0010203;   // 224.1.2.3

class MulticastTest : public ::testing::Test {
protected:
    void SetUp() override {
        mem.assign(1 << 16, 0);
        sender = ud(*pair.a, 0);
        sender_blocked = ud(*pair.a, qp_create_block_self_mcast_lb);
        local = ud(*pair.a, 0);
        remote = ud(*pair.b, 0);
        remote2 = ud(*pair.b, 0);
        group = Gid::from_ipv4(kGroup);
    }
    Side ud(Port& port, uint32_t flags) {
        Side s;
        s.port = &port;
        s.cq = *port.create_cq(256);
        RdmaQpInitAttr ia;
        ia.qp_type = QpType::ud;
        ia.send_cq = ia.recv_cq = s.cq;
        ia.create_flags = flags;
        auto qp = port.create_qp(ia);
        EXPECT_TRUE(qp) << qp.error().message;
        s.qp = *qp;
        s.mem = &mem;
        s.mr = *port.pd().register_memory(mem.data(), mem.size(), dma::Access::local_write);
        QpAttr x;
        x.qp_state = RdmaQpState::init;
        x.qkey = kQkey;
        EXPECT_TRUE(s.qp->modify(x, attr_state | attr_pkey_index | attr_port | attr_qkey));
        x.qp_state = RdmaQpState::rtr;
        EXPECT_TRUE(s.qp->modify(x, attr_state));
        x.qp_state = RdmaQpState::rts;
        EXPECT_TRUE(s.qp->modify(x, attr_state | attr_sq_psn));
        Sge r{reinterpret_cast<uint64_t>(mem.data() + 1024 * (next_slot_++)), 1024, s.mr.lkey};
        RecvWr rw{7, &r, 1, 0};
        EXPECT_TRUE(s.qp->post_recv(std::span(&rw, 1)));
        return s;
    }
    // `from` sends 100 bytes of `seed` to the group; waits for its send completion.
    void send_to_group(Side& from, uint8_t seed) {
        std::memset(mem.data() + 60000, seed, 100);
        Sge s{reinterpret_cast<uint64_t>(mem.data() + 60000), 100, from.mr.lkey};
        RdmaSendWr w = wr_of(WrOpcode::send, 1, &s);
        AhAttr ah;
        ah.dgid = group;
        w.ah = *from.port->create_ah(ah);
        w.remote_qpn = wire::kMulticastQpn;
        w.remote_qkey = kQkey;
        ASSERT_TRUE(from.qp->post_send(std::span(&w, 1)));
        for (int i = 0; i < 200; ++i) pair.a->progress(), pair.b->progress();
        const int before = received(from);   // a looped-back receive may come first
        EXPECT_EQ(sends_, 1);
        sends_ = 0;
        early_ = before;
        early_side_ = &from;
    }
    // Receive completions waiting on `s`; send completions are counted apart.
    int received(Side& s) {
        Wc wc[8];
        int n = 0, k;
        while ((k = s.cq->poll(wc)) > 0)
            for (int i = 0; i < k; ++i) {
                EXPECT_EQ(wc[i].status, RdmaWcStatus::success);
                if (wc[i].opcode == RdmaWcOpcode::send) ++sends_;
                else n += wc[i].opcode == RdmaWcOpcode::recv;
            }
        if (&s == early_side_) n += std::exchange(early_, 0);
        return n;
    }
    int sends_ = 0, early_ = 0;
    Side* early_side_ = nullptr;
    RdmaPair pair;
    std::vector<uint8_t> mem;
    Side sender, sender_blocked, local, remote, remote2;
    Gid group;
    uint32_t next_slot_ = 0;
};

TEST_F(MulticastTest, EveryMemberGetsItLocalOnesToo) {
    for (Side* s : {&sender, &sender_blocked, &local, &remote, &remote2}) ASSERT_TRUE(s->qp->attach_mcast(group, 0));
    EXPECT_TRUE(sender.qp->attach_mcast(group, 0));   // again: as ibv, no error
    // The devices pass the group's frames up: 01:00:5e:01:02:03.
    const MacAddress mac = {0x01, 0x00, 0x5e, 0x01, 0x02, 0x03};
    ASSERT_EQ(pair.dev_b.multicast.size(), 1u);
    EXPECT_EQ(pair.dev_b.multicast[0], mac);
    send_to_group(sender, 0x42);
    EXPECT_EQ(received(remote), 1);
    EXPECT_EQ(received(remote2), 1);
    EXPECT_EQ(received(local), 1);             // looped back on the sender's port
    EXPECT_EQ(received(sender), 1);            // its own send, as IB multicast loops back
    EXPECT_EQ(received(sender_blocked), 1);    // another's send: it blocks only its own
    EXPECT_EQ(mem[1024 * 3 + 40 + 99], 0x42);  // remote's buffer, after the GRH
}

TEST_F(MulticastTest, ABlockingSenderDoesNotHearItself) {
    for (Side* s : {&sender_blocked, &local, &remote}) ASSERT_TRUE(s->qp->attach_mcast(group, 0));
    send_to_group(sender_blocked, 0x17);
    EXPECT_EQ(received(sender_blocked), 0);
    EXPECT_EQ(received(local), 1);
    EXPECT_EQ(received(remote), 1);
}

TEST_F(MulticastTest, QueuePairsThatLeftOrWereDestroyedGetNothing) {
    for (Side* s : {&local, &remote, &remote2}) ASSERT_TRUE(s->qp->attach_mcast(group, 0));
    ASSERT_TRUE(remote.qp->detach_mcast(group, 0));
    ASSERT_TRUE(local.qp->destroy());
    send_to_group(sender, 0x33);
    EXPECT_EQ(received(remote), 0);
    EXPECT_EQ(received(remote2), 1);
    ASSERT_TRUE(remote2.qp->detach_mcast(group, 0));
    EXPECT_TRUE(pair.dev_b.multicast.empty());   // no group left on b: the filter closes
    send_to_group(sender, 0x34);
    EXPECT_EQ(received(remote2), 0);
    EXPECT_GT(pair.b->stats().rx_dropped, 0u);
}

TEST_F(MulticastTest, BadInputIsRefused) {
    auto r = remote.qp->attach_mcast(Gid::from_ipv4(0x0a000002), 0);   // unicast
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("multicast"), std::string::npos);
    EXPECT_FALSE(remote.qp->detach_mcast(group, 0));                    // not in it
    std::vector<uint8_t> m(4096);
    Side rc = make_side(*pair.b, QpType::rc, m);
    EXPECT_FALSE(rc.qp->attach_mcast(group, 0));                         // RC
    RdmaQpInitAttr ia;
    ia.qp_type = QpType::ud;
    ia.send_cq = ia.recv_cq = remote.cq;
    ia.create_flags = 1u << 0;                                           // not supported
    EXPECT_FALSE(pair.b->create_qp(ia));
    // Groups per port are bounded.
    for (int i = 0; i < pair.b->query_device().attr.max_mcast_grp; ++i)
        ASSERT_TRUE(remote.qp->attach_mcast(Gid::from_ipv4(0xE0000100 + uint32_t(i)), 0)) << i;
    EXPECT_FALSE(remote.qp->attach_mcast(Gid::from_ipv4(0xE0000F00), 0));
}

}  // namespace
}  // namespace vfab::rdma::test
