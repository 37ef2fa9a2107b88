// The RDMA transport's lab tests between two of the lab's NICs wired to each other, through
// real VFIO: every RC operation, messages of 1 B to 1 MiB, delivered once and byte for byte, and
// a bad rkey leaving the target untouched, fast registration and memory windows. rdma_vfab_test runs them over the multiplexed API,
// rdma_direct_test over the drivers' direct APIs (each defines open_port()).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "../unit/rdma_connect.hpp"
#include "vfab/rdma/wire.hpp"
#include "lab_env.hpp"

namespace vfab::rdma::test {
using namespace vfab::lab;

struct NicPair {
    const char* a;
    const char* b;
    uint32_t mtu = 0;   // the links' MTU (0: the device's 1500)
};

// Each test binary's own: opens lab NIC `name` for `p` through its API (the device goes into
// `keep`) and makes a port over it.
Result<std::unique_ptr<Port>> open_port(const NicPair& p, const char* name, const PortConfig& cfg,
                                        std::vector<std::shared_ptr<void>>& keep);

inline std::string pair_name(const ::testing::TestParamInfo<NicPair>& info) {
    std::string n = info.param.a;
    if (info.param.mtu) n += "_mtu" + std::to_string(info.param.mtu);
    for (char& c : n) c = std::isalnum(uint8_t(c)) ? c : '_';
    return n;
}

class RdmaOverNic : public ::testing::TestWithParam<NicPair> {
protected:
    void SetUp() override {
        if (!in_lab()) GTEST_SKIP() << "needs the lab (scripts/lab)";
        if (!present(GetParam().a) || !present(GetParam().b)) GTEST_SKIP() << "no such NICs in this lab";
        PortConfig ca, cb;
        ca.ipv4 = 0x0a580001;   // 10.88.0.1
        cb.ipv4 = 0x0a580002;
        auto pa = open_port(GetParam(), GetParam().a, ca, keep_);
        ASSERT_TRUE(pa) << pa.error().message;
        auto pb = open_port(GetParam(), GetParam().b, cb, keep_);
        ASSERT_TRUE(pb) << pb.error().message;
        port_a = std::move(*pa);
        port_b = std::move(*pb);
        ASSERT_EQ(port_a->active_mtu(), GetParam().mtu >= 4096 + 64 ? 5u : 3u);
        ma.assign(3 << 20, 0);
        mb.assign(3 << 20, 0);
        a = make_side(*port_a, QpType::rc, ma);
        b = make_side(*port_b, QpType::rc, mb);
        // Generous timeouts: QEMU's TCG is slow (timeout 16: 268 ms).
        connect_rc(a, b, 0x123456, 0xfffff0, port_a->active_mtu(), 16, 7);
        connect_rc(b, a, 0xfffff0, 0x123456, port_b->active_mtu(), 16, 7);
    }
    void TearDown() override {
        if (HasFailure() && port_a && port_b)
            for (Port* p : {port_a.get(), port_b.get()}) {
                const PortStats s = p->stats();
                std::printf("port stats: rx %lu roce %lu dropped %lu icrc %lu other %lu tx %lu retransmits %lu naks %lu "
                            "arp requests %lu replies %lu\n",
                            s.rx_frames, s.rx_roce, s.rx_dropped, s.rx_icrc_errors, s.rx_other, s.tx_frames,
                            s.retransmits, s.naks_sent, s.arp_requests, s.arp_replies);
            }
        port_a.reset();
        port_b.reset();
        keep_.clear();
    }
    Sge sge_a(uint64_t off, uint32_t len) { return {reinterpret_cast<uint64_t>(ma.data() + off), len, a.mr.lkey}; }
    Sge sge_b(uint64_t off, uint32_t len) { return {reinterpret_cast<uint64_t>(mb.data() + off), len, b.mr.lkey}; }
    void fill(std::vector<uint8_t>& m, uint64_t off, uint32_t len, uint32_t seed) {
        for (uint32_t i = 0; i < len; ++i) m[off + i] = uint8_t((seed * 131 + i * 7) ^ (i >> 8));
    }
    std::vector<std::shared_ptr<void>> keep_;   // the devices, after the ports
    std::unique_ptr<Port> port_a, port_b;
    std::vector<uint8_t> ma, mb;
    Side a, b;
};

const std::vector<uint32_t> kSizes = {1, 3, 64, 1023, 1024, 1025, 4096, 65536, 1 << 20};

TEST_P(RdmaOverNic, SendsOfEverySize) {
    for (uint32_t len : kSizes) {
        SCOPED_TRACE(len);
        fill(ma, 0, len, len);
        Sge r = sge_b(0, 1 << 21);
        RecvWr rw{len, &r, 1, 0};
        ASSERT_TRUE(b.qp->post_recv(std::span(&rw, 1)));
        Sge s = sge_a(0, len);
        RdmaSendWr w = wr_of(WrOpcode::send_with_imm, len, &s);
        w.imm_data = len;
        ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
        auto rx = wait_wc(b, a, 1, std::chrono::seconds(60));
        ASSERT_EQ(rx.size(), 1u);
        ASSERT_EQ(rx[0].status, RdmaWcStatus::success) << to_string(rx[0].status);
        EXPECT_EQ(rx[0].byte_len, len);
        EXPECT_EQ(rx[0].imm_data, len);
        EXPECT_TRUE(std::equal(ma.begin(), ma.begin() + len, mb.begin()));
        auto tx = wait_wc(a, b, 1, std::chrono::seconds(60));
        ASSERT_EQ(tx.size(), 1u);
        EXPECT_EQ(tx[0].status, RdmaWcStatus::success) << to_string(tx[0].status);
    }
}

TEST_P(RdmaOverNic, WritesAndReadsOfEverySize) {
    for (uint32_t len : kSizes) {
        SCOPED_TRACE(len);
        fill(ma, 0, len, len + 1);
        Sge s = sge_a(0, len);
        RdmaSendWr w = wr_of(WrOpcode::rdma_write, 1, &s);
        w.remote_addr = reinterpret_cast<uint64_t>(mb.data() + 8);
        w.rkey = b.mr.rkey;
        Sge r = sge_a(1 << 21, len);
        RdmaSendWr rd = wr_of(WrOpcode::rdma_read, 2, &r);
        rd.remote_addr = w.remote_addr;
        rd.rkey = b.mr.rkey;
        rd.send_flags |= wr_fence;
        RdmaSendWr both[2] = {w, rd};
        ASSERT_TRUE(a.qp->post_send(both));
        auto tx = wait_wc(a, b, 2, std::chrono::seconds(60));
        ASSERT_EQ(tx.size(), 2u);
        EXPECT_EQ(tx[0].status, RdmaWcStatus::success) << to_string(tx[0].status);
        EXPECT_EQ(tx[1].status, RdmaWcStatus::success) << to_string(tx[1].status);
        EXPECT_EQ(tx[1].opcode, RdmaWcOpcode::rdma_read);
        EXPECT_TRUE(std::equal(ma.begin(), ma.begin() + len, mb.begin() + 8));
        EXPECT_TRUE(std::equal(ma.begin(), ma.begin() + len, ma.begin() + (1 << 21)));
    }
}

TEST_P(RdmaOverNic, AtomicsAndWriteWithImmediate) {
    uint64_t* counter = reinterpret_cast<uint64_t*>(mb.data() + 4096);
    *counter = 0;
    Sge res = sge_a(0, 8);
    for (int i = 0; i < 50; ++i) {
        RdmaSendWr fa = wr_of(WrOpcode::atomic_fetch_and_add, i, &res);
        fa.remote_addr = reinterpret_cast<uint64_t>(counter);
        fa.rkey = b.mr.rkey;
        fa.compare_add = 3;
        ASSERT_TRUE(a.qp->post_send(std::span(&fa, 1)));
        auto tx = wait_wc(a, b, 1, std::chrono::seconds(30));
        ASSERT_EQ(tx.size(), 1u);
        ASSERT_EQ(tx[0].status, RdmaWcStatus::success);
        uint64_t before;
        std::memcpy(&before, ma.data(), 8);
        EXPECT_EQ(before, uint64_t(3 * i));
    }
    EXPECT_EQ(*counter, 150u);
    RdmaSendWr cs = wr_of(WrOpcode::atomic_cmp_and_swp, 99, &res);
    cs.remote_addr = reinterpret_cast<uint64_t>(counter);
    cs.rkey = b.mr.rkey;
    cs.compare_add = 150;
    cs.swap = 0xfeedfacecafebeef;
    ASSERT_TRUE(a.qp->post_send(std::span(&cs, 1)));
    auto tx = wait_wc(a, b, 1, std::chrono::seconds(30));
    ASSERT_EQ(tx.size(), 1u);
    EXPECT_EQ(tx[0].status, RdmaWcStatus::success);
    EXPECT_EQ(*counter, 0xfeedfacecafebeefu);

    Sge r = sge_b(0, 0);
    RecvWr rw{7, &r, 1, 0};
    ASSERT_TRUE(b.qp->post_recv(std::span(&rw, 1)));
    fill(ma, 0, 10000, 5);
    Sge s = sge_a(0, 10000);
    RdmaSendWr w = wr_of(WrOpcode::rdma_write_with_imm, 1, &s);
    w.remote_addr = reinterpret_cast<uint64_t>(mb.data() + 100000);
    w.rkey = b.mr.rkey;
    w.imm_data = 0x01020304;
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    auto rx = wait_wc(b, a, 1, std::chrono::seconds(30));
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].opcode, RdmaWcOpcode::recv_rdma_with_imm);
    EXPECT_EQ(rx[0].imm_data, 0x01020304u);
    EXPECT_TRUE(std::equal(ma.begin(), ma.begin() + 10000, mb.begin() + 100000));
}

// Fast registration, a type 2B window and both invalidations over the NIC (docs/rdma-memory.md):
// b registers 64 KiB of scattered pages through its send queue and binds a window on it; a writes through both,
// invalidates the window with SEND_WITH_INV, and its next write through it is refused.
TEST_P(RdmaOverNic, FastRegistrationAndWindows) {
    dma::ProtectionDomain& pd = port_b->pd();
    auto bindable = pd.register_memory(mb.data(), mb.size(),
                                       dma::Access(kAllRemote) | dma::Access::mw_bind);
    ASSERT_TRUE(bindable) << bindable.error().message;
    const uint32_t key = *pd.alloc_mr(1 << 16);
    const uint64_t base = reinterpret_cast<uint64_t>(mb.data() + (1 << 20)) & ~uint64_t(4095);
    uint64_t pages[16];   // scattered: the MR's page i is page (i * 5) % 16 of the memory
    for (int i = 0; i < 16; ++i) pages[i] = base + uint64_t(i * 5 % 16) * 4096;
    RegMrInfo info{pages, 16, 4096, 0, kAllRemote, 1 << 16, 0x40000000};
    RdmaSendWr reg = wr_of(WrOpcode::reg_mr, 1, nullptr, 0);
    reg.mem_key = key;
    reg.new_key = next_key(key);
    reg.reg = &info;
    const uint32_t mw = *pd.alloc_mw(dma::WindowType::type2);
    RdmaSendWr bind = wr_of(WrOpcode::bind_mw, 2, nullptr, 0);
    bind.mem_key = mw;
    bind.new_key = next_key(mw);
    bind.bind = {bindable->lkey, uint32_t(dma::Access::remote_write), reinterpret_cast<uint64_t>(mb.data() + 8192), 1 << 16};
    RdmaSendWr both[2] = {reg, bind};
    ASSERT_TRUE(b.qp->post_send(both));
    auto done = wait_wc(b, a, 2, std::chrono::seconds(30));
    ASSERT_EQ(done.size(), 2u);
    for (const Wc& c : done) ASSERT_EQ(c.status, RdmaWcStatus::success) << c.wr_id << " vendor_err " << c.vendor_err;

    fill(ma, 0, 1 << 16, 3);
    Sge s = sge_a(0, 1 << 16);
    RdmaSendWr w1 = wr_of(WrOpcode::rdma_write, 3, &s);
    w1.rkey = reg.new_key;
    w1.remote_addr = 0x40000000;
    RdmaSendWr w2 = wr_of(WrOpcode::rdma_write, 4, &s);
    w2.rkey = bind.new_key;
    w2.remote_addr = reinterpret_cast<uint64_t>(mb.data() + 8192);
    RdmaSendWr writes[2] = {w1, w2};
    ASSERT_TRUE(a.qp->post_send(writes));
    auto tx = wait_wc(a, b, 2, std::chrono::seconds(60));
    ASSERT_EQ(tx.size(), 2u);
    for (const Wc& c : tx) EXPECT_EQ(c.status, RdmaWcStatus::success) << c.wr_id << ": " << to_string(c.status);
    for (int i = 0; i < 16; ++i)
        EXPECT_TRUE(std::equal(ma.begin() + i * 4096, ma.begin() + (i + 1) * 4096, reinterpret_cast<uint8_t*>(pages[i])))
            << "page " << i;
    EXPECT_TRUE(std::equal(ma.begin(), ma.begin() + (1 << 16), mb.begin() + 8192));

    Sge r = sge_b(2 << 20, 64);
    RecvWr rw{5, &r, 1, 0};
    ASSERT_TRUE(b.qp->post_recv(std::span(&rw, 1)));
    Sge tiny = sge_a(0, 8);
    RdmaSendWr inv = wr_of(WrOpcode::send_with_inv, 6, &tiny);
    inv.imm_data = bind.new_key;
    ASSERT_TRUE(a.qp->post_send(std::span(&inv, 1)));
    auto rx = wait_wc(b, a, 1, std::chrono::seconds(30));
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].wc_flags & wc_with_inv, wc_with_inv);
    EXPECT_EQ(rx[0].imm_data, bind.new_key);
    ASSERT_EQ(wait_wc(a, b, 1, std::chrono::seconds(30)).size(), 1u);
    std::fill(mb.begin() + 8192, mb.begin() + 8192 + (1 << 16), 0x5a);
    ASSERT_TRUE(a.qp->post_send(std::span(&w2, 1)));
    tx = wait_wc(a, b, 1, std::chrono::seconds(30));
    ASSERT_EQ(tx.size(), 1u);
    EXPECT_EQ(tx[0].status, RdmaWcStatus::rem_access_err) << to_string(tx[0].status);
    EXPECT_TRUE(std::all_of(mb.begin() + 8192, mb.begin() + 8192 + (1 << 16), [](uint8_t x) { return x == 0x5a; }));
}

// vfab's masked atomics between two vfab ports over the NIC (docs/rdma-atomics.md): eight
// byte-wide counters in one word, each bumped by a masked add whose carries stop at the byte
// boundaries, and a masked compare-and-swap that sets one byte when another matches.
TEST_P(RdmaOverNic, MaskedAtomics) {
    uint64_t* word = reinterpret_cast<uint64_t*>(mb.data() + 8192);
    *word = 0xF0F1F2F3F4F5F6F7ull;
    Sge res = sge_a(0, 8);
    for (int i = 0; i < 20; ++i) {
        RdmaSendWr fa = wr_of(WrOpcode::masked_atomic_fetch_and_add, i, &res);
        fa.remote_addr = reinterpret_cast<uint64_t>(word);
        fa.rkey = b.mr.rkey;
        fa.compare_add = 0x0101010101010101ull;
        fa.compare_add_mask = 0x8080808080808080ull;   // eight 8-bit fields
        ASSERT_TRUE(a.qp->post_send(std::span(&fa, 1)));
        auto tx = wait_wc(a, b, 1, std::chrono::seconds(30));
        ASSERT_EQ(tx.size(), 1u);
        ASSERT_EQ(tx[0].status, RdmaWcStatus::success) << to_string(tx[0].status);
        EXPECT_EQ(tx[0].opcode, RdmaWcOpcode::masked_fetch_add);
    }
    // Each byte + 20, wrapping within its byte: F0 + 20 = 0x04, ..., F7 + 20 = 0x0B.
    EXPECT_EQ(*word, 0x0405060708090A0Bull);
    RdmaSendWr cs = wr_of(WrOpcode::masked_atomic_cmp_and_swp, 99, &res);
    cs.remote_addr = reinterpret_cast<uint64_t>(word);
    cs.rkey = b.mr.rkey;
    cs.compare_add = 0x0B;
    cs.compare_add_mask = 0xFF;                  // the low byte is 0x0B ...
    cs.swap = 0xAA00000000000000ull;
    cs.swap_mask = 0xFF00000000000000ull;        // ... so the high byte becomes 0xAA
    ASSERT_TRUE(a.qp->post_send(std::span(&cs, 1)));
    auto tx = wait_wc(a, b, 1, std::chrono::seconds(30));
    ASSERT_EQ(tx.size(), 1u);
    EXPECT_EQ(tx[0].status, RdmaWcStatus::success);
    uint64_t before;
    std::memcpy(&before, ma.data(), 8);
    EXPECT_EQ(before, 0x0405060708090A0Bull);
    EXPECT_EQ(*word, 0xAA05060708090A0Bull);
}

// UD multicast over the NIC (docs/rdma-multicast.md): b's queue pair joins 224.9.9.9 and its
// device's filter passes the group up; a's datagrams to the group arrive whole, after the GRH.
// A group b is not in (224.9.9.8, another hash) the Intel NICs' filter drops in hardware; to
// virtio-net's device, which passes every multicast frame, the port drops it in software —
// whenever it arrives, so the probe cannot take one of the receives posted later.
TEST_P(RdmaOverNic, UdMulticast) {
    auto ud = [](Port& port, std::vector<uint8_t>& mem) {
        Side s = make_side(port, QpType::ud, mem, 256);
        QpAttr x;
        x.qp_state = RdmaQpState::init;
        x.qkey = 0x77;
        EXPECT_TRUE(s.qp->modify(x, attr_state | attr_pkey_index | attr_port | attr_qkey));
        x.qp_state = RdmaQpState::rtr;
        EXPECT_TRUE(s.qp->modify(x, attr_state));
        x.qp_state = RdmaQpState::rts;
        EXPECT_TRUE(s.qp->modify(x, attr_state | attr_sq_psn));
        return s;
    };
    Side ua = ud(*port_a, ma), ub = ud(*port_b, mb);
    const Gid group = Gid::from_ipv4(0xE0090909);
    AhAttr ah;
    ah.dgid = group;
    AddressHandle* to_group = *port_a->create_ah(ah);
    ah.dgid = Gid::from_ipv4(0xE0090908);
    AddressHandle* to_other = *port_a->create_ah(ah);
    auto send = [&](uint32_t k, AddressHandle* to) {
        fill(ma, 0, 500, k);
        Sge s{reinterpret_cast<uint64_t>(ma.data()), 500, ua.mr.lkey};
        RdmaSendWr w = wr_of(WrOpcode::send, k, &s);
        w.ah = to;
        w.remote_qpn = wire::kMulticastQpn;
        w.remote_qkey = 0x77;
        ASSERT_TRUE(ua.qp->post_send(std::span(&w, 1)));
        ASSERT_EQ(wait_wc(ua, ub, 1, std::chrono::seconds(30)).size(), 1u);
    };
    const bool intel = std::string(GetParam().b).rfind("virtio", 0) != 0;
    for (int i = 0; i < 100; ++i) port_a->progress(), port_b->progress();   // what the set-up left
    const uint64_t frames_before = port_b->stats().rx_frames;
    send(1, to_other);
    for (int i = 0; i < 100; ++i) port_b->progress();
    if (intel) {
        EXPECT_EQ(port_b->stats().rx_frames, frames_before) << "the hash filter let a group no one joined through";
    }

    for (uint64_t i = 0; i < 4; ++i) {
        Sge r = sge_b(i * 4096, 4096);
        RecvWr rw{i, &r, 1, 0};
        ASSERT_TRUE(ub.qp->post_recv(std::span(&rw, 1)));
    }
    auto joined = ub.qp->attach_mcast(group, 0);
    ASSERT_TRUE(joined) << joined.error().message;
    for (uint32_t k = 2; k < 6; ++k) {
        send(k, to_group);
        auto rx = wait_wc(ub, ua, 1, std::chrono::seconds(30));
        ASSERT_EQ(rx.size(), 1u);
        ASSERT_EQ(rx[0].status, RdmaWcStatus::success) << to_string(rx[0].status);
        EXPECT_EQ(rx[0].byte_len, 540u);
        EXPECT_EQ(rx[0].src_qp, ua.qp->qp_num());
        EXPECT_TRUE(std::equal(ma.begin(), ma.begin() + 500, mb.begin() + rx[0].wr_id * 4096 + 40)) << k;
    }
    ASSERT_TRUE(ub.qp->detach_mcast(group, 0));
}

// XRC over the NIC (docs/rdma-xrc.md): a's XRC send queue pair reaches b's XRC receive queue
// pair, and each message lands in the XRC SRQ it names — two SRQs of one domain, one CQ.
TEST_P(RdmaOverNic, Xrc) {
    Cq* cq_a = *port_a->create_cq(64);
    Cq* cq_b = *port_b->create_cq(64);
    XrcDomain* xrcd = *port_b->create_xrcd();
    Srq* srq[2] = {*port_b->create_xrc_srq(SrqAttr{8, 1, 0}, xrcd, cq_b), *port_b->create_xrc_srq(SrqAttr{8, 1, 0}, xrcd, cq_b)};
    RdmaQpInitAttr ia;
    ia.qp_type = QpType::xrc_send;
    ia.send_cq = cq_a;
    Qp* ini = *port_a->create_qp(ia);
    RdmaQpInitAttr ta;
    ta.qp_type = QpType::xrc_recv;
    ta.xrcd = xrcd;
    Qp* tgt = *port_b->create_qp(ta);
    auto connect = [&](Qp* qp, uint32_t peer_qpn, Port& peer, uint32_t my_psn, uint32_t peer_psn) {
        QpAttr x;
        x.qp_state = RdmaQpState::init;
        x.qp_access_flags = kAllRemote;
        ASSERT_TRUE(qp->modify(x, attr_state | attr_pkey_index | attr_port | attr_access_flags));
        x.qp_state = RdmaQpState::rtr;
        x.path_mtu = peer.active_mtu();
        x.dest_qp_num = peer_qpn;
        x.rq_psn = peer_psn;
        x.max_dest_rd_atomic = 4;
        x.min_rnr_timer = 1;
        x.ah_attr.dgid = peer.gid();
        ASSERT_TRUE(qp->modify(x, attr_state | attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn |
                                      attr_max_dest_rd_atomic | attr_min_rnr_timer));
        x.qp_state = RdmaQpState::rts;
        x.sq_psn = my_psn;
        x.timeout = 16;
        x.max_rd_atomic = 4;
        ASSERT_TRUE(qp->modify(x, attr_state | attr_sq_psn | attr_timeout | attr_retry_cnt | attr_rnr_retry |
                                      attr_max_qp_rd_atomic));
    };
    connect(ini, tgt->qp_num(), *port_b, 0x500, 0x600);
    connect(tgt, ini->qp_num(), *port_a, 0x600, 0x500);
    for (uint64_t i = 0; i < 4; ++i) {
        Sge r = sge_b(i * 32768, 32768);
        RecvWr rw{i, &r, 1, 0};
        ASSERT_TRUE(srq[i % 2]->post_recv(std::span(&rw, 1)));   // WRs 0, 2 on srq[0]; 1, 3 on srq[1]
    }
    for (uint32_t k = 0; k < 4; ++k) {
        fill(ma, k * 32768, 20000, k);
        Sge s = sge_a(k * 32768, 20000);
        RdmaSendWr w = wr_of(WrOpcode::send, k, &s);
        w.remote_srqn = srq[k % 2]->srq_num();
        ASSERT_TRUE(ini->post_send(std::span(&w, 1)));
    }
    std::vector<Wc> rx, tx;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    Wc wc[8];
    while ((rx.size() < 4 || tx.size() < 4) && std::chrono::steady_clock::now() < end) {
        int n = cq_b->poll(wc);
        rx.insert(rx.end(), wc, wc + n);
        n = cq_a->poll(wc);
        tx.insert(tx.end(), wc, wc + n);
    }
    ASSERT_EQ(tx.size(), 4u);
    ASSERT_EQ(rx.size(), 4u);
    for (uint32_t k = 0; k < 4; ++k) {
        EXPECT_EQ(tx[k].status, RdmaWcStatus::success) << to_string(tx[k].status);
        ASSERT_EQ(rx[k].status, RdmaWcStatus::success) << to_string(rx[k].status);
        EXPECT_EQ(rx[k].qp_num, tgt->qp_num());
        EXPECT_EQ(rx[k].byte_len, 20000u);
        // Message k went to srq[k % 2], whose WRs are k % 2 and k % 2 + 2, oldest first.
        EXPECT_EQ(rx[k].wr_id, uint64_t(k)) << k;
        EXPECT_TRUE(std::equal(ma.begin() + k * 32768, ma.begin() + k * 32768 + 20000, mb.begin() + rx[k].wr_id * 32768)) << k;
    }
}

// query_device on a real device: its PCI IDs, the path MTU its link carries, the same verbs.
TEST_P(RdmaOverNic, ReportsItsCapabilities) {
    const DeviceCaps c = port_a->query_device();
    EXPECT_TRUE(c.attr.vendor_id == 0x8086 || c.attr.vendor_id == 0x1af4) << std::hex << c.attr.vendor_id;
    EXPECT_NE(c.attr.vendor_part_id, 0u);
    EXPECT_EQ(c.max_path_mtu, port_a->active_mtu());
    EXPECT_TRUE(c.attr.device_cap_flags & device_mem_mgt_extensions);
    EXPECT_TRUE(c.vfab_caps & vfab_cap_srq);
    EXPECT_EQ(std::string(c.attr.fw_ver).rfind("vfab ", 0), 0u) << c.attr.fw_ver;
}

// A shared receive queue over the NIC: two queue pairs of b receive through one SRQ while a's
// two send 20000-byte messages (20 packets each at MTU 1024) on both at once, and a WRITE with
// immediate takes an SRQ WR too; each message lands whole in the WR it started in.
TEST_P(RdmaOverNic, SharedReceiveQueue) {
    auto srq = port_b->create_srq(SrqAttr{16, 1, 0});
    ASSERT_TRUE(srq) << srq.error().message;
    Side sa[2], sb[2];
    for (int i = 0; i < 2; ++i) {
        sa[i] = make_side(*port_a, QpType::rc, ma);
        sb[i] = make_side(*port_b, QpType::rc, mb, 4096, *srq);
        connect_rc(sa[i], sb[i], 0x100 + i, 0x200 + i, port_a->active_mtu(), 16, 7);
        connect_rc(sb[i], sa[i], 0x200 + i, 0x100 + i, port_b->active_mtu(), 16, 7);
    }
    constexpr uint32_t kLen = 20000, kSlot = 32768;
    for (uint64_t id = 0; id < 8; ++id) {
        Sge r{reinterpret_cast<uint64_t>(mb.data() + id * kSlot), kSlot, sb[0].mr.lkey};
        RecvWr rw{id, &r, 1, 0};
        ASSERT_TRUE((*srq)->post_recv(std::span(&rw, 1)));
    }
    for (uint32_t m = 0; m < 3; ++m)
        for (int i = 0; i < 2; ++i) {
            const uint32_t off = (m * 2 + uint32_t(i)) * kSlot;
            fill(ma, off, kLen, off);
            Sge s{reinterpret_cast<uint64_t>(ma.data() + off), kLen, sa[i].mr.lkey};
            RdmaSendWr w = wr_of(WrOpcode::send, off, &s);
            ASSERT_TRUE(sa[i].qp->post_send(std::span(&w, 1)));
        }
    Sge none{};
    RdmaSendWr imm = wr_of(WrOpcode::rdma_write_with_imm, 99, &none, 0);
    imm.rkey = sb[1].mr.rkey;
    imm.remote_addr = reinterpret_cast<uint64_t>(mb.data() + (2 << 20));
    imm.imm_data = 0x01020304;
    ASSERT_TRUE(sa[1].qp->post_send(std::span(&imm, 1)));

    std::vector<Wc> rx;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    Wc wc[8];
    while (rx.size() < 7 && std::chrono::steady_clock::now() < end) {
        port_a->progress();
        for (int i = 0; i < 2; ++i) {
            const int n = sb[i].cq->poll(wc);
            rx.insert(rx.end(), wc, wc + n);
            sa[i].cq->poll(wc);
        }
    }
    ASSERT_EQ(rx.size(), 7u);
    std::vector<uint32_t> next(2);   // each QP's messages arrive in order
    std::vector<uint64_t> ids;
    for (const Wc& c : rx) {
        ASSERT_EQ(c.status, RdmaWcStatus::success) << to_string(c.status);
        ids.push_back(c.wr_id);
        const int i = c.qp_num == sb[0].qp->qp_num() ? 0 : 1;
        if (c.opcode == RdmaWcOpcode::recv_rdma_with_imm) {
            EXPECT_EQ(i, 1);
            EXPECT_EQ(c.imm_data, 0x01020304u);
            continue;
        }
        ASSERT_EQ(c.byte_len, kLen);
        const uint32_t off = (next[i]++ * 2 + uint32_t(i)) * kSlot;
        EXPECT_TRUE(std::equal(ma.begin() + off, ma.begin() + off + kLen, mb.begin() + c.wr_id * kSlot)) << "WR " << c.wr_id;
    }
    std::sort(ids.begin(), ids.end());
    EXPECT_EQ(ids, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6}));
}

TEST_P(RdmaOverNic, BadRkeyLeavesTheTargetUntouched) {
    std::fill(mb.begin(), mb.end(), 0x5a);
    Sge s = sge_a(0, 5000);
    RdmaSendWr w = wr_of(WrOpcode::rdma_write, 1, &s);
    w.remote_addr = reinterpret_cast<uint64_t>(mb.data());
    w.rkey = b.mr.rkey + 1;   // a stale consumer key
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    auto tx = wait_wc(a, b, 1, std::chrono::seconds(30));
    ASSERT_EQ(tx.size(), 1u);
    EXPECT_EQ(tx[0].status, RdmaWcStatus::rem_access_err) << to_string(tx[0].status);
    EXPECT_TRUE(std::all_of(mb.begin(), mb.end(), [](uint8_t x) { return x == 0x5a; }));
}

}  // namespace vfab::rdma::test
