// The completer: acknowledgements, NAKs, read responses and atomic acknowledgements end send
// WRs in order (IB spec 9.7.5.1 - 9.7.5.2); lost packets are sent again from the first one
// missing (go-back-N) after a NAK, an implied NAK or the local ACK timeout; RNR NAKs wait the
// timer of table 45; retry_cnt and rnr_retry bound the attempts (rnr_retry 7: for ever; retry_cnt
// 7 is seven, IB spec 9.7.6.1.3 — rxe retries for ever there).
#include <cstring>

#include "engine.hpp"

namespace vfab::rdma::detail {

using namespace wire;

namespace {

RdmaWcOpcode wc_opcode(WrOpcode op) {
    switch (op) {
    case WrOpcode::rdma_write:
    case WrOpcode::rdma_write_with_imm: return RdmaWcOpcode::rdma_write;
    case WrOpcode::rdma_read: return RdmaWcOpcode::rdma_read;
    case WrOpcode::atomic_cmp_and_swp: return RdmaWcOpcode::comp_swap;
    case WrOpcode::atomic_fetch_and_add: return RdmaWcOpcode::fetch_add;
    case WrOpcode::masked_atomic_cmp_and_swp: return RdmaWcOpcode::masked_comp_swap;
    case WrOpcode::masked_atomic_fetch_and_add: return RdmaWcOpcode::masked_fetch_add;
    case WrOpcode::local_inv: return RdmaWcOpcode::local_inv;
    case WrOpcode::bind_mw: return RdmaWcOpcode::bind_mw;
    case WrOpcode::reg_mr: return RdmaWcOpcode::reg_mr;
    default: return RdmaWcOpcode::send;
    }
}

// The completion status of a NAK (9.7.5.2.3 - 9.7.5.2.5).
RdmaWcStatus nak_status(uint8_t syndrome) {
    switch (syndrome) {
    case aeth::kNakInvalidRequest: return RdmaWcStatus::rem_inv_req_err;
    case aeth::kNakRemoteAccessError: return RdmaWcStatus::rem_access_err;
    case aeth::kNakRemoteOperationalError: return RdmaWcStatus::rem_op_err;
    case aeth::kNakInvalidRdRequest: return RdmaWcStatus::rem_inv_rd_req_err;
    default: return RdmaWcStatus::bad_resp_err;
    }
}

}  // namespace

void Completer::start(uint32_t sq_psn) noexcept {
    s_.una = sq_psn;
    s_.retries_left = c_.attr.retry_cnt;
    s_.rnr_left = c_.attr.rnr_retry;
}

uint64_t Completer::deadline() const noexcept {
    if (s_.rnr_deadline && (!s_.retry_deadline || s_.rnr_deadline < s_.retry_deadline)) return s_.rnr_deadline;
    return s_.retry_deadline;
}

void Completer::arm_retry(uint64_t now) noexcept {
    const uint64_t t = c_.reliable() ? ack_timeout_ns(c_.attr.timeout) : 0;
    s_.retry_deadline = t ? now + t : 0;   // timeout 0: no timer (IB spec 9.7.6.1.3); UC never retries
    c_.port.note_deadline(s_.retry_deadline);
}

// Every WR still queued completes with WR_FLUSH_ERR (the first failed one already has its status).
void Completer::flush() noexcept {
    for (; sq_.head != sq_.tail; ++sq_.head) {
        SendWqe& w = sq_.at(sq_.head);
        if (!w.done) w.status = RdmaWcStatus::wr_flush_err;
        complete(w);
    }
    sq_.next = sq_.tail;
    sq_.rd_atomic = 0;
}

void Completer::complete(const SendWqe& w) noexcept {
    if (!w.signaled && w.status == RdmaWcStatus::success) return;
    Wc wc;
    wc.wr_id = w.wr.wr_id;
    wc.status = w.status;
    wc.opcode = wc_opcode(w.wr.opcode);
    wc.vendor_err = w.vendor_err;
    wc.byte_len = w.length;
    wc.qp_num = c_.qpn;
    c_.scq->push(wc, false);
}

// Completed WRs leave the queue in order.
void Completer::retire() noexcept {
    const uint32_t before = sq_.head;
    while (sq_.head != sq_.next && sq_.at(sq_.head).done) {
        const SendWqe& w = sq_.at(sq_.head);
        if (w.started && is_read_or_atomic(w.wr.opcode)) --sq_.rd_atomic;
        complete(w);
        ++sq_.head;
    }
    if (sq_.head == before) return;
    s_.retries_left = c_.attr.retry_cnt;   // progress: a fresh count for what is still outstanding
    s_.rnr_left = c_.attr.rnr_retry;       // (both are per message, IB spec 9.7.5.2.8 and 9.7.6.1.3)
    s_.retry_started = false;
    const bool partial = sq_.next != sq_.tail && sq_.at(sq_.next).started;
    if (sq_.head == sq_.next && !partial) s_.retry_deadline = 0;
    else arm_retry(now_ns());
    if (sq_.next != sq_.tail) qp_.ready();
}

// The first WR not completed fails with `st`; the queue pair goes to the error state.
void Completer::fail_head(RdmaWcStatus st, uint32_t vendor_err) noexcept {
    for (uint32_t i = sq_.head; i != sq_.tail; ++i) {
        SendWqe& w = sq_.at(i);
        if (w.done) continue;
        w.done = true;
        w.status = st;
        w.vendor_err = vendor_err;
        break;
    }
    qp_.to_error();
}

void Completer::acked_through(uint32_t psn) noexcept {
    uint32_t next = psn_add(psn, 1);
    // An ACK past a READ or atomic still waiting for its answer does not acknowledge what the
    // answer has not brought (9.7.5.1.2: it is an implied NAK for it).
    for (uint32_t i = sq_.head, end = sq_.rd_atomic ? sq_.sent_end() : sq_.head; i != end; ++i) {
        const SendWqe& w = sq_.at(i);
        if (w.done || !is_read_or_atomic(w.wr.opcode)) continue;
        const uint32_t limit = psn_add(w.first_psn, w.read_pkts);
        if (psn_diff(next, limit) > 0) next = limit;
        break;
    }
    if (psn_diff(next, s_.una) > 0) {
        s_.una = next;
        s_.retries_left = c_.attr.retry_cnt;   // forward progress: the transport retries count afresh
        if (sq_.next != sq_.tail) qp_.ready();   // the send window opened
    }
}

// An acknowledgement of every PSN up to `psn`: SENDs and WRITEs that end there complete. A READ
// or atomic not yet answered that it passes lost its response: sent again (implied NAK,
// 9.7.5.1.2). True when that happened.
bool Completer::complete_through(uint32_t psn) noexcept {
    for (uint32_t i = sq_.head; i != sq_.next; ++i) {
        SendWqe& w = sq_.at(i);
        if (w.done) continue;
        if (is_read_or_atomic(w.wr.opcode)) {
            if (psn_diff(psn, w.first_psn) >= 0) {
                retry_on_response(psn_add(w.first_psn, w.read_pkts));
                return true;
            }
            break;
        }
        if (psn_diff(psn, psn_add(w.first_psn, w.npkts - 1)) < 0) break;
        w.done = true;
    }
    retire();
    return false;
}

// A retry a response calls for (NAK, implied NAK, a gap in read responses): one at a time.
// Until a WR completes, the responses still arriving from before it call for the same again,
// each of which would send everything again and earn yet more of them (as rxe's started_retry);
// a response lost meanwhile is left to the timer.
void Completer::retry_on_response(uint32_t psn) noexcept {
    if (s_.retry_started) return;
    s_.retry_started = true;
    retry_from(psn, true);
}

// Go back to `psn` and send everything from there again.
void Completer::retry_from(uint32_t psn, bool count) noexcept {
    if (count) {
        if (s_.retries_left == 0) {
            fail_head(RdmaWcStatus::retry_exc_err, 0);
            return;
        }
        --s_.retries_left;
    }
    for (uint32_t i = sq_.head; i != sq_.tail; ++i) {
        SendWqe& w = sq_.at(i);
        if (!w.started) break;
        const int32_t d = psn_diff(psn, w.first_psn);
        if (d < 0 || d >= int32_t(w.npkts)) continue;
        if (w.done) continue;
        qp_.req_.rewind(i, psn);
        if (w.wr.opcode == WrOpcode::rdma_read) w.read_pkts = uint32_t(d);
        c_.port.count_retransmit();
        arm_retry(now_ns());
        qp_.ready();
        return;
    }
    arm_retry(now_ns());
}

void Completer::on_timer(uint64_t now) noexcept {
    if (s_.rnr_deadline && now >= s_.rnr_deadline) {
        s_.rnr_deadline = 0;
        retry_from(s_.rnr_psn, false);
    }
    if (s_.retry_deadline && now >= s_.retry_deadline) {
        s_.retry_deadline = 0;
        for (uint32_t i = sq_.head; i != sq_.tail; ++i) {
            const SendWqe& w = sq_.at(i);
            if (!w.started) break;
            if (w.done) continue;
            uint32_t from = psn_add(w.first_psn, w.wr.opcode == WrOpcode::rdma_read ? w.read_pkts : 0);
            // Within a SEND or WRITE, what was acknowledged stays acknowledged.
            if (!is_read_or_atomic(w.wr.opcode) && psn_diff(s_.una, from) > 0 && psn_diff(s_.una, qp_.req_.next_psn()) < 0) from = s_.una;
            retry_from(from, true);
            return;
        }
    }
}

// ---- responses ----------------------------------------------------------------------------------------

void Completer::on_response(const Packet& p) noexcept {
    if (c_.state != RdmaQpState::rts && c_.state != RdmaQpState::sqd) return;
    if (psn_diff(p.psn, qp_.req_.next_psn()) >= 0) return;   // answers a PSN never sent
    switch (p.opcode) {
    case op::acknowledge: on_aeth(p); break;
    case op::atomic_acknowledge: on_atomic_ack(p); break;
    default: on_read_response(p); break;
    }
}

void Completer::on_aeth(const Packet& p) noexcept {
    const uint8_t syn = p.syndrome;
    const uint32_t before = psn_add(p.psn, kPsnMask);   // p.psn - 1
    switch (syn & aeth::kTypeMask) {
    case aeth::kAck:
        acked_through(p.psn);
        complete_through(p.psn);
        return;
    case aeth::kRnrNak:
        acked_through(before);
        if (complete_through(before)) return;
        // A copy of the request already RNR-NAKed (sent again by the ACK timer before the first
        // NAK came) is NAKed too: the wait it asks for is running, and it is no new retry.
        if (s_.rnr_deadline && p.psn == s_.rnr_psn) return;
        if (c_.attr.rnr_retry != 7) {
            if (s_.rnr_left == 0) {
                fail_head(RdmaWcStatus::rnr_retry_exc_err, syn);
                return;
            }
            --s_.rnr_left;
        }
        s_.rnr_psn = p.psn;
        s_.rnr_deadline = now_ns() + uint64_t(rnr_timer_us(syn & 0x1F)) * 1000u;
        s_.retry_deadline = 0;
        c_.port.note_deadline(s_.rnr_deadline);
        return;
    case aeth::kNak:
        // A fatal NAK for a PSN already acknowledged is a stale copy: it ends nothing.
        if (syn != aeth::kNakPsnSeqError && psn_diff(p.psn, s_.una) < 0) return;
        acked_through(before);
        if (complete_through(before)) return;
        if (syn == aeth::kNakPsnSeqError) retry_on_response(p.psn);
        else fail_head(nak_status(syn), syn);
        return;
    default: return;   // reserved
    }
}

// A read response acknowledges the SENDs and WRITEs before its READ (9.7.5.1.1); one that
// passes an unanswered atomic, or comes early, means a response was lost: sent again.
void Completer::on_read_response(const Packet& p) noexcept {
    SendWqe* w = nullptr;
    for (uint32_t i = sq_.head, end = sq_.sent_end(); i != end; ++i) {
        SendWqe& x = sq_.at(i);
        if (x.done) continue;
        if (x.wr.opcode == WrOpcode::rdma_read) { w = &x; break; }
        if (is_read_or_atomic(x.wr.opcode)) {   // an atomic before: its answer was lost
            retry_on_response(x.first_psn);
            return;
        }
        if (psn_diff(p.psn, psn_add(x.first_psn, x.npkts - 1)) <= 0) return;
        x.done = true;
    }
    if (!w) {
        retire();
        return;
    }
    const uint32_t expected = psn_add(w->first_psn, w->read_pkts);
    if (p.psn != expected) {
        if (psn_diff(p.psn, expected) > 0) retry_on_response(expected);
        return;
    }
    const bool last = p.info.has(is_last);
    const uint32_t offset = w->read_pkts * c_.mtu;
    // A READ goes as requests of a window each, and again from a lost response on: the LAST of
    // an earlier request may come where the current one goes on. Every response but the one
    // ending the WR carries exactly the MTU.
    const uint32_t end = offset + p.payload_len;
    if (p.payload_len > c_.mtu || (!last && p.payload_len != c_.mtu) || end > w->length ||
        (p.payload_len != c_.mtu && end != w->length)) {
        fail_head(RdmaWcStatus::bad_resp_err, 0);
        return;
    }
    copy_to_segments(sq_.segments(*w), w->nseg, offset, p.payload, p.payload_len);
    acked_through(p.psn);
    ++w->read_pkts;
    if (end == w->length && (last || w->length == 0)) w->done = true;
    else arm_retry(now_ns());
    retire();
}

void Completer::on_atomic_ack(const Packet& p) noexcept {
    for (uint32_t i = sq_.head, end = sq_.sent_end(); i != end; ++i) {
        SendWqe& x = sq_.at(i);
        if (x.done) continue;
        if (is_read_or_atomic(x.wr.opcode)) {
            if (x.wr.opcode == WrOpcode::rdma_read || x.first_psn != p.psn) {
                if (psn_diff(p.psn, x.first_psn) > 0) retry_on_response(psn_add(x.first_psn, x.read_pkts));
                return;
            }
            const uint64_t orig = p.atomic_orig;   // the requester's memory holds it in host order
            copy_to_segments(sq_.segments(x), x.nseg, 0, reinterpret_cast<const uint8_t*>(&orig), 8);
            acked_through(p.psn);
            x.done = true;
            break;
        }
        if (psn_diff(p.psn, psn_add(x.first_psn, x.npkts - 1)) <= 0) return;
        x.done = true;
    }
    retire();
}

}  // namespace vfab::rdma::detail
