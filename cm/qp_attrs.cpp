// QP attributes from a connection's REQ and REP (see qp_attrs.hpp).
#include "qp_attrs.hpp"

#include <algorithm>

namespace vfab::cm {

namespace {
// The requester's local ACK timeout from the responder's target ACK delay and the packet life
// time the kernel assumes on RoCE (18): the larger, plus one (the kernel's cm_ack_timeout).
constexpr uint8_t kPacketLife = 18;
uint8_t ack_timeout(uint8_t target_ack_delay) noexcept {
    return uint8_t(std::min<uint32_t>(31, std::max<uint32_t>(target_ack_delay, kPacketLife) + 1));
}
// The RNR NAK timer this side's responder asks for: 0.64 ms (the kernel leaves 0, 655 ms; the
// value is this side's own, the peer only waits it).
constexpr uint8_t kMinRnrTimer = 12;
}  // namespace

QpTransition to_init(const Req& req, const Rep& rep, Side side) noexcept {
    QpTransition t;
    t.attr.qp_state = rdma::RdmaQpState::init;
    const uint8_t answers = side == Side::active ? req.responder_resources : rep.responder_resources;
    uint32_t access = uint32_t(vfab::dma::Access::remote_write);
    if (answers) access |= uint32_t(vfab::dma::Access::remote_read) | uint32_t(vfab::dma::Access::remote_atomic);
    t.attr.qp_access_flags = access;
    t.attr.pkey_index = 0;
    t.attr.port_num = 1;
    t.mask = rdma::attr_state | rdma::attr_pkey_index | rdma::attr_port | rdma::attr_access_flags;
    return t;
}

QpTransition to_rtr(const Req& req, const Rep& rep, Side side, uint32_t peer_ip) noexcept {
    QpTransition t;
    t.attr.qp_state = rdma::RdmaQpState::rtr;
    t.attr.ah_attr.dgid = rdma::Gid::from_ipv4(peer_ip);
    t.attr.ah_attr.hop_limit = req.hop_limit;
    t.attr.ah_attr.traffic_class = req.traffic_class;
    t.attr.path_mtu = req.path_mtu;
    t.attr.dest_qp_num = side == Side::active ? rep.local_qpn : req.local_qpn;
    // A message's starting PSN is the one its sender receives from first (12.7.21; the kernel's
    // ib_cm): each side sends from the PSN the other's message gave.
    t.attr.rq_psn = side == Side::active ? req.starting_psn : rep.starting_psn;
    t.attr.max_dest_rd_atomic = side == Side::active ? req.responder_resources : rep.responder_resources;
    t.attr.min_rnr_timer = kMinRnrTimer;
    t.mask = rdma::attr_state | rdma::attr_av | rdma::attr_path_mtu | rdma::attr_dest_qpn | rdma::attr_rq_psn |
             rdma::attr_max_dest_rd_atomic | rdma::attr_min_rnr_timer;
    return t;
}

QpTransition to_rts(const Req& req, const Rep& rep, Side side) noexcept {
    QpTransition t;
    t.attr.qp_state = rdma::RdmaQpState::rts;
    t.attr.sq_psn = side == Side::active ? rep.starting_psn : req.starting_psn;
    t.attr.timeout = side == Side::active ? ack_timeout(rep.target_ack_delay) : req.local_ack_timeout;
    t.attr.retry_cnt = req.retry_count;
    t.attr.rnr_retry = side == Side::active ? rep.rnr_retry_count : req.rnr_retry_count;
    t.attr.max_rd_atomic = side == Side::active ? req.initiator_depth : rep.initiator_depth;
    t.mask = rdma::attr_state | rdma::attr_sq_psn | rdma::attr_timeout | rdma::attr_retry_cnt | rdma::attr_rnr_retry |
             rdma::attr_max_qp_rd_atomic;
    return t;
}

}  // namespace vfab::cm
