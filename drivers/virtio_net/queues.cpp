// virtio-net completion queues and the queue pair: virtqueue memory, setup through the PCI
// transport (receiveq1 = queue 0, transmitq1 = queue 1, §5.1.2), DRIVER_OK, notifications.
#include <bit>
#include <cerrno>

#include <unistd.h>

#include "vfab/drivers/virtio_net.hpp"

namespace vfab::virtio_net {
namespace {

constexpr uint16_t kRxQueue = 0, kTxQueue = 1;

template <class Q>
void set_interrupts(Q& q, bool on, bool& used_meanwhile) {
    if (on)
        used_meanwhile |= !q.enable_interrupts();
    else
        q.disable_interrupts();
}

}  // namespace

Result<CompletionQueue*> Device::create_cq(uint32_t cqe) {
    std::lock_guard lock(mu_);
    if (cqe == 0 || cqe > 65536) return Error{EINVAL, str_cat("create_cq(", cqe, "): the capacity must be 1 to 65536")};
    std::vector<bool> used(vectors_, false);
    used[0] = true;   // configuration changes
    for (auto& cq : cqs_)
        if (!cq->destroyed_) used[cq->vector_] = true;
    uint32_t vector = 1;
    while (vector < vectors_ && used[vector]) ++vector;
    if (vector == vectors_)
        return Error{ENOSPC, str_cat(attr_.address.to_string(), ": all ", vectors_ - 1,
                                     " completion queues are in use (one MSI-X vector each); destroy one first")};
    const int efd = vhost_ ? vhost_calls_[vector].get() : msix_->eventfd(vector);
    vfio::drain_eventfd(efd);
    cqs_.push_back(std::unique_ptr<CompletionQueue>(new CompletionQueue(*this, cqe, vector, efd, vhost_.has_value())));
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
    vfio::drain_eventfd(efd_);
    bool ready = false;
    for (auto [qp, send] : {std::pair{send_qp_, true}, std::pair{recv_qp_, false}}) {
        if (!qp || qp->state() != QpState::ready) {
            ready |= qp != nullptr;
            continue;
        }
        if (qp->packed_)
            set_interrupts(send ? *qp->ptx_ : *qp->prx_, true, ready);
        else
            set_interrupts(send ? *qp->stx_ : *qp->srx_, true, ready);
    }
    if (ready || has_ready()) {
        uint64_t one = 1;
        (void)!::write(efd_, &one, sizeof one);
    }
    return {};
}

uint64_t CompletionQueue::take_events() noexcept {
    bool unused = false;
    for (auto [qp, send] : {std::pair{send_qp_, true}, std::pair{recv_qp_, false}}) {
        if (!qp || qp->state() != QpState::ready) continue;
        if (qp->packed_)
            set_interrupts(send ? *qp->ptx_ : *qp->prx_, false, unused);
        else
            set_interrupts(send ? *qp->stx_ : *qp->srx_, false, unused);
    }
    return vfio::drain_eventfd(efd_);
}

Result<QueuePair*> Device::create_qp(const QpInitAttr& attr) {
    std::lock_guard lock(mu_);
    const std::string where = attr_.address.to_string();
    if (removed_)
        return Error{ENODEV, vhost_ ? str_cat("the vhost-user backend at ", vhost_->path(), " is gone; close the device")
                                    : str_cat(where, ": the device was removed; close it")};
    for (CompletionQueue* cq : {attr.send_cq, attr.recv_cq}) {
        if (!cq) return Error{EINVAL, "create_qp: send_cq and recv_cq are required (they may be the same)"};
        if (cq->dev_ != this) return Error{EINVAL, "create_qp: the completion queue belongs to another device"};
        if (cq->destroyed_) return Error{ENODEV, "create_qp: the completion queue was destroyed"};
    }
    if (qp_) return Error{EBUSY, str_cat(where, ": the virtio-net driver offers one queue pair and it exists; destroy it first")};
    const QpCaps& want = attr.caps;
    if (want.max_send_sge > kMaxSendSge || want.max_recv_sge > kMaxRecvSge)
        return Error{EINVAL, str_cat("create_qp: up to ", kMaxSendSge, " SGEs per send and ", kMaxRecvSge, " per receive")};
    const uint32_t send_sge = std::max(want.max_send_sge, 1u), recv_sge = std::max(want.max_recv_sge, 1u);
    const uint32_t max_size = vhost_ ? attr_.max_qp_wr
                                     : std::min(transport_->queue_max_size(kRxQueue), transport_->queue_max_size(kTxQueue));
    // Each WR takes its SGEs plus the header's descriptor.
    const uint64_t tx_need = uint64_t(want.max_send_wr) * (send_sge + 1), rx_need = uint64_t(want.max_recv_wr) * (recv_sge + 1);
    if (want.max_send_wr == 0 || want.max_recv_wr == 0 || tx_need > max_size || rx_need > max_size)
        return Error{EINVAL, str_cat("create_qp: ", want.max_send_wr, " sends of ", send_sge, " SGEs and ", want.max_recv_wr,
                                     " receives of ", recv_sge, " SGEs need ", tx_need, " and ", rx_need,
                                     " descriptors (each WR one more, for its header); the device's queues hold ", max_size)};
    if (driver_ok_) {   // queues cannot be added to a running device: start over (§3.1.1)
        if (auto r = handshake(); !r) return r.take_error();
    }
    const auto tx_size = uint32_t(std::bit_ceil(tx_need)), rx_size = uint32_t(std::bit_ceil(rx_need));

    std::unique_ptr<QueuePair> qp(new QueuePair(*this, attr));
    qp->packed_ = packed_;
    qp->sq_sig_all_ = attr.sq_sig_all;
    qp->tx_csum_ = virtio::has_feature(features_, virtio::net_feature::CSUM);
    qp->max_frame_ = attr_.mtu + kEthHeader;
    qp->min_recv_ = attr_.recv_buffer_size;
    qp->caps_ = {tx_size / (send_sge + 1), rx_size / (recv_sge + 1), send_sge, recv_sge};
    qp->mrs_ = &pd_->table();

    const virtio::RingLayout tx_layout = packed_ ? virtio::PackedQueue::layout(tx_size) : virtio::SplitQueue::layout(tx_size);
    const virtio::RingLayout rx_layout = packed_ ? virtio::PackedQueue::layout(rx_size) : virtio::SplitQueue::layout(rx_size);
    const size_t rx_off = 0, tx_off = rx_layout.total_bytes(), rx_hdr = tx_off + tx_layout.total_bytes(),
                 tx_hdr = rx_hdr + size_t(rx_size) * kHdrSlot, total = tx_hdr + size_t(tx_size) * kHdrSlot;
    auto mem = dma::DmaArena::create(iommu_shared(), total, vhost_ ? dma::DmaMemoryOptions{} : dma::near_device(attr_.address));
    if (!mem) return Error{mem.error().code, str_cat("create_qp: virtqueue memory: ", mem.error().message)};
    qp->mem_.emplace(std::move(*mem));
    uint8_t* base = qp->mem_->data();
    const Iova iova = qp->mem_->iova();
    const virtio::RingFeatures rf = virtio::RingFeatures::from(features_);
    const auto rx_mem = virtio::QueueMemory::carve(base + rx_off, iova + rx_off, rx_layout);
    const auto tx_mem = virtio::QueueMemory::carve(base + tx_off, iova + tx_off, tx_layout);
    if (packed_) {
        auto rq = virtio::PackedQueue::create(rx_size, rx_mem, rf);
        auto sq = virtio::PackedQueue::create(tx_size, tx_mem, rf);
        if (!rq) return rq.take_error();
        if (!sq) return sq.take_error();
        qp->prx_.emplace(std::move(*rq));
        qp->ptx_.emplace(std::move(*sq));
    } else {
        auto rq = virtio::SplitQueue::create(rx_size, rx_mem, rf);
        auto sq = virtio::SplitQueue::create(tx_size, tx_mem, rf);
        if (!rq) return rq.take_error();
        if (!sq) return sq.take_error();
        qp->srx_.emplace(std::move(*rq));
        qp->stx_.emplace(std::move(*sq));
    }
    for (auto [ring, size, off] : {std::tuple{&qp->rq_, rx_size, rx_hdr}, std::tuple{&qp->sq_, tx_size, tx_hdr}}) {
        ring->slots.resize(size);
        ring->mask = size - 1;
        ring->hdrs = base + off;
        ring->hdr_iova = (iova + off).value;
    }
    if (vhost_) {
        if (auto r = start_vhost_queues(*qp, rx_mem, rx_size, tx_mem, tx_size); !r) return r.take_error();
    } else {
        // Queue setup (§4.1.5.1.3), each queue on its completion queue's MSI-X vector.
        const struct { uint16_t index; const virtio::QueueMemory& m; uint32_t size; uint32_t vector; } queues[] = {
            {kRxQueue, rx_mem, rx_size, attr.recv_cq->vector_}, {kTxQueue, tx_mem, tx_size, attr.send_cq->vector_}};
        for (const auto& q : queues)
            if (auto r = transport_->setup_queue(q.index, uint16_t(q.size), q.m.desc_iova, q.m.driver_iova, q.m.device_iova,
                                                uint16_t(q.vector));
                !r)
                return r.take_error();
        qp->rx_bell_ = {transport_->notify_address(kRxQueue), -1, kRxQueue};
        qp->tx_bell_ = {transport_->notify_address(kTxQueue), -1, kTxQueue};
        transport_->add_status(virtio::kStatusDriverOk);
        driver_ok_ = true;
        if (transport_->status() & virtio::kStatusNeedsReset)
            return Error{EIO, str_cat(where, ": the virtio-net device wants a reset right after DRIVER_OK")};
    }
    // Notifications off until a completion queue is armed.
    bool unused = false;
    if (packed_) {
        set_interrupts(*qp->prx_, false, unused);
        set_interrupts(*qp->ptx_, false, unused);
    } else {
        set_interrupts(*qp->srx_, false, unused);
        set_interrupts(*qp->stx_, false, unused);
    }
    qp_ = std::move(qp);
    attr.send_cq->send_qp_ = qp_.get();
    attr.recv_cq->recv_qp_ = qp_.get();
    return qp_.get();
}

void Device::release_qp() {
    // No per-queue stop without VIRTIO_F_RING_RESET: reset the device, which stops it using
    // the rings and buffers, then renegotiate so that another QP can start.
    if (vhost_) {
        stop_vhost_queues();
    } else if (!removed_) {
        (void)transport_->reset();
        driver_ok_ = false;
        (void)handshake();
    }
    if (qp_->send_cq_->send_qp_ == qp_.get()) qp_->send_cq_->send_qp_ = nullptr;
    if (qp_->recv_cq_->recv_qp_ == qp_.get()) qp_->recv_cq_->recv_qp_ = nullptr;
    retired_.tx_packets += qp_->tx_packets_.get();
    retired_.tx_bytes += qp_->tx_bytes_.get();
    retired_.rx_packets += qp_->rx_packets_.get();
    retired_.rx_bytes += qp_->rx_bytes_.get();
    qp_->state_ = QpState::destroyed;
    qp_->stx_.reset();
    qp_->srx_.reset();
    qp_->ptx_.reset();
    qp_->prx_.reset();
    qp_->mem_.reset();
    qp_->sq_ = {};
    qp_->rq_ = {};
    dead_qps_.push_back(std::move(qp_));
}

Result<void> QueuePair::destroy() {
    std::lock_guard lock(dev_->mu_);
    if (state_ == QpState::destroyed) return Error{ENODEV, "this queue pair was already destroyed"};
    dev_->release_qp();
    return {};
}

}  // namespace vfab::virtio_net
