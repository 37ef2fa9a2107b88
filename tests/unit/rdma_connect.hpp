// Helpers of the transport's unit tests: an RC or UD queue pair on each port of an RdmaPair,
// connected the way an application does it (INIT, RTR, RTS), registered buffers, and a loop
// that runs both ports until a completion queue has what a test waits for.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <vector>

#include "rdma_fake_link.hpp"

namespace vfab::rdma::test {

using vfab::test::RdmaPair;

struct Side {
    rdma::Port* port = nullptr;
    rdma::Cq* cq = nullptr;
    rdma::Qp* qp = nullptr;
    std::vector<uint8_t>* mem = nullptr;
    dma::MemoryRegion mr;
};

inline constexpr uint32_t kAllRemote = uint32_t(dma::Access::local_write | dma::Access::remote_write |
                                                dma::Access::remote_read | dma::Access::remote_atomic);

// A CQ and a QP on `port` (receiving from `srq` when given) and `mem` registered.
inline Side make_side(rdma::Port& port, rdma::QpType type, std::vector<uint8_t>& mem, uint32_t cqe = 4096,
                      rdma::Srq* srq = nullptr) {
    Side s;
    s.port = &port;
    s.cq = *port.create_cq(cqe);
    rdma::RdmaQpInitAttr ia;
    ia.qp_type = type;
    ia.send_cq = ia.recv_cq = s.cq;
    ia.srq = srq;
    ia.cap.max_send_wr = 1024;
    ia.cap.max_recv_wr = 1024;
    s.qp = *port.create_qp(ia);
    s.mem = &mem;
    auto mr = port.pd().register_memory(mem.data(), mem.size(), dma::Access(kAllRemote));
    EXPECT_TRUE(mr) << mr.error().message;
    s.mr = *mr;
    return s;
}

// INIT -> RTR towards `peer`: it receives from it, and sends nothing yet.
inline void connect_rc_rtr(Side& me, const Side& peer, uint32_t peer_psn, uint32_t mtu = 3, uint8_t max_dest_rd_atomic = 4) {
    QpAttr a;
    a.qp_state = RdmaQpState::init;
    a.qp_access_flags = kAllRemote;
    ASSERT_TRUE(me.qp->modify(a, attr_state | attr_pkey_index | attr_port | attr_access_flags));
    a.qp_state = RdmaQpState::rtr;
    a.path_mtu = mtu;
    a.dest_qp_num = peer.qp->qp_num();
    a.rq_psn = peer_psn;
    a.max_dest_rd_atomic = max_dest_rd_atomic;
    a.min_rnr_timer = 1;
    a.ah_attr.dgid = peer.port->gid();
    auto r = me.qp->modify(a, attr_state | attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn |
                                  attr_max_dest_rd_atomic | attr_min_rnr_timer);
    ASSERT_TRUE(r) << r.error().message;
}

// INIT -> RTR -> RTS towards `peer`, as ibv_rc_pingpong does.
inline void connect_rc(Side& me, const Side& peer, uint32_t my_psn, uint32_t peer_psn, uint32_t mtu = 3,
                       uint8_t timeout = 8, uint8_t retry = 7, uint8_t rnr_retry = 7) {
    connect_rc_rtr(me, peer, peer_psn, mtu);
    QpAttr a;
    a.qp_state = RdmaQpState::rts;
    a.sq_psn = my_psn;
    a.timeout = timeout;
    a.retry_cnt = retry;
    a.rnr_retry = rnr_retry;
    a.max_rd_atomic = 4;
    auto r = me.qp->modify(a, attr_state | attr_sq_psn | attr_timeout | attr_retry_cnt | attr_rnr_retry |
                             attr_max_qp_rd_atomic);
    ASSERT_TRUE(r) << r.error().message;
}

// A UD queue pair through INIT (with `qkey`), RTR and RTS (send PSN `sq_psn`).
inline void connect_ud(Side& s, uint32_t qkey, uint32_t sq_psn = 0) {
    QpAttr x;
    x.qp_state = RdmaQpState::init;
    x.qkey = qkey;
    ASSERT_TRUE(s.qp->modify(x, attr_state | attr_pkey_index | attr_port | attr_qkey));
    x.qp_state = RdmaQpState::rtr;
    ASSERT_TRUE(s.qp->modify(x, attr_state));
    x.qp_state = RdmaQpState::rts;
    x.sq_psn = sq_psn;
    ASSERT_TRUE(s.qp->modify(x, attr_state | attr_sq_psn));
}

// Both QPs through RESET and connected to each other again (after an error moved them to ERR).
inline void reconnect_rc(Side& a, Side& b, uint32_t psn_a, uint32_t psn_b) {
    for (Side* s : {&a, &b}) {
        QpAttr x;
        x.qp_state = RdmaQpState::reset;
        ASSERT_TRUE(s->qp->modify(x, attr_state));
    }
    connect_rc(a, b, psn_a, psn_b);
    connect_rc(b, a, psn_b, psn_a);
}

// Runs both ports until `cq` gave `n` completions (into `out`) or `limit` passed.
inline std::vector<rdma::Wc> wait_wc(Side& waiter, Side& other, size_t n,
                                     std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    std::vector<rdma::Wc> out;
    const auto end = std::chrono::steady_clock::now() + limit;
    rdma::Wc wc[64];
    while (out.size() < n && std::chrono::steady_clock::now() < end) {
        other.port->progress();
        const int k = waiter.cq->poll(std::span(wc, std::min<size_t>(64, n - out.size())));
        for (int i = 0; i < k; ++i) out.push_back(wc[i]);
    }
    return out;
}

inline rdma::RdmaSendWr wr_of(rdma::WrOpcode op, uint64_t id, const Sge* sge, uint32_t nsge = 1) {
    rdma::RdmaSendWr w;
    w.wr_id = id;
    w.opcode = op;
    w.sg_list = sge;
    w.num_sge = nsge;
    w.send_flags = rdma::wr_signaled;
    return w;
}

}  // namespace vfab::rdma::test
