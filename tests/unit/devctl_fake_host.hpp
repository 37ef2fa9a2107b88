// A fake host for vfio-devctl's unit tests: a sysfs tree, /dev/vfio, /proc files and a tiny
// pci.ids in a temporary directory (Paths::under), in the layout the kernel uses.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "devctl_context.hpp"

namespace vfab::devctl::testing {
namespace fs = std::filesystem;

class FakeHost : public ::testing::Test {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/vfab-devctl.XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        root_ = tmpl;
        write(root_ / "pci.ids",
              "8086  Intel Corporation\n\t10d3  82574L Gigabit Network Connection\n"
              "\ta348  Cannon Lake PCH cAVS\n1af4  Red Hat, Inc.\n\t1041  Virtio 1.0 network device\n");
        write(root_ / "proc/cmdline", "BOOT_IMAGE=/vmlinuz console=ttyS0 intel_iommu=on quiet");
        write(root_ / "proc/sys/kernel/osrelease", "6.1.0-test");
        write(root_ / "proc/cpuinfo", "vendor_id\t: GenuineIntel");
        write(root_ / "sys/bus/pci/drivers_probe", "");
        write(root_ / "sys/module/vfio/parameters/enable_unsafe_noiommu_mode", "N");
        fs::create_directories(root_ / "sys/class/iommu/dmar0");
        add_driver("vfio-pci");
        hugepages("sys/kernel/mm/hugepages", 2048, 64, 60);
        hugepages("sys/kernel/mm/hugepages", 1048576, 0, 0);
        hugepages("sys/devices/system/node/node0/hugepages", 2048, 64, 60);
        ctx_.paths = Paths::under(root_);
        ctx_.paths.pci_ids = root_ / "pci.ids";
        ctx_.run = [this](const std::vector<std::string>& argv) -> Result<CommandResult> {
            commands_.push_back(argv);
            return CommandResult{1, "modprobe: FATAL: Module not found"};
        };
    }
    void TearDown() override { fs::remove_all(root_); }

    static void write(const fs::path& p, const std::string& text) {
        fs::create_directories(p.parent_path());
        std::ofstream(p) << text << "\n";
    }

    void add_driver(const std::string& driver) {
        fs::path d = root_ / "sys/bus/pci/drivers" / driver;
        write(d / "bind", "");
        write(d / "unbind", "");
    }

    // A PCI function; group < 0: no IOMMU group; driver "": none.
    void add_device(const std::string& bdf, const char* vendor, const char* device, const char* cls,
                    const std::string& driver, int group, const char* node = "-1") {
        fs::path dir = root_ / "sys/devices/pci0000:00" / bdf;
        write(dir / "vendor", vendor);
        write(dir / "device", device);
        write(dir / "subsystem_vendor", "0x8086");
        write(dir / "subsystem_device", "0x0000");
        write(dir / "class", cls);
        write(dir / "numa_node", node);
        write(dir / "driver_override", "(null)");
        fs::create_directories(root_ / "sys/bus/pci/devices");
        fs::create_directory_symlink(dir, root_ / "sys/bus/pci/devices" / bdf);
        if (!driver.empty()) {
            add_driver(driver);
            fs::create_directory_symlink(root_ / "sys/bus/pci/drivers" / driver, dir / "driver");
        }
        if (group >= 0) {
            fs::path g = root_ / "sys/kernel/iommu_groups" / std::to_string(group);
            fs::create_directories(g / "devices");
            write(g / "type", "DMA-FQ");
            fs::create_directory_symlink(g, dir / "iommu_group");
            fs::create_directory_symlink(dir, g / "devices" / bdf);
        }
    }

    // A network interface of a device; flags as sysfs writes them (0x1003: up).
    void add_interface(const std::string& bdf, const std::string& name, const char* flags) {
        write(root_ / "sys/devices/pci0000:00" / bdf / "net" / name / "flags", flags);
    }

    void hugepages(const std::string& dir, int kb, int total, int free) {
        fs::path d = root_ / dir / ("hugepages-" + std::to_string(kb) + "kB");
        write(d / "nr_hugepages", std::to_string(total));
        write(d / "free_hugepages", std::to_string(free));
    }

    // A character device node (needs CAP_MKNOD; tests that need one skip without it).
    bool add_char_device(const std::string& rel, mode_t mode = 0600) {
        fs::path p = root_ / rel;
        fs::create_directories(p.parent_path());
        return ::mknod(p.c_str(), S_IFCHR | mode, makedev(1, 3)) == 0 && ::chmod(p.c_str(), mode) == 0;
    }

    std::string read(const fs::path& p) {
        std::ifstream in(p);
        std::string s;
        std::getline(in, s);
        return s;
    }

    fs::path root_;
    Context ctx_;
    std::vector<std::vector<std::string>> commands_;
};

}  // namespace vfab::devctl::testing
