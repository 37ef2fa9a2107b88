// check, the host's side: memlock limit, hugepages, /dev/vfio permissions, vfio-pci devices.
#include <grp.h>
#include <pwd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <set>

#include "devctl_check.hpp"
#include "devctl_devices.hpp"
#include "devctl_fs.hpp"

namespace vfab::devctl {
namespace {

constexpr int kCapIpcLock = 14;   // linux/capability.h

bool has_capability(int cap) {
    auto status = read_optional("/proc/self/status").value_or("");
    auto pos = status.find("CapEff:");
    if (pos == std::string::npos) return false;
    size_t begin = status.find_first_not_of(" \t", pos + 7);
    if (begin == std::string::npos) return false;
    unsigned long long mask = 0;
    std::from_chars(status.data() + begin, status.data() + status.size(), mask, 16);
    return (mask >> cap) & 1;
}

std::string user_name(uid_t uid) {
    const passwd* pw = getpwuid(uid);
    return pw ? pw->pw_name : std::to_string(uid);
}

bool can_read_write(const struct stat& st, const ProcessFacts& proc) {
    if (proc.uid == 0) return true;
    if (st.st_uid == proc.uid) return (st.st_mode & 0600) == 0600;
    if (std::find(proc.gids.begin(), proc.gids.end(), st.st_gid) != proc.gids.end()) return (st.st_mode & 060) == 060;
    return (st.st_mode & 06) == 06;
}

std::string owner_text(const struct stat& st) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777);
    const group* gr = getgrgid(st.st_gid);
    return str_cat(user_name(st.st_uid), ":", gr ? std::string(gr->gr_name) : std::to_string(st.st_gid), " ", mode);
}

}  // namespace

ProcessFacts current_process() {
    ProcessFacts p;
    rlimit rl{};
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) p.memlock = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : rl.rlim_cur;
    p.cap_ipc_lock = has_capability(kCapIpcLock);
    p.uid = geteuid();
    p.gids.push_back(getegid());
    gid_t groups[256];
    int n = getgroups(256, groups);
    for (int i = 0; i < n; ++i) p.gids.push_back(groups[i]);
    return p;
}

void check_memlock(const ProcessFacts& proc, std::vector<Finding>& out) {
    std::string limit = proc.memlock == UINT64_MAX ? "unlimited" : human_bytes(proc.memlock);
    if (proc.memlock >= kTypicalPinnedBytes) {
        out.push_back({Severity::ok, "memlock", str_cat("RLIMIT_MEMLOCK ", limit), ""});
        return;
    }
    std::string need = str_cat("RLIMIT_MEMLOCK is ", limit, ", below the ", human_bytes(kTypicalPinnedBytes),
                               " a typical vfab application pins for DMA");
    std::string fix = str_cat("echo '", proc.uid == 0 ? std::string("<user>") : user_name(proc.uid),
                              " - memlock unlimited' | sudo tee /etc/security/limits.d/90-vfab.conf, then log in "
                              "again (systemd services: LimitMEMLOCK=infinity)");
    if (proc.cap_ipc_lock)
        out.push_back({Severity::info, "memlock", need + "; this process has CAP_IPC_LOCK (root), which the limit "
                       "does not bind, but the users who run vfab applications need it raised", fix});
    else
        out.push_back({Severity::error, "memlock", need + ": registering memory will fail with ENOMEM", fix});
}

void check_hugepages(const Context& ctx, const std::vector<HugepagePool>& pools, std::vector<Finding>& out) {
    uint64_t bytes = 0, free_bytes = 0;
    std::string summary;
    for (const HugepagePool& p : pools) {
        if (p.node >= 0) continue;
        bytes += p.total * p.page_kb * 1024;
        free_bytes += p.free * p.page_kb * 1024;
        summary += str_cat(summary.empty() ? "" : ", ", p.total, " x ", human_bytes(p.page_kb * 1024), " (", p.free, " free)");
    }
    if (bytes == 0) {
        out.push_back({Severity::warning, "hugepages", "no hugepages reserved: vfab's DMA memory falls back to 4 KiB "
                       "pages (more IOMMU entries, more TLB misses)", "vfio-devctl hugepages --reserve 128 --size 2M"});
        return;
    }
    out.push_back({free_bytes ? Severity::ok : Severity::warning, "hugepages",
                   str_cat("hugepages: ", summary, free_bytes ? "" : ": all in use"),
                   free_bytes ? "" : "vfio-devctl hugepages --reserve N (more than now)"});
    // Devices DMA best into memory on their own node: warn when that node has none.
    std::set<int> nodes;
    if (auto devices = list_devices(ctx, false))
        for (const DeviceInfo& d : *devices)
            if (d.on_vfio() && d.numa_node >= 0) nodes.insert(d.numa_node);
    for (int node : nodes) {
        bool has = std::any_of(pools.begin(), pools.end(), [&](const HugepagePool& p) { return p.node == node && p.total; });
        if (!has)
            out.push_back({Severity::warning, "hugepages", str_cat("NUMA node ", node, " has vfio-pci devices but no "
                           "hugepages: their DMA memory would come from another node"),
                           str_cat("vfio-devctl hugepages --reserve 128 --size 2M --node ", node)});
    }
}

void check_permissions(const Context& ctx, const ProcessFacts& proc, std::vector<Finding>& out) {
    std::string dir = ctx.paths.dev + "/vfio";
    std::vector<std::string> nodes;
    for (const std::string& n : list_dir(dir))
        if (n != "devices") nodes.push_back(dir + "/" + n);
    for (const std::string& n : list_dir(dir + "/devices")) nodes.push_back(dir + "/devices/" + n);
    if (is_char_device(ctx.paths.dev + "/iommu")) nodes.push_back(ctx.paths.dev + "/iommu");
    std::string seen, denied;
    for (const std::string& node : nodes) {
        struct stat st;
        if (::stat(node.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) continue;
        std::string shown = "/dev" + node.substr(ctx.paths.dev.size());   // as the user knows it, even under --root
        seen += str_cat(seen.empty() ? "" : ", ", shown, " ", owner_text(st));
        if (!can_read_write(st, proc)) denied += str_cat(denied.empty() ? "" : " ", shown);
    }
    if (seen.empty()) return;
    if (denied.empty()) {
        out.push_back({Severity::ok, "permissions", str_cat("VFIO nodes usable by ", user_name(proc.uid), ": ", seen), ""});
        return;
    }
    out.push_back({Severity::warning, "permissions", str_cat(user_name(proc.uid), " cannot open ", denied, " (", seen,
                   ")"), str_cat("sudo vfio-devctl bind BDF --user ", user_name(proc.uid),
                                 " (gives it the device's group node), or sudo chown ", user_name(proc.uid), " ",
                                 denied)});
}

void check_devices(const Context& ctx, std::vector<Finding>& out) {
    auto devices = list_devices(ctx, false);
    if (!devices) {
        out.push_back({Severity::error, "device", devices.error().message, ""});
        return;
    }
    int on_vfio = 0;
    for (const DeviceInfo& d : *devices) {
        std::string bdf = d.addr.to_string();
        if (!d.on_vfio()) {
            if (!d.vfab_driver.empty())
                out.push_back({Severity::info, "device", str_cat(bdf, " (vfab driver ", d.vfab_driver, ") is on ",
                               d.driver.value_or("no driver"), ", not vfio-pci"), "vfio-devctl bind " + bdf});
            continue;
        }
        ++on_vfio;
        std::string what = str_cat(bdf, " on vfio-pci, IOMMU group ",
                                   d.iommu_group ? std::to_string(*d.iommu_group) : std::string("none"));
        if (!group_viable(d)) {
            std::string blockers;
            for (const std::string& b : group_blockers(d)) blockers += (blockers.empty() ? "" : ", ") + b;
            out.push_back({Severity::error, "device", str_cat(what, ": the group is not viable, it also holds ", blockers,
                           " (VFIO needs every member on vfio-pci or on no driver)"),
                           "vfio-devctl bind --whole-group " + bdf});
        } else if (d.iommu_group && !group_node(ctx.paths, *d.iommu_group)) {
            out.push_back({Severity::error, "device", str_cat(what, ": /dev/vfio/", *d.iommu_group, " is missing"),
                           str_cat("vfio-devctl unbind ", bdf, " && vfio-devctl bind ", bdf)});
        } else {
            std::string driver = d.vfab_driver.empty() ? "no vfab driver for " + id_text(d.vendor, d.device)
                                                       : "vfab driver " + d.vfab_driver;
            out.push_back({Severity::ok, "device", str_cat(what, ", group viable, ", driver), ""});
        }
    }
    if (on_vfio == 0)
        out.push_back({Severity::warning, "device", "no device is bound to vfio-pci, so there is nothing for vfab to open",
                       "vfio-devctl list, then vfio-devctl bind BDF"});
}

}  // namespace vfab::devctl
