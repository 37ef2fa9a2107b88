// The drop-in libibverbs' configuration and device discovery (docs/verbs.md, "Configuration"):
//
//   /etc/vfab/verbs.conf, or the file VFAB_VERBS_CONFIG names:
//     device 0000:03:00.0 10.0.0.1 [name]      a device, its port's IPv4 address, its name
//     local_rank_device 0000:04:00.0 10.0.1.1  a device for one rank of a parallel job per host
//     progress thread|app                      who runs the protocol (docs/verbs.md, "Progress")
//     progress_cpu 3                           the progress thread's CPU
//     progress_sleep_us 1000                   idle this long, the progress thread sleeps (0: never)
//     quiet yes                                no one-line reasons on stderr
//   VFAB_VERBS_DEVICES=0000:03:00.0=10.0.0.1,0000:04:00.0=10.0.1.1   these devices and no others
//   VFAB_VERBS_LOCAL_RANK_DEVICES=PCI=IPv4,...   local rank r takes entry r mod n (not the file's)
//   VFAB_VERBS_PROGRESS, VFAB_VERBS_PROGRESS_CPU, VFAB_VERBS_PROGRESS_SLEEP_US, VFAB_VERBS_QUIET
//
// The devices listed: a rank of a parallel job with local-rank devices, its one device. Else
// with VFAB_VERBS_DEVICES, those devices. Else the file's devices, then every other PCI
// function bound to vfio-pci that a vfab provider drives and this user may open (its /dev/vfio
// group file), in PCI order. Nothing here opens a device, a netlink socket or a device file.
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "objects.hpp"
#include "vfab/pci_address.hpp"
#include "vfab/provider.hpp"
#include "vfab/vfio/pci_sysfs.hpp"

namespace vfab::verbs {
namespace {

constexpr const char* kDefaultConfig = "/etc/vfab/verbs.conf";

bool parse_ipv4(const std::string& s, uint32_t& out) {
    in_addr a{};
    if (inet_pton(AF_INET, s.c_str(), &a) != 1) return false;
    out = ntohl(a.s_addr);
    return true;
}

bool truthy(const char* v) { return v && (!std::strcmp(v, "1") || !std::strcmp(v, "yes") || !std::strcmp(v, "true")); }

// The devices configured for this process (docs/verbs.md, "Configuration").
struct Selection {
    std::vector<DeviceConfig> devices;        // VFAB_VERBS_DEVICES, then the file's "device" lines
    std::vector<DeviceConfig> by_local_rank;  // one of them per rank of a parallel job on this host
    bool explicit_list = false;               // VFAB_VERBS_DEVICES set: those devices and no others
    bool explicit_by_local_rank = false;      // VFAB_VERBS_LOCAL_RANK_DEVICES set: the file's are not read
};

// A "device" entry: the PCI address made canonical; false when it is not one.
bool add_configured(std::vector<DeviceConfig>& out, const std::string& bdf, const std::string& ip, const std::string& name,
                    const std::string& where) {
    auto addr = PciAddress::parse(bdf);
    DeviceConfig d;
    if (!addr || !parse_ipv4(ip, d.ipv4)) {
        tell("%s: '%s %s' is not a PCI address and an IPv4 address; ignored", where.c_str(), bdf.c_str(), ip.c_str());
        return false;
    }
    d.bdf = addr->to_string();
    d.name = name;
    for (auto& e : out)
        if (e.bdf == d.bdf) return true;   // the first entry for a device wins
    out.push_back(d);
    return true;
}

// "PCI=IPv4,PCI=IPv4": the devices of the environment variable `var`.
void read_device_list(const char* var, std::vector<DeviceConfig>& devs) {
    const char* v = std::getenv(var);
    if (!v) return;
    std::stringstream ss(v);
    std::string item;
    while (std::getline(ss, item, ',')) {
        const size_t eq = item.find('=');
        if (eq == std::string::npos) {
            tell("%s: '%s' is not PCI-ADDRESS=IPv4; ignored", var, item.c_str());
            continue;
        }
        add_configured(devs, item.substr(0, eq), item.substr(eq + 1), "", var);
    }
}

// The process's rank among its job's ranks on this host, from the variables the MPI launchers
// set (Open MPI's mpirun, MPICH's hydra, Slurm, PMIx); -1 outside a parallel job.
int local_rank() {
    for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "PMIX_LOCAL_RANK", "SLURM_LOCALID"})
        if (const char* v = std::getenv(var); v && *v) return std::atoi(v);
    return -1;
}

constexpr const char* kDevicesVar = "VFAB_VERBS_DEVICES";
constexpr const char* kLocalRankDevicesVar = "VFAB_VERBS_LOCAL_RANK_DEVICES";

bool set_and_not_empty(const char* var) {
    const char* v = std::getenv(var);
    return v && *v;
}

void read_env(Library& lib, Selection& sel) {
    sel.explicit_list = set_and_not_empty(kDevicesVar);
    sel.explicit_by_local_rank = set_and_not_empty(kLocalRankDevicesVar);
    read_device_list(kDevicesVar, sel.devices);
    read_device_list(kLocalRankDevicesVar, sel.by_local_rank);
    if (const char* v = std::getenv("VFAB_VERBS_PROGRESS")) lib.progress.thread = std::strcmp(v, "app") != 0;
    if (const char* v = std::getenv("VFAB_VERBS_PROGRESS_CPU")) lib.progress.cpu = std::atoi(v);
    if (const char* v = std::getenv("VFAB_VERBS_PROGRESS_SLEEP_US")) lib.progress.sleep_after_us = uint32_t(std::atol(v));
}

void read_file(Library& lib, Selection& sel) {
    std::ifstream in(lib.config_path);
    if (!in) return;
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
        ++n;
        if (const size_t hash = line.find('#'); hash != std::string::npos) line.erase(hash);
        std::istringstream f(line);
        std::string key, a, b, c;
        if (!(f >> key)) continue;
        f >> a >> b >> c;
        const std::string where = lib.config_path + ":" + std::to_string(n);
        if (key == "device") {
            if (!sel.explicit_list) add_configured(sel.devices, a, b, c, where);
        } else if (key == "local_rank_device") {
            if (!sel.explicit_by_local_rank) add_configured(sel.by_local_rank, a, b, c, where);
        }
        else if (key == "progress") lib.progress.thread = a != "app";
        else if (key == "progress_cpu") lib.progress.cpu = std::atoi(a.c_str());
        else if (key == "progress_sleep_us") lib.progress.sleep_after_us = uint32_t(std::atol(a.c_str()));
        else if (key == "quiet") lib.quiet = truthy(a.c_str());
        else tell("%s: unknown setting '%s'; ignored", where.c_str(), key.c_str());
    }
}

// The VFIO file through which this user may drive the PCI function `addr` (its group file, or
// its iommufd device file), relative to /dev/vfio; or why vfab cannot drive it: not bound to
// vfio-pci, no vfab provider for its IDs, or no such file open to this user.
struct VfioAccess {
    std::string node;   // e.g. "12", "noiommu-3", "devices/vfio0"
    std::string why;    // empty when usable
};

VfioAccess vfio_access(const vfio::PciSysfs& sysfs, const PciAddress& addr) {
    auto drv = sysfs.driver(addr);
    if (!drv || !*drv || **drv != "vfio-pci") return {{}, "not bound to vfio-pci (vfio-devctl bind " + addr.to_string() + ")"};
    auto ids = sysfs.ids(addr);
    if (!ids || !provider::find_provider(ids->vendor, ids->device)) return {{}, "no vfab provider drives it"};
    auto group = sysfs.iommu_group(addr);
    if (group)
        for (const std::string& f : {std::to_string(*group), "noiommu-" + std::to_string(*group)})
            if (::access(("/dev/vfio/" + f).c_str(), R_OK | W_OK) == 0) return {f, {}};
    if (auto cdev = sysfs.vfio_cdev(addr); cdev && *cdev)
        if (::access(("/dev/vfio/devices/" + **cdev).c_str(), R_OK | W_OK) == 0) return {"devices/" + **cdev, {}};
    return {{}, "this user may not open its VFIO group (vfio-devctl bind " + addr.to_string() + " --user $USER)"};
}

// PCI functions that vfab can drive for this user, in PCI order, with their VFIO files.
std::vector<DeviceConfig> drivable_devices(const vfio::PciSysfs& sysfs) {
    std::vector<DeviceConfig> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/sys/bus/pci/devices", ec)) {
        auto addr = PciAddress::parse(e.path().filename().string());
        if (!addr) continue;
        if (VfioAccess access = vfio_access(sysfs, *addr); access.why.empty())
            out.push_back(DeviceConfig{addr->to_string(), "", 0, std::move(access.node)});
    }
    std::sort(out.begin(), out.end(), [](const DeviceConfig& a, const DeviceConfig& b) { return a.bdf < b.bdf; });
    return out;
}

void fill_ibv_device(Device& d, size_t index) {
    ibv_device& ib = d.head.ibdev;
    ib.node_type = IBV_NODE_CA;
    ib.transport_type = IBV_TRANSPORT_IB;   // RoCE devices say IB; the link layer says Ethernet
    if (d.cfg.name.empty()) d.cfg.name = "vfab" + std::to_string(index);
    std::snprintf(ib.name, sizeof ib.name, "%s", d.cfg.name.c_str());
    // The device file, relative to /dev/infiniband, is the VFIO file this user drives the NIC
    // through: a program that checks the file before it opens the device (UCX stats it: a
    // character device it may read and write) finds the device usable exactly when it is.
    std::snprintf(ib.dev_name, sizeof ib.dev_name, "../vfio/%s", d.cfg.vfio_node.c_str());
    // No kernel RDMA device exists: both paths are the PCI function's own sysfs directory, and
    // ibv_read_sysfs_file answers the RDMA class files for them (misc.cpp).
    std::snprintf(ib.dev_path, sizeof ib.dev_path, "/sys/bus/pci/devices/%s", d.cfg.bdf.c_str());
    std::snprintf(ib.ibdev_path, sizeof ib.ibdev_path, "/sys/bus/pci/devices/%s", d.cfg.bdf.c_str());
}

}  // namespace

Library& library() {
    static Library* lib = [] {
        auto* l = new Library;   // never destroyed: ibv_device pointers outlive every static
        const char* path = std::getenv("VFAB_VERBS_CONFIG");
        l->config_path = path ? path : kDefaultConfig;
        l->quiet = truthy(std::getenv("VFAB_VERBS_QUIET"));
        return l;
    }();
    return *lib;
}

std::vector<DeviceConfig> configured_devices(Library& lib, bool& discover_others) {
    Selection sel;
    read_env(lib, sel);
    read_file(lib, sel);
    // A rank of a parallel job with local-rank devices gets one of them and sees no other NIC:
    // its neighbours on this host own the rest. So does a process given VFAB_VERBS_DEVICES.
    // Otherwise every other NIC this user may drive is listed after the configured ones.
    discover_others = !sel.explicit_list;
    if (const int rank = local_rank(); rank >= 0 && !sel.by_local_rank.empty()) {
        discover_others = false;
        return {sel.by_local_rank[size_t(rank) % sel.by_local_rank.size()]};
    }
    return sel.devices;
}

std::vector<Device*> discover(Library& lib) {
    std::lock_guard g(lib.mu);
    bool discover_others = true;
    const std::vector<DeviceConfig> configured = configured_devices(lib, discover_others);
    // Configured devices this user cannot drive are left out, with the reason.
    vfio::PciSysfs sysfs;
    std::vector<DeviceConfig> found;
    for (DeviceConfig c : configured) {
        const VfioAccess access = vfio_access(sysfs, *PciAddress::parse(c.bdf));
        c.vfio_node = access.node;
        if (access.why.empty()) found.push_back(c);
        else tell("%s: %s; not listed", c.bdf.c_str(), access.why.c_str());
    }
    if (discover_others)
        for (DeviceConfig& d : drivable_devices(sysfs))
            if (std::none_of(found.begin(), found.end(), [&](const DeviceConfig& c) { return c.bdf == d.bdf; }))
                found.push_back(std::move(d));
    std::vector<Device*> present;
    for (const DeviceConfig& c : found) {
        auto known = std::find_if(lib.devices.begin(), lib.devices.end(), [&](Device* d) { return d->cfg.bdf == c.bdf; });
        if (known != lib.devices.end()) {
            std::lock_guard dg((*known)->mu);
            if (!(*known)->open.port && c.ipv4) (*known)->cfg.ipv4 = c.ipv4;   // an address given since
            present.push_back(*known);
            continue;
        }
        auto* d = new Device;   // kept for the process (Library::devices)
        d->cfg = c;
        static const char kNotAProvider = 0;
        d->head.provider_ops = &kNotAProvider;
        fill_ibv_device(*d, lib.devices.size());
        lib.devices.push_back(d);
        present.push_back(d);
    }
    return present;
}

void tell(const char* fmt, ...) {
    if (library().quiet) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    std::fprintf(stderr, "vfab verbs: %s\n", line);
}

}  // namespace vfab::verbs
