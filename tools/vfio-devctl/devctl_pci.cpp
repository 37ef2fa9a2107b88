#include "devctl_pci.hpp"

#include <csetjmp>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <algorithm>

extern "C" {
#include <pci/pci.h>
}

namespace vfab::devctl {
namespace {

// libpci reports fatal errors through a callback that must not return (pci.h: PCI_NONRET;
// the default one calls exit()). Ours jumps back to the guarded call below with the message.
// Only C frames (libpci's) lie between the setjmp and the longjmp.
thread_local std::jmp_buf* g_on_error = nullptr;
thread_local char g_message[512];

extern "C" void on_pci_error(char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(g_message, sizeof g_message, fmt, ap);
    va_end(ap);
    if (g_on_error) std::longjmp(*g_on_error, 1);
    std::fprintf(stderr, "vfio-devctl: libpci: %s\n", g_message);
    std::_Exit(1);
}

extern "C" void on_pci_warning(char*, ...) {}   // e.g. an unreadable optional attribute

// pci_init + pci_scan_bus + pci_fill_info under the error guard; false (and g_message) on error.
bool guarded_scan(pci_access* a, bool init) {
    std::jmp_buf env;
    g_on_error = &env;
    if (setjmp(env) != 0) {
        g_on_error = nullptr;
        return false;
    }
    if (init) pci_init(a);
    pci_scan_bus(a);
    for (pci_dev* d = a->devices; d; d = d->next) pci_fill_info(d, PCI_FILL_IDENT);
    g_on_error = nullptr;
    return true;
}

}  // namespace

void PciDatabase::Cleanup::operator()(pci_access* a) const { pci_cleanup(a); }

Result<PciDatabase> PciDatabase::open(const Paths& paths) {
    std::string bus = paths.sysfs + "/bus/pci";
    std::error_code ec;
    if (!std::filesystem::is_directory(bus + "/devices", ec))
        return Error{ENODEV, str_cat("no PCI bus in sysfs (", bus, "/devices): is sysfs mounted at ",
                                     paths.sysfs, "?")};
    // libpci treats an odd entry as fatal; the guard below would catch it but leak libpci's
    // scan state, so look first. Only a device vanishing mid-scan can still reach the guard.
    for (const auto& entry : std::filesystem::directory_iterator(bus + "/devices", ec)) {
        std::string name = entry.path().filename().string();
        if (!PciAddress::parse(name) || !std::filesystem::exists(entry.path() / "vendor", ec))
            return Error{EIO, str_cat("unexpected entry '", name, "' in ", bus, "/devices: not a PCI function")};
    }
    pci_access* a = pci_alloc();
    if (!a) return Error{ENOMEM, "libpci: pci_alloc failed"};
    PciDatabase db(a);
    a->error = on_pci_error;
    a->warning = on_pci_warning;
    a->method = PCI_ACCESS_SYS_BUS_PCI;
    pci_set_param(a, const_cast<char*>("sysfs.path"), bus.data());   // libpci copies it
    if (!paths.pci_ids.empty())   // 1: libpci owns (and frees) the copy
        pci_set_name_list_path(a, strdup(paths.pci_ids.c_str()), 1);
    if (!guarded_scan(a, true)) return Error{EIO, str_cat("libpci: ", g_message)};
    return db;
}

Result<std::vector<PciAddress>> PciDatabase::scan() {
    std::vector<PciAddress> out;
    for (pci_dev* d = access_->devices; d; d = d->next) {
        PciAddress addr;
        addr.domain = static_cast<uint16_t>(d->domain);
        addr.bus = d->bus;
        addr.device = d->dev;
        addr.function = d->func;
        out.push_back(addr);
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::string PciDatabase::vendor_name(uint16_t vendor) {
    char buf[256];
    // NO_HWDB: names come from pci.ids alone, the same on every machine and in the lab guest.
    const char* name = pci_lookup_name(access_.get(), buf, sizeof buf,
                                       PCI_LOOKUP_VENDOR | PCI_LOOKUP_NO_NUMBERS | PCI_LOOKUP_NO_HWDB, vendor);
    return name ? name : "";
}

std::string PciDatabase::device_name(uint16_t vendor, uint16_t device) {
    char buf[256];
    const char* name = pci_lookup_name(access_.get(), buf, sizeof buf,
                                       PCI_LOOKUP_DEVICE | PCI_LOOKUP_NO_NUMBERS | PCI_LOOKUP_NO_HWDB, vendor, device);
    return name ? name : "";
}

}  // namespace vfab::devctl
