// The control path of intel::QueueSet (queue_set.hpp), private to
// the Intel drivers: each driver includes it once and instantiates the set for its traits
// (`template class intel::QueueSet<QueueTraits>;` and the same for its completion queue and
// queue pair).
#pragma once

#include <algorithm>
#include <string>

#include <poll.h>
#include <time.h>

#include "../common/queue_control.hpp"
#include "queue_rings.hpp"
#include "queue_set.hpp"
#include "vfab/vfio/event_wait.hpp"

namespace vfab::intel {

template <class T>
Result<void> QueueSet<T>::init_common(const dma::PdOptions& pd_options, const char* provider, const char* name) {
    auto pd = dma::ProtectionDomain::create(vfio_->iommu_shared(), pd_options);
    if (!pd) return pd.take_error();
    pd_ = std::move(*pd);
    attr_.provider = provider;
    attr_.name = name;
    attr_.address = vfio_->address();
    auto id = vfio_->pci_id();
    if (!id) return id.take_error();
    attr_.vendor_id = id->vendor;
    attr_.device_id = id->device;
    return {};
}

// ---- completion queues -----------------------------------------------------------------------

template <class T>
Result<CompletionQueue<T>*> QueueSet<T>::create_cq(uint32_t cqe) {
    std::lock_guard lock(mu_);
    if (cqe == 0 || cqe > 2 * kMaxQueueDepth)
        return Error{EINVAL, str_cat("create_cq(", cqe, "): the capacity must be 1 to ", 2 * kMaxQueueDepth)};
    auto vector = queue::Control::free_vector(cqs_, 0, cq_vectors_, attr_.address.to_string());
    if (!vector) return vector.take_error();
    const int efd = msix_->eventfd(*vector);
    vfio::drain_eventfd(efd);
    cqs_.push_back(std::unique_ptr<CompletionQueue<T>>(new CompletionQueue<T>(*this, cqe, *vector, efd)));
    return cqs_.back().get();
}

template <class T>
Result<void> CompletionQueue<T>::destroy() {
    if (!dev_) return Error{EINVAL, "destroy(): this completion queue belongs to no device"};
    std::lock_guard lock(dev_->mu_);
    return queue::Control::destroy(*this);
}

namespace {
int64_t monotonic_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
}  // namespace

template <class T>
Result<void> CompletionQueue<T>::arm() {
    if (auto r = queue::Control::check_armable(*this); !r) return r;
    // Receive buffers held back for the tail batch go to the device before anyone sleeps.
    if (this->recv_qp_ && this->recv_qp_->state() == QpState::ready) this->recv_qp_->flush_recv_tail();
    if (!dev_) return Error{EINVAL, "arm(): this completion queue belongs to no device"};
    {
        std::lock_guard lock(dev_->mu_);
        note_taken(vfio::drain_eventfd(this->efd_));   // notifications from before this arm() are stale
        if (!dev_->removed_) {
            arm_vector();
        }
        if (queue::Control::signal_if_ready(*this) || dev_->removed_) {
            ++own_signals_;
            trailer_due_ns_ = 0;   // the caller will not sleep: nothing to take
        }
    }
    if (trailer_due_ns_) absorb_trailer();
    return {};
}

// The device's lock held: its vector unmasked for the causes this queue takes, once.
template <class T>
void CompletionQueue<T>::arm_vector() {
    dev_->arm_vector(this->vector_, this->send_qp_ != nullptr, this->recv_qp_ != nullptr);
    armed_ = true;
}

// `n` notifications were read from the channel, own_signals_ of them written by arm() itself.
// The device's first one after arm() has a trailing one due, unless it was read with it.
template <class T>
void CompletionQueue<T>::note_taken(uint64_t n) noexcept {
    const uint64_t own = std::min<uint64_t>(n, own_signals_);
    own_signals_ = 0;
    n -= own;
    if (!dev_ || dev_->trailing_notify_ns_ == 0 || n == 0) return;
    if (trailer_due_ns_) {   // the one expected came
        trailer_due_ns_ = 0;
        --n;
    }
    if (armed_ && n == 1) trailer_due_ns_ = monotonic_ns() + dev_->trailing_notify_ns_;
    armed_ = false;
}

// The vector is armed and no completion waits: wait, at most until it is due, for the
// trailing notification of the last one. A completion's own notification ends the wait too
// (the two cannot be told apart, the queues can): then the channel is signalled for the
// caller; otherwise the notification was the trailing one and the vector is armed again.
// The caller's sleep that follows ends only for a completion. (Emulated interrupts can merge
// the two notifications into one; then none comes and the wait ends when due.)
template <class T>
void CompletionQueue<T>::absorb_trailer() {
    const int64_t left = trailer_due_ns_ - monotonic_ns();
    trailer_due_ns_ = 0;
    if (left <= 0) return;
    pollfd p{this->efd_, POLLIN, 0};
    const timespec ts{time_t(left / 1'000'000'000), long(left % 1'000'000'000)};
    if (::ppoll(&p, 1, &ts, nullptr) != 1) return;
    std::lock_guard lock(dev_->mu_);
    vfio::drain_eventfd(this->efd_);
    if (!dev_->removed_ && !this->wake_on_arm()) {
        arm_vector();
        return;
    }
    queue::Control::signal(*this);
    ++own_signals_;
    armed_ = false;
}

template <class T>
uint64_t CompletionQueue<T>::take_events() noexcept {
    if (dev_ && !dev_->removed_) dev_->disarm_vector(this->vector_);
    const uint64_t n = vfio::drain_eventfd(this->efd_);
    note_taken(n);
    return n;
}

// ---- queue pairs -----------------------------------------------------------------------------

template <class T>
Result<QueuePair<T>*> QueueSet<T>::create_qp(const QpInitAttr<T>& attr) {
    std::lock_guard lock(mu_);
    const std::string where = attr_.address.to_string();
    if (removed_) return Error{ENODEV, str_cat(where, ": the device was removed; close it")};
    if (auto r = queue::Control::check_cqs(this, attr.send_cq, attr.recv_cq, true); !r) return r.take_error();
    const uint32_t index = queue::Control::free_index(qps_);
    if (index == qps_.size())
        return Error{EBUSY, qps_.size() == 1
                                ? str_cat(where, ": ", chip_, " driver offers one queue pair and it exists; destroy it first")
                                : str_cat(where, ": all ", qps_.size(), " queue pairs are in use; destroy one first")};
    if (auto r = check_caps(attr.caps, chip_, attr_.recv_buffer_size); !r) return r.take_error();

    RingView<T> v{.bar = bar_->base(), .tdt = layout_.tx(index, QueueLayout::kTail),
                  .rdt = layout_.rx(index, QueueLayout::kTail),
                  .mrs = &pd_->table(), .queue = index, .max_frame = attr_.mtu + kEthHeader,
                  .rx_buffer = attr_.recv_buffer_size, .sq_sig_all = attr.sq_sig_all};
    auto rings = allocate_rings(vfio_->iommu_shared(), attr_.address, attr.caps, v);
    if (!rings) return rings.take_error();
    std::unique_ptr<QueuePair<T>> qp(new QueuePair<T>(*this, attr));
    qp->attach_rings(v);
    qp->rings_.emplace(std::move(*rings));

    qps_[index] = std::move(qp);
    QueuePair<T>& q = *qps_[index];
    queue::Control::attach(*attr.send_cq, *attr.recv_cq, &q);
    if (auto r = start_queues(queue_regs(q)); !r) {
        release_qp(q);
        return r.take_error();
    }
    return &q;
}

template <class T>
typename QueueSet<T>::QueueRegs QueueSet<T>::queue_regs(const QueuePair<T>& qp) {
    return {qp.queue_,
            qp.rings_->iova_of(qp.rx_).value,
            qp.rings_->iova_of(qp.tx_).value,
            uint32_t((qp.rx_mask_ + 1) * sizeof(typename T::RxDesc)),
            uint32_t((qp.tx_mask_ + 1) * sizeof(typename T::TxDesc)),
            qp.recv_cq_->vector(),
            qp.send_cq_->vector()};
}

template <class T>
void QueueSet<T>::release_qp(QueuePair<T>& qp) {
    stop_queues(qp.queue_);
    queue::Control::detach(*qp.send_cq_, *qp.recv_cq_, &qp);
    qp.release_rings();   // the object stays (a late post returns ENODEV)
    dead_qps_.push_back(std::move(qps_[qp.queue_]));
}

template <class T>
Result<void> QueuePair<T>::destroy() {
    std::lock_guard lock(dev_->mu_);
    if (this->state_ == QpState::destroyed) return Error{ENODEV, "this queue pair was already destroyed"};
    dev_->release_qp(*this);
    return {};
}

template <class T>
void QueueSet<T>::enter_error_state() {
    for (auto& qp : qps_)
        if (qp && qp->state_ == QpState::ready) {
            qp->state_ = QpState::error;
            if (!removed_) stop_queues(qp->queue_);
        }
    queue::Control::wake_all(cqs_);
}

template <class T>
void QueueSet<T>::stop_all_queues() {
    if (!removed_)
        for (uint32_t q = 0; q < qps_.size(); ++q)
            if (qps_[q]) stop_queues(q);
}

template <class T>
void QueueSet<T>::release_all() {
    qps_.clear();
    dead_qps_.clear();
    cqs_.clear();
    pd_.reset();
}

}  // namespace vfab::intel
