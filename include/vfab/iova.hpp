// An I/O virtual address: what a device puts on the bus to reach memory through the IOMMU.
// A distinct type so it is never mixed up with a process virtual address by accident.
#pragma once

#include <compare>
#include <cstdint>

namespace vfab {

struct Iova {
    uint64_t value = 0;
    constexpr Iova() = default;
    // The I/O virtual address `v`.
    constexpr explicit Iova(uint64_t v) : value(v) {}
    // The address `off` bytes further.
    constexpr Iova operator+(uint64_t off) const { return Iova(value + off); }
    // The distance in bytes from `o`.
    constexpr uint64_t operator-(Iova o) const { return value - o.value; }
    // Ordered as the addresses.
    constexpr auto operator<=>(const Iova&) const = default;
};

}  // namespace vfab
