// virtio-net over VFIO: the device status handshake and feature negotiation (VIRTIO 1.2
// §3.1.1), link state from the device configuration (§5.1.4), events, reset, shutdown.
#include <cerrno>
#include <chrono>
#include <thread>

#include "../common/queue_control.hpp"
#include "control_queue.hpp"
#include "vfab/drivers/virtio_net.hpp"
#include "vfab/vfio/event_wait.hpp"

namespace vfab::virtio_net {
namespace {

using virtio::feature_bit;
namespace vf = virtio::feature;
namespace nf = virtio::net_feature;

enum : uint64_t { kTagConfig = 1, kTagReq = 2 };
constexpr uint32_t kConfigVector = 0;

}  // namespace

const char* to_string(RingFormat f) noexcept {
    switch (f) {
    case RingFormat::automatic: return "automatic";
    case RingFormat::split: return "split";
    case RingFormat::packed: return "packed";
    }
    return "?";
}

Device::Device(std::unique_ptr<vfio::Device> vdev, virtio::PciTransport t, vfio::EventWaiter ev)
    : vfio_(std::move(vdev)), transport_(std::move(t)), events_(std::move(ev)) {}
Device::Device(virtio::VhostUserFrontend fe, vfio::EventWaiter ev) : vhost_(std::move(fe)), events_(std::move(ev)) {}

Result<std::unique_ptr<Device>> Device::open(const PciAddress& addr, const DeviceOptions& opts) {
    auto vdev = vfio::Device::open(addr, opts.vfio);
    if (!vdev) return vdev.take_error();
    auto id = (*vdev)->pci_id();
    if (!id) return id.take_error();
    if (!contains(kPciIds, *id))
        return Error{ENODEV, str_cat(addr.to_string(), " is ", std::hex, id->vendor, ":", id->device,
                                     ", not a modern virtio-net device (1af4:1041)",
                                     *id == PciId{0x1af4, 0x1000} ? ": it is transitional; in QEMU add disable-legacy=on" : "")};
    auto transport = virtio::PciTransport::attach(**vdev);
    if (!transport) return transport.take_error();
    auto events = vfio::EventWaiter::create();
    if (!events) return events.take_error();
    std::unique_ptr<Device> dev(new Device(std::move(*vdev), std::move(*transport), std::move(*events)));
    if (auto r = dev->init(opts); !r) return r.take_error();
    return dev;
}

Result<void> Device::init(const DeviceOptions& opts) {
    if (opts.mtu && (opts.mtu < 68 || opts.mtu > kMaxMtu))
        return Error{EINVAL, str_cat("virtio-net: MTU ", opts.mtu, " is out of range: 68 to ", kMaxMtu, " (0: 1500)")};
    opts_ = opts;
    const std::string where = vfio_->address().to_string();
    if (auto r = vfio_->enable_bus_master(); !r) return r;
    auto info = vfio_->irq_info(vfio::IrqIndex::msix);
    if (!info || info->count < 2)
        return Error{ENOTSUP, str_cat(where, ": the virtio-net device needs MSI-X with at least 2 vectors")};
    vectors_ = info->count;
    auto msix = vfio_->enable_interrupts(vfio::IrqIndex::msix, vectors_);
    if (!msix) return msix.take_error();
    msix_ = *msix;
    if (auto r = events_.add(msix_->eventfd(kConfigVector), kTagConfig); !r) return r;
    auto req = vfio_->watch_optional_interrupt(vfio::IrqIndex::req, events_, kTagReq);
    if (!req) return req.take_error();
    req_ = *req;
    if (auto r = handshake(); !r) return r;

    auto pd = dma::ProtectionDomain::create(vfio_->iommu_shared(), opts.pd);
    if (!pd) return pd.take_error();
    pd_ = std::move(*pd);

    virtio::NetConfig cfg{};
    transport_->read_device_config(0, &cfg, std::min<uint32_t>(sizeof cfg, transport_->device_config_length()));
    // Several queue pairs (§5.1.5): receiveqN/transmitqN for N up to max_virtqueue_pairs, then
    // the control virtqueue.
    const bool mq = virtio::has_feature(features_, nf::MQ);
    const uint32_t pairs = mq ? std::max<uint32_t>(cfg.max_virtqueue_pairs, 1) : 1;
    ctrl_index_ = uint16_t(2 * pairs);
    if (virtio::has_feature(features_, nf::CTRL_VQ)) {
        auto ctrl = ControlQueue::create(vfio_->iommu_shared(), dma::near_device(vfio_->address()), packed_,
                                         virtio::RingFeatures::from(features_));
        if (!ctrl) return ctrl.take_error();
        ctrl_ = std::move(*ctrl);
    }
    qps_.resize(pairs);
    attr_.provider = "virtio-net";
    attr_.name = "virtio-net (virtio 1.x)";
    attr_.address = vfio_->address();
    attr_.vendor_id = kPciIds[0].vendor;
    attr_.device_id = kPciIds[0].device;
    std::copy(cfg.mac, cfg.mac + 6, attr_.mac);
    attr_.mtu = opts.mtu ? opts.mtu : kDefaultMtu;
    attr_.max_qp = pairs;
    attr_.max_cq = vectors_ - 1;
    if (virtio::has_feature(features_, nf::RSS)) {
        attr_.rss_key_size = cfg.rss_max_key_size;
        attr_.rss_table_size = cfg.rss_max_indirection_table_length;
        attr_.rss_hash_types = cfg.supported_hash_types & (rss_ipv4 | rss_tcp_ipv4 | rss_udp_ipv4 | rss_ipv6 |
                                                           rss_tcp_ipv6 | rss_udp_ipv6);
    }
    attr_.max_qp_wr = transport_->queue_max_size(0);
    attr_.max_send_sge = kMaxSendSge;
    attr_.max_recv_sge = kMaxRecvSge;
    attr_.recv_buffer_size = attr_.mtu + kEthHeader;
    attr_.offloads = (virtio::has_feature(features_, nf::CSUM) ? offload_tx_ip_csum : 0u) |
                     (virtio::has_feature(features_, nf::GUEST_CSUM) ? offload_rx_ip_csum : 0u);
    attr_.interrupt_vectors = vectors_;
    link_up_ = link().up;
    return {};
}

// §3.1.1: reset, ACKNOWLEDGE, DRIVER, features, FEATURES_OK. DRIVER_OK comes once the queues
// are set up (start_queues).
Result<void> Device::handshake() {
    if (vhost_) {   // features stay negotiated; the vrings stop (a new queue pair restarts them)
        stop_vhost_queues();
        return {};
    }
    const std::string where = vfio_->address().to_string();
    if (auto r = transport_->reset(); !r) return r;
    driver_ok_ = false;
    transport_->add_status(virtio::kStatusAcknowledge);
    transport_->add_status(virtio::kStatusDriver);
    const uint64_t offered = transport_->device_features();
    const uint64_t required = feature_bit(vf::VERSION_1) | feature_bit(vf::ACCESS_PLATFORM);
    if ((offered & required) != required) {
        transport_->add_status(virtio::kStatusFailed);   // §3.1.1: the driver gives up on the device
        return Error{ENOTSUP, str_cat(where, ": the virtio-net device does not offer ",
                                      !virtio::has_feature(offered, vf::VERSION_1) ? "VIRTIO_F_VERSION_1 (a legacy device)"
                                                                                   : "VIRTIO_F_ACCESS_PLATFORM",
                                      ": vfab drives it only through the IOMMU, as a virtio 1.x device "
                                      "(in QEMU: disable-legacy=on,iommu_platform=on)")};
    }
    // Not GUEST_CSUM: with it the device may deliver frames whose checksum is only partial
    // (NEEDS_CSUM, from a local sender), which the driver would have to complete in software.
    // CTRL_VQ only for MQ and RSS (which need it, §5.1.3.1).
    uint64_t wanted = feature_bit(nf::MAC) | feature_bit(nf::STATUS) | feature_bit(nf::CSUM);
    if (virtio::has_feature(offered, nf::CTRL_VQ) && virtio::has_feature(offered, nf::MQ))
        wanted |= feature_bit(nf::CTRL_VQ) | feature_bit(nf::MQ) | feature_bit(nf::RSS);
    if (opts_.event_idx) wanted |= feature_bit(vf::EVENT_IDX);
    if (opts_.in_order) wanted |= feature_bit(vf::IN_ORDER);
    if (opts_.ring == RingFormat::packed && !virtio::has_feature(offered, vf::RING_PACKED)) {
        transport_->add_status(virtio::kStatusFailed);
        return Error{ENOTSUP, str_cat(where, ": packed virtqueues were asked for but the device does not offer "
                                             "VIRTIO_F_RING_PACKED (in QEMU: packed=on)")};
    }
    if (opts_.ring != RingFormat::split) wanted |= feature_bit(vf::RING_PACKED);
    auto accepted = transport_->negotiate(wanted, required);
    if (!accepted) return accepted.take_error();
    features_ = *accepted;
    packed_ = virtio::has_feature(features_, vf::RING_PACKED);
    if (auto r = transport_->set_config_vector(kConfigVector); !r) return r;
    return {};
}

LinkState Device::link() const {
    LinkState l{true, 0, true};
    if (vhost_) {
        l.up = !removed_;
        return l;
    }
    if (virtio::has_feature(features_, nf::STATUS)) {
        uint16_t status = 0;
        transport_->read_device_config(offsetof(virtio::NetConfig, status), &status, 2);
        l.up = status & virtio::net_status::LINK_UP;
    }
    return l;
}

DeviceStats Device::stats() {
    std::lock_guard lock(mu_);
    DeviceStats s = retired_;
    for (const auto& qp : qps_)
        if (qp) {
            const QpStats q = qp->stats();
            s.tx_packets += q.tx_packets;
            s.tx_bytes += q.tx_bytes;
            s.rx_packets += q.rx_packets;
            s.rx_bytes += q.rx_bytes;
        }
    return s;
}

Event Device::next_event() {
    std::lock_guard lock(mu_);
    if (vhost_) {
        if (gone_reported_ || !vhost_hung_up()) return {};
        gone_reported_ = true;
        (void)events_.remove(vhost_->socket_fd());   // reported once
        return {EventType::device_removal};
    }
    if (removed_) return {};
    if (req_ && vfio::drain_eventfd(req_->eventfd(0))) {
        enter_error_state();
        removed_ = true;
        return {EventType::device_removal};
    }
    vfio::drain_eventfd(msix_->eventfd(kConfigVector));
    if (transport_->status() & virtio::kStatusNeedsReset) {   // §2.1.2
        enter_error_state();
        return {EventType::device_fatal};
    }
    return queue::link_change(link().up, link_up_);
}

// A virtio reset stops the device's use of every queue (§2.1.2); the QP flushes what it had.
void Device::enter_error_state() {
    for (const auto& qp : qps_)
        if (qp && qp->state_ == QpState::ready) qp->state_ = QpState::error;
    if (vhost_)
        stop_vhost_queues();
    else if (!removed_)
        (void)transport_->reset();
    driver_ok_ = false;
    queue::Control::wake_all(cqs_);
}

Result<void> Device::reset() {
    std::lock_guard lock(mu_);
    if (removed_)
        return Error{ENODEV, vhost_ ? str_cat("the vhost-user backend at ", vhost_->path(),
                                              " is gone: close the device and open it again once the backend runs")
                                    : str_cat(attr_.address.to_string(), ": the device was removed; close it")};
    enter_error_state();
    return handshake();
}

Device::~Device() {
    std::lock_guard lock(mu_);
    // The device stops touching the rings and buffers before any of them is unmapped.
    if (vhost_) {
        close_vhost();
        return;
    }
    if (!removed_) (void)transport_->reset();
    vfio_->disable_bus_master();
    (void)vfio_->disable_interrupts(vfio::IrqIndex::msix);
    qps_.clear();
    dead_qps_.clear();
    cqs_.clear();
    ctrl_.reset();
    pd_.reset();
}

Result<void> Device::set_multicast(std::span<const MacAddress> groups) {
    for (const auto& g : groups)
        if (!(g[0] & 1)) return Error{EINVAL, "set_multicast: a group is not a multicast address"};
    return {};   // no VIRTIO_NET_F_CTRL_RX: the device passes every multicast frame
}

}  // namespace vfab::virtio_net
