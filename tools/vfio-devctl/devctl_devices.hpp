// What vfio-devctl knows about a PCI function, gathered from sysfs and libpci: the rows of
// `list`, the body of `show`, the input of `bind` and `check`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "devctl_context.hpp"
#include "devctl_pci.hpp"
#include "vfab/pci_address.hpp"

namespace vfab::devctl {

struct GroupMember {
    PciAddress addr;
    std::optional<std::string> driver;
};

// A network interface the kernel's driver made for the device (sysfs <device>/net/<name>).
struct NetInterface {
    std::string name;
    bool up = false;                     // IFF_UP in <device>/net/<name>/flags
    std::vector<std::string> addresses;  // IPv4/IPv6 addresses, from getifaddrs
};

struct DeviceInfo {
    PciAddress addr;
    uint16_t vendor = 0;
    uint16_t device = 0;
    uint32_t class_code = 0;
    std::string vendor_name;   // from pci.ids; empty when unknown
    std::string device_name;
    std::optional<std::string> driver;
    std::optional<std::string> driver_override;
    std::optional<unsigned> iommu_group;
    std::vector<GroupMember> group_others;   // the group's other members
    int numa_node = -1;
    std::optional<std::string> vfio_cdev;    // "vfio3" for /dev/vfio/devices/vfio3
    std::string vfab_driver;                 // empty when vfab has no driver for it
    std::vector<NetInterface> interfaces;

    bool is_network() const { return (class_code >> 16) == 0x02; }
    bool on_vfio() const { return driver == "vfio-pci"; }
};

// "8086:10d3".
std::string id_text(uint16_t vendor, uint16_t device);

// Whether a device bound to `driver` lets VFIO use its IOMMU group: vfio-pci (and its variant
// drivers), no driver, or the drivers the kernel lets share a group with VFIO (pci-stub,
// pcieport: they never do DMA on the device's behalf).
bool group_friendly(const std::optional<std::string>& driver);
// Whether every other member of the device's group is group_friendly.
bool group_viable(const DeviceInfo& info);
// The group's members that block it, as "0000:00:1f.3 (snd_hda_intel)".
std::vector<std::string> group_blockers(const DeviceInfo& info);

Result<DeviceInfo> describe(const Context& ctx, PciDatabase& db, const PciAddress& addr);
// Network devices and devices bound to vfio-pci; every PCI function with `all`.
Result<std::vector<DeviceInfo>> list_devices(const Context& ctx, bool all);
// Parses a BDF and checks that the device exists; errors say how to find the right address.
Result<PciAddress> existing_device(const Context& ctx, std::string_view bdf);

// The interfaces of a device and their state.
std::vector<NetInterface> net_interfaces(const Context& ctx, const PciAddress& addr);

// Which IOMMU backend vfab would use for a device bound to vfio-pci.
struct Backend {
    std::string name;     // "iommufd", "legacy", "noiommu", or "none" when not usable
    std::string reason;
};
Backend choose_backend(const Context& ctx, const DeviceInfo& info);

// The VFIO group node of a group: /dev/vfio/N, or /dev/vfio/noiommu-N in no-IOMMU mode;
// nullopt when neither exists.
std::optional<std::string> group_node(const Paths& paths, unsigned group);

}  // namespace vfab::devctl
