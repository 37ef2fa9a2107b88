// Raw-packet queue pairs and flows (raw_packet.hpp, docs/rdma-raw-packet.md).
#include "raw_packet.hpp"

#include <bit>
#include <cstring>

#include "engine.hpp"
#include "headers.hpp"
#include "limits.hpp"
#include "vfab/log.hpp"

namespace vfab::rdma::detail {

namespace {

template <class T>
bool field_matches(T frame, T value, T mask) { return (frame & mask) == (value & mask); }
bool mac_matches(const uint8_t* frame, const uint8_t* value, const uint8_t* mask) {
    for (int i = 0; i < 6; ++i)
        if ((frame[i] & mask[i]) != (value[i] & mask[i])) return false;
    return true;
}
bool any(const uint8_t* mask) { return std::any_of(mask, mask + 6, [](uint8_t b) { return b != 0; }); }

}  // namespace

// Ethernet II (IEEE 802.3 clause 3), one 802.1Q tag at most, IPv4 (RFC 791), and the ports
// that open TCP (RFC 793) and UDP (RFC 768) headers.
FrameKeys FrameKeys::of(const uint8_t* f, uint32_t len) noexcept {
    using namespace wire;
    FrameKeys k;
    const hdr::Eth& eth = *hdr::at<hdr::Eth>(f);
    k.dst_mac = eth.dst;
    k.src_mac = eth.src;
    k.ether_type = eth.type.get();
    uint32_t l3 = sizeof(hdr::Eth);
    if (k.ether_type == kEtherTypeVlan && len >= sizeof(hdr::Eth) + 4) {
        const hdr::Vlan& v = *hdr::at<hdr::Vlan>(f + 12);   // in place of the ethertype
        k.has_vlan = true;
        k.vlan_tag = v.tci.get();
        k.ether_type = v.type.get();
        l3 += 4;
    }
    if (k.ether_type != kEtherTypeIpv4 || len < l3 + sizeof(hdr::Ipv4)) return k;
    const hdr::Ipv4& ip = *hdr::at<hdr::Ipv4>(f + l3);
    const uint32_t ihl = uint32_t(ip.version_ihl & 0xf) * 4;
    if ((ip.version_ihl >> 4) != 4 || ihl < sizeof(hdr::Ipv4) || len < l3 + ihl) return k;
    k.ipv4 = true;
    k.ip_proto = ip.protocol;
    k.src_ip = ip.src.get();
    k.dst_ip = ip.dst.get();
    const bool later_fragment = (ip.flags_fragment.get() & 0x1fff) != 0;
    // TCP's and UDP's headers both open with the two ports.
    if ((k.ip_proto == kIpProtoTcp || k.ip_proto == kIpProtoUdp) && !later_fragment && len >= l3 + ihl + 4) {
        const hdr::Udp& ports = *hdr::at<hdr::Udp>(f + l3 + ihl);
        k.has_ports = true;
        k.src_port = ports.src_port.get();
        k.dst_port = ports.dst_port.get();
    }
    return k;
}

bool matches(const FlowRule& r, const FrameKeys& k) noexcept {
    if (!mac_matches(k.dst_mac, r.dst_mac, r.dst_mac_mask) || !mac_matches(k.src_mac, r.src_mac, r.src_mac_mask)) return false;
    if (!field_matches(k.ether_type, r.ether_type, r.ether_type_mask)) return false;
    if (r.vlan_tag_mask && (!k.has_vlan || !field_matches(k.vlan_tag, r.vlan_tag, r.vlan_tag_mask))) return false;
    const bool wants_ip = r.src_ip_mask || r.dst_ip_mask || r.ip_proto_mask;
    if (wants_ip && (!k.ipv4 || !field_matches(k.src_ip, r.src_ip, r.src_ip_mask) ||
                     !field_matches(k.dst_ip, r.dst_ip, r.dst_ip_mask) || !field_matches(k.ip_proto, r.ip_proto, r.ip_proto_mask)))
        return false;
    if ((r.src_port_mask || r.dst_port_mask) &&
        (!k.has_ports || !field_matches(k.src_port, r.src_port, r.src_port_mask) ||
         !field_matches(k.dst_port, r.dst_port, r.dst_port_mask)))
        return false;
    return true;
}

// ---- the queue pair --------------------------------------------------------------------------------

RawPacketQp::RawPacketQp(PortImpl& port, uint32_t qpn, const RdmaQpInitAttr& a)
    : port_(port),
      qpn_(qpn),
      scq_(static_cast<CqImpl*>(a.send_cq)),
      rcq_(static_cast<CqImpl*>(a.recv_cq)),
      sq_sig_all_(a.sq_sig_all),
      cap_(a.cap),
      rq_(std::bit_ceil(a.cap.max_recv_wr)),
      rq_sges_(rq_.size() * a.cap.max_recv_sge) {
    ++scq_->users;
    ++rcq_->users;
}

Result<void> RawPacketQp::modify(const QpAttr& a, uint32_t mask) {
    PortImpl::Guard g(port_);
    if (destroyed) return Error{ENODEV, "modify_qp: the queue pair was destroyed"};
    if (mask & attr_port) {
        if (a.port_num != 1) return Error{EINVAL, str_cat("modify_qp: port ", int(a.port_num), "; the device has port 1")};
        port_num_ = a.port_num;
    }
    if (!(mask & attr_state)) return {};
    const RdmaQpState from = state_, to = a.qp_state;
    const bool ok = to == RdmaQpState::reset || to == RdmaQpState::error || (from == RdmaQpState::reset && to == RdmaQpState::init) ||
                    (from == RdmaQpState::init && (to == RdmaQpState::init || to == RdmaQpState::rtr)) ||
                    (from == RdmaQpState::rtr && to == RdmaQpState::rts) || (from == RdmaQpState::rts && to == RdmaQpState::rts);
    if (!ok)
        return Error{EINVAL, str_cat("modify_qp: ", to_string(from), " -> ", to_string(to),
                                     " is not a transition of a raw-packet queue pair (RESET, INIT, RTR, RTS; IB spec table 91)")};
    if (to == RdmaQpState::error) {
        to_error();
    } else if (to == RdmaQpState::reset) {
        rq_head_ = rq_tail_ = 0;
        state_ = to;
    } else {
        state_ = to;
    }
    return {};
}

RdmaQpState RawPacketQp::state() const noexcept {
    PortImpl::Guard g(port_);
    return state_;
}

QpAttr RawPacketQp::query() const {
    PortImpl::Guard g(port_);
    QpAttr a;
    a.qp_state = state_;
    a.port_num = port_num_;
    return a;
}

void RawPacketQp::to_error() noexcept {
    state_ = RdmaQpState::error;
    for (; rq_head_ != rq_tail_; ++rq_head_) {
        Wc wc;
        wc.wr_id = rq_[rq_head_ & (rq_.size() - 1)].wr_id;
        wc.status = RdmaWcStatus::wr_flush_err;
        wc.opcode = RdmaWcOpcode::recv;
        wc.qp_num = qpn_;
        rcq_->push(wc, false);
    }
}

void RawPacketQp::cq_overran() noexcept {
    if (state_ == RdmaQpState::error || state_ == RdmaQpState::reset) return;
    AsyncEvent e;
    e.type = AsyncEventType::qp_fatal;
    e.qp = this;
    port_.raise(e);
    to_error();
}

PostResult RawPacketQp::post_recv(std::span<const RecvWr> wrs) noexcept {
    PortImpl::Guard g(port_);
    if (destroyed) return {ENODEV, 0};
    uint32_t i = 0;
    for (; i < wrs.size(); ++i) {
        const RecvWr& r = wrs[i];
        if (state_ == RdmaQpState::reset || r.num_sge > cap_.max_recv_sge || (r.num_sge && !r.sg_list)) return {EINVAL, i};
        if (rq_tail_ - rq_head_ == rq_.size()) return {ENOMEM, i};
        const uint32_t slot = rq_tail_++ & uint32_t(rq_.size() - 1);
        rq_[slot] = {r.wr_id, r.num_sge};
        std::copy_n(r.sg_list, r.num_sge, &rq_sges_[size_t(slot) * cap_.max_recv_sge]);
    }
    if (state_ == RdmaQpState::error) to_error();   // flushed at once, as any WR of a QP in error
    return {0, i};
}

bool RawPacketQp::deliver(const uint8_t* frame, uint32_t len) noexcept {
    if ((state_ != RdmaQpState::rtr && state_ != RdmaQpState::rts) || rq_head_ == rq_tail_) return false;
    const uint32_t slot = rq_head_++ & uint32_t(rq_.size() - 1);
    const Sge* sges = &rq_sges_[size_t(slot) * cap_.max_recv_sge];
    Wc wc;
    wc.wr_id = rq_[slot].wr_id;
    wc.opcode = RdmaWcOpcode::recv;
    wc.qp_num = qpn_;
    wc.byte_len = len;
    uint64_t room = 0;
    for (uint32_t s = 0; s < rq_[slot].nsge; ++s) room += sges[s].length;
    if (room < len) wc.status = RdmaWcStatus::loc_len_err;
    for (uint32_t s = 0, at = 0; s < rq_[slot].nsge && at < len && wc.status == RdmaWcStatus::success; ++s) {
        const uint32_t n = std::min(sges[s].length, len - at);
        const dma::Translation t = port_.mrs().translate_span(sges[s].lkey, sges[s].addr, n, dma::Access::local_write);
        if (t.status != dma::MrStatus::ok) {
            wc.status = RdmaWcStatus::loc_prot_err;
            break;
        }
        copy_to(Segment::of(t, n), 0, frame + at, n);
        at += n;
    }
    rcq_->push(wc, false);
    return true;
}

PostResult RawPacketQp::post_send(std::span<const RdmaSendWr> wrs) noexcept {
    PortImpl::Guard g(port_);
    if (destroyed) return {ENODEV, 0};
    uint32_t i = 0;
    for (; i < wrs.size(); ++i) {
        const RdmaSendWr& wr = wrs[i];
        if (state_ != RdmaQpState::rts || wr.opcode != WrOpcode::send || wr.num_sge > cap_.max_send_sge || (wr.num_sge && !wr.sg_list))
            return port_.tx_flush(), PostResult{EINVAL, i};
        uint64_t total = 0;
        for (uint32_t s = 0; s < wr.num_sge; ++s) total += wr.sg_list[s].length;
        const bool inl = wr.send_flags & wr_inline;
        if (total < wire::kEthHeader || total > port_.max_frame() || (inl && total > cap_.max_inline_data))
            return port_.tx_flush(), PostResult{EINVAL, i};
        uint8_t* buf = port_.tx_buffer();
        if (!buf) return port_.tx_flush(), PostResult{ENOMEM, i};
        Wc wc;
        wc.wr_id = wr.wr_id;
        wc.opcode = RdmaWcOpcode::send;
        wc.qp_num = qpn_;
        wc.byte_len = uint32_t(total);
        if (!gather_frame(port_.mrs(), wr.sg_list, wr.num_sge, inl, buf)) wc.status = RdmaWcStatus::loc_prot_err;
        if (wc.status == RdmaWcStatus::success) {
            // A multicast or broadcast frame reaches the port's own flows too, as a NIC loops
            // multicast back to its other queues; it goes on the wire all the same.
            if (buf[0] & 1) port_.steer(buf, wc.byte_len);
            port_.tx_queue(buf, wc.byte_len);
        } else {
            port_.tx_release(buf);
        }
        if (sq_sig_all_ || (wr.send_flags & wr_signaled) || wc.status != RdmaWcStatus::success) scq_->push(wc, false);
    }
    port_.tx_flush();
    return {0, i};
}

Result<uint32_t> RawPacketQp::bind_mw(uint32_t, const MwBindInfo&, uint64_t, uint32_t) {
    return Error{EINVAL, "bind_mw: a raw-packet queue pair binds no memory windows"};
}
Result<void> RawPacketQp::attach_mcast(const Gid&, uint16_t) {
    return Error{EINVAL, "attach_mcast: a raw-packet queue pair takes multicast frames through a flow (create_flow)"};
}
Result<void> RawPacketQp::detach_mcast(const Gid&, uint16_t) {
    return Error{EINVAL, "detach_mcast: a raw-packet queue pair is in no multicast group"};
}

Result<void> RawPacketQp::destroy() {
    PortImpl::Guard g(port_);
    if (destroyed) return Error{ENODEV, "queue pair already destroyed"};
    if (flows) return Error{EBUSY, str_cat("destroy QP: ", flows, " flow(s) still steer frames to it — destroy them first")};
    destroyed = true;
    state_ = RdmaQpState::reset;
    --scq_->users;
    --rcq_->users;
    return {};
}

Result<void> FlowImpl::destroy() {
    PortImpl::Guard g(port_);
    if (destroyed) return Error{ENODEV, "flow already destroyed"};
    destroyed = true;
    --qp->flows;
    port_.flows_changed();
    return {};
}

// ---- the port's side --------------------------------------------------------------------------------

Result<Qp*> PortImpl::create_raw_packet_qp(const RdmaQpInitAttr& a) {
    if (!owns(cqs_, a.send_cq) || !owns(cqs_, a.recv_cq))
        return Error{EINVAL, "create_qp: send_cq and recv_cq must be completion queues of this port"};
    if (a.srq || a.xrcd) return Error{EINVAL, "create_qp: a raw-packet queue pair has its own receive queue (no srq or xrcd)"};
    if (a.create_flags) return Error{EINVAL, "create_qp: a raw-packet queue pair takes no create_flags"};
    const RdmaQpCaps& c = a.cap;
    if (c.max_send_wr == 0 || c.max_send_wr > kMaxQpWr || c.max_recv_wr == 0 || c.max_recv_wr > kMaxQpWr || c.max_send_sge == 0 ||
        c.max_send_sge > kMaxSge || c.max_recv_sge == 0 || c.max_recv_sge > kMaxSge || c.max_inline_data > kMaxInline)
        return Error{EINVAL, str_cat("create_qp: max_send_wr/max_recv_wr 1 to ", kMaxQpWr, ", SGEs 1 to ", kMaxSge,
                                     ", inline data up to ", kMaxInline)};
    for (uint32_t i = 0; i < raw_qps_.size(); ++i)
        if (raw_qps_[i]->destroyed) {
            raw_qps_[i] = std::make_unique<RawPacketQp>(*this, kFirstRawQpn + i, a);
            return raw_qps_[i].get();
        }
    if (raw_qps_.size() >= cfg_.max_qp)
        return Error{ENOSPC, str_cat("create_qp: the port has ", raw_qps_.size(), " raw-packet queue pairs already (PortConfig::max_qp)")};
    raw_qps_.push_back(std::make_unique<RawPacketQp>(*this, kFirstRawQpn + uint32_t(raw_qps_.size()), a));
    return raw_qps_.back().get();
}

Result<Flow*> PortImpl::create_flow(Qp* qp, const FlowRule& rule) {
    Guard g(*this);
    auto it = std::find_if(raw_qps_.begin(), raw_qps_.end(), [&](auto& q) { return q.get() == qp && !q->destroyed; });
    if (it == raw_qps_.end()) return Error{EINVAL, "create_flow: qp must be a raw-packet queue pair of this port"};
    const bool matches_fields = any(rule.dst_mac_mask) || any(rule.src_mac_mask) || rule.ether_type_mask || rule.vlan_tag_mask ||
                                rule.src_ip_mask || rule.dst_ip_mask || rule.ip_proto_mask || rule.src_port_mask || rule.dst_port_mask;
    if (rule.kind == FlowRule::Kind::sniffer && matches_fields)
        return Error{EINVAL, "create_flow: a sniffer takes every frame: give it no fields to match"};
    if (live(flows_) >= kMaxFlows) return Error{ENOSPC, str_cat("create_flow: the port has ", kMaxFlows, " flows already")};
    std::erase_if(flows_, [](auto& f) { return f->destroyed; });
    flows_.push_back(std::make_unique<FlowImpl>(*this, it->get(), rule));
    ++(*it)->flows;
    flows_changed();
    return flows_.back().get();
}

void PortImpl::flows_changed() noexcept {
    live_flows_ = sniffers_ = 0;
    for (auto& f : flows_) {
        if (f->destroyed) continue;
        ++live_flows_;
        sniffers_ += f->rule.kind == FlowRule::Kind::sniffer;
    }
}

void PortImpl::sniff(const uint8_t* f, uint32_t len) noexcept {
    for (auto& fl : flows_)
        if (!fl->destroyed && fl->rule.kind == FlowRule::Kind::sniffer)
            ++(fl->qp->deliver(f, len) ? stats_.rx_raw : stats_.rx_raw_missed);
}

// The normal rule of the lowest priority number that matches, else a multicast frame's
// mc_default rule, else the all_default rule; a frame steered to a queue pair with no receive
// posted is missed (counted).
bool PortImpl::steer(const uint8_t* f, uint32_t len) noexcept {
    if (live_flows_ == sniffers_ || len < wire::kEthHeader) return false;
    const FrameKeys k = FrameKeys::of(f, len);
    const bool multicast = k.dst_mac[0] & 1;   // the group bit (IEEE 802.3 3.2.3); broadcast has it too
    FlowImpl *best = nullptr, *all_default = nullptr, *mc_default = nullptr;
    for (auto& fl : flows_) {
        if (fl->destroyed) continue;
        const FlowRule& r = fl->rule;
        if (r.kind == FlowRule::Kind::normal) {
            if ((!best || r.priority < best->rule.priority) && matches(r, k)) best = fl.get();
        } else if (r.kind == FlowRule::Kind::all_default && !all_default) {
            all_default = fl.get();
        } else if (r.kind == FlowRule::Kind::mc_default && !mc_default) {
            mc_default = fl.get();
        }
    }
    FlowImpl* to = best ? best : (multicast && mc_default) ? mc_default : all_default;
    if (!to) return false;
    ++(to->qp->deliver(f, len) ? stats_.rx_raw : stats_.rx_raw_missed);
    return true;
}

}  // namespace vfab::rdma::detail
