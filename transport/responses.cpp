// What the responder sends (IB spec 9.7.4.1 - 9.7.5.2): ACKs, NAKs, READ responses and atomic
// ACKs, in PSN order. Its requests side is responder.cpp.
#include <algorithm>

#include "engine.hpp"

namespace vfab::rdma::detail {

using namespace wire;

// Called by the queue pair's pump(): the ACK and READ responses that waited for send buffers.
// A pending ACK goes first unless READ responses before it wait (send_read_responses then sends
// it after them); in the error state they never will.
bool Responder::pump() noexcept {
    const RdmaQpState st = c_.state;
    if (s_.ack_pending && (!s_.res_sending || st == RdmaQpState::error) && !send_pending_ack()) return false;
    if (st == RdmaQpState::error || st == RdmaQpState::reset) return false;
    if (!send_read_responses()) {
        qp_.ready();
        return false;
    }
    return true;
}

// Responses leave in PSN order (9.7.5.1.1). An ACK waits for the end of the port's round of
// progress, which pumps the queue pair: ACKs are cumulative, and the next one in the same round
// replaces it — a burst of requests is answered by one ACK (coalescing, 9.7.5.1.1). An ACK for
// a request after a READ whose responses still wait for send buffers waits behind them
// (send_read_responses sends it after the last); one that came before them goes first. A NAK
// goes at once (it acknowledges what came before it, the waiting ACK with it) unless READ
// responses wait; one that ends the connection goes at once always: the responses still
// waiting will never be sent.
bool Responder::send_ack(uint8_t syndrome, uint32_t psn) noexcept {
    const uint8_t type = syndrome & aeth::kTypeMask;
    const bool fatal = type == aeth::kNak && syndrome != aeth::kNakPsnSeqError;
    s_.ack_syndrome = syndrome;
    s_.ack_psn = psn;
    if (type != aeth::kAck && (!s_.res_sending || fatal) && write_ack()) {
        s_.ack_pending = false;
        return true;
    }
    s_.ack_first = s_.res_sending == 0;
    s_.ack_pending = true;
    qp_.ready();
    return false;
}

bool Responder::send_pending_ack() noexcept {
    if (!write_ack()) {
        qp_.ready();
        return false;
    }
    s_.ack_pending = false;
    return true;
}

// The ACK or NAK in ack_syndrome / ack_psn on the wire; false when no send buffer is free.
bool Responder::write_ack() noexcept {
    uint8_t* buf = c_.port.tx_buffer();
    if (!buf) return false;
    const uint8_t syndrome = s_.ack_syndrome;
    PacketHeader h;
    h.opcode = op::acknowledge;
    h.psn = s_.ack_psn;
    h.syndrome = syndrome;
    h.msn = s_.msn;
    write_headers(buf, c_.headers(), h, 0);
    c_.port.tx_queue(buf, finish_frame(buf, 0));
    if ((syndrome & aeth::kTypeMask) != aeth::kAck) c_.port.count_nak_sent();
    return true;
}

bool Responder::send_atomic_ack(const Resource& r) noexcept {
    if (s_.ack_pending && !s_.res_sending && !send_pending_ack()) return false;   // the ACK before it first
    uint8_t* buf = c_.port.tx_buffer();
    if (!buf) return false;   // the requester asks again; the duplicate is answered from `r`
    PacketHeader h;
    h.opcode = op::atomic_acknowledge;
    h.psn = r.psn;
    h.syndrome = aeth::kAckNoCredits;
    h.msn = s_.msn;
    h.atomic_orig = r.orig;
    write_headers(buf, c_.headers(), h, 0);
    c_.port.tx_queue(buf, finish_frame(buf, 0));
    return true;
}

// Read responses still to send, oldest READ first (9.7.4.1.4); false when out of buffers.
bool Responder::send_read_responses() noexcept {
    if (s_.ack_pending && s_.ack_first && !send_pending_ack()) return false;
    if (!s_.res_sending) return !s_.ack_pending || send_pending_ack();
    const uint32_t n = res_window();
    const uint32_t mtu = c_.mtu;
    for (uint32_t k = 0; k < n; ++k) {
        Resource& r = res_[(s_.res_next + k) % n];
        while (r.sending) {
            uint8_t* buf = c_.port.tx_buffer();
            if (!buf) return false;
            const uint32_t left = r.length - r.next_offset;
            const uint32_t payload = std::min(left, mtu);
            const bool first = r.restart;   // the first response of the READ, or of its replay
            const bool last = payload == left;
            PacketHeader h;
            h.opcode = first && last ? op::read_response_only
                       : first       ? op::read_response_first
                       : last        ? op::read_response_last
                                     : op::read_response_middle;
            h.psn = r.next_psn;
            h.syndrome = aeth::kAckNoCredits;
            h.msn = s_.msn;
            uint8_t* data = write_headers(buf, c_.headers(), h, payload);
            if (payload) {
                // The key is looked at again for every response: one revoked since the READ
                // arrived ends it here (a remote access error, as at its first packet).
                const dma::Translation t = c_.port.mrs().translate_span(r.rkey, r.va + r.next_offset, payload,
                                                                        dma::Access::remote_read, c_.qpn);
                if (t.status != dma::MrStatus::ok) {
                    c_.port.tx_release(buf);
                    set_sending(r, false);
                    respond_error(r.next_psn, aeth::kNakRemoteAccessError);
                    return true;
                }
                copy_from(Segment::of(t, payload), 0, data, payload);
            }
            c_.port.tx_queue(buf, finish_frame(buf, payload));
            r.restart = false;
            r.next_psn = psn_add(r.next_psn, 1);
            r.next_offset += payload;
            if (last) set_sending(r, false);
        }
    }
    return !s_.ack_pending || send_pending_ack();
}

// A NAK that ends the connection: the requester fails its WR, this side flushes (9.7.5.2). An
// invalid request and an access violation are told to this side's application too, by an
// affiliated asynchronous error (IB spec 11.6.3.1): a WRITE, READ or atomic has no receive
// completion that could carry it. A remote operational error has one (recv_key_revoked).
bool Responder::respond_error(uint32_t psn, uint8_t syndrome) noexcept {
    send_ack(syndrome, psn);
    c_.port.tx_flush();
    qp_.to_error();
    if (syndrome == aeth::kNakRemoteAccessError) qp_.raise_event(AsyncEventType::qp_access_err);
    else if (syndrome != aeth::kNakRemoteOperationalError) qp_.raise_event(AsyncEventType::qp_req_err);
    return true;
}

}  // namespace vfab::rdma::detail
