// Taking a PCI device away from its user the way the kernel does (sysfs remove: vfio-pci
// raises the request interrupt and waits for the close), and giving it back to vfio-pci
// afterwards (rescan, driver_override, probe) for the tests that follow in the same boot.
#pragma once

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace vfab::lab {

// The driver bound to `bdf`, or "" when none.
inline std::string driver_of(const std::string& bdf) {
    std::error_code ec;
    auto link = std::filesystem::read_symlink("/sys/bus/pci/devices/" + bdf + "/driver", ec);
    return ec ? "" : link.filename().string();
}

// Removes `bdf` from the bus: returns only once its user has let it go (vfio-pci waits).
inline void remove_device(const std::string& bdf) { std::ofstream("/sys/bus/pci/devices/" + bdf + "/remove") << 1; }

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
