// The PCI devices vfab has a driver for: the one table every vfio-devctl command consults.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace vfab::devctl {

struct VfabDriver {
    uint16_t vendor;
    uint16_t device;
    std::string_view driver;   // vfab's driver (folder under drivers/)
};

inline constexpr std::array<VfabDriver, 5> kVfabDrivers = {{
    {0x8086, 0x10d3, "e1000e"},       // Intel 82574L
    {0x1af4, 0x1041, "virtio-net"},   // virtio-net, modern
    {0x1af4, 0x1000, "virtio-net"},   // virtio-net, transitional
    {0x8086, 0x10c9, "igb"},          // Intel 82576
    {0x8086, 0x10ca, "igbvf"},        // Intel 82576 virtual function
}};

// vfab's driver for vendor:device; empty when vfab has none.
constexpr std::string_view vfab_driver_for(uint16_t vendor, uint16_t device) {
    for (const VfabDriver& d : kVfabDrivers)
        if (d.vendor == vendor && d.device == device) return d.driver;
    return {};
}

}  // namespace vfab::devctl
