// The PCI devices vfab has a driver for, as vfab::Device::open finds them: the provider
// registry (the built-in providers, each with its driver's own ID table, and the plugins of the
// provider directory). vfio-devctl keeps no list of its own.
#pragma once

#include <cstdint>
#include <string>

#include "vfab/provider.hpp"

namespace vfab::devctl {

// vfab's driver (provider name) for vendor:device; empty when vfab has none.
inline std::string vfab_driver_for(uint16_t vendor, uint16_t device) {
    auto p = provider::find_provider(vendor, device);
    return p ? p->name : std::string();
}

}  // namespace vfab::devctl
