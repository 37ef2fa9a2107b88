// 82576 IEEE 1588 support (datasheet §7.9): SYSTIM counting nanoseconds, the transmit latch
// (TSYNCTXCTL / TXSTMP, armed by a descriptor's TSTAMP bit) and the receive latch (TSYNCRXCTL /
// RXSTMP, for frames an ETQF filter marks as 1588 and TSYNCRXCFG's message type). Each latch
// holds one time until it is read.
//
// The epoch is kept in software, as Linux's igb does for the 82576: SYSTIM runs free and
// set_clock_ns() records an offset that every time read goes through. TIMADJ would step SYSTIM
// itself, but QEMU adds it as two's complement where the 82576 takes sign and magnitude.
#include "device_impl.hpp"

namespace vfab::igb {

Result<void> DeviceImpl::enable_timestamps(const TimestampConfig& cfg) {
    std::lock_guard lock(mu_);
    if (removed_) return Error{ENODEV, str_cat(attr_.address.to_string(), ": the device was removed; close it")};
    timestamps_ = cfg;
    write_timestamps();
    return {};
}

void DeviceImpl::write_timestamps() {
    if (!timestamps_) return;
    const TimestampConfig& cfg = *timestamps_;
    if (bar_->read32(reg::TIMINCA) != reg::TIMINCA_1NS) bar_->write32(reg::TIMINCA, reg::TIMINCA_1NS);
    bar_->write32(reg::TSYNCTXCTL, cfg.tx ? reg::TSYNC_EN : 0);
    bar_->write32(reg::TSYNCRXCFG, uint32_t(cfg.rx_message) << 8);
    bar_->write32(reg::ETQF(reg::kPtpEtqf), cfg.rx ? reg::kEtherTypePtp | reg::ETQF_FILTER_ENABLE | reg::ETQF_1588 : 0);
    bar_->write32(reg::TSYNCRXCTL, cfg.rx ? reg::TSYNC_EN | reg::TSYNCRXCTL_TYPE_L2_V2 : 0);
    // Empty both latches: a time left from before would block the next one.
    (void)take_tx_timestamp();
    (void)take_rx_timestamp();
}

// SYSTIML first: reading it latches SYSTIMH (§8.16.2).
uint64_t DeviceImpl::clock_ns() {
    const uint64_t lo = bar_->read32(reg::SYSTIML);
    return (lo | uint64_t(bar_->read32(reg::SYSTIMH)) << 32) + clock_offset_;
}

void DeviceImpl::set_clock_ns(uint64_t ns) {
    std::lock_guard lock(mu_);
    clock_offset_ = 0;
    clock_offset_ = ns - clock_ns();   // modulo 2^64: a step back works as well
}

std::optional<uint64_t> DeviceImpl::take_tx_timestamp() {
    if (removed_ || !(bar_->read32(reg::TSYNCTXCTL) & reg::TSYNC_VALID)) return std::nullopt;
    const uint64_t lo = bar_->read32(reg::TXSTMPL);
    return (lo | uint64_t(bar_->read32(reg::TXSTMPH)) << 32) + clock_offset_;   // reading the high half frees the latch
}

std::optional<RxTimestamp> DeviceImpl::take_rx_timestamp() {
    if (removed_ || !(bar_->read32(reg::TSYNCRXCTL) & reg::TSYNC_VALID)) return std::nullopt;
    RxTimestamp t;
    const uint64_t lo = bar_->read32(reg::RXSTMPL);
    t.ns = (lo | uint64_t(bar_->read32(reg::RXSTMPH)) << 32) + clock_offset_;
    const uint32_t satrl = bar_->read32(reg::RXSATRL), satrh = bar_->read32(reg::RXSATRH);   // frees the latch
    t.source = satrl | uint64_t(satrh & 0xffff) << 32;
    t.sequence_id = uint16_t(satrh >> 16);
    return t;
}

}  // namespace vfab::igb
