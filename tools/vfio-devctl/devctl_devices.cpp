#include "devctl_devices.hpp"

#include <cstdio>

#include "devctl_fs.hpp"
#include "vfab_drivers.hpp"

namespace vfab::devctl {

std::string id_text(uint16_t vendor, uint16_t device) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%04x:%04x", vendor, device);
    return buf;
}

bool group_friendly(const std::optional<std::string>& driver) {
    if (!driver) return true;
    const std::string& d = *driver;
    // Variant drivers (mlx5-vfio-pci, ...) are vfio-pci too.
    bool vfio = d == "vfio-pci" || (d.size() > 9 && d.ends_with("-vfio-pci"));
    return vfio || d == "pci-stub" || d == "pcieport";
}

bool group_viable(const DeviceInfo& info) {
    for (const GroupMember& m : info.group_others)
        if (!group_friendly(m.driver)) return false;
    return true;
}

std::vector<std::string> group_blockers(const DeviceInfo& info) {
    std::vector<std::string> out;
    for (const GroupMember& m : info.group_others)
        if (!group_friendly(m.driver)) out.push_back(str_cat(m.addr.to_string(), " (", *m.driver, ")"));
    return out;
}

Result<PciAddress> existing_device(const Context& ctx, std::string_view bdf) {
    auto addr = PciAddress::parse(bdf);
    if (!addr) return addr.take_error();
    auto dir = ctx.sysfs().device_dir(*addr);
    if (!dir) return dir.take_error();
    return *addr;
}

namespace {

// Fills the group number and its other members; leaves them empty when the device has none.
void fill_group(const vfio::PciSysfs& sysfs, DeviceInfo& info) {
    auto group = sysfs.iommu_group(info.addr);
    if (!group) return;
    info.iommu_group = *group;
    auto members = sysfs.group_devices(*group);
    if (!members) return;
    for (const PciAddress& m : *members) {
        if (m == info.addr) continue;
        auto driver = sysfs.driver(m);
        info.group_others.push_back({m, driver ? *driver : std::nullopt});
    }
}

}  // namespace

Result<DeviceInfo> describe(const Context& ctx, PciDatabase& db, const PciAddress& addr) {
    vfio::PciSysfs sysfs = ctx.sysfs();
    auto ids = sysfs.ids(addr);
    if (!ids) return ids.take_error();
    DeviceInfo info;
    info.addr = addr;
    info.vendor = ids->vendor;
    info.device = ids->device;
    info.class_code = ids->class_code;
    info.vendor_name = db.vendor_name(info.vendor);
    info.device_name = db.device_name(info.vendor, info.device);
    if (auto driver = sysfs.driver(addr)) info.driver = *driver;
    // "(null)" is how the kernel shows an empty driver_override.
    auto override_ = read_optional(ctx.device_dir(addr) + "/driver_override");
    if (override_ && !override_->empty() && *override_ != "(null)") info.driver_override = *override_;
    fill_group(sysfs, info);
    if (auto node = sysfs.numa_node(addr)) info.numa_node = *node;
    // Only a cdev that exists: 6.1 kernels show vfio-dev/vfioN in sysfs with no /dev node.
    if (auto cdev = sysfs.vfio_cdev(addr); cdev && *cdev && is_char_device(str_cat(ctx.paths.dev, "/vfio/devices/", **cdev)))
        info.vfio_cdev = *cdev;
    info.vfab_driver = vfab_driver_for(info.vendor, info.device);
    info.interfaces = net_interfaces(ctx, addr);
    return info;
}

Result<std::vector<DeviceInfo>> list_devices(const Context& ctx, bool all) {
    auto db = PciDatabase::open(ctx.paths);
    if (!db) return db.take_error();
    auto addrs = db->scan();
    if (!addrs) return addrs.take_error();
    std::vector<DeviceInfo> out;
    for (const PciAddress& addr : *addrs) {
        auto info = describe(ctx, *db, addr);
        if (!info) continue;   // a device that went away while we looked
        if (all || info->is_network() || info->on_vfio() || !info->vfab_driver.empty())
            out.push_back(std::move(info).value());
    }
    return out;
}

std::optional<std::string> group_node(const Paths& paths, unsigned group) {
    std::string node = str_cat(paths.dev, "/vfio/", group);
    if (is_char_device(node)) return node;
    node = str_cat(paths.dev, "/vfio/noiommu-", group);
    if (is_char_device(node)) return node;
    return std::nullopt;
}

Backend choose_backend(const Context& ctx, const DeviceInfo& info) {
    const Paths& p = ctx.paths;
    if (!info.on_vfio())
        return {"none", str_cat("not bound to vfio-pci: vfio-devctl bind ", info.addr.to_string())};
    if (!info.iommu_group) return {"none", "vfio-pci is bound but the device has no IOMMU group"};
    auto node = group_node(p, *info.iommu_group);
    if (node && node->find("/noiommu-") != std::string::npos)
        return {"noiommu", str_cat(*node, " is a no-IOMMU group: DMA is not isolated or translated "
                                          "(vfab uses physical addresses; needs CAP_SYS_RAWIO)")};
    if (info.vfio_cdev && is_char_device(str_cat(p.dev, "/vfio/devices/", *info.vfio_cdev)) &&
        is_char_device(p.dev + "/iommu"))
        return {"iommufd", str_cat("/dev/iommu and the VFIO cdev /dev/vfio/devices/", *info.vfio_cdev,
                                   " exist")};
    if (node) {
        std::string why = info.vfio_cdev ? "/dev/iommu is missing (modprobe iommufd, or a kernel with "
                                           "CONFIG_IOMMUFD)"
                                         : "the device has no VFIO cdev (kernel without "
                                           "CONFIG_VFIO_DEVICE_CDEV)";
        return {"legacy", str_cat("container/group through ", *node, "; not iommufd: ", why)};
    }
    return {"none", str_cat("/dev/vfio/", *info.iommu_group, " is missing: is vfio-pci loaded?")};
}

}  // namespace vfab::devctl
