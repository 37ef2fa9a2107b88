// The sysfs steps that move a PCI device between drivers, each one write with an error that
// names the step, plus the record of the driver a device had before vfio-devctl bound it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "devctl_context.hpp"
#include "vfab/pci_address.hpp"

namespace vfab::devctl {

// Loads the kernel module behind PCI driver `driver` with modprobe unless it is registered.
Result<void> ensure_driver_loaded(const Context& ctx, const std::string& driver);

// driver_override: "" clears it (the kernel then matches by ID again).
Result<void> set_override(const Context& ctx, const PciAddress& addr, const std::string& driver);
// Unbinds the current driver, if any.
Result<void> unbind_current(const Context& ctx, const PciAddress& addr);
// Asks the kernel to probe the device (it honours driver_override).
Result<void> probe(const Context& ctx, const PciAddress& addr);
// Binds to a named driver through drivers/<driver>/bind.
Result<void> bind_to(const Context& ctx, const PciAddress& addr, const std::string& driver);
// Waits briefly for the device to be on `want` (nullopt: no driver); an error says where it is.
Result<void> expect_driver(const Context& ctx, const PciAddress& addr, const std::optional<std::string>& want);

// Where bind keeps the device's original driver: <run>/<bdf>.driver, one line, empty for none.
std::string record_path(const Context& ctx, const PciAddress& addr);
Result<void> write_record(const Context& ctx, const PciAddress& addr, const std::optional<std::string>& driver);
// nullopt: no record; an empty string inside: the device had no driver.
std::optional<std::string> read_record(const Context& ctx, const PciAddress& addr);
void forget_record(const Context& ctx, const PciAddress& addr);

// Processes that hold one of `nodes` (/dev/vfio/N, a VFIO cdev) open, as "1234 (app)".
std::vector<std::string> users_of(const Context& ctx, const std::vector<std::string>& nodes);

}  // namespace vfab::devctl
