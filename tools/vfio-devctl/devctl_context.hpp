// What vfio-devctl works on: the host's file-system roots and the one side effect that is not
// a file write, running a command (modprobe). Both are parameters so that the unit tests can
// run every command against a fake sysfs tree in a temporary directory.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "vfab/result.hpp"
#include "vfab/vfio/pci_sysfs.hpp"

namespace vfab::devctl {

struct Paths {
    std::string sysfs = "/sys";
    std::string dev = "/dev";
    std::string proc = "/proc";
    std::string modules = "/lib/modules";
    std::string run = "/run/vfab/devctl";  // bind records each device's original driver here
    std::string pci_ids;                   // empty: libpci's own (/usr/share/misc/pci.ids)

    // Every path under `root` ("<root>/sys", "<root>/dev", ...), for tests and --root.
    static Paths under(const std::string& root);
};

struct CommandResult {
    int status = 0;       // exit status; 128 + signal when killed
    std::string output;   // stdout and stderr, merged
};
using CommandRunner = std::function<Result<CommandResult>(const std::vector<std::string>& argv)>;

// Runs argv (looked up in PATH) and waits for it.
Result<CommandResult> run_command(const std::vector<std::string>& argv);

struct Context {
    Paths paths;
    CommandRunner run = run_command;

    vfio::PciSysfs sysfs() const { return vfio::PciSysfs(paths.sysfs); }
    std::string device_dir(const PciAddress& addr) const {
        return str_cat(paths.sysfs, "/bus/pci/devices/", addr.to_string());
    }
    std::string driver_dir(const std::string& driver) const {
        return str_cat(paths.sysfs, "/bus/pci/drivers/", driver);
    }
};

}  // namespace vfab::devctl
