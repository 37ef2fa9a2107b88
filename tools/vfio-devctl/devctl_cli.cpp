#include "devctl_cli.hpp"

#include <CLI/CLI.hpp>

#include "devctl_bind.hpp"
#include "devctl_check.hpp"
#include "devctl_devices.hpp"
#include "devctl_render.hpp"

namespace vfab::devctl {
namespace {

struct Args {
    std::string root, pci_ids;
    bool json = false, all = false, no_vfio = false;
    std::vector<std::string> bdfs;
    std::optional<std::string> user, group, driver;
    bool force = false, whole_group = false;
    std::optional<uint64_t> reserve;
    std::string size = "2M";
    std::optional<int> node;
};

int fail(std::ostream& err, const Error& e) {
    err << "vfio-devctl: " << e.message << "\n";
    return 1;
}

Result<std::vector<PciAddress>> parse_bdfs(const Context& ctx, const std::vector<std::string>& bdfs) {
    std::vector<PciAddress> out;
    for (const std::string& b : bdfs) {
        auto addr = existing_device(ctx, b);
        if (!addr) return addr.take_error();
        out.push_back(*addr);
    }
    return out;
}

int cmd_list(const Context& ctx, const Args& a, std::ostream& out, std::ostream& err) {
    auto devices = list_devices(ctx, a.all);
    if (!devices) return fail(err, devices.error());
    if (!a.json) {
        print_device_table(out, *devices);
        return 0;
    }
    nlohmann::json j = nlohmann::json::array();
    for (const DeviceInfo& d : *devices) j.push_back(device_json(d));
    out << dump(j) << "\n";
    return 0;
}

int cmd_show(const Context& ctx, const Args& a, std::ostream& out, std::ostream& err) {
    auto addrs = parse_bdfs(ctx, a.bdfs);
    if (!addrs) return fail(err, addrs.error());
    auto db = PciDatabase::open(ctx.paths);
    if (!db) return fail(err, db.error());
    auto info = describe(ctx, *db, addrs->front());
    if (!info) return fail(err, info.error());
    Backend backend = choose_backend(ctx, *info);
    std::optional<Result<VfioInfo>> vfio;
    std::optional<std::string> node = info->iommu_group ? group_node(ctx.paths, *info->iommu_group) : std::nullopt;
    if (info->on_vfio() && node && !a.no_vfio)
        vfio.emplace(query_vfio(ctx.paths, info->addr, *info->iommu_group, node->find("noiommu-") != std::string::npos));
    const Result<VfioInfo>* v = vfio ? &*vfio : nullptr;
    if (a.json) out << dump(show_json(*info, backend, v)) << "\n";
    else print_show(out, *info, backend, v);
    return 0;
}

int print_lines(const Result<std::vector<std::string>>& r, std::ostream& out, std::ostream& err) {
    if (!r) return fail(err, r.error());
    for (const std::string& line : *r) out << line << "\n";
    return 0;
}

int cmd_bind(const Context& ctx, const Args& a, std::ostream& out, std::ostream& err) {
    auto addrs = parse_bdfs(ctx, a.bdfs);
    if (!addrs) return fail(err, addrs.error());
    return print_lines(bind(ctx, {*addrs, a.user, a.group, a.force, a.whole_group}), out, err);
}

int cmd_unbind(const Context& ctx, const Args& a, std::ostream& out, std::ostream& err) {
    auto addrs = parse_bdfs(ctx, a.bdfs);
    if (!addrs) return fail(err, addrs.error());
    return print_lines(unbind(ctx, {*addrs, a.driver, a.force}), out, err);
}

int cmd_check(const Context& ctx, const Args& a, std::ostream& out, std::ostream&) {
    CheckReport report = check_host(ctx, current_process());
    if (a.json) out << dump(check_json(report)) << "\n";
    else print_check(out, report);
    return report.blocked() ? 1 : 0;
}

int cmd_hugepages(const Context& ctx, const Args& a, std::ostream& out, std::ostream& err) {
    if (a.reserve) {
        auto kb = parse_page_size(a.size);
        if (!kb) return fail(err, kb.error());
        auto r = reserve_hugepages(ctx, *a.reserve, *kb, a.node);
        if (!r) return fail(err, r.error());
        if (!a.json) out << *r << "\n";
    }
    if (a.json) out << dump(hugepages_json(hugepage_pools(ctx.paths))) << "\n";
    else if (!a.reserve) print_hugepages(out, hugepage_pools(ctx.paths));
    return 0;
}

using Command = int (*)(const Context&, const Args&, std::ostream&, std::ostream&);

CLI::App* add(CLI::App& app, const char* name, const char* help, Command cmd, Command& chosen) {
    CLI::App* sub = app.add_subcommand(name, help);
    sub->callback([cmd, &chosen] { chosen = cmd; });
    return sub;
}

void define(CLI::App& app, Args& a, Command& chosen) {
    app.require_subcommand(1);
    app.fallthrough();
    app.add_option("--root", a.root, "Treat DIR as / (a fake sysfs tree, for tests)")->group("");
    app.add_option("--pci-ids", a.pci_ids, "The PCI ID database (default: libpci's)")->group("");

    CLI::App* list = add(app, "list", "Network devices and devices on vfio-pci: driver, IOMMU group, NUMA node, vfab driver", cmd_list, chosen);
    list->add_flag("--all", a.all, "Every PCI device");
    list->add_flag("--json", a.json, "JSON for scripts");

    CLI::App* show = add(app, "show", "One device, the IOMMU backend vfab would use and what VFIO reports", cmd_show, chosen);
    show->add_option("BDF", a.bdfs, "PCI address, e.g. 0000:03:00.0")->required()->expected(1);
    show->add_flag("--json", a.json, "JSON for scripts");
    show->add_flag("--no-vfio", a.no_vfio, "Do not open the device through VFIO (which resets it)");

    CLI::App* bind = add(app, "bind", "Give devices to vfio-pci (recording their driver for restore)", cmd_bind, chosen);
    bind->add_option("BDF", a.bdfs, "PCI addresses")->required();
    bind->add_option("--user", a.user, "Owner of /dev/vfio/N (and the VFIO cdev) afterwards");
    bind->add_option("--group", a.group, "Group of /dev/vfio/N afterwards (mode 0660)");
    bind->add_flag("--force", a.force, "Bind even when a network interface on it is up or has an address");
    bind->add_flag("--whole-group", a.whole_group, "Also bind the other devices of each IOMMU group");

    for (const char* name : {"unbind", "restore"}) {
        CLI::App* un = add(app, name, "Give devices back to their original kernel driver", cmd_unbind, chosen);
        un->add_option("BDF", a.bdfs, "PCI addresses")->required();
        un->add_option("--driver", a.driver, "The kernel driver to bind (default: the one bind recorded)");
        un->add_flag("--force", a.force, "Unbind even when a process has the device open");
    }

    CLI::App* check = add(app, "check", "Diagnose this host for vfab; each problem with the command that fixes it", cmd_check, chosen);
    check->add_flag("--json", a.json, "JSON for scripts");

    CLI::App* huge = add(app, "hugepages", "Show or reserve hugepages", cmd_hugepages, chosen);
    huge->add_option("--reserve", a.reserve, "Number of pages to reserve (the new total)");
    huge->add_option("--size", a.size, "Page size: 2M or 1G")->capture_default_str();
    huge->add_option("--node", a.node, "NUMA node (default: the whole system)");
    huge->add_flag("--json", a.json, "JSON for scripts");
}

}  // namespace

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
    CLI::App app{"vfio-devctl: prepare a host and its PCI devices for vfab (user-space NIC drivers over VFIO)"};
    app.name("vfio-devctl");
    app.failure_message([](const CLI::App*, const CLI::Error& e) {
        return str_cat("vfio-devctl: ", e.what(), " (see vfio-devctl --help)\n");
    });
    Args args;
    Command chosen = nullptr;
    define(app, args, chosen);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e, out, err) == 0 ? 0 : 2;
    }
    Context ctx;
    if (!args.root.empty()) ctx.paths = Paths::under(args.root);
    if (!args.pci_ids.empty()) ctx.paths.pci_ids = args.pci_ids;
    return chosen ? chosen(ctx, args, out, err) : 2;
}

}  // namespace vfab::devctl
