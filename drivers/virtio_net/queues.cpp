// virtio-net completion queues and queue pairs: virtqueue memory, setup through the transport
// (receiveqN = 2(N-1), transmitqN = 2(N-1)+1, §5.1.2), DRIVER_OK, the number of queue pairs in
// use (control virtqueue), notifications.
#include <bit>
#include <cerrno>

#include <unistd.h>

#include "../common/queue_control.hpp"
#include "device_state.hpp"

namespace vfab::virtio_net {
namespace {

template <class Q>
void set_interrupts(Q& q, bool on, bool& used_meanwhile) {
    if (on)
        used_meanwhile |= !q.enable_interrupts();
    else
        q.disable_interrupts();
}

}  // namespace

using queue::Control;

Result<CompletionQueue*> DeviceState::create_cq(uint32_t cqe) {
    std::lock_guard lock(mu_);
    if (cqe == 0 || cqe > 65536) return Error{EINVAL, str_cat("create_cq(", cqe, "): the capacity must be 1 to 65536")};
    // Vector 0 is for configuration changes.
    auto vector = Control::free_vector(cqs_, 1, vectors_, transport_->where());
    if (!vector) return vector.take_error();
    const int efd = transport_->channel_fd(*vector);
    vfio::drain_eventfd(efd);
    cqs_.push_back(std::unique_ptr<CompletionQueue>(
        new CompletionQueue(*self_, cqe, *vector, efd, transport_->polls_for_gone())));
    return cqs_.back().get();
}

Result<void> CompletionQueue::destroy() {
    if (!dev_) return Error{ENODEV, "destroy(): this completion queue has no device"};
    std::lock_guard lock(dev_->s_->mu_);
    return Control::destroy(*this);
}

Result<void> CompletionQueue::arm() {
    if (!dev_) return Error{ENODEV, "arm(): this completion queue has no device to interrupt"};
    if (auto r = Control::check_armable(*this); !r) return r;
    vfio::drain_eventfd(efd_);
    bool used_meanwhile = false;   // the device used a buffer before notifications were on
    for (auto [qp, send] : {std::pair{send_qp_, true}, std::pair{recv_qp_, false}}) {
        if (!qp || qp->state() != QpState::ready) continue;
        if (qp->packed_)
            set_interrupts(send ? *qp->ptx_ : *qp->prx_, true, used_meanwhile);
        else
            set_interrupts(send ? *qp->stx_ : *qp->srx_, true, used_meanwhile);
    }
    if (used_meanwhile)
        Control::signal(*this);
    else
        Control::signal_if_ready(*this);
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

Result<QueuePair*> DeviceState::create_qp(const QpInitAttr& attr) {
    std::lock_guard lock(mu_);
    const std::string& where = transport_->where();
    if (removed_) return Error{ENODEV, transport_->gone_message()};
    if (auto r = Control::check_cqs(self_, attr.send_cq, attr.recv_cq, true); !r) return r.take_error();
    const uint32_t index = Control::free_index(qps_);
    if (index == qps_.size())
        return Error{EBUSY, str_cat(where, ": all ", qps_.size(), " queue pairs of the device are in use",
                                    qps_.size() == 1 && !virtio::has_feature(offered_, virtio::net_feature::MQ)
                                        ? str_cat(" (it does not offer VIRTIO_NET_F_MQ",
                                                  transport_->device_hint("mq=on and a multi-queue netdev"), ")")
                                        : std::string(),
                                    "; destroy one first")};
    for (const auto& other : qps_)
        if (other && other->state() == QpState::ready && !other->idle() && driver_ok_)
            return Error{EBUSY, str_cat(where, ": a virtio device takes new queues only while stopped, and queue pair ",
                                        other->queue_, " has work outstanding: create every queue pair before posting")};
    const QpCaps& want = attr.caps;
    if (want.max_send_sge > kMaxSendSge || want.max_recv_sge > kMaxRecvSge)
        return Error{EINVAL, str_cat("create_qp: up to ", kMaxSendSge, " SGEs per send and ", kMaxRecvSge, " per receive")};
    const uint32_t send_sge = std::max(want.max_send_sge, 1u), recv_sge = std::max(want.max_recv_sge, 1u);
    const auto rx_queue = uint16_t(2 * index), tx_queue = uint16_t(2 * index + 1);
    const uint32_t max_size = std::min(transport_->queue_max_size(rx_queue), transport_->queue_max_size(tx_queue));
    // Each WR takes its SGEs plus the header's descriptor, unless the header is in its headroom.
    const uint32_t hdr_desc = attr.hdr_in_headroom ? 0 : 1;
    const uint64_t tx_need = uint64_t(want.max_send_wr) * (send_sge + hdr_desc),
                   rx_need = uint64_t(want.max_recv_wr) * (recv_sge + hdr_desc);
    if (want.max_send_wr == 0 || want.max_recv_wr == 0 || tx_need > max_size || rx_need > max_size)
        return Error{EINVAL, str_cat("create_qp: ", want.max_send_wr, " sends of ", send_sge, " SGEs and ", want.max_recv_wr,
                                     " receives of ", recv_sge, " SGEs need ", tx_need, " and ", rx_need, " descriptors",
                                     attr.hdr_in_headroom ? "" : " (each WR one more, for its header)",
                                     "; the device's queues hold ", max_size)};
    const auto tx_size = uint32_t(std::bit_ceil(tx_need)), rx_size = uint32_t(std::bit_ceil(rx_need));

    std::unique_ptr<QueuePair> qp(new QueuePair(*self_, attr, index));
    qp->sig_all_ = attr.sq_sig_all ? uint8_t(send_signaled) : 0;
    qp->tx_csum_ = virtio::has_feature(features_, virtio::net_feature::CSUM);
    qp->max_frame_ = attr_.mtu + kEthHeader;
    qp->min_recv_ = attr_.recv_buffer_size;
    const QpCaps caps = {tx_size / (send_sge + hdr_desc), rx_size / (recv_sge + hdr_desc), send_sge, recv_sge};

    const virtio::RingLayout tx_layout = packed_ ? virtio::PackedQueue::layout(tx_size) : virtio::SplitQueue::layout(tx_size);
    const virtio::RingLayout rx_layout = packed_ ? virtio::PackedQueue::layout(rx_size) : virtio::SplitQueue::layout(rx_size);
    const size_t rx_off = 0, tx_off = rx_layout.total_bytes(), rx_hdr = tx_off + tx_layout.total_bytes(),
                 tx_hdr = rx_hdr + size_t(rx_size) * kHdrSlot, total = tx_hdr + size_t(tx_size) * kHdrSlot;
    auto mem = dma::DmaArena::create(transport_->address_space(), total, transport_->memory_options());
    if (!mem) return Error{mem.error().code, str_cat("create_qp: virtqueue memory: ", mem.error().message)};
    qp->mem_.emplace(std::move(*mem));
    uint8_t* base = qp->mem_->data();
    const Iova iova = qp->mem_->iova();
    const virtio::RingFeatures rf = virtio::RingFeatures::from(features_);
    const auto rx_mem = virtio::QueueMemory::carve(base + rx_off, iova + rx_off, rx_layout);
    const auto tx_mem = virtio::QueueMemory::carve(base + tx_off, iova + tx_off, tx_layout);
    // The doorbells come with the queues' start (program_qp).
    auto attach = [&]<class Q>() -> Result<void> {
        auto rq = Q::create(rx_size, rx_mem, rf);
        auto sq = Q::create(tx_size, tx_mem, rf);
        if (!rq) return rq.take_error();
        if (!sq) return sq.take_error();
        qp->attach_rings(QueueRings<Q>{.rx = std::move(*rq), .tx = std::move(*sq), .rx_hdrs = base + rx_hdr,
                                       .rx_hdr_iova = (iova + rx_hdr).value, .tx_hdrs = base + tx_hdr,
                                       .tx_hdr_iova = (iova + tx_hdr).value, .mrs = &pd_->table(), .caps = caps,
                                       .hdr_in_headroom = attr.hdr_in_headroom});
        return {};
    };
    if (auto r = packed_ ? attach.template operator()<virtio::PackedQueue>() : attach.template operator()<virtio::SplitQueue>(); !r)
        return r.take_error();
    if (driver_ok_) {   // queues cannot be added to a running device: start over (§3.1.1)
        if (auto r = transport_->restart(); !r) return r.take_error();
        driver_ok_ = false;
    }
    qps_[index] = std::move(qp);
    if (auto r = start_device(); !r) {
        // Freed on return, after restart() has stopped the device: it may have been given the
        // new rings already.
        std::unique_ptr<QueuePair> failed = std::move(qps_[index]);
        if (auto again = transport_->restart(); again) (void)start_device();   // the others carry on
        return r.take_error();
    }
    Control::attach(*attr.send_cq, *attr.recv_cq, qps_[index].get());
    return qps_[index].get();
}

// Programs the virtqueues of every ready queue pair and the control virtqueue, sets DRIVER_OK
// (§3.1.1 step 8) and tells the device how many queue pairs to use. After
// restart(); the queue pairs' rings start over (they are idle, or this is their first start).
Result<void> DeviceState::start_device() {
    driver_ok_ = true;   // from here, stop() stops whatever started
    link_cached_ = false;   // next_event() reads the link under the running device's generation
    for (const auto& qp : qps_)
        if (qp && qp->state() == QpState::ready)
            if (auto r = program_qp(*qp); !r) return r;
    if (ctrl_) {
        ctrl_->restart();
        auto bell = transport_->start_queue(ctrl_index_, ControlQueue::kSize, ctrl_->memory(), virtio::kNoChannel);
        if (!bell) return bell.take_error();
        ctrl_->set_doorbell(*bell);
    }
    if (auto r = transport_->driver_ok(); !r) return r;
    return send_queue_config();
}

Result<void> DeviceState::program_qp(QueuePair& qp) {
    bool unused = false;
    const virtio::QueueMemory* mem[2];
    uint32_t size[2];
    if (packed_) {
        qp.prx_->reset();
        qp.ptx_->reset();
        mem[0] = &qp.prx_->memory(), mem[1] = &qp.ptx_->memory();
        size[0] = qp.prx_->size(), size[1] = qp.ptx_->size();
    } else {
        qp.srx_->reset();
        qp.stx_->reset();
        mem[0] = &qp.srx_->memory(), mem[1] = &qp.stx_->memory();
        size[0] = qp.srx_->size(), size[1] = qp.stx_->size();
    }
    (void)unused;
    // Queue setup (§4.1.5.1.3): receiveqN = 2(N-1), transmitqN = 2(N-1)+1 (§5.1.2), each on
    // its completion queue's MSI-X vector.
    const uint32_t vectors[2] = {qp.recv_cq_->vector_, qp.send_cq_->vector_};
    for (int i = 0; i < 2; ++i) {
        auto bell = transport_->start_queue(uint16_t(2 * qp.queue_ + i), size[i], *mem[i], vectors[i]);
        if (!bell) return bell.take_error();
        (i == 0 ? qp.rx_bell_ : qp.tx_bell_) = *bell;
    }
    // Notifications off until a completion queue is armed; a thread sleeping on one wakes
    // (spuriously) and arms again.
    set_ring_interrupts(qp, false);
    for (CompletionQueue* cq : {qp.recv_cq_, qp.send_cq_}) Control::signal(*cq);
    return {};
}

// VIRTIO_NET_CTRL_MQ (§5.1.6.5.5): with MQ the device uses one queue pair until told more;
// with RSS configured, the RSS command says both.
Result<void> DeviceState::send_queue_config() {
    using virtio::net_feature::MQ;
    using virtio::net_feature::RSS;
    if (!ctrl_ || !virtio::has_feature(features_, MQ)) return {};
    uint16_t pairs = 1;
    for (const auto& qp : qps_)
        if (qp && qp->state() == QpState::ready) pairs = uint16_t(std::max<uint32_t>(pairs, qp->queue_ + 1));
    if (virtio::has_feature(features_, RSS) && !rss_table_.empty()) {
        // struct virtio_net_rss_config (§5.1.6.5.7.1), little-endian.
        std::vector<uint8_t> c;
        auto le16 = [&](uint32_t v) { c.push_back(uint8_t(v)); c.push_back(uint8_t(v >> 8)); };
        le16(rss_types_), le16(rss_types_ >> 16);
        le16(uint32_t(rss_table_.size() - 1));   // indirection_table_mask
        le16(rss_table_[0]);                     // unclassified_queue
        for (uint16_t q : rss_table_) le16(q);
        le16(pairs);                             // max_tx_vq
        c.push_back(uint8_t(rss_key_.size()));
        c.insert(c.end(), rss_key_.begin(), rss_key_.end());
        return ctrl_->command(ctrl::kClassMq, ctrl::kMqRssConfig, c, "configure_rss (VIRTIO_NET_CTRL_MQ_RSS_CONFIG)");
    }
    const uint8_t data[2] = {uint8_t(pairs), uint8_t(pairs >> 8)};
    return ctrl_->command(ctrl::kClassMq, ctrl::kMqVqPairsSet, data,
                          str_cat("create_qp: using ", pairs, " queue pairs (VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET)"));
}

void DeviceState::set_ring_interrupts(QueuePair& qp, bool on) {
    bool unused = false;
    if (packed_) {
        set_interrupts(*qp.prx_, on, unused);
        set_interrupts(*qp.ptx_, on, unused);
    } else {
        set_interrupts(*qp.srx_, on, unused);
        set_interrupts(*qp.stx_, on, unused);
    }
}

void DeviceState::release_qp(QueuePair& qp) {
    // No per-queue stop without VIRTIO_F_RING_RESET: reset the device, which stops it using
    // the rings and buffers, then start it again with the other queue pairs. Those with work
    // outstanding lose it: they go to the error state (and flush), as after reset().
    if (!removed_) {
        transport_->stop();
        driver_ok_ = false;
        bool others = false;
        for (const auto& other : qps_) {
            if (!other || other.get() == &qp || other->state() != QpState::ready) continue;
            if (!other->idle()) {
                other->state_ = QpState::error;
                for (CompletionQueue* cq : {other->recv_cq_, other->send_cq_}) Control::signal(*cq);
            } else {
                others = true;
            }
        }
        qp.state_ = QpState::destroyed;   // start_device() skips it
        if (auto r = transport_->restart(); r && others) (void)start_device();
    }
    Control::detach(*qp.send_cq_, *qp.recv_cq_, &qp);
    retired_.tx_packets += qp.tx_packets_.get();
    retired_.tx_bytes += qp.tx_bytes_.get();
    retired_.rx_packets += qp.rx_packets_.get();
    retired_.rx_bytes += qp.rx_bytes_.get();
    qp.state_ = QpState::destroyed;
    qp.stx_.reset();
    qp.srx_.reset();
    qp.ptx_.reset();
    qp.prx_.reset();
    qp.mem_.reset();
    qp.sq_ = {};
    qp.rq_ = {};
    dead_qps_.push_back(std::move(qps_[qp.queue_]));
}

template <class Q>
void QueuePair::attach_rings(QueueRings<Q>&& r) {
    const uint32_t rx_size = r.rx.size(), tx_size = r.tx.size();
    // Used-buffer notifications off until a completion queue's arm() asks for one: a new
    // virtqueue starts with them on (§2.7.7, §2.8.10), and a busy-polling application would
    // have the device signal the channel for every batch it uses — an interrupt over VFIO, a
    // write(2) on the back-end's core over vhost-user.
    r.rx.disable_interrupts();
    r.tx.disable_interrupts();
    if constexpr (std::is_same_v<Q, virtio::PackedQueue>) {
        packed_ = true;
        prx_.emplace(std::move(r.rx));
        ptx_.emplace(std::move(r.tx));
    } else {
        packed_ = false;
        srx_.emplace(std::move(r.rx));
        stx_.emplace(std::move(r.tx));
    }
    for (auto [ring, size, hdrs, hdr_iova] : {std::tuple{&rq_, rx_size, r.rx_hdrs, r.rx_hdr_iova},
                                             std::tuple{&sq_, tx_size, r.tx_hdrs, r.tx_hdr_iova}}) {
        ring->slots.assign(size, Slot{});
        ring->mask = size - 1;
        ring->head = ring->tail = ring->returned = ring->unsent = 0;
        ring->hdrs = hdrs;
        ring->hdr_iova = hdr_iova;
    }
    rx_bell_ = r.rx_bell, tx_bell_ = r.tx_bell;
    mrs_ = r.mrs;
    caps_ = r.caps;
    headroom_ = r.hdr_in_headroom;
}

QueuePair::QueuePair(QueueRings<virtio::SplitQueue>&& rings, CompletionQueue& cq) : send_cq_(&cq), recv_cq_(&cq) {
    attach_rings(std::move(rings));
    cq.send_qp_ = cq.recv_qp_ = this;
}

QueuePair::QueuePair(QueueRings<virtio::PackedQueue>&& rings, CompletionQueue& cq) : send_cq_(&cq), recv_cq_(&cq) {
    attach_rings(std::move(rings));
    cq.send_qp_ = cq.recv_qp_ = this;
}

Result<void> QueuePair::destroy() {
    if (!dev_) return Error{ENODEV, "destroy(): this queue pair has no device (it runs over rings the caller owns)"};
    std::lock_guard lock(dev_->s_->mu_);
    if (state_ == QpState::destroyed) return Error{ENODEV, "this queue pair was already destroyed"};
    dev_->s_->release_qp(*this);
    return {};
}

}  // namespace vfab::virtio_net
