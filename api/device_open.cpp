// vfab::Device::open: the device's PCI IDs from sysfs, the provider for them from the
// registry, a check that vfio-pci has the device, then the provider's own open.
#include <cstdio>

#include "vfab/provider.hpp"
#include "vfab/vfab.hpp"
#include "vfab/vfio/pci_sysfs.hpp"

namespace vfab {

Result<std::unique_ptr<Device>> Device::open(std::string_view pci_address, const OpenOptions& opts) {
    auto addr = PciAddress::parse(pci_address);
    if (!addr) return addr.take_error();
    const std::string bdf = addr->to_string();
    vfio::PciSysfs sysfs(opts.sysfs_root);
    auto ids = sysfs.ids(*addr);
    if (!ids) return ids.take_error();
    char id[16];
    std::snprintf(id, sizeof id, "%04x:%04x", ids->vendor, ids->device);

    auto p = opts.provider.empty() ? provider::find_provider(ids->vendor, ids->device, opts)
                                   : provider::find_provider(opts.provider, opts);
    if (!p) return Error{p.error().code, str_cat(bdf, " (", id, "): ", p.error().message)};

    auto drv = sysfs.driver(*addr);
    if (!drv) return drv.take_error();
    if (!*drv || **drv != "vfio-pci")
        return Error{*drv ? EBUSY : ENODEV,
                     str_cat(bdf, " (", id, ", vfab provider ", p->name, ") is ",
                             *drv ? str_cat("bound to ", **drv) : std::string("not bound to any driver"),
                             ", not vfio-pci — run `sudo vfio-devctl bind ", bdf, "` first")};
    return p->record->open(*addr, opts);
}

}  // namespace vfab
