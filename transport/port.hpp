// The RDMA port: one raw queue pair of a vfab device carrying RoCEv2 for the port's queue pairs
// and objects, its buffers, ARP, timers, progress and events (docs/rdma.md). Private to
// transport/: applications see include/vfab/rdma/rdma.hpp.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common.hpp"
#include "limits.hpp"
#include "objects.hpp"
#include "packet.hpp"
#include "qp.hpp"
#include "qp_numbers.hpp"
#include "qp_port.hpp"
#include "raw_packet.hpp"
#include "raw_queue.hpp"

namespace vfab::rdma::detail {

class PortImpl final : public Port {
public:
    PortImpl(std::unique_ptr<RawLink> link, const PortConfig& cfg);
    ~PortImpl() override;
    Result<void> init();

    Gid gid() const noexcept override { return Gid::from_ipv4(cfg_.ipv4); }
    uint32_t active_mtu() const noexcept override { return active_mtu_; }
    dma::ProtectionDomain& pd() override { return link_->pd(); }
    Result<Cq*> create_cq(uint32_t cqe) override;
    Result<Qp*> create_qp(const RdmaQpInitAttr& attr) override;
    Result<Qp*> create_qp1(const RdmaQpInitAttr& attr) override;
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
    void share_between_threads() noexcept override;
    PortStats stats() const override;
    Result<RawQueue> raw_queue(uint32_t depth) override;
    void set_rx_drop_hook(DropHook drop, void* ctx) override { drop_ = drop; drop_ctx_ = ctx; }
    void set_tx_drop_hook(DropHook drop, void* ctx) override { tx_drop_ = drop; tx_drop_ctx_ = ctx; }

    // The lock every API call takes while the progress thread runs or after share_between_threads().
    class Guard : public PortGuard {
    public:
        explicit Guard(PortImpl& p) : PortGuard(p.lock_) {}
    };

    // For the port's objects; a queue pair sees the part QpPort offers (qp_port.hpp).
    int run() noexcept;                       // progress without the lock
    uint8_t* tx_buffer() noexcept;            // a free send buffer, null when none
    void tx_queue(uint8_t* buf, uint32_t len) noexcept;
    void tx_flush() noexcept;
    void tx_release(uint8_t* buf) noexcept;   // a buffer from tx_buffer() not sent after all
    uint32_t max_frame() const noexcept { return link_->attr().mtu + wire::kEthHeader; }
    void mark_ready(QpImpl* qp) noexcept;
    // A CQ was armed: the program is about to wait on a completion channel, so the idle progress
    // thread sleeps on the device's interrupt rather than napping (progress_loop).
    void program_waits() noexcept;
    void note_deadline(uint64_t when) noexcept;
    // ARP: the MAC of `ip` when known (true); starts resolving it otherwise. `failed` is set
    // when the peer did not answer.
    bool resolve(uint32_t ip, uint8_t* mac, bool& failed) noexcept;
    uint32_t arp_attempts() const noexcept { return cfg_.arp_attempts; }
    bool progress_thread_runs() const noexcept { return thread_.joinable(); }
    const uint8_t* mac() const noexcept { return mac_; }
    uint32_t ipv4() const noexcept { return cfg_.ipv4; }
    uint8_t ttl() const noexcept { return cfg_.ttl; }
    dma::MrTable& mrs() noexcept { return *mrs_; }
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
    PortStats stats_;

private:
    friend class QpPort;
    // A multicast datagram to the group's queue pairs (demux.cpp); `sender`: the local queue
    // pair that sent it (looped back), null for one from the wire. False: no one took it.
    bool deliver_multicast(const Packet& p, const QpImpl* sender) noexcept;
    struct ArpEntry {
        uint32_t ip = 0;
        uint8_t mac[6] = {};
        enum State : uint8_t { empty, resolving, known, failed } state = empty;
        uint32_t attempts = 0;
        uint64_t deadline = 0;
        uint64_t used = 0;   // when it was made or a lookup last found it (arp_uses_): the oldest known one makes room
    };
    void on_frame(const uint8_t* f, uint32_t len) noexcept;   // demux.cpp
    void on_arp(const uint8_t* f, uint32_t len) noexcept;
    void wake_arp_waiters() noexcept;
    void to_raw(const uint8_t* f, uint32_t len) noexcept;
    void send_arp(uint16_t op, const uint8_t* dst_mac, uint32_t dst_ip) noexcept;
    void arp_timers(uint64_t now) noexcept;
    uint64_t arp_timeout_ns() const noexcept { return uint64_t(cfg_.arp_timeout_ms) * 1000000u; }
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
    void lock_calls() noexcept;         // every call takes the lock from now on
    void unlock_calls() noexcept;       // no call takes it from now on
    void nap() noexcept;                // the progress thread's short sleep (progress_thread.cpp)
    int run_loopback() noexcept;        // frames this port sent to itself, received

    std::unique_ptr<RawLink> link_;
    PortConfig cfg_;
    dma::MrTable* mrs_ = nullptr;   // the link's, looked up once: the fast path asks for every SGE
    uint8_t mac_[6] = {};            // the link's
    uint32_t active_mtu_ = 3;
    dma::MemoryRegion mr_{};
    uint8_t* buffers_ = nullptr;
    uint32_t slot_size_ = 0;
    std::vector<uint32_t> tx_free_;     // free tx slot indices (a stack)
    std::vector<vfab::SendWr> tx_batch_;   // tx_buffers WRs, made once; the first tx_count_ queued
    std::vector<Sge> tx_sges_;
    uint32_t tx_count_ = 0;
    std::vector<Completion> deferred_rx_;   // received frames met while taking back send buffers
    std::vector<Completion> raw_wc_;        // the raw queue's completions, polled into (made once)
    std::vector<RecvWr> rx_batch_;         // rx_buffers WRs, made once; the first rx_count_ to post
    std::vector<Sge> rx_sges_;
    uint32_t rx_count_ = 0;
    std::vector<std::unique_ptr<QpImpl>> qps_;     // by slot (qp_numbers.hpp)
    QpNumbers qp_numbers_{1};
    std::unique_ptr<QpImpl> qp1_;                  // the GSI queue pair (create_qp1)
    Result<void> check_qp_init(const RdmaQpInitAttr& a);   // create_qp's checks of RC, UC, UD and XRC
    // Each live RC, UC, UD or XRC queue pair, QP1 included.
    template <class F>
    void each_qp(F f) {
        for (auto& qp : qps_)
            if (qp && !qp->destroyed) f(*qp);
        if (qp1_ && !qp1_->destroyed) f(*qp1_);
    }
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
    Result<Qp*> create_raw_packet_qp(const RdmaQpInitAttr& a);
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
    uint64_t arp_uses_ = 0;
    void free_destroyed_ahs() noexcept;   // arp.cpp
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

    PortLock lock_;                          // calls take it while on (PortGuard)
    vfio::UniqueFd wake_fd_;                 // an eventfd that wakes the sleeping progress thread
    std::atomic<bool> sleeping_{false};
    uint64_t sleep_deadline_ = 0;            // the deadline the sleeping thread's timer waits for
    bool shared_ = false;                    // share_between_threads() was called
    std::atomic<bool> program_waits_{false}; // program_waits() since the thread last decided
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

// ---- QpPort: the port's calls a queue pair makes, inline ----------------------------------------

inline PortGuard QpPort::guard() const noexcept { return PortGuard(port_.lock_); }
inline uint8_t* QpPort::tx_buffer() noexcept { return port_.tx_buffer(); }
inline void QpPort::tx_queue(uint8_t* buf, uint32_t len) noexcept { port_.tx_queue(buf, len); }
inline void QpPort::tx_release(uint8_t* buf) noexcept { port_.tx_release(buf); }
inline void QpPort::tx_flush() noexcept { port_.tx_flush(); }
inline void QpPort::mark_ready(QpImpl* qp) noexcept { port_.mark_ready(qp); }
inline void QpPort::note_deadline(uint64_t when) noexcept { port_.note_deadline(when); }
inline bool QpPort::resolve(uint32_t ip, uint8_t* mac, bool& failed) noexcept { return port_.resolve(ip, mac, failed); }
inline const uint8_t* QpPort::mac() const noexcept { return port_.mac(); }
inline uint32_t QpPort::ipv4() const noexcept { return port_.ipv4(); }
inline uint8_t QpPort::ttl() const noexcept { return port_.ttl(); }
inline uint32_t QpPort::active_mtu() const noexcept { return port_.active_mtu(); }
inline dma::MrTable& QpPort::mrs() noexcept { return port_.mrs(); }
inline dma::ProtectionDomain& QpPort::pd() noexcept { return port_.pd(); }
inline void QpPort::raise(const AsyncEvent& e) noexcept { port_.raise(e); }
inline SrqImpl* QpPort::find_srq(uint32_t srqn) noexcept { return port_.find_srq(srqn); }
inline Result<void> QpPort::join(QpImpl* qp, uint32_t group) { return port_.join(qp, group); }
inline Result<void> QpPort::leave(QpImpl* qp, uint32_t group) { return port_.leave(qp, group); }
inline void QpPort::leave_all(QpImpl* qp) noexcept { port_.leave_all(qp); }
inline void QpPort::loop_multicast(const Packet& p, const QpImpl* sender) noexcept { (void)port_.deliver_multicast(p, sender); }
inline void QpPort::count_retransmit() noexcept { ++port_.stats_.retransmits; }
inline void QpPort::count_nak_sent() noexcept { ++port_.stats_.naks_sent; }

}  // namespace vfab::rdma::detail
