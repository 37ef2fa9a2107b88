// 82576 physical function: bring-up (datasheet §4.5 initialization), reset, link, statistics,
// asynchronous events.
#include <cerrno>
#include <chrono>
#include <thread>

#include <unistd.h>

#include "../common/queue_control.hpp"
#include "../intel/intel_common.hpp"
#include "vfab/drivers/igbvf.hpp"
#include "../intel/device_handle_impl.hpp"
#include "device_impl.hpp"
#include "vfab/vfio/event_wait.hpp"

namespace vfab::igb {
namespace {

using namespace std::chrono_literals;

enum : uint64_t { kTagOther = 1, kTagReq = 2 };

using intel::wait_until;

}  // namespace

Result<std::unique_ptr<DeviceImpl>> DeviceImpl::open(const PciAddress& addr, const DeviceOptions& opts) {
    auto f = intel::open_function(addr, opts.vfio, kPciIds, "an Intel 82576 physical function (8086:10c9)", 0x20000,
                                  [](PciId id) { return contains(igbvf::kPciIds, id) ? ": it is a virtual function (igbvf)" : ""; });
    if (!f) return f.take_error();
    std::unique_ptr<DeviceImpl> dev(new DeviceImpl(std::move(f->dev), f->bar, std::move(*f->events)));
    if (auto r = dev->init(opts); !r) return r.take_error();
    return dev;
}

Result<void> DeviceImpl::init(const DeviceOptions& opts) {
    opts_ = opts;
    if (opts.mtu && (opts.mtu < 68 || opts.mtu > kMaxMtu))
        return Error{EINVAL, str_cat("igb: MTU ", opts.mtu, " is out of range: 68 to ", kMaxMtu, " (0: 1500)")};
    const std::string where = vfio_->address().to_string();
    if (auto r = vfio_->enable_bus_master(); !r) return r;
    if (auto r = hw_reset(); !r) return r;
    auto info = vfio_->irq_info(vfio::IrqIndex::msix);
    if (!info || info->count < 2)
        return Error{ENOTSUP, str_cat(where, ": the 82576 driver needs MSI-X with at least 2 vectors")};
    vectors_ = std::min<uint32_t>(info->count, 32);   // EIMS has one bit per vector
    other_vector_ = vectors_ - 1;
    cq_vectors_ = other_vector_;
    auto msix = vfio_->enable_interrupts(vfio::IrqIndex::msix, vectors_);
    if (!msix) return msix.take_error();
    msix_ = *msix;
    if (auto r = events_.add(msix_->eventfd(other_vector_), kTagOther); !r) return r;
    auto req = vfio_->watch_optional_interrupt(vfio::IrqIndex::req, events_, kTagReq);
    if (!req) return req.take_error();
    req_ = *req;
    hw_setup();

    if (auto r = init_common(opts.pd, "igb", "Intel 82576"); !r) return r;
    intel::read_station_address(*bar_, attr_.mac);
    attr_.mtu = opts.mtu ? opts.mtu : 1500;
    attr_.max_cq = vectors_ - 1;
    attr_.max_qp = std::min(reg::kRssQueues, attr_.max_cq);
    attr_.max_qp_wr = kMaxQueueDepth;
    attr_.max_send_sge = kMaxSendSge;
    attr_.max_recv_sge = 1;
    attr_.recv_buffer_size = attr_.mtu > 1500 ? reg::kRxBufferSizeJumbo : reg::kRxBufferSize;
    attr_.offloads = offload_tx_ip_csum | (opts.rx_checksum ? uint32_t(offload_rx_ip_csum) : 0u) | offload_tx_timestamp |
                     offload_rx_timestamp;
    attr_.interrupt_vectors = vectors_;
    attr_.rss_key_size = reg::kRssKeyBytes;
    attr_.rss_table_size = reg::kRetaEntries;
    attr_.rss_hash_types = rss_ipv4 | rss_tcp_ipv4 | rss_udp_ipv4 | rss_ipv6 | rss_tcp_ipv6 | rss_udp_ipv6;
    qps_.resize(attr_.max_qp);
    layout_ = {0xc000, 0xe000, 0x40};   // the PF's queue blocks (§8.10)

    if (opts.link_timeout_ms > 0) wait_until([&] { return link().up; }, std::chrono::milliseconds(opts.link_timeout_ms));
    link_up_ = link().up;
    return {};
}

// §4.3.1 software reset: stop receive and transmit, let bus-master requests drain, CTRL.RST.
Result<void> DeviceImpl::hw_reset() {
    const std::string where = vfio_->address().to_string();
    bar_->write32(reg::IMC, ~0u);
    bar_->write32(reg::EIMC, ~0u);
    bar_->write32(reg::RCTL, 0);
    bar_->write32(reg::TCTL, reg::TCTL_PSP);
    if (auto r = intel::software_reset(*bar_, where, "82576"); !r) return r;
    bar_->write32(reg::IMC, ~0u);
    bar_->write32(reg::EIMC, ~0u);
    (void)bar_->read32(reg::ICR);
    return {};
}

// Everything the driver relies on, whatever the reset left: link, address, MSI-X routing with
// auto-clear and auto-mask (one notification per arm()), no throttling, checksums, RSS off.
void DeviceImpl::hw_setup() {
    bar_->write32(reg::CTRL_EXT, bar_->read32(reg::CTRL_EXT) | reg::CTRL_EXT_DRV_LOAD);
    uint32_t ctrl = bar_->read32(reg::CTRL);
    ctrl &= ~(reg::CTRL_FRCSPD | reg::CTRL_FRCDPX | reg::CTRL_PHY_RST | reg::CTRL_RST | reg::CTRL_GIO_MASTER_DISABLE |
              reg::CTRL_VME);
    bar_->write32(reg::CTRL, ctrl | reg::CTRL_SLU);
    // Restart auto-negotiation (§4.6.7.1): link comes up when it completes.
    bar_->write32(reg::MDIC, reg::kPhyAddr << reg::MDIC_PHY_SHIFT | reg::PHY_BMCR << reg::MDIC_REG_SHIFT |
                                 reg::MDIC_OP_WRITE | reg::BMCR_SPEED1000 | reg::BMCR_FULL_DUPLEX | reg::BMCR_AN_ENABLE |
                                 reg::BMCR_RESTART_AN);
    wait_until([&] { return bar_->read32(reg::MDIC) & (reg::MDIC_READY | reg::MDIC_ERROR); }, 10ms);
    if (opts_.mac) intel::write_station_address(*bar_, *opts_.mac);
    intel::write_multicast_table(*bar_, reg::MTA, multicast_);   // set_multicast()'s, kept across resets

    // Every queue off until a queue pair starts it (the reset leaves queue 0 enabled, §8.10.10).
    for (uint32_t q = 0; q < reg::kMaxQueues; ++q) {
        bar_->write32(reg::RXDCTL(q), 0);
        bar_->write32(reg::TXDCTL(q), 0);
    }
    bar_->write32(reg::GPIE, reg::GPIE_MULTIPLE_MSIX | reg::GPIE_EIAME | reg::GPIE_PBA | reg::GPIE_NSICR);
    for (uint32_t v = 0; v < vectors_; ++v) bar_->write32(reg::EITR(v), 0);
    for (uint32_t q = 0; q < 8; ++q) bar_->write32(reg::ivar_reg(q), 0);
    bar_->write32(reg::IVAR_MISC, (reg::IVAR_VALID | other_vector_) << 8);
    const uint32_t queue_vectors = (1u << other_vector_) - 1;
    bar_->write32(reg::EIAC, queue_vectors);   // queue vectors clear their cause when they fire
    bar_->write32(reg::EIAM, queue_vectors);   // ... and mask themselves until the next arm()
    (void)bar_->read32(reg::ICR);
    bar_->write32(reg::IMS, reg::ICR_LSC);
    bar_->write32(reg::EIMS, 1u << other_vector_);

    uint32_t rxcsum = reg::RXCSUM_PCSD;   // the RSS hash in the write-back
    if (opts_.rx_checksum) rxcsum |= reg::RXCSUM_IPOFLD | reg::RXCSUM_TUOFLD;
    bar_->write32(reg::RXCSUM, rxcsum);
    write_rss();
    write_timestamps();
    bar_->write32(reg::TCTL, reg::TCTL_EN | reg::TCTL_PSP | reg::TCTL_CT | reg::TCTL_COLD);
    uint32_t rctl = reg::RCTL_EN | reg::RCTL_BAM | reg::RCTL_SECRC;
    if (opts_.mtu > 1500) {   // (hw_setup runs before attr_ is filled in)
        rctl |= reg::RCTL_LPE;
        bar_->write32(reg::RLPML, opts_.mtu + kEthHeader + 4 + 4);   // + a VLAN tag + the FCS
    }
    if (opts_.promiscuous) rctl |= reg::RCTL_UPE | reg::RCTL_MPE;
    bar_->write32(reg::RCTL, rctl);
    for (uint32_t v = 0; v < vectors_; ++v) vfio::drain_eventfd(msix_->eventfd(v));
}

LinkState DeviceImpl::link() const { return intel::link_from_status(bar_->read32(reg::STATUS)); }

void DeviceImpl::accumulate_stats() {
    if (!removed_) intel::accumulate_stats(*bar_, stats_);
}

DeviceStats DeviceImpl::stats() {
    std::lock_guard lock(mu_);
    accumulate_stats();
    return stats_;
}

Event DeviceImpl::next_event() {
    std::lock_guard lock(mu_);
    if (removed_) return {};
    if (req_ && vfio::drain_eventfd(req_->eventfd(0))) {
        enter_error_state();
        removed_ = true;
        return {EventType::device_removal};
    }
    const bool other = vfio::drain_eventfd(msix_->eventfd(other_vector_)) != 0;
    // One STATUS read a call: all ones when the device is gone, else the link state below.
    const uint32_t status = bar_->read32(reg::STATUS);
    if (status == 0xffffffffu) {
        removed_ = true;
        enter_error_state();
        return {EventType::device_fatal};
    }
    // Reset behind the driver's back (a function-level reset through sysfs, say): the device
    // forgot its set-up, CTRL_EXT.DRV_LOAD with it (82576 datasheet §8.2.3). Reported once; reset() recovers.
    if (!setup_lost_ && !(bar_->read32(reg::CTRL_EXT) & reg::CTRL_EXT_DRV_LOAD)) {
        setup_lost_ = true;
        enter_error_state();
        return {EventType::device_fatal};
    }
    if (other) {
        (void)bar_->read32(reg::ICR);   // clears the causes (GPIE.NSICR)
        bar_->write32(reg::EIMS, 1u << other_vector_);
    }
    return queue::link_change(intel::link_from_status(status).up, link_up_);
}

Result<void> DeviceImpl::reset() {
    std::lock_guard lock(mu_);
    if (removed_) return Error{ENODEV, str_cat(attr_.address.to_string(), ": the device was removed; close it")};
    enter_error_state();
    if (auto r = hw_reset(); !r) return r;
    hw_setup();
    setup_lost_ = false;
    return {};
}

DeviceImpl::~DeviceImpl() {
    std::lock_guard lock(mu_);
    // Quiesce before anything is freed (rings and registered memory stop being DMA targets).
    stop_all_queues();
    if (!removed_) {
        bar_->write32(reg::IMC, ~0u);
        bar_->write32(reg::EIMC, ~0u);
        (void)hw_reset();
        bar_->write32(reg::CTRL_EXT, bar_->read32(reg::CTRL_EXT) & ~reg::CTRL_EXT_DRV_LOAD);
    }
    vfio_->disable_bus_master();
    (void)vfio_->disable_interrupts(vfio::IrqIndex::msix);
    release_all();
}

Result<void> DeviceImpl::set_multicast(std::span<const MacAddress> groups) {
    std::lock_guard lock(mu_);
    return intel::set_pf_multicast(*bar_, reg::MTA, removed_, attr_.address, multicast_, groups);
}

}  // namespace vfab::igb

// The public handle: intel::DeviceHandle's calls, and the driver's own below.
template class vfab::intel::DeviceHandle<vfab::igb::Device, vfab::igb::DeviceImpl, vfab::igb::QueueTraits,
                                         vfab::igb::DeviceOptions>;

namespace vfab::igb {

Device::Device(std::unique_ptr<DeviceImpl> impl) : DeviceHandle(std::move(impl)) {}

Result<void> Device::enable_timestamps(const TimestampConfig& cfg) { return impl_->enable_timestamps(cfg); }
uint64_t Device::clock_ns() { return impl_->clock_ns(); }
void Device::set_clock_ns(uint64_t ns) { impl_->set_clock_ns(ns); }
std::optional<uint64_t> Device::take_tx_timestamp() { return impl_->take_tx_timestamp(); }
std::optional<RxTimestamp> Device::take_rx_timestamp() { return impl_->take_rx_timestamp(); }

}  // namespace vfab::igb
