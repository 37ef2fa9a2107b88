// 82576 completion queues and queue pairs, for the physical and the virtual functions: ring
// memory, per-queue start and stop (datasheet §4.5.9 receive and §4.5.10 transmit
// initialization), MSI-X routing (IVAR), arming.
#include <bit>
#include <cerrno>
#include <chrono>
#include <thread>

#include <unistd.h>

#include "vfab/drivers/igb/queues.hpp"
#include "vfab/vfio/event_wait.hpp"

namespace vfab::igb {
namespace {

constexpr uint32_t kMinRing = 8;   // RDLEN/TDLEN are multiples of 128 bytes
constexpr uint32_t kMaxTxRing = 1u << 15;

uint32_t ring_size(uint32_t entries) { return std::bit_ceil(std::max(entries, kMinRing)); }

bool wait_for(auto&& done) {
    for (int i = 0; i < 100; ++i) {
        if (done()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return done();
}

}  // namespace

// ---- completion queues -----------------------------------------------------------------------

Result<CompletionQueue*> QueueSet::create_cq(uint32_t cqe) {
    std::lock_guard lock(mu_);
    if (cqe == 0 || cqe > 2 * kMaxQueueDepth)
        return Error{EINVAL, str_cat("create_cq(", cqe, "): the capacity must be 1 to ", 2 * kMaxQueueDepth)};
    std::vector<bool> used(cq_vectors_, false);
    for (auto& cq : cqs_)
        if (!cq->destroyed_) used[cq->vector_] = true;
    uint32_t vector = 0;
    while (vector < cq_vectors_ && used[vector]) ++vector;
    if (vector == cq_vectors_)
        return Error{ENOSPC, str_cat(attr_.address.to_string(), ": all ", cq_vectors_,
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

Result<void> CompletionQueue::arm() {
    if (destroyed_) return Error{ENODEV, "arm(): the completion queue was destroyed"};
    std::lock_guard lock(dev_->mu_);
    vfio::drain_eventfd(efd_);   // notifications from before this arm() are stale
    // Unmask the vector; EIAM masks it again when it fires: one arm(), one notification.
    if (!dev_->removed_) dev_->bar_->write32(reg::EIMS, 1u << vector_);
    // A completion that landed before the unmask raised no interrupt: signal it ourselves.
    if (has_ready() || (send_qp_ && send_qp_->state() != QpState::ready) || (recv_qp_ && recv_qp_->state() != QpState::ready)) {
        uint64_t one = 1;
        (void)!::write(efd_, &one, sizeof one);
    }
    return {};
}

// Masks the vector again (EIAM does that on the 82576 when the vector fires; QEMU's model
// does not, so without this a disarmed queue would keep interrupting).
uint64_t CompletionQueue::take_events() noexcept {
    if (!dev_->removed_) dev_->bar_->write32(reg::EIMC, 1u << vector_);
    return vfio::drain_eventfd(efd_);
}

// ---- queue pairs -----------------------------------------------------------------------------

Result<QueuePair*> QueueSet::create_qp(const QpInitAttr& attr) {
    std::lock_guard lock(mu_);
    const std::string where = attr_.address.to_string();
    if (removed_) return Error{ENODEV, str_cat(where, ": the device was removed; close it")};
    for (CompletionQueue* cq : {attr.send_cq, attr.recv_cq}) {
        if (!cq) return Error{EINVAL, "create_qp: send_cq and recv_cq are required (they may be the same)"};
        if (cq->dev_ != this) return Error{EINVAL, "create_qp: the completion queue belongs to another device"};
        if (cq->destroyed_) return Error{ENODEV, "create_qp: the completion queue was destroyed"};
    }
    if (attr.send_cq->send_qp_ || attr.recv_cq->recv_qp_)
        return Error{EBUSY, "create_qp: a completion queue takes the sends of one queue pair and the receives of one; "
                            "create another completion queue for this queue pair"};
    uint32_t index = 0;
    while (index < qps_.size() && qps_[index]) ++index;
    if (index == qps_.size())
        return Error{EBUSY, str_cat(where, ": all ", qps_.size(), " queue pairs are in use; destroy one first")};
    const QpCaps& want = attr.caps;
    if (want.max_send_wr == 0 || want.max_send_wr > kMaxQueueDepth || want.max_recv_wr == 0 ||
        want.max_recv_wr > kMaxQueueDepth)
        return Error{EINVAL, str_cat("create_qp: max_send_wr and max_recv_wr must be 1 to ", kMaxQueueDepth)};
    if (want.max_send_sge > kMaxSendSge || want.max_recv_sge > 1)
        return Error{EINVAL, str_cat("create_qp: the 82576 takes up to ", kMaxSendSge, " SGEs per send and 1 per receive (one buffer of ",
                                     attr_.recv_buffer_size, " bytes per frame)")};

    std::unique_ptr<QueuePair> qp(new QueuePair(*this, attr, index));
    qp->sq_sig_all_ = attr.sq_sig_all;
    qp->max_frame_ = attr_.mtu + kEthHeader;
    qp->rx_buffer_ = attr_.recv_buffer_size;
    const uint32_t sq = ring_size(want.max_send_wr);
    const uint32_t sge = std::max(want.max_send_sge, 1u);
    const uint32_t tx = std::min(ring_size(sq * (sge + 1) + 1), kMaxTxRing);   // + a context each
    const uint32_t rx = ring_size(want.max_recv_wr + 1);
    qp->caps_ = {sq, rx - 1, sge, 1};
    auto rings = dma::DmaArena::create(vfio_->iommu_shared(), size_t(tx) * sizeof(TxDesc) + size_t(rx) * sizeof(RxDesc),
                                       dma::near_device(attr_.address));
    if (!rings) return Error{rings.error().code, str_cat("create_qp: descriptor rings: ", rings.error().message)};
    qp->rings_.emplace(std::move(*rings));
    qp->rx_ = reinterpret_cast<RxDesc*>(qp->rings_->data());
    qp->tx_ = reinterpret_cast<TxDesc*>(qp->rings_->data() + size_t(rx) * sizeof(RxDesc));
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
    qp->tdt_ = layout_.tx(index, reg::Q_TAIL);
    qp->rdt_ = layout_.rx(index, reg::Q_TAIL);

    qps_[index] = std::move(qp);
    QueuePair& q = *qps_[index];
    attr.send_cq->send_qp_ = &q;
    attr.recv_cq->recv_qp_ = &q;
    if (auto r = start_queues(q); !r) {
        release_qp(q);
        return r.take_error();
    }
    return &q;
}

// §4.5.9 / §4.5.10: ring base and length, head = tail = 0, descriptor type, then enable and
// wait for the enable bit to read back. Each queue's causes go to its CQ's vector.
Result<void> QueueSet::start_queues(QueuePair& qp) {
    const uint32_t q = qp.queue_;
    const uint64_t rx_iova = qp.rings_->iova_of(qp.rx_).value, tx_iova = qp.rings_->iova_of(qp.tx_).value;
    bar_->write32(layout_.rx(q, reg::Q_DCTL), 0);
    bar_->write32(layout_.rx(q, reg::Q_BAL), uint32_t(rx_iova));
    bar_->write32(layout_.rx(q, reg::Q_BAH), uint32_t(rx_iova >> 32));
    bar_->write32(layout_.rx(q, reg::Q_LEN), (qp.rx_mask_ + 1) * sizeof(RxDesc));
    bar_->write32(layout_.rx(q, reg::Q_SRRCTL), (attr_.recv_buffer_size / 1024) << reg::SRRCTL_BSIZEPKT_SHIFT |
                                      reg::SRRCTL_DESCTYPE_ADV_ONEBUF | reg::SRRCTL_DROP_EN);
    bar_->write32(layout_.rx(q, reg::Q_HEAD), 0);
    bar_->write32(layout_.rx(q, reg::Q_TAIL), 0);
    bar_->write32(layout_.tx(q, reg::Q_DCTL), 0);
    bar_->write32(layout_.tx(q, reg::Q_BAL), uint32_t(tx_iova));
    bar_->write32(layout_.tx(q, reg::Q_BAH), uint32_t(tx_iova >> 32));
    bar_->write32(layout_.tx(q, reg::Q_LEN), (qp.tx_mask_ + 1) * sizeof(TxDesc));
    bar_->write32(layout_.tx(q, reg::Q_HEAD), 0);
    bar_->write32(layout_.tx(q, reg::Q_TAIL), 0);
    uint32_t ivar = bar_->read32(reg::ivar_reg(q));
    ivar &= ~(0xffu << reg::ivar_rx_shift(q) | 0xffu << reg::ivar_tx_shift(q));
    ivar |= (reg::IVAR_VALID | qp.recv_cq_->vector_) << reg::ivar_rx_shift(q);
    ivar |= (reg::IVAR_VALID | qp.send_cq_->vector_) << reg::ivar_tx_shift(q);
    bar_->write32(reg::ivar_reg(q), ivar);
    bar_->write32(layout_.rx(q, reg::Q_DCTL), reg::XDCTL_ENABLE);
    bar_->write32(layout_.tx(q, reg::Q_DCTL), reg::XDCTL_ENABLE);
    const uint32_t rxdctl = layout_.rx(q, reg::Q_DCTL), txdctl = layout_.tx(q, reg::Q_DCTL);
    if (!wait_for([&] { return (bar_->read32(rxdctl) & bar_->read32(txdctl)) & reg::XDCTL_ENABLE; }))
        return Error{EIO, str_cat(attr_.address.to_string(), ": queue ", q, " did not enable (RXDCTL/TXDCTL.ENABLE)")};
    return {};
}

// Disable both queues and wait until the device says so (§4.5.9.1): it then no longer
// fetches from or writes to the rings or buffers.
void QueueSet::stop_queues(uint32_t q) {
    if (removed_) return;
    const uint32_t rxdctl = layout_.rx(q, reg::Q_DCTL), txdctl = layout_.tx(q, reg::Q_DCTL);
    bar_->write32(rxdctl, 0);
    bar_->write32(txdctl, 0);
    (void)wait_for([&] { return !((bar_->read32(rxdctl) | bar_->read32(txdctl)) & reg::XDCTL_ENABLE); });
    uint32_t ivar = bar_->read32(reg::ivar_reg(q));
    ivar &= ~(0xffu << reg::ivar_rx_shift(q) | 0xffu << reg::ivar_tx_shift(q));
    bar_->write32(reg::ivar_reg(q), ivar);
    for (uint32_t r : {reg::Q_BAL, reg::Q_BAH, reg::Q_LEN, reg::Q_HEAD, reg::Q_TAIL}) {
        bar_->write32(layout_.rx(q, r), 0);
        bar_->write32(layout_.tx(q, r), 0);
    }
}

void QueueSet::release_qp(QueuePair& qp) {
    stop_queues(qp.queue_);
    if (qp.send_cq_->send_qp_ == &qp) qp.send_cq_->send_qp_ = nullptr;
    if (qp.recv_cq_->recv_qp_ == &qp) qp.recv_cq_->recv_qp_ = nullptr;
    qp.state_ = QpState::destroyed;
    qp.rings_.reset();
    qp.sq_storage_ = {};
    qp.rq_storage_ = {};
    qp.sq_head_ = qp.sq_tail_ = qp.rq_head_ = qp.rq_tail_ = 0;
    dead_qps_.push_back(std::move(qps_[qp.queue_]));
}

Result<void> QueuePair::destroy() {
    std::lock_guard lock(dev_->mu_);
    if (state_ == QpState::destroyed) return Error{ENODEV, "this queue pair was already destroyed"};
    dev_->release_qp(*this);
    return {};
}

void QueueSet::enter_error_state() {
    for (auto& qp : qps_)
        if (qp && qp->state_ == QpState::ready) {
            qp->state_ = QpState::error;
            if (!removed_) stop_queues(qp->queue_);
        }
    for (auto& cq : cqs_)
        if (!cq->destroyed_) {
            uint64_t one = 1;
            (void)!::write(cq->efd_, &one, sizeof one);
        }
}

void QueueSet::stop_all_queues() {
    if (!removed_)
        for (uint32_t q = 0; q < qps_.size(); ++q)
            if (qps_[q]) stop_queues(q);
}

void QueueSet::release_all() {
    qps_.clear();
    dead_qps_.clear();
    cqs_.clear();
    pd_.reset();
}

}  // namespace vfab::igb
