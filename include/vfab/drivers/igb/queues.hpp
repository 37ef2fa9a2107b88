// The 82576's queue pairs and completion queues (igb family, datasheet §7.1 receive, §7.2
// transmit, advanced descriptors), shared by the physical function's driver (igb.hpp) and the
// virtual function's (igbvf.hpp), whose queues have the same layout. The fast path is inline:
// no virtual call, no allocation, errors are return codes.
//
// Thread model: one thread at a time per queue pair / completion queue (no locks on the fast
// path; different queue pairs on different threads need nothing); control calls are
// thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cerrno>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "vfab/dma/dma_arena.hpp"
#include "vfab/dma/protection_domain.hpp"
#include "vfab/drivers/igb/descriptors.hpp"
#include "vfab/drivers/igb/regs.hpp"
#include "vfab/mmio.hpp"
#include "vfab/net/checksum.hpp"
#include "vfab/types.hpp"
#include "vfab/vfio/device.hpp"

namespace vfab::igb {

inline constexpr uint32_t kMaxSendSge = 8;
inline constexpr uint32_t kMaxQueueDepth = 4096;
inline constexpr uint32_t kEthHeader = 14;

class QueueSet;
class QueuePair;

class CompletionQueue final {
public:
    int poll(std::span<Completion> out) noexcept;
    // One notification on channel_fd() for the next completion (EIAM masks the vector again
    // when it fires); signalled at once when a completion is already waiting.
    Result<void> arm();
    int channel_fd() const noexcept { return efd_; }
    uint64_t take_events() noexcept;
    Result<void> destroy();
    bool destroyed() const noexcept { return destroyed_; }
    uint32_t capacity() const noexcept { return cqe_; }
    uint32_t vector() const noexcept { return vector_; }

private:
    friend class QueueSet;
    friend class QueuePair;
    friend struct FastPathHarness;
    CompletionQueue() = default;
    CompletionQueue(QueueSet& dev, uint32_t cqe, uint32_t vector, int efd)
        : dev_(&dev), cqe_(cqe), vector_(vector), efd_(efd) {}
    bool has_ready() const noexcept;

    QueueSet* dev_ = nullptr;
    QueuePair* send_qp_ = nullptr;
    QueuePair* recv_qp_ = nullptr;
    uint32_t cqe_ = 0;
    uint32_t vector_ = 0;
    int efd_ = -1;
    bool destroyed_ = false;
    bool rx_first_ = false;
};

struct QpInitAttr {
    CompletionQueue* send_cq = nullptr;
    CompletionQueue* recv_cq = nullptr;
    QpCaps caps = {};
    bool sq_sig_all = false;
};

class QueuePair final {
public:
    PostResult post_send(std::span<const SendWr> wrs) noexcept;
    PostResult post_recv(std::span<const RecvWr> wrs) noexcept;

    QpState state() const noexcept { return state_.load(std::memory_order_relaxed); }
    uint32_t qp_num() const noexcept { return queue_ + 1; }
    const QpCaps& caps() const noexcept { return caps_; }
    // The hardware queue pair (receive queue and transmit queue n); RssConfig::table names it.
    uint32_t queue() const noexcept { return queue_; }
    QpStats stats() const noexcept {
        return {tx_packets_.get(), tx_bytes_.get(), rx_packets_.get(), rx_bytes_.get()};
    }
    uint32_t send_outstanding() const noexcept { return sq_tail_ - sq_head_; }
    uint32_t recv_outstanding() const noexcept { return rq_tail_ - rq_head_; }
    Result<void> destroy();

private:
    friend class QueueSet;
    friend class CompletionQueue;
    friend struct FastPathHarness;
    struct Slot {
        uint64_t wr_id;
        uint32_t byte_len;
        uint16_t ndesc;   // hardware descriptors used; 0: completed in software (an error)
        WcStatus status;
        bool signaled;
    };
    struct TxContext {   // what the device's context slot 0 holds (§7.2.2.2)
        uint32_t vlan_macip_lens, type_tucmd;
        bool operator==(const TxContext&) const = default;
    };
    // Counters written by the queue pair's thread, read by stats() from any thread.
    struct Counter {
        std::atomic<uint64_t> v{0};
        void add(uint64_t n) noexcept { v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
        uint64_t get() const noexcept { return v.load(std::memory_order_relaxed); }
    };
    QueuePair() = default;
    QueuePair(QueueSet& dev, const QpInitAttr& attr, uint32_t queue)
        : dev_(&dev), send_cq_(attr.send_cq), recv_cq_(attr.recv_cq), queue_(queue) {}
    bool send_ready() const noexcept;
    bool recv_ready() const noexcept;
    uint32_t poll_send(Completion* out, uint32_t max) noexcept;
    uint32_t poll_recv(Completion* out, uint32_t max) noexcept;
    int prepare_checksum(const Sge& first, TxContext& ctx, uint32_t& popts) noexcept;

    QueueSet* dev_ = nullptr;
    CompletionQueue* send_cq_ = nullptr;
    CompletionQueue* recv_cq_ = nullptr;
    volatile uint8_t* bar_ = nullptr;
    const dma::MrTable* mrs_ = nullptr;
    std::atomic<QpState> state_{QpState::ready};
    uint32_t queue_ = 0;
    uint32_t tdt_ = 0, rdt_ = 0;   // this queue pair's tail registers
    QpCaps caps_;
    bool sq_sig_all_ = false;
    uint32_t max_frame_ = 1514;
    uint32_t rx_buffer_ = reg::kRxBufferSize;   // what each receive must hold (SRRCTL.BSIZEPACKET)

    Slot* sq_ = nullptr;
    uint32_t sq_mask_ = 0, sq_head_ = 0, sq_tail_ = 0;
    TxDesc* tx_ = nullptr;
    uint32_t tx_mask_ = 0, tx_head_ = 0, tx_tail_ = 0;
    std::optional<TxContext> tx_ctx_;

    Slot* rq_ = nullptr;
    uint32_t rq_mask_ = 0, rq_head_ = 0, rq_tail_ = 0;
    RxDesc* rx_ = nullptr;
    uint32_t rx_mask_ = 0, rx_head_ = 0, rx_tail_ = 0;

    Counter tx_packets_, tx_bytes_, rx_packets_, rx_bytes_;
    std::vector<Slot> sq_storage_, rq_storage_;
    std::optional<dma::DmaArena> rings_;
};

// Where a device's queue registers are: the PF's at 0xc000 (receive) and 0xe000 (transmit),
// 0x40 apart (§8.10); a VF's at the legacy 0x2800 and 0x3800, 0x100 apart (§8.27.3).
struct QueueLayout {
    uint32_t rx_base = 0xc000, tx_base = 0xe000, stride = 0x40;
    constexpr uint32_t rx(uint32_t q, uint32_t reg) const { return rx_base + stride * q + reg; }
    constexpr uint32_t tx(uint32_t q, uint32_t reg) const { return tx_base + stride * q + reg; }
};

// What the 82576's physical function (igb::Device) and its virtual functions (igbvf::Device)
// share: queue pairs on the same register layout and descriptors, completion queues on MSI-X
// vectors, and a protection domain. Each device adds its own bring-up, link and events.
class QueueSet {
public:
    QueueSet(const QueueSet&) = delete;
    QueueSet& operator=(const QueueSet&) = delete;

    const DeviceAttr& attr() const { return attr_; }
    dma::ProtectionDomain& pd() { return *pd_; }
    vfio::Device& vfio() { return *vfio_; }
    vfio::Region& bar0() { return *bar_; }

    // One MSI-X vector per completion queue (attr().max_cq of them).
    Result<CompletionQueue*> create_cq(uint32_t cqe);
    // Up to attr().max_qp queue pairs, the lowest free queue index first; each starts at once
    // (the others keep running). A completion queue takes the sends of one queue pair and the
    // receives of one.
    Result<QueuePair*> create_qp(const QpInitAttr& attr);

protected:
    friend class CompletionQueue;
    friend class QueuePair;
    QueueSet(std::unique_ptr<vfio::Device> vdev, vfio::Region* bar) : vfio_(std::move(vdev)), bar_(bar) {}
    ~QueueSet() = default;
    Result<void> start_queues(QueuePair& qp);
    void stop_queues(uint32_t q);
    // Every queue pair stops and goes to the error state (WRs flush); sleepers on channels wake.
    void enter_error_state();
    void release_qp(QueuePair& qp);
    // A device's destructor: stop_all_queues() first (the device stops DMA to the rings and
    // buffers), then its own shutdown, then release_all() frees the queue pairs, completion
    // queues and the protection domain.
    void stop_all_queues();
    void release_all();

    std::unique_ptr<vfio::Device> vfio_;
    vfio::Region* bar_;
    vfio::Interrupts* msix_ = nullptr;
    std::unique_ptr<dma::ProtectionDomain> pd_;
    DeviceAttr attr_;
    uint32_t cq_vectors_ = 0;   // completion queues take MSI-X vectors 0 .. cq_vectors_ - 1
    QueueLayout layout_;
    bool removed_ = false;
    std::recursive_mutex mu_;
    std::vector<std::unique_ptr<CompletionQueue>> cqs_;
    std::vector<std::unique_ptr<QueuePair>> qps_;   // by queue index; null when free
    std::vector<std::unique_ptr<QueuePair>> dead_qps_;
};

// ---- fast path -------------------------------------------------------------------------------

inline int QueuePair::prepare_checksum(const Sge& first, TxContext& ctx, uint32_t& popts) noexcept {
    const dma::MrEntry* mr = mrs_->find(first.lkey);
    if (!mr) return EINVAL;
    auto* frame = reinterpret_cast<uint8_t*>(mr->zero_based() ? mr->addr + first.addr : first.addr);
    net::L4Offsets o;
    if (!net::parse_l4(frame, first.length, o) || o.l3 > 127 || o.l4 - o.l3 > 511) return EINVAL;
    net::seed_for_offload(frame, o);
    ctx.vlan_macip_lens = uint32_t(o.l4 - o.l3) | uint32_t(o.l3) << txd::MACLEN_SHIFT;
    ctx.type_tucmd = txd::DTYP_CONTEXT | txd::CMD_DEXT | (o.ipv4 ? txd::TUCMD_IPV4 : 0) | (o.tcp ? txd::TUCMD_L4T_TCP : 0);
    popts = txd::POPTS_TXSM | (o.ipv4 ? txd::POPTS_IXSM : 0);
    return 0;
}

inline PostResult QueuePair::post_send(std::span<const SendWr> wrs) noexcept {
    if (const QpState st = state(); st != QpState::ready) [[unlikely]]
        return {st == QpState::destroyed ? ENODEV : EIO, 0};
    const uint32_t old_tail = tx_tail_;
    uint32_t i = 0;
    int err = 0;
    for (; i < wrs.size(); ++i) {
        const SendWr& wr = wrs[i];
        if (wr.num_sge == 0 || wr.num_sge > caps_.max_send_sge || !wr.sg_list) [[unlikely]] {
            err = EINVAL;
            break;
        }
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
        if (sq_tail_ - sq_head_ > sq_mask_ || (tx_tail_ - tx_head_) + need > tx_mask_) [[unlikely]] {
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
        uint32_t popts = 0;
        static_assert(txd::CMD_TSTAMP == uint32_t(send_timestamp) << 11);
        uint32_t tstamp = (wr.flags & send_timestamp) << 11;   // the packet's first descriptor only
        if (csum) {
            TxContext ctx;
            if (prepare_checksum(wr.sg_list[0], ctx, popts) != 0) {
                err = EINVAL;
                break;
            }
            if (tx_ctx_ != ctx) {   // the context persists in slot 0 until replaced
                auto& c = *reinterpret_cast<TxContextDesc*>(&tx_[tx_tail_ & tx_mask_]);
                c = {ctx.vlan_macip_lens, 0, ctx.type_tucmd, 0};
                ++tx_tail_;
                ++slot.ndesc;
                tx_ctx_ = ctx;
            }
        }
        for (uint32_t s = 0; s < wr.num_sge; ++s) {
            const bool last = s + 1 == wr.num_sge;
            TxDesc& d = tx_[tx_tail_ & tx_mask_];
            d.buffer_addr = iova[s];
            d.cmd_type_len = wr.sg_list[s].length | txd::DTYP_DATA | txd::CMD_DEXT | txd::CMD_IFCS |
                             (last ? txd::CMD_EOP | txd::CMD_RS : 0) | tstamp;
            tstamp = 0;
            // PAYLEN and the offload options go in the packet's first data descriptor.
            d.olinfo_status = s == 0 ? uint32_t(total) << txd::PAYLEN_SHIFT | popts : 0;
            ++tx_tail_;
            ++slot.ndesc;
        }
        ++sq_tail_;
    }
    if (tx_tail_ != old_tail) {
        mmio::dma_wmb();
        mmio::write<uint32_t>(bar_, tdt_, tx_tail_ & tx_mask_);
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
            d.read.pkt_addr = t.iova.value;
            d.read.hdr_addr = 0;
            ++rx_tail_;
            slot.ndesc = 1;
        }
        ++rq_tail_;
    }
    if (rx_tail_ != old_tail) {
        mmio::dma_wmb();
        mmio::write<uint32_t>(bar_, rdt_, rx_tail_ & rx_mask_);
    }
    return {err, i};
}

inline uint32_t QueuePair::poll_send(Completion* out, uint32_t max) noexcept {
    uint32_t n = 0, done = 0;
    uint64_t bytes = 0;
    const bool flushing = state() == QpState::error;
    while (n < max && sq_head_ != sq_tail_) {
        const Slot& s = sq_[sq_head_ & sq_mask_];
        WcStatus status = s.status;
        if (s.ndesc) {
            const auto* last = reinterpret_cast<const volatile TxDesc*>(&tx_[(tx_head_ + s.ndesc - 1) & tx_mask_]);
            if (!(last->olinfo_status & txd::STA_DD)) {
                if (!flushing) break;
                status = WcStatus::wr_flush_error;
            }
            mmio::dma_rmb();
            tx_head_ += s.ndesc;
        }
        ++sq_head_;
        if (status == WcStatus::success) ++done, bytes += s.byte_len;
        if (s.signaled || status != WcStatus::success)
            out[n++] = {s.wr_id, status, WcOpcode::send, 0, s.byte_len, queue_ + 1, 0};
    }
    if (done) tx_packets_.add(done), tx_bytes_.add(bytes);
    return n;
}

inline uint32_t QueuePair::poll_recv(Completion* out, uint32_t max) noexcept {
    uint32_t n = 0, done = 0;
    uint64_t bytes = 0;
    const bool flushing = state() == QpState::error;
    while (n < max && rq_head_ != rq_tail_) {
        const Slot& s = rq_[rq_head_ & rq_mask_];
        Completion& c = out[n];
        c = {s.wr_id, s.status, WcOpcode::recv, 0, 0, queue_ + 1, 0};
        if (s.ndesc) {
            const auto* d = reinterpret_cast<const volatile RxDesc*>(&rx_[rx_head_ & rx_mask_]);
            const uint32_t se = d->wb.status_error;
            if (!(se & rxd::DD)) {
                if (!flushing) break;
                c.status = WcStatus::wr_flush_error;
            } else {
                mmio::dma_rmb();
                c.byte_len = d->wb.length;
                if (!(se & rxd::EOP))
                    c.status = WcStatus::local_length_error;
                else if (se & rxd::ERR_FRAME)
                    c.status = WcStatus::general_error;
                else if ((se & (rxd::IPCS | rxd::L4CS)) == (rxd::IPCS | rxd::L4CS) && !(se & (rxd::ERR_IPE | rxd::ERR_L4E)))
                    c.flags = wc_ip_csum_ok;
                if (se & rxd::TS) [[unlikely]]
                    c.flags |= wc_timestamped;
                if (c.status == WcStatus::success) ++done, bytes += c.byte_len;
            }
            ++rx_head_;
        }
        ++rq_head_;
        ++n;
    }
    if (done) rx_packets_.add(done), rx_bytes_.add(bytes);
    return n;
}

inline bool QueuePair::send_ready() const noexcept {
    if (sq_head_ == sq_tail_) return false;
    const Slot& s = sq_[sq_head_ & sq_mask_];
    if (!s.ndesc || state() == QpState::error) return true;
    const auto* last = reinterpret_cast<const volatile TxDesc*>(&tx_[(tx_head_ + s.ndesc - 1) & tx_mask_]);
    return last->olinfo_status & txd::STA_DD;
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
    rx_first_ = !rx_first_;
    if (rx_first_ && recv_qp_) n += recv_qp_->poll_recv(out.data() + n, max - n);
    if (send_qp_) n += send_qp_->poll_send(out.data() + n, max - n);
    if (!rx_first_ && recv_qp_) n += recv_qp_->poll_recv(out.data() + n, max - n);
    return static_cast<int>(n);
}

inline bool CompletionQueue::has_ready() const noexcept {
    return (send_qp_ && send_qp_->send_ready()) || (recv_qp_ && recv_qp_->recv_ready());
}

}  // namespace vfab::igb
