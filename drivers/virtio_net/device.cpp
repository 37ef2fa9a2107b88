// virtio-net over either virtio transport: the device status handshake and feature negotiation
// (VIRTIO 1.2 §3.1.1), link state from the device configuration (§5.1.4), events, reset, shutdown.
#include <cerrno>

#include "../common/queue_control.hpp"
#include "device_state.hpp"
#include "vfab/vfio/device.hpp"
#include "vfab/vfio/event_wait.hpp"

namespace vfab::virtio_net {
namespace {

using virtio::feature_bit;
namespace vf = virtio::feature;
namespace nf = virtio::net_feature;

enum : uint64_t { kTagConfig = 1, kTagGone = 2 };

}  // namespace

const char* to_string(RingFormat f) noexcept {
    switch (f) {
    case RingFormat::automatic: return "automatic";
    case RingFormat::split: return "split";
    case RingFormat::packed: return "packed";
    }
    return "?";
}

Device::Device(std::unique_ptr<DeviceState> s) : s_(std::move(s)) { s_->self_ = this; }

namespace {
Result<void> check_options(const DeviceOptions& opts) {
    if (opts.mtu && (opts.mtu < 68 || opts.mtu > kMaxMtu))
        return Error{EINVAL, str_cat("virtio-net: MTU ", opts.mtu, " is out of range: 68 to ", kMaxMtu, " (0: 1500)")};
    return {};
}
}  // namespace

Result<std::unique_ptr<Device>> Device::open(const PciAddress& addr, const DeviceOptions& opts) {
    if (auto r = check_options(opts); !r) return r.take_error();
    auto vdev = vfio::Device::open(addr, opts.vfio);
    if (!vdev) return vdev.take_error();
    auto id = (*vdev)->pci_id();
    if (!id) return id.take_error();
    if (!contains(kPciIds, *id))
        return Error{ENODEV, str_cat(addr.to_string(), " is ", std::hex, id->vendor, ":", id->device,
                                     ", not a modern virtio-net device (1af4:1041)",
                                     *id == PciId{0x1af4, 0x1000} ? ": it is transitional; in QEMU add disable-legacy=on" : "")};
    return DeviceState::open(virtio::open_vfio_pci(std::move(*vdev)), opts);
}

Result<std::unique_ptr<Device>> Device::open_vhost_user(std::string_view socket_path, const DeviceOptions& opts) {
    if (auto r = check_options(opts); !r) return r.take_error();
    return DeviceState::open(virtio::open_vhost_user(socket_path), opts);
}

Result<std::unique_ptr<Device>> DeviceState::open(Result<std::unique_ptr<virtio::Transport>> t, const DeviceOptions& opts) {
    if (!t) return t.take_error();
    auto events = vfio::EventWaiter::create();
    if (!events) return events.take_error();
    std::unique_ptr<Device> dev(new Device(std::make_unique<DeviceState>(std::move(*t), std::move(*events))));
    if (auto r = dev->s_->init(opts); !r) return r.take_error();
    return dev;
}

Result<void> DeviceState::init(const DeviceOptions& opts) {
    opts_ = opts;
    virtio::Transport& t = *transport_;
    if (auto r = t.watch(events_, kTagConfig, kTagGone); !r) return r;
    vectors_ = t.vectors();
    if (auto r = negotiate(); !r) return r;

    auto pd = dma::ProtectionDomain::create(t.address_space(), opts.pd);
    if (!pd) return pd.take_error();
    pd_ = std::move(*pd);

    virtio::NetConfig cfg{};
    t.read_config(0, &cfg, std::min<uint32_t>(sizeof cfg, t.config_length()));
    // Several queue pairs (§5.1.5): receiveqN/transmitqN for N up to max_virtqueue_pairs, then
    // the control virtqueue.
    const bool mq = virtio::has_feature(features_, nf::MQ);
    const uint32_t pairs = mq ? std::max<uint32_t>(cfg.max_virtqueue_pairs, 1) : 1;
    ctrl_index_ = uint16_t(2 * pairs);
    if (virtio::has_feature(features_, nf::CTRL_VQ)) {
        auto ctrl = ControlQueue::create(t.address_space(), t.memory_options(), packed_, virtio::RingFeatures::from(features_));
        if (!ctrl) return ctrl.take_error();
        ctrl_ = std::move(*ctrl);
    }
    qps_.resize(pairs);
    attr_.provider = "virtio-net";
    attr_.name = str_cat("virtio-net (", t.kind(), ")");
    attr_.address = t.pci_address().value_or(PciAddress{});
    attr_.vendor_id = kPciIds[0].vendor;   // over vhost-user: what a virtio-net device over PCI would be
    attr_.device_id = kPciIds[0].device;
    if (virtio::has_feature(features_, nf::MAC)) {
        std::copy(cfg.mac, cfg.mac + 6, attr_.mac);
    } else {
        const std::array<uint8_t, 6> mac = opts.mac.value_or(kDefaultVhostMac);
        std::copy(mac.begin(), mac.end(), attr_.mac);
    }
    attr_.mtu = opts.mtu ? opts.mtu : kDefaultMtu;
    attr_.max_qp = pairs;
    attr_.max_cq = vectors_ - 1;   // vector 0 is for configuration changes
    if (virtio::has_feature(features_, nf::RSS)) {
        attr_.rss_key_size = cfg.rss_max_key_size;
        attr_.rss_table_size = cfg.rss_max_indirection_table_length;
        attr_.rss_hash_types = cfg.supported_hash_types & (rss_ipv4 | rss_tcp_ipv4 | rss_udp_ipv4 | rss_ipv6 |
                                                           rss_tcp_ipv6 | rss_udp_ipv6);
    }
    attr_.max_qp_wr = t.queue_max_size(0);
    attr_.max_send_sge = kMaxSendSge;
    attr_.max_recv_sge = kMaxRecvSge;
    attr_.recv_buffer_size = attr_.mtu + kEthHeader;
    attr_.offloads = (virtio::has_feature(features_, nf::CSUM) ? offload_tx_ip_csum : 0u) |
                     (virtio::has_feature(features_, nf::GUEST_CSUM) ? offload_rx_ip_csum : 0u);
    attr_.interrupt_vectors = vectors_;
    attr_.frame_headroom = kNetHdrSize;   // QpInitAttr::hdr_in_headroom
    link_up_ = link().up;
    return {};
}

// §3.1.1: reset, ACKNOWLEDGE, DRIVER, features, FEATURES_OK (the transport adds what it needs
// and drops what it cannot carry). DRIVER_OK comes once the queues are set up (start_device).
Result<void> DeviceState::negotiate() {
    virtio::Transport& t = *transport_;
    auto offered = t.begin_negotiation();
    if (!offered) return offered.take_error();
    offered_ = *offered;
    // Not GUEST_CSUM: with it the device may deliver frames whose checksum is only partial
    // (NEEDS_CSUM, from a local sender), which the driver would have to complete in software.
    // CTRL_VQ only for MQ and RSS (which need it, §5.1.3.1).
    uint64_t wanted = feature_bit(nf::MAC) | feature_bit(nf::STATUS) | feature_bit(nf::CSUM);
    if (virtio::has_feature(offered_, nf::CTRL_VQ) && virtio::has_feature(offered_, nf::MQ))
        wanted |= feature_bit(nf::CTRL_VQ) | feature_bit(nf::MQ) | feature_bit(nf::RSS);
    if (opts_.event_idx) wanted |= feature_bit(vf::EVENT_IDX);
    if (opts_.in_order) wanted |= feature_bit(vf::IN_ORDER);
    if (opts_.ring == RingFormat::packed && !virtio::has_feature(offered_, vf::RING_PACKED)) {
        t.fail();
        return Error{ENOTSUP, str_cat("packed virtqueues were asked for but ", t.where(),
                                      " does not offer VIRTIO_F_RING_PACKED: use RingFormat::split or automatic",
                                      t.device_hint("packed=on"))};
    }
    if (opts_.ring != RingFormat::split) wanted |= feature_bit(vf::RING_PACKED);
    auto accepted = t.negotiate(wanted, feature_bit(vf::VERSION_1));
    if (!accepted) return accepted.take_error();
    features_ = *accepted;
    packed_ = virtio::has_feature(features_, vf::RING_PACKED);
    return {};
}

LinkState DeviceState::link() const {
    LinkState l{!removed_, 0, true};
    if (!removed_ && virtio::has_feature(features_, nf::STATUS)) {
        uint16_t status = 0;
        transport_->read_config(offsetof(virtio::NetConfig, status), &status, 2);
        l.up = status & virtio::net_status::LINK_UP;
    }
    return l;
}

DeviceStats DeviceState::stats() {
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

Event DeviceState::next_event() {
    std::lock_guard lock(mu_);
    if (!gone_reported_ && check_gone()) {
        gone_reported_ = true;   // reported once
        transport_->removal_reported(events_);
        return {EventType::device_removal};
    }
    if (removed_) return {};
    if (!fatal_reported_ && transport_->needs_reset()) {   // §2.1.2; reported once, reset() recovers
        fatal_reported_ = true;
        enter_error_state();
        return {EventType::device_fatal};
    }
    // A running device moves config_generation with its config; before DRIVER_OK it need not
    // (QEMU's does not: it notifies configuration changes only to a running driver), so the
    // status is read every time until the queues start.
    if (!driver_ok_) {
        link_cached_ = false;
        link_now_ = link().up;
    } else if (const uint8_t gen = transport_->config_generation(); !link_cached_ || gen != link_gen_) {
        link_gen_ = gen;   // read before the status: a change in between is seen next time
        link_now_ = link().up;
        link_cached_ = true;
    }
    return queue::link_change(link_now_, link_up_);
}

// Caller holds mu_. True once the device is gone; the first time, the queue pairs go to the
// error state (outstanding WRs flush) and every completion channel fires.
bool DeviceState::check_gone() {
    if (!removed_ && transport_->gone()) {
        enter_error_state();
        removed_ = true;
    }
    return removed_;
}

void CompletionQueue::check_gone() noexcept {
    std::unique_lock lock(dev_->s_->mu_, std::try_to_lock);   // busy: the next check will do
    if (lock) (void)dev_->s_->check_gone();
}

// A virtio reset stops the device's use of every queue (§2.1.2); the QP flushes what it had.
void DeviceState::enter_error_state() {
    for (const auto& qp : qps_)
        if (qp && qp->state_ == QpState::ready) qp->state_ = QpState::error;
    if (!removed_) transport_->stop();
    driver_ok_ = false;
    queue::Control::wake_all(cqs_);
}

Result<void> DeviceState::reset() {
    std::lock_guard lock(mu_);
    if (removed_) return Error{ENODEV, transport_->gone_message()};
    enter_error_state();
    if (auto r = transport_->restart(); !r) return r;
    fatal_reported_ = false;
    return {};
}

DeviceState::~DeviceState() {
    std::lock_guard lock(mu_);
    // The device stops touching the rings and buffers before any of them is unmapped.
    transport_->shutdown();
    qps_.clear();
    dead_qps_.clear();
    cqs_.clear();
    ctrl_.reset();
    pd_.reset();
}

// ---- Device: the calls, over its state ----

Device::~Device() = default;
const DeviceAttr& Device::attr() const { return s_->attr_; }
LinkState Device::link() const { return s_->link(); }
DeviceStats Device::stats() { return s_->stats(); }
dma::ProtectionDomain& Device::pd() { return *s_->pd_; }
uint64_t Device::features() const { return s_->features_; }
RingFormat Device::ring_format() const { return s_->packed_ ? RingFormat::packed : RingFormat::split; }
Result<CompletionQueue*> Device::create_cq(uint32_t cqe) { return s_->create_cq(cqe); }
Result<QueuePair*> Device::create_qp(const QpInitAttr& attr) { return s_->create_qp(attr); }
Result<void> Device::configure_rss(const RssConfig& cfg) { return s_->configure_rss(cfg); }
int Device::event_fd() const { return s_->events_.fd(); }
Event Device::next_event() { return s_->next_event(); }
Result<void> Device::reset() { return s_->reset(); }
vfio::Device& Device::vfio() { return *s_->transport_->vfio_device(); }
bool Device::is_vhost_user() const { return !s_->transport_->pci_address(); }

Result<void> Device::set_multicast(std::span<const MacAddress> groups) {
    for (const auto& g : groups)
        if (!(g[0] & 1)) return Error{EINVAL, "set_multicast: a group is not a multicast address"};
    return {};   // no VIRTIO_NET_F_CTRL_RX: the device passes every multicast frame
}

}  // namespace vfab::virtio_net
