// 82574L bring-up, reset, link, statistics and asynchronous events.
#include <cerrno>
#include <chrono>
#include <thread>

#include <unistd.h>

#include "../common/queue_control.hpp"
#include "../intel/intel_common.hpp"
#include "../intel/device_handle_impl.hpp"
#include "device_impl.hpp"
#include "vfab/log.hpp"
#include "vfab/vfio/event_wait.hpp"

namespace vfab::e1000e {
namespace {

using namespace std::chrono_literals;


// Event tags in the device's epoll set.
enum : uint64_t { kTagOther = 1, kTagReq = 2, kTagErr = 3 };

using intel::wait_until;

}  // namespace

Result<std::unique_ptr<DeviceImpl>> DeviceImpl::open(const PciAddress& addr, const DeviceOptions& opts) {
    auto f = intel::open_function(addr, opts.vfio, kPciIds, "an Intel 82574L (8086:10d3)", 0x10000, [](PciId) {
        return ": open it with vfab::Device::open(), which picks the driver for its IDs";
    });
    if (!f) return f.take_error();
    std::unique_ptr<DeviceImpl> dev(new DeviceImpl(std::move(f->dev), f->bar, std::move(*f->events)));
    if (auto r = dev->init(opts); !r) return r.take_error();
    return dev;
}

Result<void> DeviceImpl::init(const DeviceOptions& opts) {
    opts_ = opts;
    chip_ = "the 82574L";
    cq_vectors_ = kMaxCq;
    qps_.resize(1);   // queue 0 (layout_ is the 82574L's)
    if (opts.mtu && (opts.mtu < 68 || opts.mtu > kMaxMtu))
        return Error{EINVAL, str_cat("e1000e: MTU ", opts.mtu, " is out of range: 68 to ", kMaxMtu, " (0: 1500)")};
    if (auto r = vfio_->enable_bus_master(); !r) return r;
    if (auto r = hw_reset(); !r) return r;

    auto msix = vfio_->enable_interrupts(vfio::IrqIndex::msix, reg::kMsixVectors);
    if (!msix)
        return Error{msix.error().code, str_cat(msix.error().message, " — the driver needs the 82574L's 5 MSI-X vectors")};
    msix_ = *msix;
    if (auto r = events_.add(msix_->eventfd(kOtherVector), kTagOther); !r) return r;
    // The kernel's request to give the device back (unbind, hot unplug) and AER errors; a
    // device without them (conventional PCI) simply never reports those events.
    for (auto [index, tag, slot] : {std::tuple{vfio::IrqIndex::req, kTagReq, &req_}, std::tuple{vfio::IrqIndex::err, kTagErr, &err_}}) {
        auto irq = vfio_->watch_optional_interrupt(index, events_, tag);
        if (!irq) return irq.take_error();
        *slot = *irq;
    }
    if (auto r = hw_setup(); !r) return r;
    trailing_notify_ns_ = probe_trailing_notification();

    if (auto r = init_common(opts.pd, "e1000e", "Intel 82574L"); !r) return r;
    intel::read_station_address(*bar_, attr_.mac);
    attr_.mtu = opts.mtu ? opts.mtu : 1500;
    attr_.max_qp = 1;
    attr_.max_cq = kMaxCq;
    attr_.max_qp_wr = kMaxQueueDepth;
    attr_.max_send_sge = kMaxSendSge;
    attr_.max_recv_sge = 1;
    attr_.recv_buffer_size = attr_.mtu > 1500 ? reg::kRxBufferSizeJumbo : reg::kRxBufferSize;
    attr_.offloads = offload_tx_ip_csum | (opts.rx_checksum ? uint32_t(offload_rx_ip_csum) : 0u);
    attr_.interrupt_vectors = reg::kMsixVectors;

    if (opts.link_timeout_ms > 0)
        wait_until([&] { return link().up; }, std::chrono::milliseconds(opts.link_timeout_ms));
    link_up_ = link().up;
    return {};
}

// Software reset, §4.6.3 and the sequence of §14.5 (initialization): mask interrupts, stop
// receive and transmit, disable bus mastering requests and let them drain, then CTRL.RST.
Result<void> DeviceImpl::hw_reset() {
    bar_->write32(reg::IMC, ~0u);
    bar_->write32(reg::RCTL, 0);
    bar_->write32(reg::TCTL, reg::TCTL_PSP);
    if (auto r = intel::software_reset(*bar_, vfio_->address().to_string(), "82574L"); !r) return r;
    bar_->write32(reg::IMC, ~0u);
    bar_->write32(reg::ICR, ~0u);   // write 1 to clear: reads do not clear it under MSI-X
    return {};
}

// Everything the driver relies on is programmed here, whatever the reset left behind.
Result<void> DeviceImpl::hw_setup() {
    bar_->write32(reg::CTRL_EXT, bar_->read32(reg::CTRL_EXT) | reg::CTRL_EXT_DRV_LOAD);
    uint32_t ctrl = bar_->read32(reg::CTRL);
    ctrl &= ~(reg::CTRL_FRCSPD | reg::CTRL_FRCDPX | reg::CTRL_PHY_RST | reg::CTRL_RST | reg::CTRL_GIO_MASTER_DISABLE |
              reg::CTRL_VME);
    bar_->write32(reg::CTRL, ctrl | reg::CTRL_SLU | reg::CTRL_ASDE);
    if (opts_.mac) intel::write_station_address(*bar_, *opts_.mac);
    intel::write_multicast_table(*bar_, reg::MTA, multicast_);   // set_multicast()'s, kept across resets
    // No interrupt moderation: completions are written back and signalled at once.
    bar_->write32(reg::ITR, 0);
    for (uint32_t v = 0; v < reg::kMsixVectors; ++v) bar_->write32(reg::EITR0 + 4 * v, 0);
    for (uint32_t r : {reg::RDTR, reg::RADV, reg::TIDV, reg::TADV}) bar_->write32(r, 0);
    bar_->write32(reg::RXCSUM, opts_.rx_checksum ? reg::RXCSUM_IPOFLD | reg::RXCSUM_TUOFLD : 0);
    bar_->write32(reg::RFCTL, reg::RFCTL_EXSTEN);
    // Queue causes go to their CQ's vector (set when a QP starts), link changes to "other".
    // EIAC: a cause is cleared from ICR and IMS when its vector fires, which makes each arm()
    // good for one notification.
    if (qps_[0]) {
        const QueueRegs q = queue_regs(*qps_[0]);
        program_ivar(&q);
    } else {
        program_ivar(nullptr);
    }
    bar_->write32(reg::EIAC, reg::ICR_RXQ0 | reg::ICR_TXQ0 | reg::ICR_OTHER);
    bar_->write32(reg::ICR, ~0u);
    bar_->write32(reg::IMS, reg::ICR_LSC | reg::ICR_OTHER);
    for (uint32_t v = 0; v < reg::kMsixVectors; ++v) vfio::drain_eventfd(msix_->eventfd(v));
    return {};
}

// QEMU's 82574L model before QEMU 10.1 moderates every vector (EITR cannot be 0 there: at least
// 500 × 256 ns) and, when that timer runs out, notifies the vector again whether or not a cause
// is pending: each notification is followed by one with nothing behind it, which would wake an
// application asleep on its completion channel for nothing. Real hardware with EITR = 0 sends
// none. Probed once at open, on a completion queue's vector no queue uses yet: a cause raised
// through ICS: is the notification followed by a second within kProbeWindow? Returns how long
// arm() may wait for one (CompletionQueue::arm), 0 when none came.
int64_t DeviceImpl::probe_trailing_notification() {
    using std::chrono::milliseconds;
    constexpr uint32_t kVector = 0;
    constexpr auto kFirst = milliseconds(20), kProbeWindow = milliseconds(5);
    const int efd = msix_->eventfd(kVector);
    bar_->write32(reg::IVAR, (reg::IVAR_VALID | kOtherVector) << reg::IVAR_OTHER_SHIFT |
                                 (reg::IVAR_VALID | kVector) << reg::IVAR_TXQ0_SHIFT);
    // The timer runs 500 × 256 ns (128 µs) of the emulator's clock; under load it fires later:
    // arm() waits up to kTrailingWait, which a trailing notification ends at once.
    constexpr int64_t kTrailingWait = 5'000'000;
    int64_t trailing = 0;
    // Twice at most: a notification raised while the vector's timer still runs (after one of
    // the reset's) is held until the timer's end and has no trailing one.
    for (int attempt = 0; attempt < 2 && !trailing; ++attempt) {
        std::this_thread::sleep_for(kProbeWindow);   // any timer of the vector has run out
        vfio::drain_eventfd(efd);
        bar_->write32(reg::IMS, reg::ICR_TXQ0);
        bar_->write32(reg::ICS, reg::ICR_TXQ0);
        // The first notification, then everything within kProbeWindow of it, read at once.
        if (auto ready = vfio::wait_any({&efd, 1}, int(kFirst.count())); !ready || *ready < 0) continue;
        std::this_thread::sleep_for(kProbeWindow);
        if (vfio::drain_eventfd(efd) >= 2) trailing = kTrailingWait;
    }
    bar_->write32(reg::IMC, reg::ICR_TXQ0);
    bar_->write32(reg::ICR, reg::ICR_TXQ0);
    program_ivar(nullptr);
    vfio::drain_eventfd(efd);
    if (trailing)
        log(LogLevel::info, str_cat(vfio_->address().to_string(), ": the device notifies a vector a second time with no "
                                    "cause (QEMU's 82574L model): arm() takes that one first"));
    return trailing;
}

void DeviceImpl::program_ivar(const QueueRegs* q) {
    uint32_t ivar = (reg::IVAR_VALID | kOtherVector) << reg::IVAR_OTHER_SHIFT;
    if (q) {
        ivar |= (reg::IVAR_VALID | q->rx_vector) << reg::IVAR_RXQ0_SHIFT;
        ivar |= (reg::IVAR_VALID | q->tx_vector) << reg::IVAR_TXQ0_SHIFT;
    }
    bar_->write32(reg::IVAR, ivar);
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
        removed_ = true;   // from now on the registers are not touched
        return {EventType::device_removal};
    }
    if (err_ && vfio::drain_eventfd(err_->eventfd(0))) {
        enter_error_state();
        return {EventType::device_fatal};
    }
    const bool other = vfio::drain_eventfd(msix_->eventfd(kOtherVector)) != 0;
    // One STATUS read a call: all ones when the device is gone, else the link state below.
    const uint32_t status = bar_->read32(reg::STATUS);
    if (status == 0xffffffffu) {   // surprise removal
        removed_ = true;
        enter_error_state();
        return {EventType::device_fatal};
    }
    // Reset behind the driver's back (a function-level reset through sysfs, say): the device
    // forgot its set-up, CTRL_EXT.DRV_LOAD with it (82574L datasheet §10.2.2.3). Reported once; reset() recovers.
    if (!setup_lost_ && !(bar_->read32(reg::CTRL_EXT) & reg::CTRL_EXT_DRV_LOAD)) {
        setup_lost_ = true;
        enter_error_state();
        return {EventType::device_fatal};
    }
    if (other) {
        // Clear the "other" causes, then re-arm: EIAC masked OTHER when it fired.
        bar_->write32(reg::ICR, reg::ICR_LSC | reg::ICR_OTHER | reg::ICR_RXO | reg::ICR_RXDMT0);
        bar_->write32(reg::IMS, reg::ICR_LSC | reg::ICR_OTHER);
    }
    return queue::link_change(intel::link_from_status(status).up, link_up_);
}

// Stops the device's DMA and puts the queue pair in the error state: its outstanding WRs
// complete with wr_flush_error (or success, for those the device had finished).
void DeviceImpl::enter_error_state() {
    QueueSet::enter_error_state();
    vfio_->disable_bus_master();
}

Result<void> DeviceImpl::reset() {
    std::lock_guard lock(mu_);
    if (removed_) return Error{ENODEV, str_cat(attr_.address.to_string(), ": the device was removed; close it")};
    enter_error_state();
    if (auto r = vfio_->enable_bus_master(); !r) return r;
    if (auto r = hw_reset(); !r) return r;
    if (auto r = hw_setup(); !r) return r;
    setup_lost_ = false;
    return {};
}

DeviceImpl::~DeviceImpl() {
    std::lock_guard lock(mu_);
    // Quiesce before anything is freed: the rings and registered memory must not be DMA
    // targets any more when their IOMMU mappings go.
    stop_all_queues();
    if (!removed_) {
        bar_->write32(reg::IMC, ~0u);
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

}  // namespace vfab::e1000e

// The public handle: intel::DeviceHandle's calls.
template class vfab::intel::DeviceHandle<vfab::e1000e::Device, vfab::e1000e::DeviceImpl, vfab::e1000e::QueueTraits,
                                         vfab::e1000e::DeviceOptions>;

namespace vfab::e1000e {
Device::Device(std::unique_ptr<DeviceImpl> impl) : DeviceHandle(std::move(impl)) {}
}  // namespace vfab::e1000e
