// The responder (IB spec 9.7.3 - 9.7.5): requests in PSN order; SENDs into posted receive WRs
// (RNR NAK when there is none); WRITEs, READs and atomics checked against the memory-
// registration table before one byte moves (NAK remote access error otherwise); READs and
// atomics kept as responder resources so that duplicates are answered from them, never
// executed twice; UD datagrams with their GRH. UC (9.8) takes the same path without answering:
// what RC would NAK, UC drops with the rest of its message. What it sends: responses.cpp.
// Each handler returns false for a packet dropped (counted by the port), true otherwise.
#include <algorithm>
#include <atomic>
#include <cstring>

#include "atomics.hpp"
#include "engine.hpp"

namespace vfab::rdma::detail {

using namespace wire;

namespace {
// Whether the queue pair takes remote requests of this kind (its qp_access_flags). One it does
// not take is an invalid request, as rxe answers it (an unsupported operation for this queue
// pair; the spec's remote access error is for keys and their rights, 9.7.5.2.4).
bool granted(uint32_t qp_access, dma::Access a) { return (qp_access & uint32_t(a)) == uint32_t(a); }
}  // namespace

void Responder::reset() noexcept {
    for (auto& r : res_) r = Resource{};
    s_ = {};
}

// UC: a message that cannot be taken (a packet missing, no receive WR, a bad key or length) is
// dropped silently, its packets up to the next FIRST or ONLY with it (9.8; rxe drops the
// same). The receive WR a SEND was filling waits for the next one; one too short for its
// message completes with loc_len_err first, as with RC.
bool Responder::reject(const Packet& p, uint8_t syndrome) noexcept {
    if (c_.reliable()) return respond_error(p.psn, syndrome);
    uc_drop();
    return false;
}

// The receive WR a SEND is landing in names memory whose key was revoked after it was posted:
// nothing is written; the WR completes with a local protection error and the queue pair goes
// to the error state (IB spec 10.8.3.1), the requester told by a NAK (remote operational
// error, 9.7.5.2.8); UC drops the message.
bool Responder::recv_key_revoked(const Packet& p) noexcept {
    rq_.complete(RdmaWcStatus::loc_prot_err, RdmaWcOpcode::recv, s_.recv_offset, 0, 0, 0, false);
    s_.in_send = false;
    if (c_.reliable()) return respond_error(p.psn, aeth::kNakRemoteOperationalError);
    qp_.to_error();
    return true;
}

// No receive WR for a SEND or a WRITE with immediate: RC tells the requester to wait and repeat
// (RNR NAK); UC has nobody to tell: the message is dropped.
bool Responder::no_receive(const Packet& p) noexcept {
    if (!c_.reliable()) {
        uc_drop();
        return false;
    }
    send_ack(uint8_t(aeth::kRnrNak | c_.attr.min_rnr_timer), p.psn);
    return true;
}

// UC's PSN check (9.8): a FIRST or ONLY starts a message whatever its PSN, abandoning one in
// progress whose LAST was lost; any other packet goes on only at the expected PSN while no
// packet of its message was lost.
bool Responder::uc_in_sequence(const Packet& p) noexcept {
    if (p.info.has(is_first)) {
        s_.uc_discard = s_.in_send = s_.in_write = false;
        s_.epsn = p.psn;
        return true;
    }
    if (!s_.uc_discard && p.psn == s_.epsn) return true;
    uc_drop();
    return false;
}

Resource* Responder::new_resource() noexcept {
    const uint32_t n = res_window();
    Resource* r = &res_[s_.res_next % n];
    ++s_.res_next;
    set_sending(*r, false);
    *r = Resource{};
    return r;
}

bool Responder::on_request(const Packet& p) noexcept {
    if (c_.state == RdmaQpState::rtr && !s_.comm_est_raised) {   // the first request: the connection is up
        s_.comm_est_raised = true;
        qp_.raise_event(AsyncEventType::comm_est);
    }
    if (!c_.reliable()) {
        if (!uc_in_sequence(p)) return false;
    } else if (const int32_t d = psn_diff(p.psn, s_.epsn); d != 0) {
        if (!c_.peer.known) return false;   // nowhere to answer yet; the requester sends it again
        if (d < 0) return on_duplicate(p);
        if (!s_.nak_seq_sent) {   // a gap: one NAK until the expected PSN comes (9.7.5.1.3)
            s_.nak_seq_sent = true;
            send_ack(aeth::kNakPsnSeqError, s_.epsn);
        }
        return true;
    }
    // Before the peer's ARP answer, its MAC from a request at the expected PSN: a sender that
    // does not know the connection's PSNs cannot make this port answer elsewhere.
    if (!c_.peer.known && c_.reliable()) c_.learn_peer_mac(p.src_mac);
    s_.nak_seq_sent = false;
    const OpInfo& i = p.info;
    const bool first = i.has(is_first), last = i.has(is_last);
    // Packets of a message come in order: FIRST, MIDDLE..., LAST (9.8.3, C9-72).
    if ((s_.in_send && !(i.has(is_send) && !first)) || (s_.in_write && !(i.has(is_write) && !first)) ||
        (!s_.in_send && i.has(is_send) && !first) || (!s_.in_write && i.has(is_write) && !first))
        return reject(p, aeth::kNakInvalidRequest);
    // FIRST and MIDDLE carry exactly the path MTU, LAST and ONLY at most that (9.7.4.1.3); a
    // LAST at least one byte (its message would have ended a packet earlier; rxe checks it too).
    if (i.has(has_payload) &&
        (p.payload_len > c_.mtu || (!last && p.payload_len != c_.mtu) || (last && !first && p.payload_len == 0)))
        return reject(p, aeth::kNakInvalidRequest);
    if (i.has(is_send)) return on_send(p);
    if (i.has(is_write)) return on_write(p);
    if (i.has(is_read)) return on_read(p);
    return on_atomic(p);
}

bool Responder::on_send(const Packet& p) noexcept {
    const bool first = p.info.has(is_first), last = p.info.has(is_last);
    if (first) {
        if (c_.type == QpType::xrc_recv && !rq_.select_xrc_srq(p)) return respond_error(p.psn, aeth::kNakInvalidRequest);
        if (!rq_.take()) return no_receive(p);
        s_.in_send = true;
        s_.recv_offset = 0;
    }
    if (s_.recv_offset + p.payload_len > rq_.current().length) {
        rq_.complete(RdmaWcStatus::loc_len_err, RdmaWcOpcode::recv, s_.recv_offset, 0, 0, 0, false);
        s_.in_send = false;
        return reject(p, aeth::kNakInvalidRequest);
    }
    if (!rq_.translate()) return recv_key_revoked(p);
    rq_.copy_in(s_.recv_offset, p.payload, p.payload_len);
    s_.recv_offset += p.payload_len;
    if (last) {
        uint32_t flags = 0, imm = 0;
        if (p.info.has(has_immdt)) flags |= wc_with_imm, imm = p.imm_be;
        if (p.info.has(has_ieth)) {
            if (c_.port.pd().invalidate(p.inv_rkey, c_.qpn) != dma::MrStatus::ok) {
                rq_.complete(RdmaWcStatus::rem_inv_req_err, RdmaWcOpcode::recv, s_.recv_offset, 0, 0, 0, false);
                s_.in_send = false;
                return respond_error(p.psn, aeth::kNakInvalidRequest);
            }
            flags |= wc_with_inv, imm = p.inv_rkey;
        }
        s_.in_send = false;
        s_.msn = (s_.msn + 1) & aeth::kMsnMask;
        rq_.complete(RdmaWcStatus::success, RdmaWcOpcode::recv, s_.recv_offset, flags, imm, 0, p.solicited);
    }
    s_.epsn = psn_add(s_.epsn, 1);
    if (p.ack_req && c_.reliable()) send_ack(aeth::kAckNoCredits, p.psn);
    return true;
}

bool Responder::on_write(const Packet& p) noexcept {
    const bool first = p.info.has(is_first), last = p.info.has(is_last), imm = p.info.has(has_immdt);
    dma::Translation t{};   // of the whole message at FIRST; an ONLY lands through it
    if (first) {
        if (!granted(c_.attr.qp_access_flags, dma::Access::remote_write)) return reject(p, aeth::kNakInvalidRequest);
        if (p.dma_len > kMaxDmaLength) return reject(p, aeth::kNakInvalidRequest);
        if (p.dma_len) {
            t = c_.port.mrs().translate_span(p.rkey, p.va, p.dma_len, dma::Access::remote_write, c_.qpn);
            if (t.status != dma::MrStatus::ok) return reject(p, aeth::kNakRemoteAccessError);
        }
        s_.write_rkey = p.rkey;
        s_.write_va = p.va;
        s_.write_len = p.dma_len;
        s_.write_offset = 0;
        if (!last) {   // packets follow
            s_.write_at = t;
            s_.write_revision = c_.port.mrs().revision();
        }
    }
    if (s_.write_offset + p.payload_len > s_.write_len || (last && s_.write_offset + p.payload_len != s_.write_len))
        return reject(p, aeth::kNakInvalidRequest);
    if (imm && c_.type == QpType::xrc_recv && !rq_.has_current() && !rq_.select_xrc_srq(p))
        return respond_error(p.psn, aeth::kNakInvalidRequest);
    if (imm && !rq_.take()) {   // WRITE with immediate needs a receive WR
        s_.in_write = !first;
        return no_receive(p);
    }
    if (p.payload_len) {
        const dma::MrTable& mrs = c_.port.mrs();
        if (first) {
            copy_to(Segment::of(t, p.payload_len), 0, p.payload, p.payload_len);
        } else if (mrs.revision() == s_.write_revision) {   // no key changed since FIRST
            copy_to(Segment::of(s_.write_at, s_.write_len), s_.write_offset, p.payload, p.payload_len);
        } else {   // the key again: revoked since FIRST, the rest is refused
            t = mrs.translate_span(s_.write_rkey, s_.write_va + s_.write_offset, p.payload_len, dma::Access::remote_write,
                                   c_.qpn);
            if (t.status != dma::MrStatus::ok) return reject(p, aeth::kNakRemoteAccessError);
            copy_to(Segment::of(t, p.payload_len), 0, p.payload, p.payload_len);
        }
    }
    s_.write_offset += p.payload_len;
    s_.in_write = !last;
    if (last) {
        s_.msn = (s_.msn + 1) & aeth::kMsnMask;
        if (imm)
            rq_.complete(RdmaWcStatus::success, RdmaWcOpcode::recv_rdma_with_imm, s_.write_len, wc_with_imm, p.imm_be, 0,
                         p.solicited);
    }
    s_.epsn = psn_add(s_.epsn, 1);
    if (p.ack_req && c_.reliable()) send_ack(aeth::kAckNoCredits, p.psn);
    return true;
}

bool Responder::on_read(const Packet& p) noexcept {
    if (c_.attr.max_dest_rd_atomic == 0) return respond_error(p.psn, aeth::kNakInvalidRequest);   // no resources (rxe)
    if (!granted(c_.attr.qp_access_flags, dma::Access::remote_read)) return respond_error(p.psn, aeth::kNakInvalidRequest);
    if (p.dma_len > kMaxDmaLength) return respond_error(p.psn, aeth::kNakInvalidRequest);
    if (p.dma_len && c_.port.mrs().translate_span(p.rkey, p.va, p.dma_len, dma::Access::remote_read, c_.qpn).status !=
                         dma::MrStatus::ok)
        return respond_error(p.psn, aeth::kNakRemoteAccessError);
    const uint32_t npkts = std::max<uint32_t>(1, (p.dma_len + c_.mtu - 1) / c_.mtu);
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
    s_.epsn = psn_add(p.psn, npkts);
    s_.msn = (s_.msn + 1) & aeth::kMsnMask;
    if (!send_read_responses()) qp_.ready();
    return true;
}

bool Responder::on_atomic(const Packet& p) noexcept {
    if (c_.attr.max_dest_rd_atomic == 0) return respond_error(p.psn, aeth::kNakInvalidRequest);
    if (!granted(c_.attr.qp_access_flags, dma::Access::remote_atomic)) return respond_error(p.psn, aeth::kNakInvalidRequest);
    if (p.va & 7) return respond_error(p.psn, aeth::kNakInvalidRequest);   // atomics are 8-byte aligned (9.4.5)
    const dma::Translation t = c_.port.mrs().translate(p.rkey, p.va, 8, dma::Access::remote_atomic, c_.qpn);
    if (t.status == dma::MrStatus::discontiguous || (t.status == dma::MrStatus::ok && t.host & 7))
        // across two scattered blocks, or memory registered at an odd offset: not one word
        return respond_error(p.psn, aeth::kNakInvalidRequest);
    if (t.status != dma::MrStatus::ok) return respond_error(p.psn, aeth::kNakRemoteAccessError);
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
    s_.epsn = psn_add(p.psn, 1);
    s_.msn = (s_.msn + 1) & aeth::kMsnMask;
    send_atomic_ack(*r);
    return true;
}

// A request already executed (9.7.5.1.2): SENDs and WRITEs acknowledged again, READs answered
// again from their resource (re-reading the memory the peer may read), atomics answered with
// the value saved when they ran. A repeated READ must name what the original did from its PSN
// on — the same key, at the original's address plus the packets before it (an invalid request
// otherwise) — and is answered from the original's range only, its key checked again as for
// a new READ: one revoked since is a remote access error (rxe checks it too). A requester
// asking again from the middle may ask for more than the original covered (vfab's splits a
// long READ into several); the rest is answered by the READs that covered it.
bool Responder::on_duplicate(const Packet& p) noexcept {
    if (p.info.has(is_read)) {
        for (Resource& r : res_) {
            if (r.kind != Resource::read || psn_diff(p.psn, r.psn) < 0 || psn_diff(p.psn, r.last_psn) > 0) continue;
            const uint32_t offset = uint32_t(psn_diff(p.psn, r.psn)) * c_.mtu;
            if (offset > r.length) return true;
            if (p.rkey != r.rkey || p.va != r.va + offset || p.dma_len > kMaxDmaLength)
                return respond_error(p.psn, aeth::kNakInvalidRequest);
            const uint32_t left = r.length - offset;
            if (left && c_.port.mrs().translate_span(r.rkey, r.va + offset, left, dma::Access::remote_read, c_.qpn).status !=
                            dma::MrStatus::ok)
                return respond_error(p.psn, aeth::kNakRemoteAccessError);
            set_sending(r, true);
            r.restart = true;
            r.next_psn = p.psn;
            r.next_offset = offset;
            if (!send_read_responses()) qp_.ready();
            return true;
        }
        return true;
    }
    if (p.info.has(is_atomic)) {
        for (const Resource& r : res_)
            if (r.kind == Resource::atomic && r.psn == p.psn) {
                send_atomic_ack(r);
                return true;
            }
        return true;
    }
    send_ack(aeth::kAckNoCredits, psn_add(s_.epsn, kPsnMask));   // asked or not (C9-105: the first ACK may be lost)
    return true;
}

// A UD datagram (9.8.4): the Q_Key must match; it lands after a 40-byte GRH whose last 20
// bytes are the IPv4 header (Annex A17.4.5.1). No receive WR: dropped, as UD does.
bool Responder::on_datagram(const Packet& p) noexcept {
    if (p.qkey != c_.attr.qkey || p.payload_len > c_.mtu || !rq_.take()) return false;
    const uint32_t len = uint32_t(kGrhSize) + p.payload_len;
    if (len > rq_.current().length) {
        rq_.complete(RdmaWcStatus::loc_len_err, RdmaWcOpcode::recv, len, 0, 0, p.src_qp, false);
        return true;
    }
    if (!rq_.translate()) {   // its memory deregistered since it was posted
        rq_.complete(RdmaWcStatus::loc_prot_err, RdmaWcOpcode::recv, 0, 0, 0, p.src_qp, false);
        qp_.to_error();
        return true;
    }
    uint8_t grh[kGrhSize] = {};
    std::memcpy(grh + kGrhSize - kIpv4Header, p.ipv4, kIpv4Header);
    rq_.copy_in(0, grh, kGrhSize);
    rq_.copy_in(kGrhSize, p.payload, p.payload_len);
    uint32_t flags = wc_grh, imm = 0;
    if (p.info.has(has_immdt)) flags |= wc_with_imm, imm = p.imm_be;
    rq_.complete(RdmaWcStatus::success, RdmaWcOpcode::recv, len, flags, imm, p.src_qp, p.solicited);
    return true;
}

}  // namespace vfab::rdma::detail
