// Taking a PCI device away from its user the way the kernel does (sysfs remove: vfio-pci
// raises the request interrupt and waits for the close), and giving it back to vfio-pci
// afterwards (rescan, driver_override, probe) for the tests that follow in the same boot.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "leak_check.hpp"   // holds_vfio
#include "spawn.hpp"

namespace vfab::lab {

// The driver bound to `bdf`, or "" when none.
inline std::string driver_of(const std::string& bdf) {
    std::error_code ec;
    auto link = std::filesystem::read_symlink("/sys/bus/pci/devices/" + bdf + "/driver", ec);
    return ec ? "" : link.filename().string();
}

// Removes `bdf` from the bus: returns only once its user has let it go (vfio-pci waits).
inline void remove_device(const std::string& bdf) { std::ofstream("/sys/bus/pci/devices/" + bdf + "/remove") << 1; }

// Waits up to 10 s until `prog` holds a VFIO group or device (it has opened its device).
inline bool wait_until_open(const Child& prog) {
    for (int i = 0; i < 500; ++i, std::this_thread::sleep_for(std::chrono::milliseconds(20)))
        if (holds_vfio(prog.pid())) return true;
    return false;
}

// What a program did when its device was taken away, and how long the kernel's removal waited
// for it to let go (seconds; -1: the removal had not returned).
struct RemovalRun {
    Outcome outcome;
    double removal_s = -1;
};

// Removes `bdf` while `prog` runs, and waits up to `limit` for the program to end.
inline RemovalRun remove_while_running(Child& prog, const std::string& bdf, std::chrono::milliseconds limit) {
    const auto t0 = std::chrono::steady_clock::now();
    std::atomic<double> removal_s{-1};
    std::thread remover([&] {
        remove_device(bdf);   // returns once the program has closed the device
        removal_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
    RemovalRun r{prog.wait(limit)};
    remover.join();
    r.removal_s = removal_s;
    return r;
}

// Rescans the bus and binds the device to vfio-pci again, whatever the rescan did with it.
inline void give_back_to_vfio(const std::string& bdf) {
    { std::ofstream("/sys/bus/pci/rescan") << 1; }
    for (int i = 0; i < 200 && !std::filesystem::exists("/sys/bus/pci/devices/" + bdf); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const std::string dev = "/sys/bus/pci/devices/" + bdf;
    { std::ofstream(dev + "/driver_override") << "vfio-pci"; }
    if (std::string d = driver_of(bdf); !d.empty() && d != "vfio-pci") std::ofstream(dev + "/driver/unbind") << bdf;
    if (driver_of(bdf).empty()) std::ofstream("/sys/bus/pci/drivers_probe") << bdf;
}

}  // namespace vfab::lab
