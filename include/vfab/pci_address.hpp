// A PCI function's address, domain:bus:device.function ("0000:03:00.1").
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include "vfab/result.hpp"

namespace vfab {

struct PciAddress {
    uint16_t domain = 0;
    uint8_t bus = 0;
    uint8_t device = 0;    // 0..31
    uint8_t function = 0;  // 0..7

    // Accepts "DDDD:BB:DD.F" and the short "BB:DD.F" (domain 0), hex, either case.
    static Result<PciAddress> parse(std::string_view text);

    // Canonical sysfs form: "0000:03:00.1".
    std::string to_string() const;

    // Ordered by domain, bus, device, function.
    auto operator<=>(const PciAddress&) const = default;
};

}  // namespace vfab
