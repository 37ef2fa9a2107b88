// What VFIO reports for a device on vfio-pci: its regions (size, flags, mmappable areas) and
// interrupt indices. The only place vfio-devctl talks to VFIO itself.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "devctl_context.hpp"
#include "vfab/pci_address.hpp"
#include "vfab/vfio/info.hpp"

namespace vfab::devctl {

// VFIO's own descriptions (vfab/vfio/info.hpp), with the names `show` prints.
struct VfioRegion {
    std::string name;      // BAR0..BAR5, ROM, CONFIG, VGA, or "region N"
    vfio::RegionInfo info;
};

struct VfioIrq {
    std::string name;      // INTX, MSI, MSIX, ERR, REQ
    vfio::IrqInfo info;
};

struct VfioInfo {
    bool reset = false;    // VFIO_DEVICE_FLAGS_RESET
    std::string iommu;     // the IOMMU backend used to open it: "legacy", "iommufd" or "noiommu"
    std::vector<VfioRegion> regions;
    std::vector<VfioIrq> irqs;
};

// Opens the device through vfab's VFIO layer (the backend an application would get;
// `noiommu`: the group node is /dev/vfio/noiommu-N) and asks for its regions and IRQs.
// Opening the device makes vfio-pci reset it; an error when another process holds it.
Result<VfioInfo> query_vfio(const Paths& paths, const PciAddress& addr, unsigned group, bool noiommu);

}  // namespace vfab::devctl
