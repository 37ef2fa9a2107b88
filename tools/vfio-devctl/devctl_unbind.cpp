// unbind / restore: from vfio-pci back to the device's original kernel driver.
#include <optional>

#include "devctl_bind.hpp"
#include "devctl_devices.hpp"
#include "devctl_driver_ops.hpp"
#include "devctl_fs.hpp"

namespace vfab::devctl {
namespace {

// The VFIO nodes through which a process may hold the device: its group node and its cdev.
std::vector<std::string> vfio_nodes(const Context& ctx, const PciAddress& addr) {
    std::vector<std::string> nodes;
    vfio::PciSysfs sysfs = ctx.sysfs();
    if (auto group = sysfs.iommu_group(addr))
        if (auto node = group_node(ctx.paths, *group)) nodes.push_back(*node);
    if (auto cdev = sysfs.vfio_cdev(addr); cdev && *cdev)
        nodes.push_back(str_cat(ctx.paths.dev, "/vfio/devices/", **cdev));
    return nodes;
}

// Unbinding from vfio-pci waits until every user closes the device: with a process holding
// it, the write would block (the kernel keeps asking the process to let go).
Result<void> check_not_in_use(const Context& ctx, const PciAddress& addr) {
    auto users = users_of(ctx, vfio_nodes(ctx, addr));
    if (users.empty()) return {};
    std::string who;
    for (const std::string& u : users) who += (who.empty() ? "" : ", ") + u;
    return Error{EBUSY, str_cat(addr.to_string(), " is open in process ", who, ": stop it first (unbinding "
                                "would wait for it to close the device), or pass --force")};
}

// Where the device goes: a named driver (--driver, or the record), no driver (the record says
// it had none), or the kernel's own match (no record: like driverctl unset-override).
struct Target {
    enum Kind { named, none, kernel } kind = kernel;
    std::string driver;
};

Target target_of(const Context& ctx, const PciAddress& addr, const UnbindOptions& opts) {
    if (opts.driver) return {Target::named, *opts.driver};
    auto recorded = read_record(ctx, addr);
    if (!recorded) return {Target::kernel, ""};
    if (recorded->empty()) return {Target::none, ""};
    return {Target::named, *recorded};
}

// Binds `t` after the device was unbound; the error says where the device ended up.
Result<void> land(const Context& ctx, const PciAddress& addr, const Target& t) {
    if (t.kind == Target::none) return {};
    if (t.kind == Target::kernel) return probe(ctx, addr);
    if (auto r = bind_to(ctx, addr, t.driver); !r) {
        (void)probe(ctx, addr);   // rather on whatever the kernel matches than on nothing
        auto now = ctx.sysfs().driver(addr);
        return Error{r.error().code, str_cat(r.error().message, "; the kernel's own match put it on ",
                                             now && *now ? **now : std::string("no driver"))};
    }
    return expect_driver(ctx, addr, t.driver);
}

Result<std::string> unbind_one(const Context& ctx, const PciAddress& addr, const UnbindOptions& opts) {
    auto driver = ctx.sysfs().driver(addr);
    if (!driver) return driver.take_error();
    Target t = target_of(ctx, addr, opts);
    std::string was = driver->value_or("no driver");
    bool there = t.kind == Target::named ? *driver == t.driver : t.kind == Target::none ? !*driver : driver->has_value();
    if (*driver != "vfio-pci" && there) return str_cat(addr.to_string(), ": not on vfio-pci (on ", was, "), nothing to do");
    if (*driver == "vfio-pci" && !opts.force)
        if (auto r = check_not_in_use(ctx, addr); !r) return r.take_error();
    if (t.kind == Target::named)
        if (auto r = ensure_driver_loaded(ctx, t.driver); !r) return r.take_error();

    if (auto r = set_override(ctx, addr, ""); !r) return r.take_error();
    if (auto r = unbind_current(ctx, addr); !r) return r.take_error();
    if (auto r = land(ctx, addr, t); !r) return r.take_error();
    forget_record(ctx, addr);
    auto now = ctx.sysfs().driver(addr);
    std::string landed = now && *now ? **now : std::string("no driver");
    const char* why = t.kind == Target::none     ? " (it had none before bind)"
                      : t.kind == Target::kernel ? " (no recorded driver: the kernel's own match; --driver NAME picks one)"
                                                 : "";
    return str_cat(addr.to_string(), ": ", was, " -> ", landed, why);
}

}  // namespace

Result<std::vector<std::string>> unbind(const Context& ctx, const UnbindOptions& opts) {
    std::vector<std::string> report;
    for (const PciAddress& addr : opts.devices) {   // each stands alone: a device is never half-moved
        auto line = unbind_one(ctx, addr, opts);
        if (!line) {
            if (report.empty()) return line.take_error();
            std::string done;
            for (const std::string& r : report) done += "; " + r;
            return Error{line.error().code, line.error().message + " (already done" + done + ")"};
        }
        report.push_back(std::move(line).value());
    }
    return report;
}

}  // namespace vfab::devctl
