#include "devctl_bind.hpp"

#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "devctl_devices.hpp"
#include "devctl_driver_ops.hpp"
#include "devctl_fs.hpp"

namespace vfab::devctl {
namespace {

std::string join(const std::vector<std::string>& parts, const char* sep = ", ") {
    std::string out;
    for (const std::string& p : parts) out += (out.empty() ? "" : sep) + p;
    return out;
}

// Owner for --user/--group: a name or a number; -1 (unchanged) when not given.
Result<uid_t> lookup_user(const std::optional<std::string>& user) {
    if (!user) return static_cast<uid_t>(-1);
    if (const passwd* pw = getpwnam(user->c_str())) return pw->pw_uid;
    char* end = nullptr;
    unsigned long id = std::strtoul(user->c_str(), &end, 10);
    if (!user->empty() && *end == '\0') return static_cast<uid_t>(id);
    return Error{EINVAL, str_cat("no user '", *user, "' (see getent passwd)")};
}

Result<gid_t> lookup_group(const std::optional<std::string>& group) {
    if (!group) return static_cast<gid_t>(-1);
    if (const struct group* gr = getgrnam(group->c_str())) return gr->gr_gid;
    char* end = nullptr;
    unsigned long id = std::strtoul(group->c_str(), &end, 10);
    if (!group->empty() && *end == '\0') return static_cast<gid_t>(id);
    return Error{EINVAL, str_cat("no group '", *group, "' (see getent group)")};
}

// A device backing an interface that is up or has an address is in use by the host's
// network stack: taking it away could cut the very ssh session running this command.
Result<void> check_interfaces(const DeviceInfo& info) {
    for (const NetInterface& nif : info.interfaces) {
        if (!nif.up && nif.addresses.empty()) continue;
        std::string state = nif.up ? "up" : "down";
        if (!nif.addresses.empty()) state += str_cat(" with address ", join(nif.addresses));
        return Error{EBUSY, str_cat(info.addr.to_string(), " backs network interface ", nif.name, ", which is ",
                                    state, ": binding it to vfio-pci takes that interface away from the kernel. "
                                    "Take it down first (ip addr flush dev ", nif.name, "; ip link set ", nif.name,
                                    " down) or pass --force")};
    }
    return {};
}

// Without an IOMMU group vfio-pci refuses the device, unless no-IOMMU mode is on (then it
// makes a group of its own at probe).
Result<void> check_iommu(const Context& ctx, const DeviceInfo& info) {
    if (info.iommu_group) return {};
    auto noiommu = read_optional(ctx.paths.sysfs + "/module/vfio/parameters/enable_unsafe_noiommu_mode");
    if (noiommu == "Y" || noiommu == "1") return {};
    return Error{ENODEV, str_cat(info.addr.to_string(), " has no IOMMU group, so vfio-pci would refuse it: turn "
                                 "the IOMMU on (intel_iommu=on or amd_iommu=on on the kernel command line, and "
                                 "VT-d/AMD-Vi in the firmware), or, on a machine whose DMA need not be isolated, "
                                 "enable no-IOMMU mode: echo 1 > /sys/module/vfio/parameters/"
                                 "enable_unsafe_noiommu_mode. `vfio-devctl check` says more")};
}

// Adds the group's other members to the devices to bind (--whole-group) or refuses when they
// would keep the group from being usable.
Result<void> check_group(const DeviceInfo& info, bool whole_group, std::vector<PciAddress>& todo) {
    std::vector<std::string> blockers;
    for (const GroupMember& m : info.group_others) {
        if (group_friendly(m.driver) || std::find(todo.begin(), todo.end(), m.addr) != todo.end()) continue;
        if (whole_group) todo.push_back(m.addr);
        else blockers.push_back(str_cat(m.addr.to_string(), " (", *m.driver, ")"));
    }
    if (blockers.empty()) return {};
    return Error{EBUSY, str_cat(info.addr.to_string(), " shares IOMMU group ", *info.iommu_group, " with ",
                                join(blockers), ": VFIO opens a group only when every member is on vfio-pci or "
                                "on no driver. Bind them too with --whole-group (or name them), or put the "
                                "device in a slot with a group of its own")};
}

// One device moved by this call: where it came from, for the rollback.
struct Moved {
    PciAddress addr;
    std::optional<std::string> original;
};

// Puts a device back on `original`; the error says how to finish by hand.
Result<void> put_back(const Context& ctx, const PciAddress& addr, const std::optional<std::string>& original) {
    (void)set_override(ctx, addr, "");
    (void)unbind_current(ctx, addr);
    if (original) (void)bind_to(ctx, addr, *original);
    auto now = expect_driver(ctx, addr, original);
    if (now) return {};
    return Error{EIO, str_cat("could not put ", addr.to_string(), " back on ", original.value_or("no driver"), " (",
                              now.error().message, "); try: echo ", addr.to_string(), " > /sys/bus/pci/drivers/",
                              original.value_or("<driver>"), "/bind")};
}

// The three steps of a bind: override, unbind, probe; then check where the device landed.
Result<void> move_to_vfio(const Context& ctx, const DeviceInfo& info) {
    if (auto r = set_override(ctx, info.addr, "vfio-pci"); !r) return r;
    if (auto r = unbind_current(ctx, info.addr); !r) return r;
    if (auto r = probe(ctx, info.addr); !r) return r;
    return expect_driver(ctx, info.addr, "vfio-pci");
}

// Gives the group node (and the device's VFIO cdev) to --user/--group.
Result<std::string> hand_over(const Context& ctx, const PciAddress& addr, uid_t uid, gid_t gid) {
    if (uid == static_cast<uid_t>(-1) && gid == static_cast<gid_t>(-1)) return std::string();
    auto group = ctx.sysfs().iommu_group(addr);
    if (!group) return group.take_error();
    std::vector<std::string> nodes;
    for (int i = 0; i < 40 && nodes.empty(); ++i) {   // devtmpfs may lag the probe a moment
        if (auto node = group_node(ctx.paths, *group)) nodes.push_back(*node);
        else usleep(50 * 1000);
    }
    if (nodes.empty()) return Error{ENOENT, str_cat("no /dev/vfio/", *group, " after binding ", addr.to_string())};
    if (auto cdev = ctx.sysfs().vfio_cdev(addr); cdev && *cdev) {
        std::string path = str_cat(ctx.paths.dev, "/vfio/devices/", **cdev);
        if (is_char_device(path)) nodes.push_back(path);   // 6.1 has vfio-dev/ in sysfs but no cdev
    }
    for (const std::string& node : nodes) {
        if (::chown(node.c_str(), uid, gid) != 0) {
            int err = errno;
            return Error::from_errno(err, str_cat("chown ", node), err == EPERM ? "run as root (sudo)" : "");
        }
        if (gid != static_cast<gid_t>(-1)) ::chmod(node.c_str(), 0660);
    }
    return str_cat(", ", join(nodes, " and "), " handed over");
}

// RDMA programs look for a device's file under /dev/infiniband before they open it (UCX stats
// it); vfab's libibverbs names the device's VFIO file relative to that directory
// ("../vfio/12", verbs/config.cpp). A host without the kernel's RDMA stack has no such
// directory: make it, empty. A line for the report when it was made.
Result<std::optional<std::string>> ensure_rdma_device_dir(const Context& ctx) {
    const std::string dir = str_cat(ctx.paths.dev, "/infiniband");
    if (::mkdir(dir.c_str(), 0755) == 0)
        return std::optional<std::string>(str_cat(dir, ": made, empty (RDMA programs look there for a device's file; "
                                                       "vfab's libibverbs names its VFIO file from it)"));
    if (errno == EEXIST) return std::optional<std::string>();
    const int err = errno;
    return Error::from_errno(err, str_cat("mkdir ", dir), err == EACCES ? "run as root (sudo)" : "");
}

Result<std::vector<DeviceInfo>> plan_bind(const Context& ctx, PciDatabase& db, const BindOptions& opts) {
    std::vector<PciAddress> todo;
    for (const PciAddress& a : opts.devices)   // each once, in the order given
        if (std::find(todo.begin(), todo.end(), a) == todo.end()) todo.push_back(a);
    std::vector<DeviceInfo> plan;
    for (size_t i = 0; i < todo.size(); ++i) {   // grows with --whole-group
        auto info = describe(ctx, db, todo[i]);
        if (!info) return info.take_error();
        if (auto r = check_iommu(ctx, *info); !r) return r.take_error();
        if (auto r = check_group(*info, opts.whole_group, todo); !r) return r.take_error();
        if (!opts.force && !info->on_vfio())
            if (auto r = check_interfaces(*info); !r) return r.take_error();
        if (!exists(ctx.device_dir(info->addr) + "/driver_override"))
            return Error{ENOTSUP, str_cat(info->addr.to_string(), " has no driver_override (kernel older than 3.16)")};
        if (::access((ctx.device_dir(info->addr) + "/driver_override").c_str(), W_OK) != 0)
            return Error{EACCES, str_cat("binding changes drivers through sysfs: run vfio-devctl as root (sudo)")};
        plan.push_back(std::move(info).value());
    }
    return plan;
}

// Rolls back the devices moved so far and turns `failure` into the final error.
Error roll_back(const Context& ctx, const std::vector<Moved>& moved, const Error& failure) {
    std::string msg = failure.message;
    for (auto it = moved.rbegin(); it != moved.rend(); ++it) {
        auto r = put_back(ctx, it->addr, it->original);
        msg += r ? str_cat("; ", it->addr.to_string(), " was put back on ", it->original.value_or("no driver"))
                 : str_cat("; ", r.error().message);
        if (r) forget_record(ctx, it->addr);
    }
    return Error{failure.code, msg};
}

}  // namespace

Result<std::vector<std::string>> bind(const Context& ctx, const BindOptions& opts) {
    auto uid = lookup_user(opts.user);
    if (!uid) return uid.take_error();
    auto gid = lookup_group(opts.group);
    if (!gid) return gid.take_error();
    auto db = PciDatabase::open(ctx.paths);
    if (!db) return db.take_error();
    auto plan = plan_bind(ctx, *db, opts);   // every check before the first change
    if (!plan) return plan.take_error();
    if (auto r = ensure_driver_loaded(ctx, "vfio-pci"); !r) return r.take_error();
    auto made = ensure_rdma_device_dir(ctx);   // before the first change: all or nothing
    if (!made) return made.take_error();

    std::vector<std::string> report;
    std::vector<Moved> moved;
    for (const DeviceInfo& info : *plan) {
        std::string line = str_cat(info.addr.to_string(), ": already on vfio-pci");
        if (!info.on_vfio()) {
            // The current driver is the truth; an old record only counts for a driverless device.
            if (info.driver || !read_record(ctx, info.addr))
                if (auto r = write_record(ctx, info.addr, info.driver); !r) return roll_back(ctx, moved, r.error());
            moved.push_back({info.addr, info.driver});
            if (auto r = move_to_vfio(ctx, info); !r) return roll_back(ctx, moved, r.error());
            line = str_cat(info.addr.to_string(), ": ", info.driver.value_or("no driver"), " -> vfio-pci");
        }
        auto group = ctx.sysfs().iommu_group(info.addr);
        if (group) line += str_cat(" (IOMMU group ", *group, ")");
        auto handed = hand_over(ctx, info.addr, *uid, *gid);
        if (!handed) return roll_back(ctx, moved, handed.error());
        report.push_back(line + *handed);
    }
    if (*made) report.push_back(**made);
    return report;
}

}  // namespace vfab::devctl
