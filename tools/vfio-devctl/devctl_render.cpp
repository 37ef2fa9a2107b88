// list and show: the device table, the per-device view and their JSON.
#include "devctl_render.hpp"

#include <cstdio>

#include "devctl_fs.hpp"

namespace vfab::devctl {
using nlohmann::json;

std::string dump(const json& j) { return j.dump(2, ' ', false, json::error_handler_t::replace); }

namespace {

json or_null(const std::optional<std::string>& s) { return s ? json(*s) : json(nullptr); }

std::string hex(uint64_t v) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    return buf;
}

std::string name_of(const DeviceInfo& d) {
    char id[8];
    std::snprintf(id, sizeof id, "%04x", d.device);
    if (d.vendor_name.empty()) return "(not in pci.ids)";
    if (d.device_name.empty()) return str_cat(d.vendor_name, " device ", id, " (not in pci.ids)");
    return str_cat(d.vendor_name, " ", d.device_name);
}

std::string members_text(const DeviceInfo& d) {
    std::string out;
    for (const GroupMember& m : d.group_others)
        out += str_cat(out.empty() ? "" : ", ", m.addr.to_string(), " (", m.driver.value_or("no driver"), ")");
    return out;
}

}  // namespace

json device_json(const DeviceInfo& d) {
    json members = json::array();
    for (const GroupMember& m : d.group_others)
        members.push_back({{"bdf", m.addr.to_string()}, {"driver", or_null(m.driver)}});
    json interfaces = json::array();
    for (const NetInterface& n : d.interfaces)
        interfaces.push_back({{"name", n.name}, {"up", n.up}, {"addresses", n.addresses}});
    char cls[8];
    std::snprintf(cls, sizeof cls, "%06x", d.class_code);
    return {
        {"bdf", d.addr.to_string()},
        {"id", id_text(d.vendor, d.device)},
        {"class", cls},
        {"vendor", d.vendor_name.empty() ? json(nullptr) : json(d.vendor_name)},
        {"device", d.device_name.empty() ? json(nullptr) : json(d.device_name)},
        {"driver", or_null(d.driver)},
        {"driver_override", or_null(d.driver_override)},
        {"iommu_group", d.iommu_group ? json(*d.iommu_group) : json(nullptr)},
        {"group_members", members},
        {"group_viable", group_viable(d)},
        {"numa_node", d.numa_node >= 0 ? json(d.numa_node) : json(nullptr)},
        {"vfio_cdev", or_null(d.vfio_cdev)},
        {"vfab_driver", d.vfab_driver.empty() ? json(nullptr) : json(d.vfab_driver)},
        {"net_interfaces", interfaces},
    };
}

void print_device_table(std::ostream& out, const std::vector<DeviceInfo>& devices) {
    char line[512];
    std::snprintf(line, sizeof line, "%-13s %-10s %-12s %-6s %-5s %-11s %s\n", "BDF", "ID", "DRIVER", "GROUP",
                  "NODE", "VFAB", "DEVICE");
    out << line;
    for (const DeviceInfo& d : devices) {
        std::string group = d.iommu_group ? std::to_string(*d.iommu_group) : "-";
        if (!d.group_others.empty()) group += "*";
        std::string node = d.numa_node >= 0 ? std::to_string(d.numa_node) : "-";
        std::string name = name_of(d);
        for (const NetInterface& n : d.interfaces) name += str_cat(" [", n.name, n.up ? " up" : "", "]");
        std::snprintf(line, sizeof line, "%-13s %-10s %-12s %-6s %-5s %-11s %s\n", d.addr.to_string().c_str(),
                      id_text(d.vendor, d.device).c_str(), d.driver.value_or("-").c_str(), group.c_str(),
                      node.c_str(), d.vfab_driver.empty() ? "-" : d.vfab_driver.c_str(), name.c_str());
        out << line;
        if (!d.group_others.empty())
            out << "              * group " << *d.iommu_group << " also holds " << members_text(d) << "\n";
    }
    if (devices.empty()) out << "(no network device and none on vfio-pci; --all lists every PCI device)\n";
}

namespace {

json vfio_json(const VfioInfo& v) {
    json regions = json::array(), irqs = json::array();
    for (const VfioRegion& reg : v.regions) {
        const vfio::RegionInfo& r = reg.info;
        json areas = json::array();
        for (const vfio::SparseArea& a : r.mmap_areas) areas.push_back({{"offset", a.offset}, {"size", a.size}});
        regions.push_back({{"index", r.index}, {"name", reg.name}, {"size", r.size}, {"offset", r.offset},
                           {"read", r.readable}, {"write", r.writable}, {"mmap", r.mmappable}, {"mmap_areas", areas}});
    }
    for (const VfioIrq& irq : v.irqs) {
        const vfio::IrqInfo& i = irq.info;
        irqs.push_back({{"index", i.index}, {"name", irq.name}, {"count", i.count}, {"eventfd", i.eventfd},
                        {"maskable", i.maskable}, {"automasked", i.automasked}, {"noresize", i.noresize}});
    }
    return {{"iommu", v.iommu}, {"reset", v.reset}, {"regions", regions}, {"irqs", irqs}};
}

void print_vfio(std::ostream& out, const VfioInfo& v) {
    out << "  VFIO (" << v.iommu << " backend" << (v.reset ? ", reset supported" : ", no reset") << "):\n";
    char line[256];
    for (const VfioRegion& reg : v.regions) {
        const vfio::RegionInfo& r = reg.info;
        std::string flags = str_cat(r.readable ? "r" : "-", r.writable ? "w" : "-", r.mmappable ? "m" : "-");
        std::string areas;
        for (const vfio::SparseArea& a : r.mmap_areas)
            areas += str_cat(areas.empty() ? "" : " ", "[", hex(a.offset), "+", hex(a.size), "]");
        std::snprintf(line, sizeof line, "    %-8s %10s  %s", reg.name.c_str(), human_bytes(r.size).c_str(), flags.c_str());
        out << line << (areas.empty() ? "" : "  mmap " + areas) << "\n";
    }
    for (const VfioIrq& irq : v.irqs) {
        const vfio::IrqInfo& i = irq.info;
        std::string flags = str_cat(i.eventfd ? " eventfd" : "", i.maskable ? " maskable" : "",
                                    i.automasked ? " automasked" : "", i.noresize ? " noresize" : "");
        std::snprintf(line, sizeof line, "    IRQ %-4s %3u vector%s%s\n", irq.name.c_str(), i.count,
                      i.count == 1 ? " " : "s", flags.c_str());
        out << line;
    }
}

}  // namespace

json show_json(const DeviceInfo& info, const Backend& backend, const Result<VfioInfo>* vfio) {
    json j = device_json(info);
    j["iommu_backend"] = {{"name", backend.name}, {"reason", backend.reason}};
    if (vfio && vfio->ok()) j["vfio"] = vfio_json(**vfio);
    else if (vfio) j["vfio"] = {{"error", vfio->error().message}};
    else j["vfio"] = nullptr;
    return j;
}

void print_show(std::ostream& out, const DeviceInfo& d, const Backend& backend, const Result<VfioInfo>* vfio) {
    out << d.addr.to_string() << "  " << name_of(d) << "\n";
    char cls[8];
    std::snprintf(cls, sizeof cls, "%06x", d.class_code);
    out << "  ID:            " << id_text(d.vendor, d.device) << ", class " << cls << "\n";
    out << "  driver:        " << d.driver.value_or("none")
        << (d.driver_override ? str_cat(" (driver_override ", *d.driver_override, ")") : "") << "\n";
    out << "  vfab driver:   " << (d.vfab_driver.empty() ? "none (vfab cannot drive this device)" : d.vfab_driver) << "\n";
    if (d.iommu_group) {
        out << "  IOMMU group:   " << *d.iommu_group;
        if (d.group_others.empty()) out << " (alone in it)";
        else out << ", also " << members_text(d) << (group_viable(d) ? "" : " — not viable: bind --whole-group");
        out << "\n";
    } else {
        out << "  IOMMU group:   none (the IOMMU is off; `vfio-devctl check`)\n";
    }
    out << "  NUMA node:     " << (d.numa_node >= 0 ? std::to_string(d.numa_node) : "unknown") << "\n";
    if (d.vfio_cdev) out << "  VFIO cdev:     /dev/vfio/devices/" << *d.vfio_cdev << "\n";
    for (const NetInterface& n : d.interfaces) {
        std::string addrs;
        for (const std::string& a : n.addresses) addrs += " " + a;
        out << "  interface:     " << n.name << (n.up ? " up" : " down") << addrs << "\n";
    }
    out << "  IOMMU backend: " << backend.name << " — " << backend.reason << "\n";
    if (vfio && vfio->ok()) print_vfio(out, **vfio);
    else if (vfio) out << "  VFIO:          unavailable: " << vfio->error().message << "\n";
}

}  // namespace vfab::devctl
