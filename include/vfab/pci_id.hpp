// A PCI function's vendor and device IDs (PCI Local Bus 3.0 §6.2.1, config space 0x00 / 0x02),
// and the table form each driver lists the devices it drives in: that one table is what the
// driver checks when it opens a device, what the provider registry matches, and what
// vfio-devctl reports (docs/drivers.md).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

namespace vfab {

struct PciId {
    uint16_t vendor = 0;
    uint16_t device = 0;
    // Both IDs equal.
    bool operator==(const PciId&) const = default;
};

// Whether `id` is in `table` (a driver's kPciIds).
constexpr bool contains(std::span<const PciId> table, PciId id) {
    return std::find(table.begin(), table.end(), id) != table.end();
}

}  // namespace vfab
