// 82574L completion queues and the queue pair: ring memory, queue start/stop (datasheet §14.6
// receive and §14.7 transmit initialization), interrupt arming.
#include <bit>
#include <cerrno>
#include <chrono>
#include <thread>

#include <unistd.h>

#include "vfab/drivers/e1000e.hpp"
#include "vfab/vfio/event_wait.hpp"

namespace vfab::e1000e {
namespace {

constexpr uint32_t kMinRing = 8;             // RDLEN/TDLEN are multiples of 128 bytes
constexpr uint32_t kMaxTxRing = 1u << 15;

uint32_t ring_size(uint32_t entries) { return std::bit_ceil(std::max(entries, kMinRing)); }

}  // namespace

// ---- completion queues -----------------------------------------------------------------------

Result<CompletionQueue*> Device::create_cq(uint32_t cqe) {
    std::lock_guard lock(mu_);
    if (cqe == 0 || cqe > 2 * kMaxQueueDepth)
        return Error{EINVAL, str_cat("create_cq(", cqe, "): the capacity must be 1 to ", 2 * kMaxQueueDepth)};
    bool used[kMaxCq] = {};
    for (auto& cq : cqs_)
        if (!cq->destroyed_) used[cq->vector_] = true;
    uint32_t vector = 0;
    while (vector < kMaxCq && used[vector]) ++vector;
    if (vector == kMaxCq)
        return Error{ENOSPC, str_cat(attr_.address.to_string(), ": all ", kMaxCq,
                                     " completion queues are in use (one MSI-X vector each); destroy one first")};
    const int efd = msix_->eventfd(vector);
    vfio::drain_eventfd(efd);
    cqs_.push_back(std::unique_ptr<CompletionQueue>(new CompletionQueue(*this, cqe, vector, efd)));
    return cqs_.back().get();
}

Result<void> CompletionQueue::destroy() {
    std::lock_guard lock(dev_->mu_);
    if (destroyed_) return Error{ENODEV, "this completion queue was already destroyed"};
    if (send_qp_ || recv_qp_)
        return Error{EBUSY, "the completion queue is still used by a queue pair: destroy the queue pair first"};
    destroyed_ = true;
    return {};
}

uint32_t CompletionQueue::causes() const noexcept {
    return (send_qp_ ? reg::ICR_TXQ0 : 0) | (recv_qp_ ? reg::ICR_RXQ0 : 0);
}

Result<void> CompletionQueue::arm() {
    if (destroyed_) return Error{ENODEV, "arm(): the completion queue was destroyed"};
    std::lock_guard lock(dev_->mu_);
    const uint32_t c = causes();
    vfio::drain_eventfd(efd_);   // notifications from before this arm() are stale
    if (c && !dev_->removed_) {
        // Forget causes already handled, then unmask: EIAC masks them again when the vector
        // fires, so one arm() gives one notification.
        dev_->bar_->write32(reg::ICR, c);
        dev_->bar_->write32(reg::IMS, c);
    }
    // A completion that landed before the unmask raised no interrupt: signal it ourselves.
    if (has_ready() || (send_qp_ && send_qp_->state() != QpState::ready) || (recv_qp_ && recv_qp_->state() != QpState::ready)) {
        uint64_t one = 1;
        (void)!::write(efd_, &one, sizeof one);
    }
    return {};
}

uint64_t CompletionQueue::take_events() noexcept { return vfio::drain_eventfd(efd_); }

// ---- the queue pair --------------------------------------------------------------------------

Result<QueuePair*> Device::create_qp(const QpInitAttr& attr) {
    std::lock_guard lock(mu_);
    const std::string where = attr_.address.to_string();
    if (removed_) return Error{ENODEV, str_cat(where, ": the device was removed; close it")};
    for (CompletionQueue* cq : {attr.send_cq, attr.recv_cq}) {
        if (!cq) return Error{EINVAL, "create_qp: send_cq and recv_cq are required (they may be the same)"};
        if (cq->dev_ != this) return Error{EINVAL, "create_qp: the completion queue belongs to another device"};
        if (cq->destroyed_) return Error{ENODEV, "create_qp: the completion queue was destroyed"};
    }
    if (qp_)
        return Error{EBUSY, str_cat(where, ": the 82574L driver offers one queue pair and it exists; destroy it first")};
    const QpCaps& want = attr.caps;
    if (want.max_send_wr == 0 || want.max_send_wr > kMaxQueueDepth || want.max_recv_wr == 0 ||
        want.max_recv_wr > kMaxQueueDepth)
        return Error{EINVAL, str_cat("create_qp: max_send_wr and max_recv_wr must be 1 to ", kMaxQueueDepth)};
    if (want.max_send_sge > kMaxSendSge || want.max_recv_sge > 1)
        return Error{EINVAL, str_cat("create_qp: the 82574L takes up to ", kMaxSendSge,
                                     " SGEs per send and 1 per receive (one buffer of ", attr_.recv_buffer_size,
                                     " bytes per frame)")};

    std::unique_ptr<QueuePair> qp(new QueuePair(*this, attr));
    qp->sq_sig_all_ = attr.sq_sig_all;
    qp->max_frame_ = attr_.mtu + kEthHeader;
    qp->rx_buffer_ = attr_.recv_buffer_size;
    const uint32_t sq = ring_size(want.max_send_wr);
    const uint32_t sge = std::max(want.max_send_sge, 1u);
    const uint32_t tx = std::min(ring_size(sq * (sge + 1) + 1), kMaxTxRing);   // + a context each
    const uint32_t rx = ring_size(want.max_recv_wr + 1);
    qp->caps_ = {sq, rx - 1, sge, 1};

    auto rings = dma::DmaArena::create(vfio_->iommu_shared(), size_t(tx) * sizeof(TxDataDesc) + size_t(rx) * sizeof(RxDesc),
                                       dma::near_device(attr_.address));
    if (!rings) return Error{rings.error().code, str_cat("create_qp: descriptor rings: ", rings.error().message)};
    qp->rings_.emplace(std::move(*rings));
    qp->rx_ = reinterpret_cast<RxDesc*>(qp->rings_->data());
    qp->tx_ = reinterpret_cast<TxDataDesc*>(qp->rings_->data() + size_t(rx) * sizeof(RxDesc));
    qp->rx_mask_ = rx - 1;
    qp->tx_mask_ = tx - 1;
    qp->sq_storage_.resize(sq);
    qp->rq_storage_.resize(rx);
    qp->sq_ = qp->sq_storage_.data();
    qp->rq_ = qp->rq_storage_.data();
    qp->sq_mask_ = sq - 1;
    qp->rq_mask_ = rx - 1;
    qp->bar_ = bar_->base();
    qp->mrs_ = &pd_->table();

    accumulate_stats();
    qp->base_ = stats_;
    qp_ = std::move(qp);
    attr.send_cq->send_qp_ = qp_.get();
    attr.recv_cq->recv_qp_ = qp_.get();
    if (auto r = start_queues(*qp_); !r) {
        release_qp();
        return r.take_error();
    }
    return qp_.get();
}

// §14.6 / §14.7: ring base and length, head = tail = 0, then enable.
Result<void> Device::start_queues(QueuePair& qp) {
    const uint64_t rx_iova = qp.rings_->iova_of(qp.rx_).value;
    const uint64_t tx_iova = qp.rings_->iova_of(qp.tx_).value;
    bar_->write32(reg::RDBAL, uint32_t(rx_iova));
    bar_->write32(reg::RDBAH, uint32_t(rx_iova >> 32));
    bar_->write32(reg::RDLEN, (qp.rx_mask_ + 1) * sizeof(RxDesc));
    bar_->write32(reg::RDH, 0);
    bar_->write32(reg::RDT, 0);
    bar_->write32(reg::TDBAL, uint32_t(tx_iova));
    bar_->write32(reg::TDBAH, uint32_t(tx_iova >> 32));
    bar_->write32(reg::TDLEN, (qp.tx_mask_ + 1) * sizeof(TxDataDesc));
    bar_->write32(reg::TDH, 0);
    bar_->write32(reg::TDT, 0);
    program_ivar();
    bar_->write32(reg::TIPG, reg::kTipgCopper);
    bar_->write32(reg::TCTL, reg::TCTL_EN | reg::TCTL_PSP | 0x0fu << reg::TCTL_CT_SHIFT | 0x3fu << reg::TCTL_COLD_SHIFT);
    uint32_t rctl = reg::RCTL_EN | reg::RCTL_BAM | reg::RCTL_SECRC |
                    (attr_.mtu > 1500 ? reg::RCTL_LPE | reg::RCTL_BSIZE_8192 : reg::RCTL_BSIZE_2048);
    if (opts_.promiscuous) rctl |= reg::RCTL_UPE | reg::RCTL_MPE;
    bar_->write32(reg::RCTL, rctl);
    if (bar_->read32(reg::RDLEN) != (qp.rx_mask_ + 1) * sizeof(RxDesc))
        return Error{EIO, str_cat(attr_.address.to_string(), ": the receive ring registers did not take their values")};
    return {};
}

// Receive and transmit off; the rings stay where they are until the QP's memory goes, and the
// device no longer fetches from or writes to them.
void Device::stop_queues() {
    if (removed_) return;
    bar_->write32(reg::RCTL, 0);
    bar_->write32(reg::TCTL, reg::TCTL_PSP);
    bar_->write32(reg::IMC, reg::ICR_RXQ0 | reg::ICR_TXQ0);
    (void)bar_->read32(reg::STATUS);
    // Let a frame being written land before the caller frees anything (§14.6: "allow the
    // receive unit to complete a packet in progress").
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    bar_->write32(reg::RDLEN, 0);
    bar_->write32(reg::TDLEN, 0);
    for (uint32_t r : {reg::RDBAL, reg::RDBAH, reg::RDH, reg::RDT, reg::TDBAL, reg::TDBAH, reg::TDH, reg::TDT})
        bar_->write32(r, 0);
}

void Device::release_qp() {
    stop_queues();
    if (qp_->send_cq_->send_qp_ == qp_.get()) qp_->send_cq_->send_qp_ = nullptr;
    if (qp_->recv_cq_->recv_qp_ == qp_.get()) qp_->recv_cq_->recv_qp_ = nullptr;
    qp_->state_ = QpState::destroyed;
    // The object stays (a late post returns ENODEV); its rings and slots go now.
    qp_->rings_.reset();
    qp_->sq_storage_ = {};
    qp_->rq_storage_ = {};
    qp_->sq_head_ = qp_->sq_tail_ = qp_->rq_head_ = qp_->rq_tail_ = 0;
    dead_qps_.push_back(std::move(qp_));
    program_ivar();
}

Result<void> QueuePair::destroy() {
    std::lock_guard lock(dev_->mu_);
    if (state_ == QpState::destroyed) return Error{ENODEV, "this queue pair was already destroyed"};
    dev_->release_qp();
    return {};
}

QpStats QueuePair::stats() const noexcept {
    const DeviceStats now = dev_->stats();
    return {now.tx_packets - base_.tx_packets, now.tx_bytes - base_.tx_bytes, now.rx_packets - base_.rx_packets,
            now.rx_bytes - base_.rx_bytes};
}

Result<void> Device::configure_rss(const RssConfig&) {
    return Error{ENOTSUP, str_cat(attr_.address.to_string(), ": the 82574L driver uses one queue pair and offers no RSS "
                                                             "(attr().rss_table_size is 0)")};
}

}  // namespace vfab::e1000e
