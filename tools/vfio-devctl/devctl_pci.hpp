// libpci: enumeration of the PCI bus (through sysfs, so the root can be a fake tree) and
// vendor/device names from its ID database (pci.ids).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "devctl_context.hpp"
#include "vfab/pci_address.hpp"

struct pci_access;

namespace vfab::devctl {

class PciDatabase {
public:
    // Opens libpci on paths.sysfs (and paths.pci_ids, when set).
    static Result<PciDatabase> open(const Paths& paths);

    // Every PCI function, sorted by address.
    Result<std::vector<PciAddress>> scan();

    // Names from pci.ids; empty when the database does not know the ID.
    std::string vendor_name(uint16_t vendor);
    std::string device_name(uint16_t vendor, uint16_t device);

private:
    struct Cleanup { void operator()(pci_access* a) const; };
    explicit PciDatabase(pci_access* a) : access_(a) {}
    std::unique_ptr<pci_access, Cleanup> access_;
};

}  // namespace vfab::devctl
