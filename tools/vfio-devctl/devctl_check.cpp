// check, the kernel's side: the IOMMU and its mode, VFIO, vfio-pci, iommufd, no-IOMMU mode.
#include "devctl_check.hpp"

#include <algorithm>
#include <sstream>

#include "devctl_fs.hpp"

namespace vfab::devctl {

const char* severity_name(Severity s) {
    switch (s) {
        case Severity::ok: return "ok";
        case Severity::info: return "info";
        case Severity::warning: return "warning";
        case Severity::error: return "error";
    }
    return "?";
}

bool CheckReport::blocked() const {
    return std::any_of(findings.begin(), findings.end(), [](const Finding& f) { return f.severity == Severity::error; });
}

namespace {

std::vector<std::string> iommu_params(const std::string& cmdline) {
    std::vector<std::string> out;
    std::istringstream in(cmdline);
    for (std::string word; in >> word;)
        if (word.starts_with("intel_iommu=") || word.starts_with("amd_iommu=") || word.starts_with("iommu=") ||
            word.starts_with("iommu.") || word.starts_with("vfio") || word.starts_with("vfio_iommu_type1."))
            out.push_back(word);
    return out;
}

bool has_param(const IommuState& s, const std::string& p) {
    return std::find(s.cmdline.begin(), s.cmdline.end(), p) != s.cmdline.end();
}

// The kernel release, for the module directory.
std::string release(const Paths& p) { return read_optional(p.proc + "/sys/kernel/osrelease").value_or(""); }

// Whether the kernel has a module (loadable or built in) named `ko` ("vfio-pci.ko").
bool kernel_has_module(const Paths& p, const std::string& ko) {
    std::string dir = str_cat(p.modules, "/", release(p));
    for (const char* index : {"/modules.dep", "/modules.builtin"}) {
        auto text = read_optional(dir + index);
        if (text && (text->find("/" + ko) != std::string::npos)) return true;
    }
    return false;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
    std::string out;
    for (const std::string& s : v) out += (out.empty() ? "" : sep) + s;
    return out;
}

// Whether the IOMMU to turn on is AMD's: the kernel parameter already named, else the
// firmware's table (DMAR: Intel VT-d, IVRS: AMD-Vi), else the CPU's vendor.
bool amd_iommu(const Paths& p, const IommuState& s) {
    for (const std::string& param : s.cmdline) {
        if (param.starts_with("intel_iommu=")) return false;
        if (param.starts_with("amd_iommu=")) return true;
    }
    if (exists(p.sysfs + "/firmware/acpi/tables/DMAR")) return false;
    if (exists(p.sysfs + "/firmware/acpi/tables/IVRS")) return true;
    return read_optional(p.proc + "/cpuinfo").value_or("").find("AuthenticAMD") != std::string::npos;
}

// The kernel command line change that turns the IOMMU on.
std::string iommu_fix(const Paths& p, const IommuState& s) {
    bool amd = amd_iommu(p, s);
    std::string param = amd ? "amd_iommu=on iommu=pt" : "intel_iommu=on iommu=pt";
    return str_cat("enable ", amd ? "AMD-Vi (IOMMU)" : "VT-d", " in the firmware setup, then: sudo sed -i "
                   "'s/^GRUB_CMDLINE_LINUX=\"/&", param, " /' /etc/default/grub && sudo update-grub && sudo reboot");
}

}  // namespace

IommuState read_iommu_state(const Paths& p) {
    IommuState s;
    s.units = list_dir(p.sysfs + "/class/iommu");
    std::vector<std::string> groups = list_dir(p.sysfs + "/kernel/iommu_groups");
    s.groups = groups.size();
    if (!groups.empty()) s.default_domain = read_optional(str_cat(p.sysfs, "/kernel/iommu_groups/", groups[0], "/type")).value_or("");
    s.cmdline = iommu_params(read_optional(p.proc + "/cmdline").value_or(""));
    auto noiommu = read_optional(p.sysfs + "/module/vfio/parameters/enable_unsafe_noiommu_mode");
    s.noiommu_mode = noiommu == "Y" || noiommu == "1";
    // Groups without IOMMU units are what no-IOMMU mode fakes for vfio-pci: not an IOMMU.
    s.on = !s.units.empty();
    return s;
}

void check_iommu(const Context& ctx, const IommuState& s, std::vector<Finding>& out) {
    std::string params = s.cmdline.empty() ? "none" : join(s.cmdline, " ");
    if (s.on) {
        std::string mode = s.default_domain.empty() ? "" : str_cat(", default domain ", s.default_domain);
        if (s.default_domain == "identity" || has_param(s, "iommu=pt") || has_param(s, "iommu.passthrough=1"))
            mode += " (passthrough for kernel drivers; devices on vfio-pci still get translated domains)";
        out.push_back({Severity::ok, "iommu", str_cat("IOMMU on: ", join(s.units, ", "), ", ", s.groups,
                                                      " IOMMU groups", mode, "; kernel parameters: ", params), ""});
        if (s.noiommu_mode)
            out.push_back({Severity::warning, "noiommu", "no-IOMMU mode is enabled although the IOMMU is on: a device "
                           "without an IOMMU group would be bound with no DMA isolation",
                           "echo 0 > /sys/module/vfio/parameters/enable_unsafe_noiommu_mode"});
        return;
    }
    std::string why = has_param(s, "intel_iommu=off") || has_param(s, "amd_iommu=off")
                          ? "the kernel command line turns it off (" + params + ")"
                          : "no IOMMU unit in /sys/class/iommu (kernel parameters: " + params + ")";
    if (s.noiommu_mode) {
        out.push_back({Severity::warning, "iommu", str_cat("IOMMU missing: ", why, "; VFIO runs in unsafe no-IOMMU "
                       "mode: devices DMA to physical addresses with no isolation (acceptable in a VM without a "
                       "virtual IOMMU, nowhere else)"), iommu_fix(ctx.paths, s)});
        return;
    }
    out.push_back({Severity::error, "iommu", str_cat("IOMMU missing: ", why, ": vfio-pci cannot take a device "
                   "without an IOMMU group"), iommu_fix(ctx.paths, s) + " (in a VM without a virtual IOMMU instead: "
                   "echo 1 > /sys/module/vfio/parameters/enable_unsafe_noiommu_mode, unsafe)"});
}

void check_vfio_modules(const Context& ctx, std::vector<Finding>& out) {
    const Paths& p = ctx.paths;
    if (is_char_device(p.dev + "/vfio/vfio"))
        out.push_back({Severity::ok, "vfio", "VFIO loaded (/dev/vfio/vfio: the legacy container)", ""});
    else if (kernel_has_module(p, "vfio.ko"))
        out.push_back({Severity::warning, "vfio", "VFIO is not loaded (no /dev/vfio/vfio)", "modprobe vfio-pci"});
    else
        out.push_back({Severity::error, "vfio", "VFIO is missing: no /dev/vfio/vfio and no vfio module for this kernel",
                       "a kernel with CONFIG_VFIO=m (Debian's linux-image-amd64 has it)"});

    bool vfio_pci = is_dir(p.sysfs + "/bus/pci/drivers/vfio-pci");
    if (vfio_pci)
        out.push_back({Severity::ok, "vfio-pci", "vfio-pci loaded", ""});
    else if (kernel_has_module(p, "vfio-pci.ko"))
        out.push_back({Severity::warning, "vfio-pci", "vfio-pci is not loaded (vfio-devctl bind loads it)",
                       "modprobe vfio-pci && echo vfio-pci > /etc/modules-load.d/vfab.conf"});
    else
        out.push_back({Severity::error, "vfio-pci", "vfio-pci is missing: not loaded and no module for this kernel",
                       "a kernel with CONFIG_VFIO_PCI=m"});

    if (is_char_device(p.dev + "/iommu"))
        out.push_back({Severity::ok, "iommufd", "iommufd available (/dev/iommu): vfab uses it for devices with a "
                       "VFIO cdev (/dev/vfio/devices/vfioN)", ""});
    else if (kernel_has_module(p, "iommufd.ko"))
        out.push_back({Severity::info, "iommufd", "iommufd is not loaded: vfab uses the legacy container",
                       "modprobe iommufd"});
    else
        out.push_back({Severity::info, "iommufd", "this kernel has no iommufd (CONFIG_IOMMUFD): vfab uses the legacy "
                       "VFIO container, which works as well", ""});
}

CheckReport check_host(const Context& ctx, const ProcessFacts& proc) {
    CheckReport r;
    r.iommu = read_iommu_state(ctx.paths);
    r.hugepages = hugepage_pools(ctx.paths);
    check_iommu(ctx, r.iommu, r.findings);
    check_vfio_modules(ctx, r.findings);
    check_memlock(proc, r.findings);
    check_hugepages(ctx, r.hugepages, r.findings);
    check_permissions(ctx, proc, r.findings);
    check_devices(ctx, r.findings);
    return r;
}

}  // namespace vfab::devctl
