// vfab's driver for the Intel 82576 (igb) physical function, direct API: the same shape as the
// e1000e driver (Device, CompletionQueue, QueuePair; fast path inline, no virtual call), with
// several queue pairs, each its own receive and transmit queue, and RSS to spread flows over
// them (configure_rss). Advanced descriptors (§7.1.5, §7.2.2), MSI-X with one vector per
// completion queue and one for link changes.
//
//   auto dev = vfab::igb::Device::open(*vfab::PciAddress::parse("0000:05:00.0"));
//   for (int i = 0; i < 4; ++i) {                       // queue pairs 0-3, one CQ each
//       auto* cq = *(*dev)->create_cq(1024);
//       qps[i] = *(*dev)->create_qp({.send_cq = cq, .recv_cq = cq});
//   }
//   (*dev)->configure_rss({.table = table, .hash_types = vfab::rss_udp_ipv4 | vfab::rss_ipv4});
//
// The queue pairs and completion queues, with the thread model, are in igb/queues.hpp.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "vfab/drivers/intel/device_handle.hpp"
#include "vfab/pci_id.hpp"
#include "vfab/drivers/igb/queues.hpp"
#include "vfab/vfio/device_options.hpp"

namespace vfab::igb {

// The devices this driver drives: the 82576 family (datasheet §1.1). The one list: the
// driver's check, the provider registry and vfio-devctl read it.
inline constexpr PciId kPciIds[] = {
    {0x8086, 0x10c9},   // 82576 copper
    {0x8086, 0x10e6},   // 82576 fiber
    {0x8086, 0x10e7},   // 82576 serdes
    {0x8086, 0x10e8},   // 82576 quad copper
    {0x8086, 0x1526},   // 82576 quad copper ET2
    {0x8086, 0x150a},   // 82576 NS
    {0x8086, 0x1518},   // 82576 NS serdes
    {0x8086, 0x150d},   // 82576 serdes quad
};

struct DeviceOptions {
    vfio::DeviceOptions vfio;
    bool promiscuous = false;
    bool rx_checksum = true;
    int link_timeout_ms = 3000;
    std::optional<std::array<uint8_t, 6>> mac;
    dma::PdOptions pd;
    // The link's MTU (largest frame mtu + 14 bytes): 0 for 1500. Up to kMaxMtu: long packets
    // (RCTL.LPE, RLPML) into 8 KiB receive buffers, which receives must then hold.
    uint32_t mtu = 0;
};
inline constexpr uint32_t kMaxMtu = 8000;

// IEEE 1588 (datasheet §7.9): TimestampConfig and RxTimestamp are vfab's (types.hpp).

class DeviceImpl;   // the control path: drivers/igb/device_impl.hpp

// Up to 8 queue pairs (attr().max_qp: RSS without VMDq names queues 0-7, reg::kRssQueues).
// configure_rss (§7.1.2.8): a table of 1 to 128 queue indices (a power of 2; repeated over the
// device's 128 entries), a 40-byte key (empty: net::kDefaultRssKey), RssHash types; frames RSS
// does not hash go to table[0]; hash_types 0: all to queue 0.
class Device final : public intel::DeviceHandle<Device, DeviceImpl, QueueTraits, DeviceOptions> {
public:
    // Starts the clock counting nanoseconds (SYSTIM; on QEMU, the virtual time) and the latches
    // cfg asks for; kept across reset(). A receive completion whose frame latched has
    // wc_timestamped.
    Result<void> enable_timestamps(const TimestampConfig& cfg);
    // The device's clock now, in ns: SYSTIM (counting ns once enable_timestamps() ran) plus
    // set_clock_ns()'s offset. Two register reads, no lock, no system call.
    uint64_t clock_ns();
    // Sets the clock's reading to `ns` (e.g. CLOCK_REALTIME's, or a PTP master's): every later
    // clock_ns() and latched time counts from there. Until then the epoch is the device's.
    void set_clock_ns(uint64_t ns);
    // The latched time, if one is waiting; taking it frees the latch for the next frame.
    std::optional<uint64_t> take_tx_timestamp();
    // The same for the receive latch: the arrival time, with the PTP source port and sequence
    // id that match it to the completion that had wc_timestamped.
    std::optional<RxTimestamp> take_rx_timestamp();

private:
    friend class intel::DeviceHandle<Device, DeviceImpl, QueueTraits, DeviceOptions>;
    explicit Device(std::unique_ptr<DeviceImpl> impl);
};

// The driver's classes by role, for code written once for every driver
// (examples::BasicPort<igb::Driver>, the lab's MqPort).
struct Driver {
    using Device = igb::Device;
    using DeviceOptions = igb::DeviceOptions;
    using CompletionQueue = igb::CompletionQueue;
    using QueuePair = igb::QueuePair;
    using QpInitAttr = igb::QpInitAttr;
};

}  // namespace vfab::igb
