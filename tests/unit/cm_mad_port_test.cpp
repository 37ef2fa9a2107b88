// CM MADs between two ports' QP1s on the fake wire (cm/mad_port.hpp): what one sends the other
// receives, with the transaction ID and the sender's address; a datagram to QP1 that is not a
// CM message is dropped and counted; nothing is left behind when the MadPort goes.
#include <gtest/gtest.h>

#include <chrono>

#include "cm/mad_port.hpp"
#include "rdma_fake_link.hpp"

namespace vfab::cm {
namespace {

using vfab::test::kIpA;
using vfab::test::kIpB;

// Polls both until `to` received something or two seconds passed.
size_t receive(MadPort& from, MadPort& to, std::span<MadPort::Received> out) {
    MadPort::Received none[1];
    for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2); std::chrono::steady_clock::now() < end;) {
        (void)from.poll(none);
        if (size_t n = to.poll(out)) return n;
    }
    return 0;
}

TEST(CmMadPort, AReqAndItsRepBetweenTwoPorts) {
    vfab::test::RdmaPair pair;
    auto a = MadPort::open(*pair.a, 8);
    ASSERT_TRUE(a) << a.error().message;
    auto b = MadPort::open(*pair.b, 8);
    ASSERT_TRUE(b) << b.error().message;
    Req q;
    q.local_comm_id = 0xC0FFEE;
    q.service_id = service_id(kPsTcp, 7471);
    q.local_qpn = 0x123;
    q.starting_psn = 0xABCDE;
    q.private_data[0] = 0x42;
    ASSERT_TRUE((*a)->send(q, 0x100000001ull, kIpB));
    MadPort::Received got[4];
    ASSERT_EQ(receive(**a, **b, got), 1u);
    EXPECT_EQ(got[0].tid, 0x100000001ull);
    EXPECT_EQ(got[0].src_ip, kIpA);
    ASSERT_TRUE(std::holds_alternative<Req>(got[0].msg));
    const Req& r = std::get<Req>(got[0].msg);
    EXPECT_EQ(r.local_comm_id, 0xC0FFEEu);
    EXPECT_EQ(r.service_id, q.service_id);
    EXPECT_EQ(r.starting_psn, 0xABCDEu);
    EXPECT_EQ(r.private_data[0], 0x42);

    Rep p;
    p.local_comm_id = 7;
    p.remote_comm_id = r.local_comm_id;
    ASSERT_TRUE((*b)->send(p, got[0].tid, got[0].src_ip));
    ASSERT_EQ(receive(**b, **a, got), 1u);
    EXPECT_EQ(got[0].src_ip, kIpB);
    ASSERT_TRUE(std::holds_alternative<Rep>(got[0].msg));
    EXPECT_EQ(std::get<Rep>(got[0].msg).remote_comm_id, 0xC0FFEEu);
}

// A burst (100 CM answers at once through 4 send buffers): none refused, each goes in order as a
// buffer comes back, and all arrive.
TEST(CmMadPort, ABurstWaitsForSendBuffersInOrder) {
    vfab::test::RdmaPair pair;
    auto a = MadPort::open(*pair.a, 4);
    auto b = MadPort::open(*pair.b, 128);   // room for all: UD drops what finds no receive WR
    ASSERT_TRUE(a && b);
    for (int i = 0; i < 100; ++i) {
        Rtu t{uint32_t(i), 0, {}};
        ASSERT_TRUE((*a)->send(t, uint64_t(i), kIpB)) << i;
    }
    std::vector<uint32_t> ids;
    MadPort::Received got[128];
    for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2); ids.size() < 100 && std::chrono::steady_clock::now() < end;) {
        MadPort::Received none[1];
        (void)(*a)->poll(none);
        const size_t n = (*b)->poll(got);   // B answers A's ARP and takes what came
        for (size_t i = 0; i < n; ++i) ids.push_back(std::get<Rtu>(got[i].msg).local_comm_id);
    }
    ASSERT_EQ(ids.size(), 100u);
    for (uint32_t i = 0; i < 100; ++i) EXPECT_EQ(ids[i], i);
}

// A datagram to QP1 that is not a CM message (a Get, a short one) is dropped and counted; a
// port has one QP1.
TEST(CmMadPort, WhatIsNotTheCmsIsDroppedAndCounted) {
    vfab::test::RdmaPair pair;
    auto b = MadPort::open(*pair.b, 8);
    ASSERT_TRUE(b) << b.error().message;
    auto again = MadPort::open(*pair.b, 8);
    ASSERT_FALSE(again);
    EXPECT_EQ(again.error().code, EBUSY) << again.error().message;
    // Port A's QP1, by hand (only QP1 may send the GSI's controlled Q_Key).
    rdma::Cq* cq = *pair.a->create_cq(16);
    rdma::RdmaQpInitAttr ia;
    ia.qp_type = rdma::QpType::ud;
    ia.send_cq = ia.recv_cq = cq;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 8;
    rdma::Qp* qp = *pair.a->create_qp1(ia);
    rdma::QpAttr x;
    x.qp_state = rdma::RdmaQpState::init;
    x.qkey = 1;
    ASSERT_TRUE(qp->modify(x, rdma::attr_state | rdma::attr_pkey_index | rdma::attr_port | rdma::attr_qkey));
    x.qp_state = rdma::RdmaQpState::rtr;
    ASSERT_TRUE(qp->modify(x, rdma::attr_state));
    x.qp_state = rdma::RdmaQpState::rts;
    ASSERT_TRUE(qp->modify(x, rdma::attr_state | rdma::attr_sq_psn));
    rdma::AhAttr ah;
    ah.dgid = pair.b->gid();
    rdma::AddressHandle* to_b = *pair.a->create_ah(ah);
    std::vector<uint8_t> mem(2 * kMadSize);
    auto mr = *pair.a->pd().register_memory(mem.data(), mem.size(), dma::Access::local_write);
    encode(Rtu{1, 2, {}}, 9, mem.data());
    set(mem.data(), mad::method, 0x01);            // a Get
    encode(Rtu{1, 2, {}}, 9, mem.data() + kMadSize);   // a good one, cut short
    for (uint32_t len : {uint32_t(kMadSize), 100u}) {
        Sge s{reinterpret_cast<uint64_t>(mem.data() + (len == kMadSize ? 0 : kMadSize)), len, mr.lkey};
        rdma::RdmaSendWr w;
        w.sg_list = &s;
        w.num_sge = 1;
        w.opcode = rdma::WrOpcode::send;
        w.ah = to_b;
        w.remote_qpn = rdma::wire::kGsiQpn;
        w.remote_qkey = rdma::wire::kGsiQkey;
        ASSERT_TRUE(qp->post_send(std::span(&w, 1)));
    }
    MadPort::Received got[2];
    for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
         (*b)->dropped() < 2 && std::chrono::steady_clock::now() < end;) {
        pair.a->progress();
        EXPECT_EQ((*b)->poll(got), 0u);
    }
    EXPECT_EQ((*b)->dropped(), 2u);
    ASSERT_TRUE(qp->destroy());
    ASSERT_TRUE(pair.a->pd().deregister(mr));
}

}  // namespace
}  // namespace vfab::cm
