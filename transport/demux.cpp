// Received frames, dispatched: port -> queue pair -> role. A frame is ARP (arp.cpp), RoCEv2 to
// a queue pair of this port or a multicast group, or something else for the application's raw
// queues and raw-packet flows (raw_packet.cpp). Every RoCEv2 packet is counted once: accepted
// (rx_roce) when a role took it, dropped (rx_dropped) otherwise.
#include <cstring>

#include "engine.hpp"

namespace vfab::rdma::detail {

using namespace wire;

void PortImpl::on_frame(const uint8_t* f, uint32_t len) noexcept {
    ++stats_.rx_frames;
    if (drop_ && drop_(drop_ctx_, f, len)) return;
    if (sniffers_) sniff(f, len);
    Packet p;
    switch (parse_frame(f, len, cfg_.ipv4, p)) {
    case ParseResult::arp:
        on_arp(f, len);
        to_raw(f, len);   // the application's raw traffic may speak ARP too
        return;
    case ParseResult::other:
        ++stats_.rx_other;
        to_raw(f, len);
        return;
    case ParseResult::bad_icrc: ++stats_.rx_icrc_errors; ++stats_.rx_dropped; return;
    case ParseResult::malformed: ++stats_.rx_dropped; return;
    case ParseResult::roce: break;
    }
    if (p.opcode == op::cnp) return;
    bool taken = false;
    if (is_ipv4_multicast(p.dst_ip)) {
        taken = deliver_multicast(p, nullptr);
    } else if (p.dest_qp == kGsiQpn) {   // QP1, the management datagrams' (create_qp1)
        taken = qp1_ && !qp1_->destroyed && qp1_->on_packet(p);
    } else {
        const uint32_t slot = qp_numbers_.slot_of(p.dest_qp);
        if (slot < qps_.size() && qps_[slot] && !qps_[slot]->destroyed && qps_[slot]->qp_num() == p.dest_qp)
            taken = qps_[slot]->on_packet(p);
    }
    ++(taken ? stats_.rx_roce : stats_.rx_dropped);
}

void PortImpl::to_raw(const uint8_t* f, uint32_t len) noexcept {
    if (live_flows_ && steer(f, len)) return;
    if (app_raw_qp_) ++(app_raw_qp_->deliver(f, len) ? stats_.rx_raw : stats_.rx_raw_missed);
}

// A datagram to a group (multicast.cpp keeps the members): each member gets it, the sender
// itself too unless it asked not to. From the wire, for a group no one here is in (the
// device's filter hashes), it is dropped.
bool PortImpl::deliver_multicast(const Packet& p, const QpImpl* sender) noexcept {
    auto g = find_group(p.dst_ip);
    if (g == mcast_.end() || p.dest_qp != kMulticastQpn || !p.info.has(has_deth)) return false;
    bool taken = false;
    for (QpImpl* qp : g->qps)
        if (!qp->destroyed && !(qp == sender && qp->blocks_self_mcast())) taken |= qp->on_packet(p);
    return taken || sender;
}

// The queue pair's checks, then its role: a response to the completer, a request to the
// responder, a datagram to the responder of a UD queue pair.
bool QpImpl::on_packet(const Packet& p) noexcept {
    const RdmaQpState st = c_.state;
    if (st == RdmaQpState::reset || st == RdmaQpState::init || st == RdmaQpState::error) return false;
    if (c_.type == QpType::ud) return p.info.has(has_deth) && resp_.on_datagram(p);
    if (p.info.has(has_deth)) return false;   // a UD opcode to a connected queue pair
    // RC, UC and XRC opcodes do not mix: each queue pair takes its own transport's (as rxe).
    if (p.xrc != c_.is_xrc() || p.uc != (c_.type == QpType::uc)) return false;
    const bool request = p.info.has(is_request);
    if (c_.type == QpType::xrc_send && request) return false;   // a sender only sends
    if (c_.type == QpType::xrc_recv && !request) return false;  // a receiver only receives
    if (p.src_ip != c_.peer.ip) return false;   // only the connected peer (as rxe checks the GIDs)
    if (request) return resp_.on_request(p);
    if (!c_.peer.known) return false;   // a response to nothing: the requester sends once the MAC is known
    comp_.on_response(p);
    return true;
}

}  // namespace vfab::rdma::detail
