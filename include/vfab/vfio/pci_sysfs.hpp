// What sysfs says about a PCI function: IDs, bound driver, IOMMU group, NUMA node, VFIO cdev.
// Read-only; the sysfs root is a parameter so unit tests can point it at a fake tree.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "vfab/pci_address.hpp"
#include "vfab/result.hpp"

namespace vfab::vfio {

struct PciIds {
    uint16_t vendor = 0;
    uint16_t device = 0;
    uint16_t subsystem_vendor = 0;
    uint16_t subsystem_device = 0;
    uint32_t class_code = 0;  // base class << 16 | subclass << 8 | prog-if
};

class PciSysfs {
public:
    // Reads the tree under `sysfs_root` (tests pass a fake one); nothing is read until a call.
    explicit PciSysfs(std::string sysfs_root = "/sys") : root_(std::move(sysfs_root)) {}

    // The device's directory, /sys/bus/pci/devices/<bdf>; an error when there is no such device.
    Result<std::string> device_dir(const PciAddress& addr) const;

    // The IDs and class code from the device's vendor, device, subsystem_* and class files.
    // ENODEV when there is no such device; a read's errno, or EIO for a file that holds no number.
    Result<PciIds> ids(const PciAddress& addr) const;

    // The bound driver's name; nullopt when no driver is bound.
    Result<std::optional<std::string>> driver(const PciAddress& addr) const;

    // The IOMMU group number; an error that says how to turn the IOMMU on when there is none.
    Result<unsigned> iommu_group(const PciAddress& addr) const;

    // Every device in IOMMU group `group`, sorted.
    Result<std::vector<PciAddress>> group_devices(unsigned group) const;

    // The physical function of an SR-IOV virtual function (its `physfn` link); nullopt for a
    // device that is no VF, or whose PF this system does not show (a VF passed into a VM).
    Result<std::optional<PciAddress>> physfn(const PciAddress& addr) const;

    // The kernel's network interfaces on the device (its net/ directory), sorted; none when
    // no network driver is bound.
    Result<std::vector<std::string>> net_interfaces(const PciAddress& addr) const;

    // The NUMA node the device is attached to; -1 when the platform does not say.
    Result<int> numa_node(const PciAddress& addr) const;

    // The VFIO device cdev name ("vfio3", for /dev/vfio/devices/vfio3) when vfio-pci is bound
    // and the kernel has CONFIG_VFIO_DEVICE_CDEV; nullopt otherwise.
    Result<std::optional<std::string>> vfio_cdev(const PciAddress& addr) const;

    // The sysfs root given at construction.
    const std::string& root() const { return root_; }

private:
    std::string root_;
};

}  // namespace vfab::vfio
