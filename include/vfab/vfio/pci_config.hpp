// PCI configuration space: register offsets and the capability lists (PCI Local Bus 3.0
// §6.7 for the standard list from 0x34, PCI Express Base §7.6 for the extended list from
// 0x100). The parser works on a snapshot of config space, so it is testable without a device.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace vfab::pci {

inline constexpr uint16_t kVendorId = 0x00;
inline constexpr uint16_t kDeviceId = 0x02;
inline constexpr uint16_t kCommand = 0x04;
inline constexpr uint16_t kStatus = 0x06;
inline constexpr uint16_t kCapabilityList = 0x34;
inline constexpr uint16_t kExtendedCapStart = 0x100;

inline constexpr uint16_t kCommandMemory = 1u << 1;
inline constexpr uint16_t kCommandBusMaster = 1u << 2;
inline constexpr uint16_t kCommandIntxDisable = 1u << 10;
inline constexpr uint16_t kStatusCapList = 1u << 4;

// Standard capability IDs.
inline constexpr uint8_t kCapPowerManagement = 0x01;
inline constexpr uint8_t kCapMsi = 0x05;
inline constexpr uint8_t kCapVendor = 0x09;
inline constexpr uint8_t kCapPciExpress = 0x10;
inline constexpr uint8_t kCapMsix = 0x11;
// Extended capability IDs.
inline constexpr uint16_t kExtCapAer = 0x0001;
inline constexpr uint16_t kExtCapSriov = 0x0010;

struct Capability {
    uint16_t id = 0;
    uint16_t offset = 0;
    bool extended = false;
    uint8_t version = 0;   // extended capabilities only
};

// Every capability in `config` (256 or 4096 bytes), standard ones first. A malformed list
// (pointer into the header, a loop) ends the walk instead of looping.
std::vector<Capability> parse_capabilities(std::span<const uint8_t> config);

// The first capability `id` of the standard list (`extended` false) or the extended list
// (true); nullopt when the device has none.
std::optional<Capability> find_capability(std::span<const Capability> caps, uint16_t id, bool extended = false);

}  // namespace vfab::pci
