// The transport's objects: the port over a raw queue pair, the RC/UC/UD queue pairs with their
// requester, completer and responder, and the software completion queues (docs/rdma.md).
// Private to transport/: applications see include/vfab/rdma/rdma.hpp.
#pragma once

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "limits.hpp"
#include "packet.hpp"
#include "raw_packet.hpp"
#include "raw_queue.hpp"
#include "recv_queue.hpp"
#include "vfab/rdma/rdma.hpp"

namespace vfab::rdma::detail {

uint64_t now_ns() noexcept;   // CLOCK_MONOTONIC

constexpr uint64_t ns_of(const timespec& t) noexcept { return uint64_t(t.tv_sec) * 1000000000u + uint64_t(t.tv_nsec); }
inline uint64_t clock_ns(clockid_t clock) noexcept {
    timespec t;
    clock_gettime(clock, &t);
    return ns_of(t);
}

// vendor_err of a WR that failed because its peer never answered ARP.
inline constexpr uint32_t kVendorErrArpUnresolved = 0x10001;
inline constexpr uint32_t kFirstQpn = 0x100;   // QP numbers: kFirstQpn + index in the port's table
inline constexpr uint32_t kMaxAsyncEvents = 256;   // unread asynchronous events a port keeps
inline constexpr uint32_t kFirstSrqn = 0x10;       // SRQ numbers: kFirstSrqn + index in the port's list
inline constexpr uint32_t kAckReqInterval = 32; // AckReq at least every this many packets of a message
// Packets sent and not yet acknowledged, at most: a burst the peer's receive ring can take
// (rxe keeps 128 too). Without a bound a 1 MiB message overruns a NIC's ring at every try.
inline constexpr int32_t kMaxUnackedPsns = 128;

class PortImpl;
class QpImpl;

// WRs answered by the responder's data (READ responses, atomic ACKs), counted against
// max_rd_atomic and held back by a fence.
constexpr bool is_atomic_wr(WrOpcode op) noexcept {
    return op == WrOpcode::atomic_cmp_and_swp || op == WrOpcode::atomic_fetch_and_add ||
           op == WrOpcode::masked_atomic_cmp_and_swp || op == WrOpcode::masked_atomic_fetch_and_add;
}
constexpr bool is_read_or_atomic(WrOpcode op) noexcept { return op == WrOpcode::rdma_read || is_atomic_wr(op); }
// Memory-management WRs: they act on the MR table and send nothing (memory_ops.cpp).
constexpr bool is_memory_wr(WrOpcode op) noexcept {
    return op == WrOpcode::local_inv || op == WrOpcode::bind_mw || op == WrOpcode::reg_mr;
}


// Objects of a port's list not destroyed.
template <class List>
uint32_t live(const List& list) noexcept {
    uint32_t n = 0;
    for (auto& x : list) n += !x->destroyed;
    return n;
}
// Whether `x` is a live object of a port's list: a handle the application got from this port.
template <class List, class T>
bool owns(const List& list, const T* x) noexcept {
    return x && std::any_of(list.begin(), list.end(), [&](auto& o) { return o.get() == x && !o->destroyed; });
}

class CqImpl final : public Cq {
public:
    CqImpl(PortImpl& port, uint32_t capacity);
    Result<void> init();

    int poll(std::span<Wc> out) noexcept override;
    Result<void> arm(bool solicited_only) override;
    int channel_fd() const noexcept override { return channel_.fd(); }
    uint64_t take_events() noexcept override;
    uint64_t overruns() const noexcept override { return overruns_; }
    void set_ignore_overrun(bool on) noexcept override { ignore_overrun_ = on; }
    void set_notify_hook(void (*hook)(void*), void* ctx) noexcept override;
    Result<uint32_t> resize(uint32_t cqe) override;
    Result<void> destroy() override;

    // Adds a completion; false (and counted) when the queue is full: the port then raises
    // cq_error and puts the CQ's queue pairs in error (PortImpl::fail_overrun_cqs).
    bool push(const Wc& wc, bool solicited) noexcept;
    uint32_t users = 0;        // queue pairs using it
    bool destroyed = false;
    bool overran = false;      // cq_error raised: once per CQ
    bool ignore_overrun_ = false;
    uint64_t overruns_ = 0;

private:
    PortImpl& port_;
    std::vector<Wc> ring_;
    uint64_t head_ = 0, tail_ = 0;
    bool solicited_only_ = false;
    Channel channel_;
};

class AhImpl final : public AddressHandle {
public:
    AhImpl(PortImpl& port, const AhAttr& a) : port_(port), attr_(a) {}
    const AhAttr& attr() const noexcept override { return attr_; }
    Result<void> destroy() override;
    bool destroyed = false;

private:
    PortImpl& port_;
    AhAttr attr_;
};

// A send WR as the requester keeps it until it completes.
struct SendWqe {
    SendWr wr;
    uint32_t seg0 = 0, nseg = 0;   // its segments in QpImpl::sq_segs_
    uint32_t length = 0;
    uint32_t first_psn = 0;        // RC: the PSNs it occupies
    uint32_t npkts = 0;
    uint32_t read_pkts = 0;        // READ: responses received in order
    bool started = false;
    bool done = false;
    bool signaled = false;
    WcStatus status = WcStatus::success;
    uint32_t vendor_err = 0;
};

class XrcdImpl final : public XrcDomain {
public:
    explicit XrcdImpl(PortImpl& port) : port_(port) {}
    Result<void> destroy() override;
    uint32_t users = 0;   // XRC SRQs and receive queue pairs in it
    bool destroyed = false;

private:
    PortImpl& port_;
};

class SrqImpl final : public Srq {
public:
    SrqImpl(PortImpl& port, const SrqAttr& a, uint32_t srqn) : srqn(srqn), port_(port), limit_(a.srq_limit) {
        rq.init(a.max_wr, a.max_sge);
    }
    PostResult post_recv(std::span<const RecvWr> wrs) noexcept override;
    Result<void> modify(const SrqAttr& attr, uint32_t mask) override;
    SrqAttr query() const override;
    uint32_t srq_num() const noexcept override { return srqn; }
    Result<void> destroy() override;
    const uint32_t srqn;
    XrcdImpl* xrcd = nullptr;   // an XRC SRQ: its domain and the CQ its receives complete on
    CqImpl* cq = nullptr;

    // A queue pair took a WR: the limit event when fewer than the limit stay posted.
    void taken() noexcept;
    RecvQueue rq;
    uint32_t users = 0;   // queue pairs using it
    bool destroyed = false;

private:
    PortImpl& port_;
    uint32_t limit_ = 0;
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

class QpImpl final : public Qp {
public:
    QpImpl(PortImpl& port, uint32_t qpn, const QpInitAttr& a);
    Result<void> init();

    Result<void> modify(const QpAttr& attr, uint32_t mask) override;
    QpAttr query() const override;
    PostResult post_send(std::span<const SendWr> wrs) noexcept override;
    PostResult post_recv(std::span<const RecvWr> wrs) noexcept override;
    uint32_t qp_num() const noexcept override { return qpn_; }
    QpType type() const noexcept override { return type_; }
    QpState state() const noexcept override { return state_; }
    Result<uint32_t> bind_mw(uint32_t mw_key, const MwBindInfo& info, uint64_t wr_id, uint32_t send_flags) override;
    Result<void> attach_mcast(const Gid& gid, uint16_t lid) override;
    Result<void> detach_mcast(const Gid& gid, uint16_t lid) override;
    Result<void> destroy() override;
    bool blocks_self_mcast() const noexcept { return create_flags_ & qp_create_block_self_mcast_lb; }
    bool is_xrc() const noexcept { return type_ == QpType::xrc_send || type_ == QpType::xrc_recv; }
    // RC, UC and both XRC ends: connected to one peer, PSN-ordered.
    bool connected() const noexcept { return type_ != QpType::ud; }
    // ... and acknowledged, retransmitted: all of them but UC.
    bool reliable() const noexcept { return connected() && type_ != QpType::uc; }

    // Called by the port.
    void on_packet(const Packet& p) noexcept;
    void pump() noexcept;                  // sends what is waiting, as tx buffers allow
    void on_timer(uint64_t now) noexcept;  // retransmission and RNR deadlines
    uint64_t deadline() const noexcept;    // the next one, 0 for none
    void on_arp_change() noexcept;
    bool destroyed = false;
    bool in_ready = false;   // on the port's list of queue pairs with something to send

private:
    friend class PortImpl;
    // qp_state.cpp
    Result<void> check_modify(const QpAttr& a, uint32_t mask) const;
    void to_error() noexcept;
    void flush() noexcept;
    // requester.cpp
    PostResult post_send_one(const SendWr& wr) noexcept;
    SendWqe& new_wqe(const SendWr& wr) noexcept;
    bool resolve_peer() noexcept;
    bool send_rc_packet(SendWqe& w) noexcept;
    bool send_ud_packet(SendWqe& w) noexcept;
    void gather(const SendWqe& w, uint32_t offset, uint8_t* to, uint32_t len) const noexcept;
    void fill_common(PacketHeader& h) const noexcept;
    void arm_retry(uint64_t now) noexcept;
    // memory_ops.cpp
    PostResult post_memory_wr(const SendWr& wr, bool type1_bind) noexcept;
    void execute_memory_wr(SendWqe& w, const SendWr& wr, bool type1_bind) noexcept;
    void fast_register(SendWqe& w, const SendWr& wr) noexcept;
    // completer.cpp
    void on_response(const Packet& p) noexcept;
    void on_aeth(const Packet& p) noexcept;
    void on_read_response(const Packet& p) noexcept;
    void on_atomic_ack(const Packet& p) noexcept;
    bool complete_through(uint32_t psn) noexcept;
    void retry_from(uint32_t psn, bool count) noexcept;
    void retry_on_response(uint32_t psn) noexcept;
    void fail_head(WcStatus st, uint32_t vendor_err) noexcept;
    void retire() noexcept;
    void complete_send(const SendWqe& w) noexcept;
    // responder.cpp
    void on_request(const Packet& p) noexcept;
    void on_duplicate(const Packet& p) noexcept;
    bool uc_in_sequence(const Packet& p) noexcept;   // UC: whether the packet goes on (else dropped)
    void reject(const Packet& p, uint8_t syndrome) noexcept;   // RC: NAK and error; UC: drop the message
    void no_receive(const Packet& p) noexcept;                 // RC: RNR NAK; UC: drop the message
    void uc_drop() noexcept;
    void on_ud_send(const Packet& p) noexcept;
    void complete_recv(WcStatus st, WcOpcode op, uint32_t byte_len, uint32_t flags, uint32_t imm, uint32_t src_qp,
                       bool se) noexcept;
    void respond_error(const Packet& p, uint8_t syndrome) noexcept;
    void respond_error(uint32_t psn, uint8_t syndrome) noexcept;
    void recv_key_revoked(const Packet& p) noexcept;
    bool send_ack(uint8_t syndrome, uint32_t psn) noexcept;
    bool send_atomic_ack(const Resource& r) noexcept;
    bool send_read_responses() noexcept;   // then a pending ACK that waited behind them
    bool send_pending_ack() noexcept;      // the ACK that waited (ack_pending_); false: still no buffer
    bool write_ack() noexcept;
    Resource* new_resource() noexcept;
    void ready() noexcept;

    PortImpl& port_;
    const QpType type_;
    const uint32_t qpn_;
    CqImpl* const scq_;
    CqImpl* const rcq_;
    const QpCapsRdma cap_;
    const bool sq_sig_all_;
    const uint32_t create_flags_;
    QpState state_ = QpState::reset;
    QpAttr attr_;
    uint32_t mtu_ = 1024;

    // The peer of an RC QP.
    uint32_t peer_ip_ = 0;
    uint8_t peer_mac_[6] = {};
    bool peer_known_ = false;
    uint16_t src_port_ = 0;

    // Requester: sq_[head, next) sent and waiting for acknowledgement, [next, tail) waiting to send.
    std::vector<SendWqe> sq_;
    std::vector<Segment> sq_segs_;
    std::vector<uint8_t> inline_;
    uint32_t sq_mask_ = 0, sq_head_ = 0, sq_next_ = 0, sq_tail_ = 0;
    uint32_t next_psn_ = 0;       // of the next packet to send
    uint32_t una_ = 0;            // the oldest PSN not acknowledged
    void acked_through(uint32_t psn) noexcept;   // una_ moves past `psn`
    // The end of the WRs with packets on the wire: sq_next_, or one past it while the WR there
    // is part sent (a long READ goes out a window of responses at a time).
    uint32_t sent_end() const noexcept {
        return sq_next_ != sq_tail_ && sq_[sq_next_ & sq_mask_].started ? sq_next_ + 1 : sq_next_;
    }
    uint32_t rd_atomic_ = 0;      // READs and atomics started and not completed
    uint32_t pkts_unacked_ = 0;   // since the last AckReq
    uint64_t retry_deadline_ = 0; // 0: timer off
    uint64_t rnr_deadline_ = 0;   // 0: not waiting for an RNR timer
    uint32_t rnr_psn_ = 0;
    uint8_t retries_left_ = 7, rnr_left_ = 7;
    bool retry_started_ = false;  // a retry a response called for is under way (retry_on_response)
    bool waiting_arp_ = false;

    // Responder. rq_ is own_rq_ or the SRQ's; cur_recv_ the WR the message in progress fills.
    // An XRC receive QP takes srq_ from each message's XRCETH (select_xrc_srq).
    SrqImpl* srq_;
    XrcdImpl* const xrcd_;
    bool select_xrc_srq(const Packet& p) noexcept;
    CqImpl* recv_cq() const noexcept { return type_ == QpType::xrc_recv ? srq_->cq : rcq_; }
    RecvQueue own_rq_;
    RecvQueue* rq_ = nullptr;
    uint32_t cur_recv_ = RecvQueue::kNone;
    bool take_recv() noexcept;   // cur_recv_ from rq_; false when none is posted
    void return_recv() noexcept; // cur_recv_ back to the SRQ's head, unused (reset, destroy)
    void recv_error(uint64_t wr_id, WcStatus st) noexcept;   // a receive completion in error
    bool last_wqe_raised_ = false;
    bool comm_est_raised_ = false;
    void raise_event(AsyncEventType type) noexcept;   // an affiliated asynchronous event of this QP
    void cq_overran() noexcept;   // its CQ lost a completion: qp_fatal, and the error state
    uint32_t epsn_ = 0, msn_ = 0;
    bool nak_seq_sent_ = false;
    bool uc_discard_ = false;      // UC: dropping the rest of a message, until the next FIRST or ONLY
    bool in_send_ = false;         // a multi-packet SEND is being received into cur_recv_
    uint32_t recv_offset_ = 0;
    bool in_write_ = false;        // a multi-packet WRITE is being received
    uint32_t write_rkey_ = 0;      // where it lands: translated again for every packet, so that a
    uint64_t write_va_ = 0;        // key revoked between FIRST and LAST stops the rest
    uint32_t write_len_ = 0, write_offset_ = 0;
    std::vector<Resource> res_;
    uint32_t res_next_ = 0;
    // The resources in use: a ring of max_dest_rd_atomic of them (res_ holds the most allowed).
    uint32_t res_window() const noexcept {
        return std::max<uint32_t>(1, std::min<uint32_t>(attr_.max_dest_rd_atomic, uint32_t(res_.size())));
    }
    uint32_t res_sending_ = 0;   // resources with responses still to send (a READ being answered)
    void set_sending(Resource& r, bool on) noexcept {
        if (r.sending != on) res_sending_ += on ? 1 : uint32_t(-1);
        r.sending = on;
    }
    // An ACK or NAK that found no tx buffer, sent on the next pump.
    bool ack_pending_ = false;
    bool ack_first_ = false;       // it goes before the READ responses pending (it came before them)
    uint8_t ack_syndrome_ = 0;
    uint32_t ack_psn_ = 0;
};

class PortImpl final : public Port {
public:
    PortImpl(std::unique_ptr<RawLink> link, const PortConfig& cfg);
    ~PortImpl() override;
    Result<void> init();

    Gid gid() const noexcept override { return Gid::from_ipv4(cfg_.ipv4); }
    uint32_t active_mtu() const noexcept override { return active_mtu_; }
    dma::ProtectionDomain& pd() override { return link_->pd(); }
    Result<Cq*> create_cq(uint32_t cqe) override;
    Result<Qp*> create_qp(const QpInitAttr& attr) override;
    Result<Flow*> create_flow(Qp* qp, const FlowRule& rule) override;
    void flows_changed() noexcept;   // a flow made or destroyed: the counts steer() looks at
    Result<AddressHandle*> create_ah(const AhAttr& attr) override;
    Result<Srq*> create_srq(const SrqAttr& attr) override;
    Result<XrcDomain*> create_xrcd() override;
    Result<Srq*> create_xrc_srq(const SrqAttr& attr, XrcDomain* xrcd, Cq* cq) override;
    SrqImpl* find_srq(uint32_t srqn) noexcept;   // XRC: the SRQ a message names, null when none
    DeviceCaps query_device() const override;
    bool get_async_event(AsyncEvent& out) noexcept override;
    int async_fd() const noexcept override { return async_fd_.get(); }
    void set_async_hook(AsyncHook hook, void* ctx) noexcept override {
        Guard g(*this);
        async_hook_ = hook, async_hook_ctx_ = ctx;
    }
    int progress() noexcept override;
    Result<void> start_progress_thread(int cpu) override { return start_progress_thread(ProgressThreadOptions{.cpu = cpu}); }
    Result<void> start_progress_thread(const ProgressThreadOptions& opts) override;
    void stop_progress_thread() override;
    PortStats stats() const override;
    Result<RawQueue> raw_queue(uint32_t depth) override;
    void set_rx_drop_hook(DropHook drop, void* ctx) override { drop_ = drop; drop_ctx_ = ctx; }
    void set_tx_drop_hook(DropHook drop, void* ctx) override { tx_drop_ = drop; tx_drop_ctx_ = ctx; }

    // The lock every API call takes while the progress thread runs.
    class Guard {
    public:
        explicit Guard(PortImpl& p) : m_(p.threaded_.load(std::memory_order_acquire) ? &p.mu_ : nullptr) {
            if (m_) m_->lock();
        }
        ~Guard() {
            if (m_) m_->unlock();
        }
        Guard(const Guard&) = delete;
        Guard& operator=(const Guard&) = delete;

    private:
        std::mutex* m_;
    };

    // For the queue pairs.
    int run() noexcept;                       // progress without the lock
    uint8_t* tx_buffer() noexcept;            // a free send buffer, null when none
    void tx_queue(uint8_t* buf, uint32_t len) noexcept;
    void tx_flush() noexcept;
    void tx_release(uint8_t* buf) noexcept;   // a buffer from tx_buffer() not sent after all
    uint32_t max_frame() const noexcept { return link_->attr().mtu + wire::kEthHeader; }
    void mark_ready(QpImpl* qp) noexcept;
    void note_deadline(uint64_t when) noexcept;
    // ARP: the MAC of `ip` when known (true); starts resolving it otherwise. `failed` is set
    // when the peer did not answer.
    bool resolve(uint32_t ip, uint8_t* mac, bool& failed) noexcept;
    const uint8_t* mac() const noexcept { return link_->attr().mac; }
    uint32_t ipv4() const noexcept { return cfg_.ipv4; }
    uint8_t ttl() const noexcept { return cfg_.ttl; }
    dma::MrTable& mrs() noexcept { return link_->pd().table(); }
    RawLink& link() noexcept { return *link_; }
    int timer_fd() const noexcept { return timer_fd_.get(); }
    void arm_timer() noexcept;
    void raise(const AsyncEvent& e) noexcept;
    // A frame to the raw-packet queue pair whose flow takes it (raw_packet.cpp); false: none.
    bool steer(const uint8_t* f, uint32_t len) noexcept;
    // A CQ overran: at the end of this run() (not inside the completer or responder that
    // pushed), cq_error is raised and its queue pairs go to error (fail_overrun_cqs).
    void cq_overran(CqImpl* cq) { overran_cqs_.push_back(cq); }
    // Multicast (multicast.cpp): queue pairs in groups, the device's filter kept in step.
    Result<void> join(QpImpl* qp, uint32_t group);
    Result<void> leave(QpImpl* qp, uint32_t group);
    void leave_all(QpImpl* qp) noexcept;
    // A multicast datagram to the group's queue pairs; `sender`: the local queue pair that sent
    // it (looped back), null for one from the wire.
    void deliver_multicast(const Packet& p, const QpImpl* sender) noexcept;
    PortStats stats_;

private:
    struct ArpEntry {
        uint32_t ip = 0;
        uint8_t mac[6] = {};
        enum State : uint8_t { empty, resolving, known, failed } state = empty;
        uint32_t attempts = 0;
        uint64_t deadline = 0;
    };
    void on_frame(const uint8_t* f, uint32_t len) noexcept;
    void on_arp(const uint8_t* f, uint32_t len) noexcept;
    void wake_arp_waiters() noexcept;
    void to_raw(const uint8_t* f, uint32_t len) noexcept;
    void send_arp(uint16_t op, const uint8_t* dst_mac, uint32_t dst_ip) noexcept;
    void arp_timers(uint64_t now) noexcept;
    void run_timers(uint64_t now) noexcept;
    int poll_raw() noexcept;
    void reap_tx() noexcept;
    void on_raw_recv(const Completion& c) noexcept;
    void post_rx(uint32_t slot) noexcept;
    void flush_rx() noexcept;
    void progress_loop(ProgressThreadOptions opts) noexcept;
    void sleep_until_work() noexcept;   // the progress thread, idle: until a frame, a deadline or kick()
    void kick() noexcept;               // wakes the progress thread when it sleeps
    void wake() noexcept;               // wakes it whether it sleeps or not (its next sleep returns)
    int run_loopback() noexcept;        // frames this port sent to itself, received

    std::unique_ptr<RawLink> link_;
    PortConfig cfg_;
    uint32_t active_mtu_ = 3;
    dma::MemoryRegion mr_{};
    uint8_t* buffers_ = nullptr;
    uint32_t slot_size_ = 0;
    std::vector<uint32_t> tx_free_;     // free tx slot indices (a stack)
    std::vector<vfab::SendWr> tx_batch_;
    std::vector<Sge> tx_sges_;
    std::vector<Completion> deferred_rx_;   // received frames met while taking back send buffers
    std::vector<RecvWr> rx_batch_;
    std::vector<Sge> rx_sges_;
    std::vector<std::unique_ptr<QpImpl>> qps_;     // by index
    std::vector<std::unique_ptr<CqImpl>> cqs_;
    std::vector<std::unique_ptr<AhImpl>> ahs_;
    std::vector<std::unique_ptr<SrqImpl>> srqs_;   // SRQ number: kFirstSrqn + index
    std::vector<std::unique_ptr<XrcdImpl>> xrcds_;
    Result<SrqImpl*> new_srq(const SrqAttr& a);
    struct McastGroup {
        uint32_t ip = 0;
        std::vector<QpImpl*> qps;
    };
    std::vector<McastGroup> mcast_;
    std::vector<McastGroup>::iterator find_group(uint32_t ip) noexcept;   // mcast_.end() when none
    Result<void> update_multicast_filter(const std::vector<McastGroup>& groups);
    std::vector<AsyncEvent> events_;        // a ring of kMaxAsyncEvents
    uint32_t events_head_ = 0, events_tail_ = 0;
    vfio::UniqueFd async_fd_;               // an eventfd: readable while events wait
    AsyncHook async_hook_ = nullptr;        // set_async_hook(): events go there instead
    void* async_hook_ctx_ = nullptr;
    std::vector<QpImpl*> ready_;
    // Raw-packet queue pairs (QP number kFirstRawQpn + index) and flows (raw_packet.cpp).
    std::vector<std::unique_ptr<RawPacketQp>> raw_qps_;
    std::vector<std::unique_ptr<FlowImpl>> flows_;
    uint32_t live_flows_ = 0, sniffers_ = 0;
    Result<Qp*> create_raw_packet_qp(const QpInitAttr& a);
    void sniff(const uint8_t* f, uint32_t len) noexcept;   // a copy to each sniffer
    std::vector<CqImpl*> overran_cqs_;
    void fail_overrun_cqs() noexcept;
    // The link's state as last read (port_active / port_error when it changes) and when to
    // read it next, on the coarse clock.
    bool link_up_ = false;
    uint64_t next_link_check_ = 0;
    uint32_t runs_ = 0;
    void maybe_check_link() noexcept;
    std::unique_ptr<RawCq> app_raw_cq_;   // raw_queue(): the application's raw frames
    std::unique_ptr<RawQp> app_raw_qp_;
    std::vector<ArpEntry> arp_;
    uint64_t next_deadline_ = 0;
    uint64_t coarse_slack_ns_ = 0;   // how far CLOCK_MONOTONIC_COARSE may lag now_ns()
    vfio::UniqueFd timer_fd_;
    DropHook drop_ = nullptr, tx_drop_ = nullptr;
    void* drop_ctx_ = nullptr;
    void* tx_drop_ctx_ = nullptr;

    // Frames sent to the port's own MAC (a queue pair connected to one of the same port): the
    // tx slots, received by run() instead of going to the device.
    struct LoopFrame {
        uint32_t slot = 0, len = 0;
    };
    std::vector<LoopFrame> loopback_;

    std::mutex mu_;
    vfio::UniqueFd wake_fd_;                 // an eventfd that wakes the sleeping progress thread
    std::atomic<bool> sleeping_{false};
    uint64_t sleep_deadline_ = 0;            // the deadline the sleeping thread's timer waits for
    std::atomic<bool> threaded_{false};
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

}  // namespace vfab::rdma::detail
