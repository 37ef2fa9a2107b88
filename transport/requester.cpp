// The requester: send WRs become packets (IB spec 9.5 and 9.7.4): messages split at the path
// MTU, PSNs assigned, AckReq on the last packet, READs and atomics bounded by max_rd_atomic,
// fenced WRs held until earlier READs and atomics complete. UC (9.8) sends the same SENDs and
// WRITEs under its own opcodes, asks for no acknowledgement and completes a WR once its last
// packet is handed to the link.
#include <algorithm>
#include <bit>
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

void SendQueue::init(uint32_t depth, uint32_t max_sge, uint32_t max_inline) {
    const uint32_t n = std::bit_ceil(depth);
    segs_per_wqe_ = max_sge + 1;
    max_inline_ = max_inline;
    wqes_.resize(n);
    segs_.resize(size_t(n) * segs_per_wqe_);
    inline_.resize(size_t(n) * max_inline);
    mask_ = n - 1;
}

SendWqe& SendQueue::prepare(const RdmaSendWr& wr, bool signaled) noexcept {
    const uint32_t slot = tail & mask_;
    SendWqe& w = wqes_[slot];
    w.wr = wr;
    w.wr.sg_list = nullptr;
    w.wr.reg = nullptr;
    w.seg0 = slot * segs_per_wqe_;
    w.nseg = w.length = w.first_psn = w.npkts = w.read_pkts = 0;
    w.started = w.done = false;
    w.signaled = signaled;
    w.status = RdmaWcStatus::success;
    w.vendor_err = 0;
    return w;
}

PostResult Requester::post(const RdmaSendWr& wr) noexcept {
    const RdmaQpState state = c_.state;
    if (state == RdmaQpState::reset || state == RdmaQpState::init || state == RdmaQpState::rtr) return {EINVAL, 0};
    if (c_.type == QpType::xrc_recv) return {EINVAL, 0};   // an XRC receiver has no send queue
    const bool ud = c_.type == QpType::ud;
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
        if (ud || c_.type == QpType::uc) return {EINVAL, 0};
        break;
    case WrOpcode::masked_atomic_cmp_and_swp:   // RC only: their opcodes have no XRC form
    case WrOpcode::masked_atomic_fetch_and_add:
        if (c_.type != QpType::rc) return {EINVAL, 0};
        break;
    case WrOpcode::local_inv:
    case WrOpcode::bind_mw:
    case WrOpcode::reg_mr: return post_memory_wr(wr, false);
    default: return {EINVAL, 0};
    }
    const bool inl = wr.send_flags & wr_inline;
    if (inl && (is_read_or_atomic(wr.opcode))) return {EINVAL, 0};
    if (!inl && wr.num_sge > c_.cap.max_send_sge) return {EINVAL, 0};
    if (ud && (!wr.ah || static_cast<const AhImpl*>(wr.ah)->destroyed)) return {EINVAL, 0};   // none, or destroyed
    if (sq.full()) return {ENOMEM, 0};

    SendWqe& w = sq.prepare(wr, c_.sq_sig_all || (wr.send_flags & wr_signaled));
    Segment* seg = sq.segments(w);
    bool bad = false;
    if (inl) {
        uint64_t total = 0;
        for (uint32_t s = 0; s < wr.num_sge; ++s) total += wr.sg_list[s].length;
        if (total > c_.cap.max_inline_data) return {EINVAL, 0};
        uint8_t* to = sq.inline_data(sq.tail);
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
            const dma::Translation t = c_.port.mrs().translate_span(sge.lkey, sge.addr, sge.length, need);
            bad |= t.status != dma::MrStatus::ok;
            seg[s] = Segment::of(t, sge.length);
            total += sge.length;
        }
        if (total > (1u << 31)) return {EINVAL, 0};
        w.length = uint32_t(total);
        w.nseg = wr.num_sge;
    }
    ++sq.tail;
    if (state == RdmaQpState::error) {
        qp_.flush();
        return {0, 1};
    }
    if (bad || (is_atomic_wr(wr.opcode) && w.length < 8) || (ud && w.length > c_.mtu)) {
        // Local errors end the WR and, as verbs has it, the queue pair.
        w.done = true;
        w.status = bad ? RdmaWcStatus::loc_prot_err : RdmaWcStatus::loc_len_err;
        qp_.to_error();
        return {0, 1};
    }
    qp_.ready();
    return {0, 1};
}

// ---- sending ------------------------------------------------------------------------------------

void Requester::pump() noexcept {
    while (sq.next != sq.tail && c_.state == RdmaQpState::rts) {
        SendWqe& w = sq.at(sq.next);
        if (c_.type == QpType::ud) {
            if (!send_ud_packet(w)) return;
            ++sq.next;
            qp_.comp_.retire();
            continue;
        }
        if (is_memory_wr(w.wr.opcode)) {
            if (!w.started) {   // a fenced LOCAL_INV: once the earlier READs and atomics are done
                if (sq.rd_atomic > 0) return;
                execute_memory_wr(w, w.wr, false);
                if (w.status != RdmaWcStatus::success) {
                    qp_.to_error();
                    return;
                }
            }
            ++sq.next;
            qp_.comp_.retire();
            continue;
        }
        if (!c_.peer.known && !resolve_peer()) return;   // packets need the peer's MAC; memory WRs do not
        const uint32_t mtu = c_.mtu;
        if (!w.started) {
            const bool rd = is_read_or_atomic(w.wr.opcode);
            if (rd && sq.rd_atomic >= std::max<uint32_t>(1, c_.attr.max_rd_atomic)) return;   // a completion readies us
            if ((w.wr.send_flags & wr_fence) && sq.rd_atomic > 0) return;
            w.started = true;
            w.first_psn = s_.next_psn;
            w.npkts = w.wr.opcode == WrOpcode::rdma_read || !is_read_or_atomic(w.wr.opcode)
                          ? std::max<uint32_t>(1, (w.length + mtu - 1) / mtu)
                          : 1;
            if (rd) ++sq.rd_atomic;
        }
        const bool reliable = c_.reliable(), read = w.wr.opcode == WrOpcode::rdma_read;
        do {   // the WR's packets, while the send window and send buffers allow
            if (reliable && psn_diff(s_.next_psn, qp_.comp_.una()) >= kMaxUnackedPsns) return;   // an ACK readies us
            // A READ asks for its next part once every response of the last part is in: the
            // responder keeps one resource per request, max_dest_rd_atomic of them, and two parts
            // of one READ with atomics behind would push out the first part's, which its lost
            // responses need.
            if (read && psn_diff(s_.next_psn, psn_add(w.first_psn, w.read_pkts)) > 0) return;
            if (!send_rc_packet(w)) {
                qp_.ready();
                return;
            }
        } while (psn_diff(s_.next_psn, w.first_psn) < int32_t(w.npkts));
        ++sq.next;
        if (!c_.reliable()) {   // UC: no acknowledgement will come (9.8)
            w.done = true;
            qp_.comp_.retire();
        }
    }
}

void Requester::on_arp_change() noexcept {
    if (!s_.waiting_arp) return;
    s_.waiting_arp = false;
    qp_.ready();
}

void Requester::rewind(uint32_t index, uint32_t psn) noexcept {
    sq.next = index;
    s_.next_psn = psn;
    s_.pkts_unacked = 0;
}

bool Requester::resolve_peer() noexcept {
    bool failed = false;
    c_.peer.known = c_.port.resolve(c_.peer.ip, c_.peer.mac, failed);
    c_.headers_changed();
    if (c_.peer.known) return true;
    if (failed) {
        qp_.comp_.fail_head(RdmaWcStatus::retry_exc_err, kVendorErrArpUnresolved);
        return false;
    }
    s_.waiting_arp = true;
    return false;
}

bool Requester::send_rc_packet(SendWqe& w) noexcept {
    uint8_t* buf = c_.port.tx_buffer();
    if (!buf) return false;
    // The packet's fields, over the last packet's: each opcode's path sets what its headers carry
    // (write_headers reads nothing else), the BTH's flags here.
    PacketHeader& h = hdr_;
    h.solicited = h.ack_req = false;
    h.xrc_srqn = w.wr.remote_srqn;   // XRC: every request names the target's SRQ (9.3.8)
    const uint32_t psn = s_.next_psn;
    const uint32_t idx = uint32_t(psn_diff(psn, w.first_psn));
    const uint32_t offset = idx * c_.mtu;
    h.psn = psn;
    uint32_t payload = 0;
    switch (w.wr.opcode) {
    case WrOpcode::rdma_read: {
        // A long READ goes as several requests of at most a send window of responses each:
        // the responder sends them back to back, and a receive ring takes a window, not 1 MiB.
        const uint32_t chunk = std::min(w.length - offset, uint32_t(kMaxUnackedPsns) * c_.mtu);
        h.opcode = op::read_request;
        h.va = w.wr.remote_addr + offset;
        h.rkey = w.wr.rkey;
        h.dma_len = chunk;
        h.ack_req = true;
        s_.next_psn = psn_add(psn, std::max<uint32_t>(1, (chunk + c_.mtu - 1) / c_.mtu));
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
        s_.next_psn = psn_add(psn, 1);
        break;
    }
    default: {
        const bool first = idx == 0, last = idx + 1 == w.npkts;
        payload = std::min(c_.mtu, w.length - offset);
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
        h.ack_req = c_.reliable() && (last || ++s_.pkts_unacked >= kAckReqInterval ||
                                   psn_diff(psn_add(psn, 1), qp_.comp_.una()) >= kMaxUnackedPsns);
        if (h.ack_req) s_.pkts_unacked = 0;
        s_.next_psn = psn_add(psn, 1);
    }
    }
    uint8_t* data = write_headers(buf, c_.headers(), h, payload);
    copy_from_segments(sq.segments(w), w.nseg, offset, data, payload);
    c_.port.tx_queue(buf, finish_frame(buf, payload));
    if (c_.reliable() && !qp_.comp_.retry_armed()) qp_.comp_.arm_retry(now_ns());
    return true;
}

bool Requester::send_ud_packet(SendWqe& w) noexcept {
    const AhImpl& handle = *static_cast<const AhImpl*>(w.wr.ah);
    const AhAttr& ah = handle.attr();
    bool failed = false;
    if (!handle.mac_ready(failed)) {
        if (!failed) {
            s_.waiting_arp = true;
            return false;
        }
        w.status = RdmaWcStatus::retry_exc_err;   // the destination never answered ARP
        w.vendor_err = kVendorErrArpUnresolved;
        w.done = true;
        return true;
    }
    const uint8_t* mac = handle.mac;
    uint8_t* buf = c_.port.tx_buffer();
    if (!buf) {
        qp_.ready();
        return false;
    }
    PacketHeader h;
    h.dst_mac = mac;
    h.src_mac = c_.port.mac();
    h.src_ip = c_.port.ipv4();
    h.dst_ip = ah.dgid.ipv4();
    h.src_port = c_.src_port;
    h.ttl = ah.hop_limit ? ah.hop_limit : c_.port.ttl();
    h.tos = ah.traffic_class;
    h.opcode = w.wr.opcode == WrOpcode::send_with_imm ? op::ud_send_only_imm : op::ud_send_only;
    h.solicited = w.wr.send_flags & wr_solicited;
    h.dest_qp = w.wr.remote_qpn;
    h.psn = s_.next_psn;
    s_.next_psn = psn_add(s_.next_psn, 1);
    h.qkey = (w.wr.remote_qkey & kControlledQkey) ? c_.attr.qkey : w.wr.remote_qkey;
    h.src_qp = c_.qpn;
    h.imm_be = w.wr.imm_data;
    uint8_t* data = write_headers(buf, h, w.length);
    copy_from_segments(sq.segments(w), w.nseg, 0, data, w.length);
    const uint32_t len = finish_frame(buf, w.length);
    if (is_ipv4_multicast(h.dst_ip)) {   // the NIC sends it away: this port's members get it here
        Packet p;
        if (parse_frame(buf, len, c_.port.ipv4(), p) == ParseResult::roce) c_.port.loop_multicast(p, &qp_);
    }
    c_.port.tx_queue(buf, len);
    w.done = true;
    return true;
}

}  // namespace vfab::rdma::detail
