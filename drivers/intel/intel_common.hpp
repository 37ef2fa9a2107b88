// What vfab's drivers for Intel's e1000 family (82574L: e1000e, 82576: igb) share on the
// control path: the register layout they have in common (device status, the software reset
// handshake, the clear-on-read statistics, datasheets §8/§10 of either), and small helpers.
// Internal to drivers/; the fast paths stay in each driver's header (their descriptors differ).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "vfab/result.hpp"
#include "vfab/types.hpp"
#include "vfab/vfio/device.hpp"
#include "vfab/vfio/event_wait.hpp"
#include "vfab/vfio/region.hpp"

namespace vfab::intel {

namespace reg {
inline constexpr uint32_t CTRL = 0x0000;
inline constexpr uint32_t STATUS = 0x0008;
inline constexpr uint32_t CTRL_GIO_MASTER_DISABLE = 1u << 2;
inline constexpr uint32_t CTRL_RST = 1u << 26;
inline constexpr uint32_t STATUS_FD = 1u << 0;
inline constexpr uint32_t STATUS_LU = 1u << 1;
inline constexpr uint32_t STATUS_SPEED_SHIFT = 6;   // 00: 10, 01: 100, 1x: 1000 Mb/s
inline constexpr uint32_t STATUS_GIO_MASTER_ENABLE = 1u << 19;
// Statistics, clear on read; the 64-bit octet counters clear when their high half is read.
inline constexpr uint32_t CRCERRS = 0x4000, ALGNERRC = 0x4004, SYMERRS = 0x4008, RXERRC = 0x400c, MPC = 0x4010,
                          SEC = 0x4038, RLEC = 0x4040, GPRC = 0x4074, BPRC = 0x4078, MPRC = 0x407c, GPTC = 0x4080,
                          GORCL = 0x4088, GORCH = 0x408c, GOTCL = 0x4090, GOTCH = 0x4094;
// Receive address 0, loaded from the EEPROM (82574L §10.2.5.16, 82576 §8.10.14).
inline constexpr uint32_t RAL0 = 0x5400, RAH0 = 0x5404;
inline constexpr uint32_t RAH_AV = 1u << 31;   // address valid
}  // namespace reg

// The station address in RAL0/RAH0 (little-endian: the first byte on the wire lowest).
inline void read_station_address(vfio::Region& bar, uint8_t (&mac)[6]) {
    const uint32_t ral = bar.read32(reg::RAL0), rah = bar.read32(reg::RAH0);
    for (int i = 0; i < 4; ++i) mac[i] = uint8_t(ral >> (8 * i));
    for (int i = 0; i < 2; ++i) mac[4 + i] = uint8_t(rah >> (8 * i));
}
inline void write_station_address(vfio::Region& bar, const std::array<uint8_t, 6>& m) {
    bar.write32(reg::RAL0, uint32_t(m[0]) | uint32_t(m[1]) << 8 | uint32_t(m[2]) << 16 | uint32_t(m[3]) << 24);
    bar.write32(reg::RAH0, uint32_t(m[4]) | uint32_t(m[5]) << 8 | reg::RAH_AV);
}

inline std::string mac_string(const MacAddress& m) {
    char s[18];
    std::snprintf(s, sizeof s, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
    return s;
}

// ---- multicast filtering ------------------------------------------------------------------------
// A 4096-bit hash filter: with RCTL.MO = 00 a frame's hash is bits 47:36 of its destination
// address (82574 §10.2.5.x MTA, 82576 §8.10.13; the VF asks its PF for the same hashes).
inline uint16_t multicast_hash(const MacAddress& m) noexcept { return uint16_t(((m[4] >> 4) | (uint16_t(m[5]) << 4)) & 0xfff); }

// Groups a PF driver keeps (the hash filter takes any number; this bounds the list).
inline constexpr size_t kMaxMulticastGroups = 256;

// Every group a multicast address, at most `max` of them.
inline Result<void> check_multicast_groups(std::span<const MacAddress> groups, size_t max) {
    if (groups.size() > max)
        return Error{EINVAL, str_cat("set_multicast: ", groups.size(), " groups; the device takes up to ", max)};
    for (const auto& g : groups)
        if (!(g[0] & 1)) return Error{EINVAL, str_cat("set_multicast: ", mac_string(g), " is not a multicast address")};
    return {};
}

// The table array (MTA, 128 registers at `mta`) for `groups`; all clear for none.
inline void write_multicast_table(vfio::Region& bar, uint32_t mta, std::span<const MacAddress> groups) {
    constexpr uint32_t kRegs = 128;
    uint32_t table[kRegs] = {};
    for (const auto& g : groups) {
        const uint16_t h = multicast_hash(g);
        table[h >> 5] |= 1u << (h & 31);
    }
    for (uint32_t i = 0; i < kRegs; ++i) bar.write32(mta + 4 * i, table[i]);
}

// A PF driver's set_multicast: the groups checked, kept in `kept` (written again after a
// reset) and the table written; ENODEV once the device is gone.
inline Result<void> set_pf_multicast(vfio::Region& bar, uint32_t mta, bool removed, const PciAddress& addr,
                                     std::vector<MacAddress>& kept, std::span<const MacAddress> groups) {
    if (auto r = check_multicast_groups(groups, kMaxMulticastGroups); !r) return r;
    if (removed) return Error{ENODEV, str_cat(addr.to_string(), ": set_multicast: the device was removed")};
    kept.assign(groups.begin(), groups.end());
    write_multicast_table(bar, mta, kept);
    return {};
}

inline bool wait_until(auto&& done, std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
        if (std::chrono::steady_clock::now() > end) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

inline LinkState link_from_status(uint32_t status) {
    LinkState l;
    if (status == 0xffffffffu) return l;   // the device is gone
    l.up = status & reg::STATUS_LU;
    const uint32_t speed = (status >> reg::STATUS_SPEED_SHIFT) & 3;
    l.speed_mbps = l.up ? (speed == 0 ? 10 : speed == 1 ? 100 : 1000) : 0;
    l.full_duplex = status & reg::STATUS_FD;
    return l;
}

// Adds the clear-on-read counters to `s`.
inline void accumulate_stats(vfio::Region& bar, DeviceStats& s) {
    auto rd = [&](uint32_t r) { return uint64_t(bar.read32(r)); };
    s.rx_packets += rd(reg::GPRC);
    s.tx_packets += rd(reg::GPTC);
    s.rx_bytes += rd(reg::GORCL) | rd(reg::GORCH) << 32;   // low first: reading high clears both
    s.tx_bytes += rd(reg::GOTCL) | rd(reg::GOTCH) << 32;
    s.rx_missed += rd(reg::MPC);
    s.rx_crc_errors += rd(reg::CRCERRS);
    s.rx_errors += rd(reg::RXERRC) + rd(reg::SYMERRS) + rd(reg::ALGNERRC) + rd(reg::SEC) + rd(reg::RLEC);
    s.rx_broadcast += rd(reg::BPRC);
    s.rx_multicast += rd(reg::MPRC);
}

// The software reset both devices take (82574L §4.6.3, 82576 §4.3.1), once interrupts are
// masked and receive and transmit stopped: let bus-master requests drain, CTRL.RST, wait for
// it to clear. `name` goes into the error ("82574L").
inline Result<void> software_reset(vfio::Region& bar, const std::string& where, const char* name) {
    using namespace std::chrono_literals;
    (void)bar.read32(reg::STATUS);   // flush the posted writes
    std::this_thread::sleep_for(10ms);
    bar.write32(reg::CTRL, bar.read32(reg::CTRL) | reg::CTRL_GIO_MASTER_DISABLE);
    wait_until([&] { return !(bar.read32(reg::STATUS) & reg::STATUS_GIO_MASTER_ENABLE); }, 10ms);
    bar.write32(reg::CTRL, bar.read32(reg::CTRL) | reg::CTRL_RST);
    std::this_thread::sleep_for(1ms);
    if (!wait_until([&] { return !(bar.read32(reg::CTRL) & reg::CTRL_RST); }, 100ms))
        return Error{EIO, str_cat(where, ": the ", name, " did not come out of software reset (CTRL.RST still set after 100 ms)")};
    if (bar.read32(reg::STATUS) == 0xffffffffu)
        return Error{ENODEV, str_cat(where, ": registers read all-ones: the device is gone")};
    return {};
}

// What the Intel drivers' open() share: the function through VFIO, its IDs checked against the
// driver's (else ENODEV: "<addr> is 8086:10ca, not <what><hint(device id)>"), BAR 0 mmapped
// (the drivers touch registers directly; at least `min_bar` bytes) and an event waiter.
struct OpenedFunction {
    std::unique_ptr<vfio::Device> dev;
    vfio::Region* bar = nullptr;
    std::optional<vfio::EventWaiter> events;
};
template <class Hint>
Result<OpenedFunction> open_function(const PciAddress& addr, const vfio::DeviceOptions& opts, std::span<const PciId> ids,
                                     const char* what, uint64_t min_bar, Hint&& hint) {
    auto vdev = vfio::Device::open(addr, opts);
    if (!vdev) return vdev.take_error();
    auto id = (*vdev)->pci_id();
    if (!id) return id.take_error();
    if (!contains(ids, *id))
        return Error{ENODEV, str_cat(addr.to_string(), " is ", std::hex, id->vendor, ":", id->device, std::dec, ", not ",
                                     what, hint(*id))};
    auto bar = (*vdev)->region(0);
    if (!bar) return bar.take_error();
    if (!(*bar)->base() || (*bar)->mapped_length() < min_bar)
        return Error{EIO, str_cat(addr.to_string(), ": BAR 0 cannot be mmapped; the driver needs direct register access")};
    auto events = vfio::EventWaiter::create();
    if (!events) return events.take_error();
    return OpenedFunction{std::move(*vdev), *bar, std::move(*events)};
}

}  // namespace vfab::intel
