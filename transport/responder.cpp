// The responder (IB spec 9.7.3 - 9.7.5): requests in PSN order; SENDs into posted receive WRs
// (RNR NAK when there is none); WRITEs, READs and atomics checked against the memory-
// registration table before one byte moves (NAK remote access error otherwise, and nothing
// written); READs and atomics kept as responder resources so that duplicates are answered
// from them, never executed twice; UD datagrams with their GRH. UC (9.8) takes the same path
// without answering: what RC would NAK, UC drops with the rest of its message.
#include <algorithm>
#include <atomic>
#include <cstring>

#include "atomics.hpp"
#include "engine.hpp"

namespace vfab::rdma::detail {

using namespace wire;

namespace {
bool granted(uint32_t qp_access, dma::Access a) { return (qp_access & uint32_t(a)) == uint32_t(a); }
}  // namespace

void QpImpl::complete_recv(WcStatus st, WcOpcode op, uint32_t byte_len, uint32_t flags, uint32_t imm, uint32_t src_qp,
                           bool se) noexcept {
    Wc wc;
    wc.wr_id = rq_->wqe(cur_recv_).wr_id;
    wc.status = st;
    wc.opcode = op;
    wc.byte_len = byte_len;
    wc.imm_data = imm;
    wc.qp_num = qpn_;
    wc.src_qp = src_qp;
    wc.wc_flags = flags;
    rq_->release(cur_recv_);
    cur_recv_ = RecvQueue::kNone;
    recv_cq()->push(wc, se);
}

// Responses leave in PSN order (9.7.5.1.1): an ACK or NAK for a request after a READ whose
// responses still wait for send buffers waits behind them (send_read_responses sends it after
// the last); one that found no buffer goes before the responses of a READ that comes later. An
// ACK is cumulative, so one pending is replaced by the next. A NAK that ends the connection
// goes at once: the responses still waiting will never be sent.
bool QpImpl::send_ack(uint8_t syndrome, uint32_t psn) noexcept {
    const bool fatal = (syndrome & aeth::kTypeMask) == aeth::kNak && syndrome != aeth::kNakPsnSeqError;
    ack_syndrome_ = syndrome;
    ack_psn_ = psn;
    if ((!res_sending_ || fatal) && write_ack()) return true;
    ack_first_ = res_sending_ == 0;
    ack_pending_ = true;
    ready();
    return false;
}

bool QpImpl::send_pending_ack() noexcept {
    if (!write_ack()) {
        ready();
        return false;
    }
    ack_pending_ = false;
    return true;
}

// The ACK or NAK in ack_syndrome_ / ack_psn_ on the wire; false when no send buffer is free.
bool QpImpl::write_ack() noexcept {
    uint8_t* buf = port_.tx_buffer();
    if (!buf) return false;
    const uint8_t syndrome = ack_syndrome_;
    const uint32_t psn = ack_psn_;
    PacketHeader h;
    fill_common(h);
    h.opcode = op::acknowledge;
    h.psn = psn;
    h.syndrome = syndrome;
    h.msn = msn_;
    write_headers(buf, h, 0);
    port_.tx_queue(buf, finish_frame(buf, 0));
    if ((syndrome & aeth::kTypeMask) != aeth::kAck) ++port_.stats_.naks_sent;
    return true;
}

// A NAK that ends the connection: the requester fails its WR, this side flushes (9.7.5.2). An
// invalid request and an access violation are told to this side's application too, by an
// affiliated asynchronous error (IB spec 11.6.3.1): a WRITE, READ or atomic has no receive
// completion that could carry it. A remote operational error has one (recv_key_revoked).
void QpImpl::respond_error(const Packet& p, uint8_t syndrome) noexcept { respond_error(p.psn, syndrome); }

void QpImpl::respond_error(uint32_t psn, uint8_t syndrome) noexcept {
    send_ack(syndrome, psn);
    port_.tx_flush();
    to_error();
    if (syndrome == aeth::kNakRemoteAccessError) raise_event(AsyncEventType::qp_access_err);
    else if (syndrome != aeth::kNakRemoteOperationalError) raise_event(AsyncEventType::qp_req_err);
}

// UC: a message that cannot be taken (a packet missing, no receive WR, a bad key or length) is
// dropped silently, its packets up to the next FIRST or ONLY with it (9.8; rxe drops the
// same). The receive WR a SEND was filling waits for the next one; one too short for its
// message completes with loc_len_err first, as with RC.
void QpImpl::uc_drop() noexcept {
    uc_discard_ = true;
    in_send_ = in_write_ = false;
    ++port_.stats_.rx_dropped;
}

void QpImpl::reject(const Packet& p, uint8_t syndrome) noexcept {
    if (reliable()) respond_error(p, syndrome);
    else uc_drop();
}

// The receive WR a SEND is landing in names memory whose key was revoked after it was posted:
// nothing is written; the WR completes with a local protection error and the queue pair goes
// to the error state (IB spec 10.8.3.1), the requester told by a NAK (remote operational
// error, 9.7.5.2.8); UC drops the message.
void QpImpl::recv_key_revoked(const Packet& p) noexcept {
    complete_recv(WcStatus::loc_prot_err, WcOpcode::recv, recv_offset_, 0, 0, 0, false);
    in_send_ = false;
    if (reliable()) return respond_error(p, aeth::kNakRemoteOperationalError);
    to_error();
}

// No receive WR for a SEND or a WRITE with immediate: RC tells the requester to wait and repeat
// (RNR NAK); UC has nobody to tell: the message is dropped.
void QpImpl::no_receive(const Packet& p) noexcept {
    if (reliable()) send_ack(uint8_t(aeth::kRnrNak | attr_.min_rnr_timer), p.psn);
    else uc_drop();
}

// UC's PSN check (9.8): a FIRST or ONLY starts a message whatever its PSN, abandoning one in
// progress whose LAST was lost; any other packet goes on only at the expected PSN while no
// packet of its message was lost.
bool QpImpl::uc_in_sequence(const Packet& p) noexcept {
    if (p.info.has(is_first)) {
        uc_discard_ = in_send_ = in_write_ = false;
        epsn_ = p.psn;
        return true;
    }
    if (!uc_discard_ && p.psn == epsn_) return true;
    uc_drop();
    return false;
}

Resource* QpImpl::new_resource() noexcept {
    const uint32_t n = res_window();
    Resource* r = &res_[res_next_ % n];
    ++res_next_;
    set_sending(*r, false);
    *r = Resource{};
    return r;
}

bool QpImpl::send_atomic_ack(const Resource& r) noexcept {
    uint8_t* buf = port_.tx_buffer();
    if (!buf) return false;   // the requester asks again; the duplicate is answered from `r`
    PacketHeader h;
    fill_common(h);
    h.opcode = op::atomic_acknowledge;
    h.psn = r.psn;
    h.syndrome = aeth::kAckNoCredits;
    h.msn = msn_;
    h.atomic_orig = r.orig;
    write_headers(buf, h, 0);
    port_.tx_queue(buf, finish_frame(buf, 0));
    return true;
}

// Read responses still to send, oldest READ first (9.7.4.1.4); false when out of buffers.
bool QpImpl::send_read_responses() noexcept {
    if (ack_pending_ && ack_first_ && !send_pending_ack()) return false;
    if (!res_sending_) return !ack_pending_ || send_pending_ack();
    const uint32_t n = res_window();
    for (uint32_t k = 0; k < n; ++k) {
        Resource& r = res_[(res_next_ + k) % n];
        while (r.sending) {
            uint8_t* buf = port_.tx_buffer();
            if (!buf) return false;
            const uint32_t left = r.length - r.next_offset;
            const uint32_t payload = std::min(left, mtu_);
            const bool first = r.restart;   // the first response of the READ, or of its replay
            const bool last = payload == left;
            PacketHeader h;
            fill_common(h);
            h.opcode = first && last ? op::read_response_only
                       : first       ? op::read_response_first
                       : last        ? op::read_response_last
                                     : op::read_response_middle;
            h.psn = r.next_psn;
            h.syndrome = aeth::kAckNoCredits;
            h.msn = msn_;
            uint8_t* data = write_headers(buf, h, payload);
            if (payload) {
                // The key is looked at again for every response: one revoked since the READ
                // arrived ends it here (a remote access error, as at its first packet).
                const dma::Translation t =
                    port_.mrs().translate_span(r.rkey, r.va + r.next_offset, payload, dma::Access::remote_read, qpn_);
                if (t.status != dma::MrStatus::ok) {
                    port_.tx_release(buf);
                    set_sending(r, false);
                    respond_error(r.next_psn, aeth::kNakRemoteAccessError);
                    return true;
                }
                copy_from(Segment::of(t, payload), 0, data, payload);
            }
            port_.tx_queue(buf, finish_frame(buf, payload));
            r.restart = false;
            r.next_psn = psn_add(r.next_psn, 1);
            r.next_offset += payload;
            if (last) set_sending(r, false);
        }
    }
    return !ack_pending_ || send_pending_ack();
}

void QpImpl::on_request(const Packet& p) noexcept {
    if (!reliable()) {
        if (!uc_in_sequence(p)) return;
    } else if (const int32_t d = psn_diff(p.psn, epsn_); d < 0) {
        on_duplicate(p);
        return;
    } else if (d > 0) {   // a gap: one NAK until the expected PSN comes (9.7.5.1.3)
        if (!nak_seq_sent_) {
            nak_seq_sent_ = true;
            send_ack(aeth::kNakPsnSeqError, epsn_);
        }
        return;
    }
    nak_seq_sent_ = false;
    const OpInfo& i = p.info;
    const bool first = i.has(is_first), last = i.has(is_last);
    // Packets of a message come in order: FIRST, MIDDLE..., LAST (9.8.3, C9-72).
    if ((in_send_ && !(i.has(is_send) && !first)) || (in_write_ && !(i.has(is_write) && !first)) ||
        (!in_send_ && i.has(is_send) && !first) || (!in_write_ && i.has(is_write) && !first))
        return reject(p, aeth::kNakInvalidRequest);
    // FIRST and MIDDLE carry exactly the path MTU, LAST and ONLY at most that (9.7.4.1.3); a
    // LAST at least one byte (its message would have ended a packet earlier; rxe checks it too).
    if (i.has(has_payload) &&
        (p.payload_len > mtu_ || (!last && p.payload_len != mtu_) || (last && !first && p.payload_len == 0)))
        return reject(p, aeth::kNakInvalidRequest);

    if (i.has(is_send)) {
        if (first) {
            if (type_ == QpType::xrc_recv && !select_xrc_srq(p)) return respond_error(p, aeth::kNakInvalidRequest);
            if (!take_recv()) return no_receive(p);
            in_send_ = true;
            recv_offset_ = 0;
        }
        const RecvWqe& q = rq_->wqe(cur_recv_);
        if (recv_offset_ + p.payload_len > q.length) {
            complete_recv(WcStatus::loc_len_err, WcOpcode::recv, recv_offset_, 0, 0, 0, false);
            in_send_ = false;
            return reject(p, aeth::kNakInvalidRequest);
        }
        if (!rq_->translate(cur_recv_, port_.mrs())) return recv_key_revoked(p);
        copy_to_segments(rq_->segments(cur_recv_), q.nseg, recv_offset_, p.payload, p.payload_len);
        recv_offset_ += p.payload_len;
        if (last) {
            uint32_t flags = 0, imm = 0;
            if (i.has(has_immdt)) flags |= wc_with_imm, imm = p.imm_be;
            if (i.has(has_ieth)) {
                if (port_.pd().invalidate(p.inv_rkey, qpn_) != dma::MrStatus::ok) {
                    complete_recv(WcStatus::rem_inv_req_err, WcOpcode::recv, recv_offset_, 0, 0, 0, false);
                    in_send_ = false;
                    return respond_error(p, aeth::kNakInvalidRequest);
                }
                flags |= wc_with_inv, imm = p.inv_rkey;
            }
            in_send_ = false;
            msn_ = (msn_ + 1) & aeth::kMsnMask;
            complete_recv(WcStatus::success, WcOpcode::recv, recv_offset_, flags, imm, 0, p.solicited);
        }
    } else if (i.has(is_write)) {
        if (first) {
            if (!granted(attr_.qp_access_flags, dma::Access::remote_write))
                return reject(p, aeth::kNakRemoteAccessError);
            if (p.dma_len > kMaxDmaLength) return reject(p, aeth::kNakInvalidRequest);
            if (p.dma_len &&
                port_.mrs().translate_span(p.rkey, p.va, p.dma_len, dma::Access::remote_write, qpn_).status != dma::MrStatus::ok)
                return reject(p, aeth::kNakRemoteAccessError);
            write_rkey_ = p.rkey;
            write_va_ = p.va;
            write_len_ = p.dma_len;
            write_offset_ = 0;
        }
        if (write_offset_ + p.payload_len > write_len_ || (last && write_offset_ + p.payload_len != write_len_))
            return reject(p, aeth::kNakInvalidRequest);
        if (i.has(has_immdt) && type_ == QpType::xrc_recv && cur_recv_ == RecvQueue::kNone && !select_xrc_srq(p))
            return respond_error(p, aeth::kNakInvalidRequest);
        if (i.has(has_immdt) && !take_recv()) {   // WRITE with immediate needs a receive WR
            in_write_ = !first;
            return no_receive(p);
        }
        if (p.payload_len) {   // the key again for each packet: revoked since FIRST, the rest is refused
            const dma::Translation t = port_.mrs().translate_span(write_rkey_, write_va_ + write_offset_, p.payload_len,
                                                                  dma::Access::remote_write, qpn_);
            if (t.status != dma::MrStatus::ok) return reject(p, aeth::kNakRemoteAccessError);
            copy_to(Segment::of(t, p.payload_len), 0, p.payload, p.payload_len);
        }
        write_offset_ += p.payload_len;
        in_write_ = !last;
        if (last) {
            msn_ = (msn_ + 1) & aeth::kMsnMask;
            if (i.has(has_immdt))
                complete_recv(WcStatus::success, WcOpcode::recv_rdma_with_imm, write_len_, wc_with_imm, p.imm_be, 0,
                              p.solicited);
        }
    } else if (i.has(is_read)) {
        if (attr_.max_dest_rd_atomic == 0) return respond_error(p, aeth::kNakInvalidRequest);   // no resources (rxe)
        if (!granted(attr_.qp_access_flags, dma::Access::remote_read))
            return respond_error(p, aeth::kNakRemoteAccessError);
        if (p.dma_len > kMaxDmaLength) return respond_error(p, aeth::kNakInvalidRequest);
        if (p.dma_len &&
            port_.mrs().translate_span(p.rkey, p.va, p.dma_len, dma::Access::remote_read, qpn_).status != dma::MrStatus::ok)
            return respond_error(p, aeth::kNakRemoteAccessError);
        const uint32_t npkts = std::max<uint32_t>(1, (p.dma_len + mtu_ - 1) / mtu_);
        Resource* r = new_resource();
        r->kind = Resource::read;
        r->psn = p.psn;
        r->last_psn = psn_add(p.psn, npkts - 1);
        r->va = p.va;
        r->length = p.dma_len;
        r->rkey = p.rkey;
        set_sending(*r, true);
        r->restart = true;
        r->next_psn = p.psn;
        epsn_ = psn_add(p.psn, npkts);
        msn_ = (msn_ + 1) & aeth::kMsnMask;
        if (!send_read_responses()) ready();
        return;
    } else if (i.has(is_atomic)) {
        if (attr_.max_dest_rd_atomic == 0) return respond_error(p, aeth::kNakInvalidRequest);
        if (!granted(attr_.qp_access_flags, dma::Access::remote_atomic))
            return respond_error(p, aeth::kNakRemoteAccessError);
        if (p.va & 7) return respond_error(p, aeth::kNakInvalidRequest);   // atomics are 8-byte aligned (9.4.5)
        const dma::Translation t = port_.mrs().translate(p.rkey, p.va, 8, dma::Access::remote_atomic, qpn_);
        if (t.status == dma::MrStatus::discontiguous || (t.status == dma::MrStatus::ok && t.host & 7))
            // across two scattered blocks, or memory registered at an odd offset: not one word
            return respond_error(p, aeth::kNakInvalidRequest);
        if (t.status != dma::MrStatus::ok) return respond_error(p, aeth::kNakRemoteAccessError);
        std::atomic_ref<uint64_t> target(*reinterpret_cast<uint64_t*>(t.host));
        uint64_t orig;
        if (p.opcode == op::cmp_swap) {
            orig = p.compare;
            target.compare_exchange_strong(orig, p.swap_add);   // orig: the value found
        } else if (p.opcode == op::fetch_add) {
            orig = target.fetch_add(p.swap_add);
        } else if (p.opcode == op::vfab_masked_cmp_swap) {
            orig = atomic_masked_cmp_swap(target, p.compare, p.compare_mask, p.swap_add, p.swap_mask);
        } else {
            orig = atomic_masked_fetch_add(target, p.swap_add, p.compare_mask);
        }
        Resource* r = new_resource();
        r->kind = Resource::atomic;
        r->psn = r->last_psn = p.psn;
        r->va = p.va;
        r->orig = orig;
        epsn_ = psn_add(p.psn, 1);
        msn_ = (msn_ + 1) & aeth::kMsnMask;
        send_atomic_ack(*r);
        return;
    }
    epsn_ = psn_add(epsn_, 1);
    if (p.ack_req && reliable()) send_ack(aeth::kAckNoCredits, p.psn);
}

// A request already executed (9.7.5.1.2): SENDs and WRITEs acknowledged again, READs answered
// again from their resource (re-reading the memory the peer may read), atomics answered with
// the value saved when they ran. A repeated READ must name what the original did from its PSN
// on — the same key, at the original's address plus the packets before it (an invalid request
// otherwise) — and is answered from the original's range only, its key checked again as for
// a new READ: one revoked since is a remote access error (rxe checks it too). A requester
// asking again from the middle may ask for more than the original covered (vfab's splits a
// long READ into several); the rest is answered by the READs that covered it.
void QpImpl::on_duplicate(const Packet& p) noexcept {
    if (p.info.has(is_read)) {
        for (Resource& r : res_) {
            if (r.kind != Resource::read || psn_diff(p.psn, r.psn) < 0 || psn_diff(p.psn, r.last_psn) > 0) continue;
            const uint32_t offset = uint32_t(psn_diff(p.psn, r.psn)) * mtu_;
            if (offset > r.length) return;
            if (p.rkey != r.rkey || p.va != r.va + offset || p.dma_len > kMaxDmaLength)
                return respond_error(p, aeth::kNakInvalidRequest);
            const uint32_t left = r.length - offset;
            if (left && port_.mrs().translate_span(r.rkey, r.va + offset, left, dma::Access::remote_read, qpn_).status !=
                            dma::MrStatus::ok)
                return respond_error(p, aeth::kNakRemoteAccessError);
            set_sending(r, true);
            r.restart = true;
            r.next_psn = p.psn;
            r.next_offset = offset;
            if (!send_read_responses()) ready();
            return;
        }
        return;
    }
    if (p.info.has(is_atomic)) {
        for (const Resource& r : res_)
            if (r.kind == Resource::atomic && r.psn == p.psn) {
                send_atomic_ack(r);
                return;
            }
        return;
    }
    send_ack(aeth::kAckNoCredits, psn_add(epsn_, kPsnMask));   // asked or not (C9-105: the first ACK may be lost)
}

// A UD datagram (9.8.4): the Q_Key must match; it lands after a 40-byte GRH whose last 20
// bytes are the IPv4 header (Annex A17.4.5.1). No receive WR: dropped, as UD does.
void QpImpl::on_ud_send(const Packet& p) noexcept {
    if (p.qkey != attr_.qkey || p.payload_len > mtu_ || !take_recv()) {
        ++port_.stats_.rx_dropped;
        return;
    }
    const RecvWqe& q = rq_->wqe(cur_recv_);
    const uint32_t len = uint32_t(kGrhSize) + p.payload_len;
    if (len > q.length) {
        complete_recv(WcStatus::loc_len_err, WcOpcode::recv, len, 0, 0, p.src_qp, false);
        return;
    }
    if (!rq_->translate(cur_recv_, port_.mrs())) {   // its memory deregistered since it was posted
        complete_recv(WcStatus::loc_prot_err, WcOpcode::recv, 0, 0, 0, p.src_qp, false);
        to_error();
        return;
    }
    uint8_t grh[kGrhSize] = {};
    std::memcpy(grh + kGrhSize - kIpv4Header, p.ipv4, kIpv4Header);
    copy_to_segments(rq_->segments(cur_recv_), q.nseg, 0, grh, kGrhSize);
    copy_to_segments(rq_->segments(cur_recv_), q.nseg, kGrhSize, p.payload, p.payload_len);
    uint32_t flags = wc_grh, imm = 0;
    if (p.info.has(has_immdt)) flags |= wc_with_imm, imm = p.imm_be;
    complete_recv(WcStatus::success, WcOpcode::recv, len, flags, imm, p.src_qp, p.solicited);
}

}  // namespace vfab::rdma::detail
