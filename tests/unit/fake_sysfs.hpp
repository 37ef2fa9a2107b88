// A fake sysfs tree in a temporary directory: PCI devices with IDs, drivers, IOMMU groups,
// NUMA nodes and VFIO cdevs, laid out as the kernel does (bus/pci/devices/<bdf> links into
// devices/, driver and iommu_group links).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace vfab::testing {

class FakeSysfsTree {
public:
    FakeSysfsTree() {
        char tmpl[] = "/tmp/vfab-sysfs.XXXXXX";
        root_ = mkdtemp(tmpl);
        std::filesystem::create_directories(root_ / "bus/pci/devices");
    }
    ~FakeSysfsTree() { std::filesystem::remove_all(root_); }
    FakeSysfsTree(const FakeSysfsTree&) = delete;
    FakeSysfsTree& operator=(const FakeSysfsTree&) = delete;

    const std::filesystem::path& root() const { return root_; }

    // group < 0: no IOMMU group; driver "": unbound.
    void add_device(const std::string& bdf, const char* vendor, const char* device, const std::string& driver,
                    int group, const char* numa_node = "-1", const char* cls = "0x020000") {
        namespace fs = std::filesystem;
        fs::path dir = root_ / "devices/pci0000:00" / bdf;
        fs::create_directories(dir);
        fs::create_directory_symlink(dir, root_ / "bus/pci/devices" / bdf);
        write(dir / "vendor", vendor);
        write(dir / "device", device);
        write(dir / "subsystem_vendor", "0x8086");
        write(dir / "subsystem_device", "0x0000");
        write(dir / "class", cls);
        write(dir / "numa_node", numa_node);
        if (!driver.empty()) {
            fs::create_directories(root_ / "bus/pci/drivers" / driver);
            fs::create_directory_symlink(root_ / "bus/pci/drivers" / driver, dir / "driver");
        }
        if (group >= 0) {
            fs::path g = root_ / "kernel/iommu_groups" / std::to_string(group);
            fs::create_directories(g / "devices");
            fs::create_directory_symlink(g, dir / "iommu_group");
            fs::create_directory_symlink(dir, g / "devices" / bdf);
        }
    }

    // `vf` an SR-IOV virtual function of `pf` (both added already).
    void add_vf(const std::string& pf, const std::string& vf) {
        namespace fs = std::filesystem;
        fs::create_directory_symlink(root_ / "devices/pci0000:00" / pf, root_ / "devices/pci0000:00" / vf / "physfn");
    }
    void add_net_interface(const std::string& bdf, const std::string& name) {
        std::filesystem::create_directories(root_ / "bus/pci/devices" / bdf / "net" / name);
    }

    void add_vfio_cdev(const std::string& bdf, const std::string& name) {
        std::filesystem::create_directories(root_ / "bus/pci/devices" / bdf / "vfio-dev" / name);
    }

    static void write(const std::filesystem::path& p, const std::string& text) { std::ofstream(p) << text << "\n"; }

private:
    std::filesystem::path root_;
};

}  // namespace vfab::testing
