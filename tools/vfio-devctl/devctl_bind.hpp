// bind: hand PCI devices to vfio-pci; unbind/restore: give them back to their kernel driver.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "devctl_context.hpp"
#include "vfab/pci_address.hpp"

namespace vfab::devctl {

struct BindOptions {
    std::vector<PciAddress> devices;
    std::optional<std::string> user;    // chown /dev/vfio/N (and the VFIO cdev) to this user
    std::optional<std::string> group;   // ... and chgrp to this group (mode 0660)
    bool force = false;                 // bind even when a network interface is up or has an address
    bool whole_group = false;           // also bind the other members of each IOMMU group
};

// Binds every device (all or nothing: when one fails, the ones this call moved go back to
// their drivers). Returns what it did, one line per device.
Result<std::vector<std::string>> bind(const Context& ctx, const BindOptions& opts);

struct UnbindOptions {
    std::vector<PciAddress> devices;
    std::optional<std::string> driver;  // the driver to give it to; default: the recorded one
    bool force = false;                 // unbind even when a process has the device open
};

// Gives devices on vfio-pci back to their original driver (recorded by bind, or --driver; with
// neither, the kernel's own match).
Result<std::vector<std::string>> unbind(const Context& ctx, const UnbindOptions& opts);

}  // namespace vfab::devctl
