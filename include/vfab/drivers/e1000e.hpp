// vfab's driver for the Intel 82574L (e1000e), direct API: final classes, the fast path
// (post_send, post_recv, poll) inline in this header, no virtual calls.
//
//   auto dev = vfab::e1000e::Device::open(*vfab::PciAddress::parse("0000:03:00.0"));
//   auto* cq = *(*dev)->create_cq(512);
//   auto* qp = *(*dev)->create_qp({.send_cq = cq, .recv_cq = cq});
//   auto mr = (*dev)->pd().register_memory(buf, len, vfab::dma::Access::local_write);
//   vfab::Sge sge{addr, 2048, mr->lkey};
//   vfab::RecvWr wr{.wr_id = 1, .sg_list = &sge, .num_sge = 1};
//   qp->post_recv({&wr, 1});
//   vfab::Completion wc[32];
//   int n = cq->poll(wc);
//
// The device owns its completion queues and queue pair (as an ibv_context does): destroy()
// releases one early, and using it afterwards returns ENODEV instead of touching freed memory.
// The device quiesces the hardware (receive and transmit off, software reset) before any ring
// or registered memory is released.
//
// Thread model: one thread at a time per queue pair / completion queue (no locks on the fast
// path); control calls (create, destroy, stats, reset, events) are thread-safe.
#pragma once

#include <atomic>
#include <cerrno>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "vfab/pci_id.hpp"
#include "vfab/dma/dma_arena.hpp"
#include "vfab/dma/protection_domain.hpp"
#include "vfab/drivers/e1000e/descriptors.hpp"
#include "vfab/drivers/e1000e/regs.hpp"
#include "vfab/mmio.hpp"
#include "vfab/net/checksum.hpp"
#include "vfab/types.hpp"
#include "vfab/vfio/device.hpp"
#include "vfab/vfio/event_wait.hpp"

namespace vfab::e1000e {

// The devices this driver drives: the 82574 family it follows (datasheet §5.6). The one list:
// the driver's check, the provider registry and vfio-devctl read it.
inline constexpr PciId kPciIds[] = {
    {0x8086, 0x10d3},   // 82574L
    {0x8086, 0x10f6},   // 82574LA
};

inline constexpr uint32_t kMaxSendSge = 8;
inline constexpr uint32_t kMaxQueueDepth = 4096;
inline constexpr uint32_t kMaxCq = 4;           // MSI-X vectors 0-3; vector 4 is "other"
inline constexpr uint32_t kOtherVector = 4;
inline constexpr uint32_t kEthHeader = 14;

struct DeviceOptions {
    vfio::DeviceOptions vfio;        // IOMMU backend, a shared IOMMU context
    bool promiscuous = false;        // accept every unicast and multicast frame
    bool rx_checksum = true;         // verify IPv4/TCP/UDP checksums on receive
    int link_timeout_ms = 3000;      // how long open() waits for link (0: not at all)
    std::optional<std::array<uint8_t, 6>> mac;   // replace the address from the EEPROM
    dma::PdOptions pd;
    // The link's MTU (largest frame mtu + 14 bytes): 0 for 1500. Up to kMaxMtu: long packets
    // (RCTL.LPE) into 8 KiB receive buffers, which receives must then hold.
    uint32_t mtu = 0;
};
inline constexpr uint32_t kMaxMtu = 8000;

class Device;
class QueuePair;

class CompletionQueue final {
public:
    // Up to out.size() completions, oldest first per queue; a negative errno when the CQ was
    // destroyed (-ENODEV).
    int poll(std::span<Completion> out) noexcept;
    // Requests one notification on channel_fd() for the next completion (ibv_req_notify_cq).
    // If a completion is already waiting, the channel is signalled at once, so arm-then-wait
    // never sleeps through one.
    Result<void> arm();
    // An eventfd (the MSI-X vector's): readable after arm() once a completion arrives.
    int channel_fd() const noexcept { return efd_; }
    // Reads and clears the channel; the number of notifications since the last call.
    uint64_t take_events() noexcept;
    // EBUSY while a queue pair uses it.
    Result<void> destroy();
    bool destroyed() const noexcept { return destroyed_; }
    uint32_t capacity() const noexcept { return cqe_; }
    uint32_t vector() const noexcept { return vector_; }

private:
    friend class Device;
    friend class QueuePair;
    friend struct FastPathHarness;   // unit tests and bench/: the fast path over plain memory
    CompletionQueue() = default;
    CompletionQueue(Device& dev, uint32_t cqe, uint32_t vector, int efd)
        : dev_(&dev), cqe_(cqe), vector_(vector), efd_(efd) {}
    bool has_ready() const noexcept;
    uint32_t causes() const noexcept;

    Device* dev_ = nullptr;
    QueuePair* send_qp_ = nullptr;
    QueuePair* recv_qp_ = nullptr;
    uint32_t cqe_ = 0;
    uint32_t vector_ = 0;
    int efd_ = -1;
    bool destroyed_ = false;
    bool rx_first_ = false;   // alternates which queue poll() drains first
};

struct QpInitAttr {
    CompletionQueue* send_cq = nullptr;
    CompletionQueue* recv_cq = nullptr;
    QpCaps caps = {};
    bool sq_sig_all = false;   // every send completes (else only send_signaled ones and errors)
};

class QueuePair final {
public:
    PostResult post_send(std::span<const SendWr> wrs) noexcept;
    PostResult post_recv(std::span<const RecvWr> wrs) noexcept;

    QpState state() const noexcept { return state_.load(std::memory_order_relaxed); }
    uint32_t qp_num() const noexcept { return qp_num_; }
    const QpCaps& caps() const noexcept { return caps_; }
    uint32_t queue() const noexcept { return 0; }   // the driver uses one queue pair
    // The device's counters since this queue pair was created (it is the only one).
    QpStats stats() const noexcept;
    // Outstanding work requests, for tests and diagnostics.
    uint32_t send_outstanding() const noexcept { return sq_tail_ - sq_head_; }
    uint32_t recv_outstanding() const noexcept { return rq_tail_ - rq_head_; }
    // Stops the queues and frees the rings; outstanding WRs are dropped (as ibv_destroy_qp).
    Result<void> destroy();

private:
    friend class Device;
    friend class CompletionQueue;
    friend struct FastPathHarness;
    struct Slot {
        uint64_t wr_id;
        uint32_t byte_len;
        uint16_t ndesc;      // hardware descriptors used; 0: completed in software (an error)
        WcStatus status;
        bool signaled;
    };
    struct TxContext {
        uint8_t ipcss, ipcso, tucss, tucso;
        uint32_t tucmd;
        bool operator==(const TxContext&) const = default;
    };
    QueuePair() = default;
    QueuePair(Device& dev, const QpInitAttr& attr) : dev_(&dev), send_cq_(attr.send_cq), recv_cq_(attr.recv_cq) {}
    bool send_ready() const noexcept;
    bool recv_ready() const noexcept;
    uint32_t poll_send(Completion* out, uint32_t max) noexcept;
    uint32_t poll_recv(Completion* out, uint32_t max) noexcept;
    int prepare_checksum(const Sge& first, TxContext& ctx) noexcept;
    void write_doorbell(uint32_t reg, uint32_t value) noexcept { mmio::write<uint32_t>(bar_, reg, value); }

    Device* dev_ = nullptr;
    CompletionQueue* send_cq_ = nullptr;
    CompletionQueue* recv_cq_ = nullptr;
    volatile uint8_t* bar_ = nullptr;
    const dma::MrTable* mrs_ = nullptr;
    // Written by the control path (reset, removal, destroy) while the owning thread posts and
    // polls: atomic, read relaxed (a plain load on x86).
    std::atomic<QpState> state_{QpState::ready};
    uint32_t qp_num_ = 1;
    DeviceStats base_;   // the device's counters when the queue pair was created
    QpCaps caps_;
    bool sq_sig_all_ = false;
    uint32_t max_frame_ = 1514;
    uint32_t rx_buffer_ = reg::kRxBufferSize;   // what each receive must hold (RCTL.BSIZE)

    // Send: a ring of WR slots and the hardware ring of descriptors they use. Counters run
    // freely; a ring index is counter & mask.
    Slot* sq_ = nullptr;
    uint32_t sq_mask_ = 0, sq_head_ = 0, sq_tail_ = 0;
    TxDataDesc* tx_ = nullptr;
    uint32_t tx_mask_ = 0, tx_head_ = 0, tx_tail_ = 0;
    std::optional<TxContext> tx_ctx_;   // the checksum context the device holds

    // Receive: one descriptor per WR (or none for a refused one).
    Slot* rq_ = nullptr;
    uint32_t rq_mask_ = 0, rq_head_ = 0, rq_tail_ = 0;
    RxDesc* rx_ = nullptr;
    uint32_t rx_mask_ = 0, rx_head_ = 0, rx_tail_ = 0;

    std::vector<Slot> sq_storage_, rq_storage_;
    std::optional<dma::DmaArena> rings_;
};

class Device {
public:
    static Result<std::unique_ptr<Device>> open(const PciAddress& addr, const DeviceOptions& opts = {});
    ~Device();
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    const DeviceAttr& attr() const { return attr_; }
    LinkState link() const;
    DeviceStats stats();
    dma::ProtectionDomain& pd() { return *pd_; }

    // `cqe` is a capacity hint (completions are read from the queues' own rings, so a CQ
    // cannot overflow).
    Result<CompletionQueue*> create_cq(uint32_t cqe);
    Result<QueuePair*> create_qp(const QpInitAttr& attr);
    // ENOTSUP: one queue pair, no RSS (attr().rss_table_size is 0).
    Result<void> configure_rss(const RssConfig& cfg);
    // The multicast groups the device receives besides broadcast (its 4096-bit hash filter:
    // a frame of another group that hashes alike gets through too); kept across reset().
    Result<void> set_multicast(std::span<const MacAddress> groups);

    // Asynchronous events: event_fd() becomes readable when one may be waiting; next_event()
    // returns it (EventType::none when there is none). Put event_fd() in the application's
    // epoll set, or call next_event() now and then: a device removal waits for it.
    int event_fd() const { return events_.fd(); }
    Event next_event();

    // Resets the device. Queue pairs go to the error state (outstanding WRs complete with
    // wr_flush_error); destroy and create them again.
    Result<void> reset();

    // Provider extensions: the VFIO device and register BAR.
    vfio::Device& vfio() { return *vfio_; }
    vfio::Region& bar0() { return *bar_; }

private:
    friend class CompletionQueue;
    friend class QueuePair;
    Device(std::unique_ptr<vfio::Device> vdev, vfio::Region* bar, vfio::EventWaiter events)
        : vfio_(std::move(vdev)), bar_(bar), events_(std::move(events)) {}
    Result<void> init(const DeviceOptions& opts);
    Result<void> hw_reset();
    Result<void> hw_setup();
    Result<void> start_queues(QueuePair& qp);
    void stop_queues();
    void enter_error_state();
    void disable_bus_master();
    void program_ivar();
    void release_qp();
    void accumulate_stats();

    std::unique_ptr<vfio::Device> vfio_;
    vfio::Region* bar_;
    vfio::Interrupts* msix_ = nullptr;
    vfio::Interrupts* req_ = nullptr;
    vfio::Interrupts* err_ = nullptr;
    vfio::EventWaiter events_;
    std::unique_ptr<dma::ProtectionDomain> pd_;
    DeviceAttr attr_;
    DeviceOptions opts_;
    DeviceStats stats_;
    bool link_up_ = false;
    bool removed_ = false;
    std::vector<MacAddress> multicast_;   // set_multicast()

    std::recursive_mutex mu_;
    std::vector<std::unique_ptr<CompletionQueue>> cqs_;   // kept after destroy(): see above
    std::unique_ptr<QueuePair> qp_;
    std::vector<std::unique_ptr<QueuePair>> dead_qps_;
};

// ---- fast path -------------------------------------------------------------------------------

inline int QueuePair::prepare_checksum(const Sge& first, TxContext& ctx) noexcept {
    // The headers must be in the first SGE; the CPU reads them at their CPU address (for a
    // zero-based MR not its SGE address, an offset).
    const dma::Translation t = mrs_->translate(first.lkey, first.addr, first.length, dma::Access::none);
    if (t.status != dma::MrStatus::ok) return EINVAL;
    auto* frame = reinterpret_cast<uint8_t*>(t.host);
    net::L4Offsets o;
    if (!net::parse_l4(frame, first.length, o) || o.l4 > 255) return EINVAL;
    net::seed_for_offload(frame, o);   // what the 82574L does not compute (§7.2.5.2)
    ctx.ipcss = uint8_t(o.l3);
    ctx.ipcso = uint8_t(o.l3 + 10);
    ctx.tucss = uint8_t(o.l4);
    ctx.tucso = uint8_t(o.csum);
    ctx.tucmd = (o.tcp ? txd::TUCMD_TCP : 0) | (o.ipv4 ? txd::TUCMD_IP : 0);
    return 0;
}

inline PostResult QueuePair::post_send(std::span<const SendWr> wrs) noexcept {
    if (const QpState st = state(); st != QpState::ready) [[unlikely]]
        return {st == QpState::destroyed ? ENODEV : EIO, 0};
    const uint32_t tx_cap = tx_mask_;   // one descriptor stays empty: head == tail means idle
    const uint32_t old_tail = tx_tail_;
    uint32_t i = 0;
    int err = 0;
    for (; i < wrs.size(); ++i) {
        const SendWr& wr = wrs[i];
        if (wr.num_sge == 0 || wr.num_sge > caps_.max_send_sge || !wr.sg_list) [[unlikely]] {
            err = EINVAL;
            break;
        }
        // One pass over the SGEs: lengths for the checks below, keys translated (a bad key
        // is not refused here: it becomes an error completion, in order).
        uint64_t total = 0, iova[kMaxSendSge];
        bool zero_sge = false, bad_key = false;
        for (uint32_t s = 0; s < wr.num_sge; ++s) {
            const Sge& g = wr.sg_list[s];
            total += g.length;
            zero_sge |= g.length == 0;
            const dma::Translation t = mrs_->translate(g.lkey, g.addr, g.length, dma::Access::none);
            bad_key |= t.status != dma::MrStatus::ok;
            iova[s] = t.iova.value;
        }
        if (zero_sge || total < kEthHeader || total > max_frame_) [[unlikely]] {
            err = EINVAL;
            break;
        }
        const bool csum = wr.flags & send_ip_csum;
        const uint32_t need = wr.num_sge + (csum ? 1 : 0);
        if (sq_tail_ - sq_head_ > sq_mask_ || (tx_tail_ - tx_head_) + need > tx_cap) [[unlikely]] {
            err = ENOMEM;
            break;
        }
        Slot& slot = sq_[sq_tail_ & sq_mask_];
        slot = {wr.wr_id, uint32_t(total), 0, WcStatus::success, sq_sig_all_ || (wr.flags & send_signaled)};
        if (bad_key) [[unlikely]] {   // completes in order, touches no descriptor
            slot.status = WcStatus::local_protection_error;
            ++sq_tail_;
            continue;
        }
        uint8_t popts = 0;
        if (csum) {
            TxContext ctx;
            if (prepare_checksum(wr.sg_list[0], ctx) != 0) {
                err = EINVAL;
                break;
            }
            popts = (ctx.tucmd & txd::TUCMD_IP ? txd::POPTS_IXSM : 0) | txd::POPTS_TXSM;
            // A context descriptor only when the offsets change (§7.2.10.2: it persists).
            if (tx_ctx_ != ctx) {
                auto& c = *reinterpret_cast<TxContextDesc*>(&tx_[tx_tail_ & tx_mask_]);
                c = {ctx.ipcss, ctx.ipcso, uint16_t(ctx.tucss - 1), ctx.tucss, ctx.tucso, 0,
                     txd::CMD_DEXT | ctx.tucmd, 0, 0, 0};
                if (!(ctx.tucmd & txd::TUCMD_IP)) c.ipcse = 0;
                ++tx_tail_;
                ++slot.ndesc;
                tx_ctx_ = ctx;
            }
        }
        for (uint32_t s = 0; s < wr.num_sge; ++s) {
            const bool last = s + 1 == wr.num_sge;
            TxDataDesc& d = tx_[tx_tail_ & tx_mask_];
            d.buffer_addr = iova[s];
            d.cmd_len = wr.sg_list[s].length | txd::DTYP_DATA | txd::CMD_DEXT | txd::CMD_IFCS |
                        (last ? txd::CMD_EOP | txd::CMD_RS : 0);
            d.status = 0;
            d.popts = popts;
            d.vlan = 0;
            ++tx_tail_;
            ++slot.ndesc;
        }
        ++sq_tail_;
    }
    if (tx_tail_ != old_tail) {
        mmio::dma_wmb();   // descriptors before the tail that hands them to the device
        write_doorbell(reg::TDT, tx_tail_ & tx_mask_);
    }
    return {err, i};
}

inline PostResult QueuePair::post_recv(std::span<const RecvWr> wrs) noexcept {
    if (const QpState st = state(); st != QpState::ready) [[unlikely]]
        return {st == QpState::destroyed ? ENODEV : EIO, 0};
    const uint32_t old_tail = rx_tail_;
    uint32_t i = 0;
    int err = 0;
    for (; i < wrs.size(); ++i) {
        const RecvWr& wr = wrs[i];
        // One buffer per frame, holding all the device may write (RCTL.BSIZE).
        if (wr.num_sge != 1 || !wr.sg_list || wr.sg_list[0].length < rx_buffer_) {
            err = EINVAL;
            break;
        }
        if (rq_tail_ - rq_head_ > rq_mask_ || rx_tail_ - rx_head_ >= rx_mask_) {
            err = ENOMEM;
            break;
        }
        const Sge& g = wr.sg_list[0];
        Slot& slot = rq_[rq_tail_ & rq_mask_];
        slot = {wr.wr_id, 0, 0, WcStatus::success, true};
        const dma::Translation t = mrs_->translate(g.lkey, g.addr, rx_buffer_, dma::Access::local_write);
        if (t.status != dma::MrStatus::ok) {
            slot.status = WcStatus::local_protection_error;
        } else {
            RxDesc& d = rx_[rx_tail_ & rx_mask_];
            d.read.buffer_addr = t.iova.value;
            d.read.reserved = 0;
            ++rx_tail_;
            slot.ndesc = 1;
        }
        ++rq_tail_;
    }
    if (rx_tail_ != old_tail) {
        mmio::dma_wmb();
        write_doorbell(reg::RDT, rx_tail_ & rx_mask_);
    }
    return {err, i};
}

inline uint32_t QueuePair::poll_send(Completion* out, uint32_t max) noexcept {
    uint32_t n = 0;
    const bool flushing = state() == QpState::error;
    while (n < max && sq_head_ != sq_tail_) {
        const Slot& s = sq_[sq_head_ & sq_mask_];
        WcStatus status = s.status;
        if (s.ndesc) {
            const auto* last = reinterpret_cast<const volatile TxDataDesc*>(&tx_[(tx_head_ + s.ndesc - 1) & tx_mask_]);
            if (!(last->status & txd::STA_DD)) {
                if (!flushing) break;
                status = WcStatus::wr_flush_error;
            }
            mmio::dma_rmb();
            tx_head_ += s.ndesc;
        }
        ++sq_head_;
        if (s.signaled || status != WcStatus::success)
            out[n++] = {s.wr_id, status, WcOpcode::send, 0, s.byte_len, qp_num_, 0};
    }
    return n;
}

inline uint32_t QueuePair::poll_recv(Completion* out, uint32_t max) noexcept {
    uint32_t n = 0;
    const bool flushing = state() == QpState::error;
    while (n < max && rq_head_ != rq_tail_) {
        const Slot& s = rq_[rq_head_ & rq_mask_];
        Completion& c = out[n];
        c = {s.wr_id, s.status, WcOpcode::recv, 0, 0, qp_num_, 0};
        if (s.ndesc) {
            const auto* d = reinterpret_cast<const volatile RxDesc*>(&rx_[rx_head_ & rx_mask_]);
            const uint32_t se = d->wb.status_error;
            if (!(se & rxd::DD)) {
                if (!flushing) break;
                c.status = WcStatus::wr_flush_error;
            } else {
                mmio::dma_rmb();   // the rest of the write-back after DD
                c.byte_len = d->wb.length;
                if (!(se & rxd::EOP))
                    c.status = WcStatus::local_length_error;   // larger than one buffer
                else if (se & rxd::ERR_FRAME)
                    c.status = WcStatus::general_error;
                else if ((se & (rxd::IPCS | rxd::TCPCS)) == (rxd::IPCS | rxd::TCPCS) &&
                         !(se & (rxd::ERR_IPE | rxd::ERR_TCPE)))
                    c.flags = wc_ip_csum_ok;
            }
            ++rx_head_;
        }
        ++rq_head_;
        ++n;
    }
    return n;
}

inline bool QueuePair::send_ready() const noexcept {
    if (sq_head_ == sq_tail_) return false;
    const Slot& s = sq_[sq_head_ & sq_mask_];
    if (!s.ndesc || state() == QpState::error) return true;
    const auto* last = reinterpret_cast<const volatile TxDataDesc*>(&tx_[(tx_head_ + s.ndesc - 1) & tx_mask_]);
    return last->status & txd::STA_DD;
}

inline bool QueuePair::recv_ready() const noexcept {
    if (rq_head_ == rq_tail_) return false;
    const Slot& s = rq_[rq_head_ & rq_mask_];
    if (!s.ndesc || state() == QpState::error) return true;
    const auto* d = reinterpret_cast<const volatile RxDesc*>(&rx_[rx_head_ & rx_mask_]);
    return d->wb.status_error & rxd::DD;
}

inline int CompletionQueue::poll(std::span<Completion> out) noexcept {
    if (destroyed_) [[unlikely]]
        return -ENODEV;
    const auto max = static_cast<uint32_t>(out.size());
    uint32_t n = 0;
    // Alternate which queue goes first so neither starves the other when `out` is small.
    rx_first_ = !rx_first_;
    if (rx_first_ && recv_qp_) n += recv_qp_->poll_recv(out.data() + n, max - n);
    if (send_qp_) n += send_qp_->poll_send(out.data() + n, max - n);
    if (!rx_first_ && recv_qp_) n += recv_qp_->poll_recv(out.data() + n, max - n);
    return static_cast<int>(n);
}

inline bool CompletionQueue::has_ready() const noexcept {
    return (send_qp_ && send_qp_->send_ready()) || (recv_qp_ && recv_qp_->recv_ready());
}

// The driver's classes by role, for code written once for every driver
// (examples::BasicPort<e1000e::Driver>, the lab's MqPort).
struct Driver {
    using Device = e1000e::Device;
    using DeviceOptions = e1000e::DeviceOptions;
    using CompletionQueue = e1000e::CompletionQueue;
    using QueuePair = e1000e::QueuePair;
    using QpInitAttr = e1000e::QpInitAttr;
};

}  // namespace vfab::e1000e
