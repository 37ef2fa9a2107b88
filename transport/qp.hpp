// A queue pair of the transport (RC, UC, UD, XRC send and receive): a small shared context and
// four roles, each owning its state (IB spec 9.7: requester and responder, each side's
// reliability; 10.2: the queues).
//   Requester (requester.cpp, memory_ops.cpp)  send WRs into packets; the send queue
//   Completer (completer.cpp)                  ACKs, NAKs, read responses, retransmission
//   Responder (responder.cpp)                  requests: SEND, WRITE, READ, atomics, duplicates
//   QpRecvQueue (qp_recv.cpp)                  the receive queue or SRQ messages land in
// QpImpl (qp_state.cpp) is the verbs object: the state machine, the error state, and the calls
// the port makes; demux.cpp hands it received packets. RESET resets every role by value.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "common.hpp"
#include "limits.hpp"
#include "packet.hpp"
#include "qp_port.hpp"
#include "recv_queue.hpp"
#include "segment.hpp"

namespace vfab::rdma::detail {

class CqImpl;
class SrqImpl;
class XrcdImpl;
class QpImpl;

// A send WR as the requester keeps it until it completes (SendQueue::prepare sets every field).
struct SendWqe {
    RdmaSendWr wr;
    uint32_t seg0 = 0, nseg = 0;   // its segments in the send queue's
    uint32_t length = 0;
    uint32_t first_psn = 0;        // RC: the PSNs it occupies
    uint32_t npkts = 0;
    uint32_t read_pkts = 0;        // READ: responses received in order
    bool started = false;
    bool done = false;
    bool signaled = false;
    RdmaWcStatus status = RdmaWcStatus::success;
    uint32_t vendor_err = 0;
};

// A READ or atomic the responder executed: replayed, never executed again, for duplicates.
struct Resource {
    enum Kind : uint8_t { none, read, atomic } kind = none;
    uint32_t psn = 0;          // of the request
    uint32_t last_psn = 0;     // of its last response
    uint64_t va = 0;
    uint32_t length = 0;
    uint32_t rkey = 0;         // READ: its key, translated again for every response and replay
    uint64_t orig = 0;         // atomic: the value before it ran
    // Responses still to send: from next_psn / next_offset through last_psn.
    bool sending = false;
    bool restart = false;      // the next response is the first of a (re)transmission
    uint32_t next_psn = 0;
    uint32_t next_offset = 0;
};

// What every role reads: what the queue pair was made with, its attributes and state, its peer.
struct QpContext {
    QpContext(PortImpl& port, uint32_t qpn, const RdmaQpInitAttr& a);

    QpPort port;
    const QpType type;
    const uint32_t qpn;
    CqImpl* const scq;
    CqImpl* const rcq;
    const RdmaQpCaps cap;
    const bool sq_sig_all;
    const uint32_t create_flags;
    const uint16_t src_port;   // UDP source port of its packets (A17.2.1: entropy)
    RdmaQpState state = RdmaQpState::reset;
    QpAttr attr;
    uint32_t mtu = 1024;       // bytes, from RTR
    struct Peer {              // the peer of a connected queue pair, from RTR
        uint32_t ip = 0;
        uint8_t mac[6] = {};
        bool known = false;    // mac resolved
    } peer;

    bool is_xrc() const noexcept { return type == QpType::xrc_send || type == QpType::xrc_recv; }
    // RC, UC and both XRC ends: connected to one peer, PSN-ordered.
    bool connected() const noexcept { return type != QpType::ud; }
    // ... and acknowledged, retransmitted: all of them but UC.
    bool reliable() const noexcept { return connected() && type != QpType::uc; }
    // The headers every packet to the peer carries, and their template (made when first needed
    // once the peer or the attributes changed: headers_changed()).
    void fill_common(PacketHeader& h) const noexcept;
    const HeaderTemplate& headers() noexcept {
        if (!headers_ok_) [[unlikely]] {
            PacketHeader h;
            fill_common(h);
            make_template(h, headers_);
            headers_ok_ = true;
        }
        return headers_;
    }
    void headers_changed() noexcept { headers_ok_ = false; }
    // The peer's MAC from a request it sent in sequence, while its ARP answer is still on its way.
    void learn_peer_mac(const uint8_t* mac) noexcept {
        std::memcpy(peer.mac, mac, 6);
        peer.known = true;
        headers_changed();
    }

private:
    HeaderTemplate headers_;
    bool headers_ok_ = false;
};

// The send queue: WRs [head, next) sent and waiting for acknowledgement, [next, tail) waiting
// to send. The requester fills and sends it; the completer retires it.
class SendQueue {
public:
    void init(uint32_t depth, uint32_t max_sge, uint32_t max_inline);
    void reset() noexcept { head = next = tail = rd_atomic = 0; }
    SendWqe& at(uint32_t i) noexcept { return wqes_[i & mask_]; }
    const SendWqe& at(uint32_t i) const noexcept { return wqes_[i & mask_]; }
    Segment* segments(const SendWqe& w) noexcept { return &segs_[w.seg0]; }
    const Segment* segments(const SendWqe& w) const noexcept { return &segs_[w.seg0]; }
    uint8_t* inline_data(uint32_t i) noexcept { return &inline_[size_t(i & mask_) * max_inline_]; }
    bool full() const noexcept { return tail - head == wqes_.size(); }
    // The slot at `tail` made ready for `wr` (the caller then advances tail). The WR's pointers
    // are dropped: what they point to is read during the post only.
    SendWqe& prepare(const RdmaSendWr& wr, bool signaled) noexcept;
    // The end of the WRs with packets on the wire: next, or one past it while the WR there is
    // part sent (a long READ goes out a window of responses at a time).
    uint32_t sent_end() const noexcept { return next != tail && at(next).started ? next + 1 : next; }

    uint32_t head = 0, next = 0, tail = 0;   // free-running
    uint32_t rd_atomic = 0;                  // READs and atomics started and not completed

private:
    std::vector<SendWqe> wqes_;
    std::vector<Segment> segs_;   // max_sge + 1 per slot
    std::vector<uint8_t> inline_;
    uint32_t mask_ = 0, segs_per_wqe_ = 0, max_inline_ = 0;
};

class Requester {
public:
    Requester(QpImpl& qp, QpContext& c) : qp_(qp), c_(c) {}
    void init() { sq.init(c_.cap.max_send_wr, c_.cap.max_send_sge, c_.cap.max_inline_data); }
    void reset() noexcept {
        sq.reset();
        s_ = {};
    }
    void start(uint32_t sq_psn) noexcept { s_.next_psn = sq_psn; }   // RTR -> RTS
    PostResult post(const RdmaSendWr& wr) noexcept;
    PostResult post_memory_wr(const RdmaSendWr& wr, bool type1_bind) noexcept;   // memory_ops.cpp
    void pump() noexcept;   // sends what waits, as send buffers allow
    void on_arp_change() noexcept;
    // The completer goes back: WR `index` and what follows go again from PSN `psn`.
    void rewind(uint32_t index, uint32_t psn) noexcept;
    uint32_t next_psn() const noexcept { return s_.next_psn; }

    SendQueue sq;

private:
    bool resolve_peer() noexcept;
    bool send_rc_packet(SendWqe& w) noexcept;
    bool send_ud_packet(SendWqe& w) noexcept;
    void execute_memory_wr(SendWqe& w, const RdmaSendWr& wr, bool type1_bind) noexcept;
    void fast_register(SendWqe& w, const RdmaSendWr& wr) noexcept;

    QpImpl& qp_;
    QpContext& c_;
    PacketHeader hdr_;   // send_rc_packet's, kept: a packet's fields written over the last one's
    struct State {
        uint32_t next_psn = 0;       // of the next packet to send
        uint32_t pkts_unacked = 0;   // since the last AckReq
        bool waiting_arp = false;
    } s_;
};

class Completer {
public:
    Completer(QpImpl& qp, QpContext& c, SendQueue& sq) : qp_(qp), c_(c), sq_(sq) {}
    void reset() noexcept { s_ = {}; }
    void start(uint32_t sq_psn) noexcept;   // RTR -> RTS
    void on_response(const Packet& p) noexcept;
    void on_timer(uint64_t now) noexcept;   // retransmission and RNR deadlines
    uint64_t deadline() const noexcept;     // the next one, 0 for none
    void stop_timers() noexcept { s_.retry_deadline = s_.rnr_deadline = 0; }
    bool rnr_waiting() const noexcept { return s_.rnr_deadline != 0; }
    uint32_t una() const noexcept { return s_.una; }   // the oldest PSN not acknowledged
    void arm_retry(uint64_t now) noexcept;
    bool retry_armed() const noexcept { return s_.retry_deadline != 0; }
    void retire() noexcept;   // completed WRs leave the queue, in order
    // The first WR not completed fails with `st`; the queue pair goes to the error state.
    void fail_head(RdmaWcStatus st, uint32_t vendor_err) noexcept;
    void flush() noexcept;    // every WR left completes, flushed
    void complete(const SendWqe& w) noexcept;

private:
    void on_aeth(const Packet& p) noexcept;
    void on_read_response(const Packet& p) noexcept;
    void on_atomic_ack(const Packet& p) noexcept;
    void acked_through(uint32_t psn) noexcept;   // una moves past `psn`
    bool complete_through(uint32_t psn) noexcept;
    void retry_from(uint32_t psn, bool count) noexcept;
    void retry_on_response(uint32_t psn) noexcept;

    QpImpl& qp_;
    QpContext& c_;
    SendQueue& sq_;
    struct State {
        uint32_t una = 0;
        uint64_t retry_deadline = 0;   // 0: timer off
        uint64_t rnr_deadline = 0;     // 0: not waiting for an RNR timer
        uint32_t rnr_psn = 0;
        uint8_t retries_left = 7, rnr_left = 7;
        bool retry_started = false;    // a retry a response called for is under way (retry_on_response)
    } s_;
};

// The receive queue messages land in: the queue pair's own, its SRQ, or for an XRC receiver
// the XRC SRQ each message names. It holds the WR the message in progress fills.
class QpRecvQueue {
public:
    QpRecvQueue(QpImpl& qp, QpContext& c, SrqImpl* srq, XrcdImpl* xrcd) : qp_(qp), c_(c), srq_(srq), xrcd_(xrcd) {}
    void init();                      // the queue it uses, and its SRQ and domain told
    void reset() noexcept;            // the WR in use given back; the own queue emptied
    void detach() noexcept;           // destroy: the WR in use given back, SRQ and domain told
    RecvQueue::Post post(const RecvWr& wr) noexcept { return rq_->post(wr, c_.port.mrs()); }
    bool take() noexcept;             // a WR for a new message; false when none is posted
    bool has_current() const noexcept { return cur_ != RecvQueue::kNone; }
    const RecvWqe& current() const noexcept { return rq_->wqe(cur_); }
    // The current WR's memory translated again (false: a key was revoked), and filled.
    bool translate() noexcept { return rq_->translate(cur_, c_.port.mrs()); }
    void copy_in(uint32_t offset, const uint8_t* from, uint32_t len) noexcept {
        copy_to_segments(rq_->segments(cur_), current().nseg, offset, from, len);
    }
    // The current WR completes; error() completes one not taken (its wr_id).
    void complete(RdmaWcStatus st, RdmaWcOpcode op, uint32_t byte_len, uint32_t flags, uint32_t imm, uint32_t src_qp,
                  bool se) noexcept;
    void error(uint64_t wr_id, RdmaWcStatus st) noexcept;
    void flush() noexcept;
    bool select_xrc_srq(const Packet& p) noexcept;   // XRC: the SRQ the message names (xrc.cpp)
    CqImpl* cq() const noexcept;
    bool has_srq() const noexcept { return srq_ != nullptr; }
    SrqImpl* srq() const noexcept { return srq_; }

private:
    QpImpl& qp_;
    QpContext& c_;
    SrqImpl* srq_;
    XrcdImpl* const xrcd_;
    RecvQueue own_;
    RecvQueue* rq_ = nullptr;
    uint32_t cur_ = RecvQueue::kNone;
    bool last_wqe_raised_ = false;
};

class Responder {
public:
    Responder(QpImpl& qp, QpContext& c, QpRecvQueue& rq) : qp_(qp), c_(c), rq_(rq) {}
    void init() { res_.resize(kMaxRdAtomic); }
    void reset() noexcept;
    void start(uint32_t rq_psn) noexcept { s_.epsn = rq_psn, s_.msn = 0; }   // INIT -> RTR
    void stop() noexcept { s_.in_send = s_.in_write = false; }           // the error state
    // A request of a connected queue pair; a UD datagram. False: dropped.
    bool on_request(const Packet& p) noexcept;
    bool on_datagram(const Packet& p) noexcept;
    // The ACKs and READ responses waiting for send buffers; false: the requester waits.
    bool pump() noexcept;
    uint32_t max_resources() const noexcept { return uint32_t(res_.size()); }

private:
    bool on_duplicate(const Packet& p) noexcept;
    bool uc_in_sequence(const Packet& p) noexcept;   // UC: whether the packet goes on (else dropped)
    bool reject(const Packet& p, uint8_t syndrome) noexcept;   // RC: NAK and error; UC: drop the message
    bool no_receive(const Packet& p) noexcept;                 // RC: RNR NAK; UC: drop the message
    void uc_drop() noexcept { s_.uc_discard = true, s_.in_send = s_.in_write = false; }
    bool respond_error(uint32_t psn, uint8_t syndrome) noexcept;
    bool recv_key_revoked(const Packet& p) noexcept;
    bool send_ack(uint8_t syndrome, uint32_t psn) noexcept;
    bool send_atomic_ack(const Resource& r) noexcept;
    bool send_read_responses() noexcept;   // then a pending ACK that waited behind them
    bool send_pending_ack() noexcept;      // the ACK that waited; false: still no buffer
    bool write_ack() noexcept;
    bool on_send(const Packet& p) noexcept;
    bool on_write(const Packet& p) noexcept;
    bool on_read(const Packet& p) noexcept;
    bool on_atomic(const Packet& p) noexcept;
    Resource* new_resource() noexcept;
    // The resources in use: a ring of max_dest_rd_atomic of them (res_ holds the most allowed).
    uint32_t res_window() const noexcept {
        return std::max<uint32_t>(1, std::min<uint32_t>(c_.attr.max_dest_rd_atomic, uint32_t(res_.size())));
    }
    void set_sending(Resource& r, bool on) noexcept {
        if (r.sending != on) s_.res_sending += on ? 1 : uint32_t(-1);
        r.sending = on;
    }

    QpImpl& qp_;
    QpContext& c_;
    QpRecvQueue& rq_;
    std::vector<Resource> res_;
    struct State {
        uint32_t epsn = 0, msn = 0;
        bool comm_est_raised = false;
        bool nak_seq_sent = false;
        bool uc_discard = false;     // UC: dropping the rest of a message, until the next FIRST or ONLY
        bool in_send = false;        // a multi-packet SEND is being received
        uint32_t recv_offset = 0;
        bool in_write = false;       // a multi-packet WRITE is being received
        uint32_t write_rkey = 0;     // where it lands: translated again for every packet once the
        uint64_t write_va = 0;       // MR table changed, so that a key revoked between FIRST and
        uint32_t write_len = 0, write_offset = 0;   // LAST stops the rest
        dma::Translation write_at;   // its translation at FIRST, good while the table's revision
        uint64_t write_revision = 0; // is still this
        uint32_t res_next = 0;
        uint32_t res_sending = 0;    // resources with responses still to send (a READ being answered)
        // An ACK or NAK that found no send buffer, sent on the next pump.
        bool ack_pending = false;
        bool ack_first = false;      // it goes before the READ responses pending (it came before them)
        uint8_t ack_syndrome = 0;
        uint32_t ack_psn = 0;
    } s_;
};

class QpImpl final : public Qp {
public:
    QpImpl(PortImpl& port, uint32_t qpn, const RdmaQpInitAttr& a);
    Result<void> init();

    Result<void> modify(const QpAttr& attr, uint32_t mask) override;
    QpAttr query() const override;
    PostResult post_send(std::span<const RdmaSendWr> wrs) noexcept override;
    PostResult post_recv(std::span<const RecvWr> wrs) noexcept override;
    uint32_t qp_num() const noexcept override { return c_.qpn; }
    QpType type() const noexcept override { return c_.type; }
    RdmaQpState state() const noexcept override;   // under the port's lock: the thread moves it
    Result<uint32_t> bind_mw(uint32_t mw_key, const MwBindInfo& info, uint64_t wr_id, uint32_t send_flags) override;
    Result<void> attach_mcast(const Gid& gid, uint16_t lid) override;
    Result<void> detach_mcast(const Gid& gid, uint16_t lid) override;
    Result<void> destroy() override;
    bool blocks_self_mcast() const noexcept { return c_.create_flags & qp_create_block_self_mcast_lb; }

    // Called by the port.
    bool on_packet(const Packet& p) noexcept;   // demux.cpp; false: dropped
    void pump() noexcept;                       // sends what is waiting, as tx buffers allow
    void on_timer(uint64_t now) noexcept { comp_.on_timer(now); }
    uint64_t deadline() const noexcept;         // the next timer's, 0 for none
    void on_arp_change() noexcept { req_.on_arp_change(); }
    // A WR not yet sent names `ah` (a destroyed handle is freed once none does).
    bool holds_ah(const AddressHandle* ah) const noexcept {
        for (uint32_t i = req_.sq.next; i != req_.sq.tail; ++i)
            if (req_.sq.at(i).wr.ah == ah) return true;
        return false;
    }
    bool uses(const CqImpl* cq) const noexcept { return c_.scq == cq || rq_.cq() == cq; }
    void cq_overran() noexcept;   // a CQ of it lost a completion: qp_fatal, and the error state
    bool destroyed = false;
    bool in_ready = false;   // on the port's list of queue pairs with something to send

private:
    friend class Requester;
    friend class Completer;
    friend class Responder;
    friend class QpRecvQueue;
    Result<void> check_modify(const QpAttr& a, uint32_t mask) const;
    void reset() noexcept;
    void to_error() noexcept;
    void flush() noexcept;   // both queues' WRs complete, flushed
    void raise_event(AsyncEventType type) noexcept;   // an affiliated asynchronous event
    void ready() noexcept { c_.port.mark_ready(this); }

    QpContext c_;
    QpRecvQueue rq_;
    Requester req_;
    Completer comp_;
    Responder resp_;
};

}  // namespace vfab::rdma::detail
