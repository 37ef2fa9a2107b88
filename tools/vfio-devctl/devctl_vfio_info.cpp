// What VFIO reports for a device, through vfab's VFIO layer (the same open path, backend
// choice and error messages as an application gets).
#include "devctl_vfio_info.hpp"

#include <iterator>

#include "vfab/vfio/device.hpp"

namespace vfab::devctl {
namespace {

const char* region_name(unsigned index) {
    static const char* names[] = {"BAR0", "BAR1", "BAR2", "BAR3", "BAR4", "BAR5", "ROM", "CONFIG", "VGA"};
    return index < std::size(names) ? names[index] : nullptr;
}

const char* irq_name(unsigned index) {
    static const char* names[] = {"INTX", "MSI", "MSIX", "ERR", "REQ"};
    return index < std::size(names) ? names[index] : "?";
}

}  // namespace

Result<VfioInfo> query_vfio(const Paths& paths, const PciAddress& addr, unsigned /*group*/, bool noiommu) {
    vfio::DeviceOptions opts;
    opts.sysfs_root = paths.sysfs;
    if (noiommu) opts.backend = vfio::IommuBackend::noiommu;   // the device's group says so
    auto dev = vfio::Device::open(addr, opts);
    if (!dev) return dev.take_error();
    VfioInfo out;
    out.reset = (*dev)->can_reset();
    out.iommu = vfio::to_string((*dev)->iommu().backend());
    for (unsigned i = 0; i < (*dev)->num_regions(); ++i) {
        auto ri = (*dev)->region_info(i);
        if (!ri && ri.error().code == EINVAL) continue;   // an index the device lacks (VGA on a NIC)
        if (!ri) return ri.take_error();
        if (ri->size == 0) continue;                        // absent BARs have size 0
        const char* name = region_name(i);
        out.regions.push_back({name ? name : str_cat("region ", i), std::move(*ri)});
    }
    for (unsigned i = 0; i < (*dev)->num_irqs(); ++i) {
        auto ii = (*dev)->irq_info(static_cast<vfio::IrqIndex>(i));
        if (!ii) return ii.take_error();
        out.irqs.push_back({irq_name(i), *ii});
    }
    return out;
}

}  // namespace vfab::devctl
