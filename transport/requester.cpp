// The requester: send WRs become packets (IB spec 9.5 and 9.7.4): messages split at the path
// MTU, PSNs assigned, AckReq on the last packet, READs and atomics bounded by max_rd_atomic,
// fenced WRs held until earlier READs and atomics complete. UC (9.8) sends the same SENDs and
// WRITEs under its own opcodes, asks for no acknowledgement and completes a WR once its last
// packet is handed to the link.
#include <algorithm>
#include <cstring>

#include "engine.hpp"

namespace vfab::rdma::detail {

using namespace wire;

namespace {

// The opcode of packet `first`/`last` of a SEND or WRITE message (9.2.1, table 38).
uint8_t message_opcode(WrOpcode op, bool first, bool last) {
    const bool write = op == WrOpcode::rdma_write || op == WrOpcode::rdma_write_with_imm;
    if (write) {
        const bool imm = op == WrOpcode::rdma_write_with_imm;
        if (first && last) return imm ? op::write_only_imm : op::write_only;
        if (first) return op::write_first;
        if (last) return imm ? op::write_last_imm : op::write_last;
        return op::write_middle;
    }
    if (first && last)
        return op == WrOpcode::send_with_imm ? op::send_only_imm : op == WrOpcode::send_with_inv ? op::send_only_inv : op::send_only;
    if (first) return op::send_first;
    if (last)
        return op == WrOpcode::send_with_imm ? op::send_last_imm : op == WrOpcode::send_with_inv ? op::send_last_inv : op::send_last;
    return op::send_middle;
}

}  // namespace

// ---- posting ------------------------------------------------------------------------------------

PostResult QpImpl::post_send(std::span<const SendWr> wrs) noexcept {
    PortImpl::Guard g(port_);
    if (destroyed) return {ENODEV, 0};
    uint32_t i = 0;
    for (; i < wrs.size(); ++i)
        if (PostResult r = post_send_one(wrs[i]); !r) {
            r.posted = i;
            pump();
            port_.tx_flush();
            return r;
        }
    pump();   // the first packets leave now, in the caller's call
    port_.tx_flush();
    return {0, i};
}

// The send queue's next slot, made ready for `wr` (not yet counted: the caller advances sq_tail_).
// The WR's pointers are dropped: what they point to is read during the post only.
SendWqe& QpImpl::new_wqe(const SendWr& wr) noexcept {
    const uint32_t slot = sq_tail_ & sq_mask_;
    SendWqe& w = sq_[slot];
    w = SendWqe{};
    w.wr = wr;
    w.wr.sg_list = nullptr;
    w.wr.reg = nullptr;
    w.seg0 = slot * (cap_.max_send_sge + 1);
    w.signaled = sq_sig_all_ || (wr.send_flags & wr_signaled);
    return w;
}

PostResult QpImpl::post_send_one(const SendWr& wr) noexcept {
    if (state_ == QpState::reset || state_ == QpState::init || state_ == QpState::rtr) return {EINVAL, 0};
    if (type_ == QpType::xrc_recv) return {EINVAL, 0};   // an XRC receiver has no send queue
    const bool ud = type_ == QpType::ud;
    switch (wr.opcode) {
    case WrOpcode::send:
    case WrOpcode::send_with_imm: break;
    case WrOpcode::rdma_write:
    case WrOpcode::rdma_write_with_imm:
        if (ud) return {EINVAL, 0};
        break;
    case WrOpcode::rdma_read:   // UC has SENDs and WRITEs only (9.2.1 table 38)
    case WrOpcode::atomic_cmp_and_swp:
    case WrOpcode::atomic_fetch_and_add:
    case WrOpcode::send_with_inv:
        if (ud || type_ == QpType::uc) return {EINVAL, 0};
        break;
    case WrOpcode::masked_atomic_cmp_and_swp:   // RC only: their opcodes have no XRC form
    case WrOpcode::masked_atomic_fetch_and_add:
        if (type_ != QpType::rc) return {EINVAL, 0};
        break;
    case WrOpcode::local_inv:
    case WrOpcode::bind_mw:
    case WrOpcode::reg_mr: return post_memory_wr(wr, false);
    default: return {EINVAL, 0};
    }
    const bool inl = wr.send_flags & wr_inline;
    if (inl && (is_read_or_atomic(wr.opcode))) return {EINVAL, 0};
    if (!inl && wr.num_sge > cap_.max_send_sge) return {EINVAL, 0};
    if (ud && (!wr.ah || static_cast<const AhImpl*>(wr.ah)->destroyed)) return {EINVAL, 0};   // none, or destroyed
    if (sq_tail_ - sq_head_ == sq_.size()) return {ENOMEM, 0};

    const uint32_t slot = sq_tail_ & sq_mask_;
    SendWqe& w = new_wqe(wr);
    Segment* seg = &sq_segs_[w.seg0];
    bool bad = false;
    if (inl) {
        uint64_t total = 0;
        for (uint32_t s = 0; s < wr.num_sge; ++s) total += wr.sg_list[s].length;
        if (total > cap_.max_inline_data) return {EINVAL, 0};
        uint8_t* to = &inline_[size_t(slot) * cap_.max_inline_data];
        for (uint32_t s = 0; s < wr.num_sge; ++s) {
            std::memcpy(to + w.length, reinterpret_cast<const void*>(wr.sg_list[s].addr), wr.sg_list[s].length);
            w.length += wr.sg_list[s].length;
        }
        seg[0] = {to, w.length};
        w.nseg = 1;
    } else {
        const dma::Access need = is_read_or_atomic(wr.opcode) ? dma::Access::local_write : dma::Access::none;
        uint64_t total = 0;
        for (uint32_t s = 0; s < wr.num_sge; ++s) {
            const Sge& sge = wr.sg_list[s];
            const dma::Translation t = port_.mrs().translate_span(sge.lkey, sge.addr, sge.length, need);
            bad |= t.status != dma::MrStatus::ok;
            seg[s] = Segment::of(t, sge.length);
            total += sge.length;
        }
        if (total > (1u << 31)) return {EINVAL, 0};
        w.length = uint32_t(total);
        w.nseg = wr.num_sge;
    }
    ++sq_tail_;
    if (state_ == QpState::error) {
        flush();
        return {0, 1};
    }
    if (bad || (is_atomic_wr(wr.opcode) && w.length < 8) || (ud && w.length > mtu_)) {
        // Local errors end the WR and, as verbs has it, the queue pair.
        w.done = true;
        w.status = bad ? WcStatus::loc_prot_err : WcStatus::loc_len_err;
        to_error();
        return {0, 1};
    }
    ready();
    return {0, 1};
}

// ---- sending ------------------------------------------------------------------------------------

void QpImpl::pump() noexcept {
    if (destroyed) return;
    // A pending ACK goes first unless READ responses before it wait (send_read_responses then
    // sends it after them); in the error state they never will.
    if (ack_pending_ && (!res_sending_ || state_ == QpState::error) && !send_pending_ack()) return;
    if (state_ == QpState::error || state_ == QpState::reset) return;
    if (!send_read_responses()) {
        ready();
        return;
    }
    if (state_ != QpState::rts || rnr_deadline_) return;
    while (sq_next_ != sq_tail_ && state_ == QpState::rts) {
        SendWqe& w = sq_[sq_next_ & sq_mask_];
        if (type_ == QpType::ud) {
            if (!send_ud_packet(w)) return;
            ++sq_next_;
            retire();
            continue;
        }
        if (is_memory_wr(w.wr.opcode)) {
            if (!w.started) {   // a fenced LOCAL_INV: once the earlier READs and atomics are done
                if (rd_atomic_ > 0) return;
                execute_memory_wr(w, w.wr, false);
                if (w.status != WcStatus::success) {
                    to_error();
                    return;
                }
            }
            ++sq_next_;
            retire();
            continue;
        }
        if (!peer_known_ && !resolve_peer()) return;   // packets need the peer's MAC; memory WRs do not
        if (!w.started) {
            const bool rd = is_read_or_atomic(w.wr.opcode);
            if (rd && rd_atomic_ >= std::max<uint32_t>(1, attr_.max_rd_atomic)) return;   // a completion readies us
            if ((w.wr.send_flags & wr_fence) && rd_atomic_ > 0) return;
            w.started = true;
            w.first_psn = next_psn_;
            w.npkts = w.wr.opcode == WrOpcode::rdma_read || !is_read_or_atomic(w.wr.opcode)
                          ? std::max<uint32_t>(1, (w.length + mtu_ - 1) / mtu_)
                          : 1;
            if (rd) ++rd_atomic_;
        }
        if (reliable() && psn_diff(next_psn_, una_) >= kMaxUnackedPsns) return;   // an acknowledgement readies us
        // A READ asks for its next part once every response of the last part is in: the responder
        // keeps one resource per request, max_dest_rd_atomic of them, and two parts of one READ
        // with atomics behind would push out the first part's, which its lost responses need.
        if (w.wr.opcode == WrOpcode::rdma_read && psn_diff(next_psn_, psn_add(w.first_psn, w.read_pkts)) > 0) return;
        if (!send_rc_packet(w)) {
            ready();
            return;
        }
        if (psn_diff(next_psn_, w.first_psn) < int32_t(w.npkts)) continue;
        ++sq_next_;
        if (!reliable()) {   // UC: no acknowledgement will come (9.8)
            w.done = true;
            retire();
        }
    }
}

bool QpImpl::resolve_peer() noexcept {
    bool failed = false;
    peer_known_ = port_.resolve(peer_ip_, peer_mac_, failed);
    if (peer_known_) return true;
    if (failed) {
        fail_head(WcStatus::retry_exc_err, kVendorErrArpUnresolved);
        return false;
    }
    waiting_arp_ = true;
    return false;
}

void QpImpl::fill_common(PacketHeader& h) const noexcept {
    h.dst_mac = peer_mac_;
    h.src_mac = port_.mac();
    h.src_ip = port_.ipv4();
    h.dst_ip = peer_ip_;
    h.src_port = src_port_;
    h.ttl = attr_.ah_attr.hop_limit ? attr_.ah_attr.hop_limit : port_.ttl();
    h.tos = attr_.ah_attr.traffic_class;
    h.dest_qp = attr_.dest_qp_num;
    h.xrc = is_xrc();
    h.uc = type_ == QpType::uc;
}

void QpImpl::gather(const SendWqe& w, uint32_t offset, uint8_t* to, uint32_t len) const noexcept {
    copy_from_segments(&sq_segs_[w.seg0], w.nseg, offset, to, len);
}

bool QpImpl::send_rc_packet(SendWqe& w) noexcept {
    uint8_t* buf = port_.tx_buffer();
    if (!buf) return false;
    PacketHeader h;
    fill_common(h);
    h.xrc_srqn = w.wr.remote_srqn;   // XRC: every request names the target's SRQ (9.3.8)
    const uint32_t psn = next_psn_;
    const uint32_t idx = uint32_t(psn_diff(psn, w.first_psn));
    const uint32_t offset = idx * mtu_;
    h.psn = psn;
    uint32_t payload = 0;
    switch (w.wr.opcode) {
    case WrOpcode::rdma_read: {
        // A long READ goes as several requests of at most a send window of responses each:
        // the responder sends them back to back, and a receive ring takes a window, not 1 MiB.
        const uint32_t chunk = std::min(w.length - offset, uint32_t(kMaxUnackedPsns) * mtu_);
        h.opcode = op::read_request;
        h.va = w.wr.remote_addr + offset;
        h.rkey = w.wr.rkey;
        h.dma_len = chunk;
        h.ack_req = true;
        next_psn_ = psn_add(psn, std::max<uint32_t>(1, (chunk + mtu_ - 1) / mtu_));
        break;
    }
    case WrOpcode::atomic_cmp_and_swp:
    case WrOpcode::atomic_fetch_and_add:
    case WrOpcode::masked_atomic_cmp_and_swp:
    case WrOpcode::masked_atomic_fetch_and_add: {   // masked: docs/rdma-atomics.md
        const bool masked = w.wr.opcode == WrOpcode::masked_atomic_cmp_and_swp ||
                            w.wr.opcode == WrOpcode::masked_atomic_fetch_and_add;
        const bool cas = w.wr.opcode == WrOpcode::atomic_cmp_and_swp || w.wr.opcode == WrOpcode::masked_atomic_cmp_and_swp;
        h.opcode = masked ? (cas ? op::vfab_masked_cmp_swap : op::vfab_masked_fetch_add) : (cas ? op::cmp_swap : op::fetch_add);
        h.va = w.wr.remote_addr;
        h.rkey = w.wr.rkey;
        h.swap_add = cas ? w.wr.swap : w.wr.compare_add;
        h.compare = cas ? w.wr.compare_add : 0;
        h.swap_mask = masked && cas ? w.wr.swap_mask : 0;
        h.compare_mask = masked ? w.wr.compare_add_mask : 0;
        h.ack_req = true;
        next_psn_ = psn_add(psn, 1);
        break;
    }
    default: {
        const bool first = idx == 0, last = idx + 1 == w.npkts;
        payload = std::min(mtu_, w.length - offset);
        h.opcode = message_opcode(w.wr.opcode, first, last);
        if (first && (w.wr.opcode == WrOpcode::rdma_write || w.wr.opcode == WrOpcode::rdma_write_with_imm)) {
            h.va = w.wr.remote_addr;
            h.rkey = w.wr.rkey;
            h.dma_len = w.length;
        }
        h.imm_be = w.wr.imm_data;
        h.inv_rkey = w.wr.imm_data;   // SEND_WITH_INV: the rkey to invalidate
        h.solicited = last && (w.wr.send_flags & wr_solicited);
        // AckReq on a message's last packet, every kAckReqInterval packets, and on the one that
        // fills the send window (else nothing would ever open it). UC asks for none, as rxe.
        h.ack_req = reliable() && (last || ++pkts_unacked_ >= kAckReqInterval ||
                                   psn_diff(psn_add(psn, 1), una_) >= kMaxUnackedPsns);
        if (h.ack_req) pkts_unacked_ = 0;
        next_psn_ = psn_add(psn, 1);
    }
    }
    uint8_t* data = write_headers(buf, h, payload);
    gather(w, offset, data, payload);
    port_.tx_queue(buf, finish_frame(buf, payload));
    if (!retry_deadline_ && reliable()) arm_retry(now_ns());
    return true;
}

bool QpImpl::send_ud_packet(SendWqe& w) noexcept {
    const AhAttr& ah = w.wr.ah->attr();
    uint8_t mac[6];
    bool failed = false;
    if (!port_.resolve(ah.dgid.ipv4(), mac, failed)) {
        if (!failed) {
            waiting_arp_ = true;
            return false;
        }
        w.status = WcStatus::retry_exc_err;   // the destination never answered ARP
        w.vendor_err = kVendorErrArpUnresolved;
        w.done = true;
        return true;
    }
    uint8_t* buf = port_.tx_buffer();
    if (!buf) {
        ready();
        return false;
    }
    PacketHeader h;
    h.dst_mac = mac;
    h.src_mac = port_.mac();
    h.src_ip = port_.ipv4();
    h.dst_ip = ah.dgid.ipv4();
    h.src_port = src_port_;
    h.ttl = ah.hop_limit ? ah.hop_limit : port_.ttl();
    h.tos = ah.traffic_class;
    h.opcode = w.wr.opcode == WrOpcode::send_with_imm ? op::ud_send_only_imm : op::ud_send_only;
    h.solicited = w.wr.send_flags & wr_solicited;
    h.dest_qp = w.wr.remote_qpn;
    h.psn = next_psn_;
    next_psn_ = psn_add(next_psn_, 1);
    h.qkey = (w.wr.remote_qkey & kControlledQkey) ? attr_.qkey : w.wr.remote_qkey;
    h.src_qp = qpn_;
    h.imm_be = w.wr.imm_data;
    uint8_t* data = write_headers(buf, h, w.length);
    gather(w, 0, data, w.length);
    const uint32_t len = finish_frame(buf, w.length);
    if (is_ipv4_multicast(h.dst_ip)) {   // the NIC sends it away: this port's members get it here
        Packet p;
        if (parse_frame(buf, len, port_.ipv4(), p) == ParseResult::roce) port_.deliver_multicast(p, this);
    }
    port_.tx_queue(buf, len);
    w.done = true;
    return true;
}

void QpImpl::arm_retry(uint64_t now) noexcept {
    const uint64_t t = reliable() ? ack_timeout_ns(attr_.timeout) : 0;
    retry_deadline_ = t ? now + t : 0;   // timeout 0: no timer (IB spec 9.7.6.1.3); UC never retries
    port_.note_deadline(retry_deadline_);
}

}  // namespace vfab::rdma::detail
