// The "kernel keeps the PF, the application takes a VF" set-up for lab tests: the guest
// kernel's igb driver takes the 82576 at 00:0a.0 (dca, i2c-algo-bit, igb), makes one virtual
// function through sriov_numvfs, and the VF (8086:10ca) goes to vfio-pci as `vfio-devctl bind`
// would put it. restore() (or the destructor) removes the VF and gives the PF back to
// vfio-pci, where the lab's other tests expect it, whatever happened in between.
#pragma once

#include <filesystem>
#include <string>

#include "kernel_nic.hpp"

namespace vfab::lab {

class SriovVf {
public:
    static constexpr const char* kPf = "0000:00:0a.0";

    SriovVf() = default;
    ~SriovVf() { (void)restore(); }
    SriovVf(const SriovVf&) = delete;
    SriovVf& operator=(const SriovVf&) = delete;

    // Empty on success, else what failed.
    std::string create() {
        namespace fs = std::filesystem;
        if (!fs::exists(pf_dir() + "/sriov_totalvfs")) return std::string(kPf) + " offers no SR-IOV";
        if (auto e = pf_.take("igb", {"dca", "i2c-algo-bit", "igb"}); !e.empty()) return e;
        if (auto e = write_sysfs(pf_dir() + "/sriov_numvfs", "1"); !e.empty()) return e;
        if (!wait_for([&] { return fs::exists(pf_dir() + "/virtfn0"); }, std::chrono::seconds(5)))
            return "no virtfn0 under " + pf_dir() + " within 5 s";
        vf_ = fs::read_symlink(pf_dir() + "/virtfn0").filename().string();
        const std::string vf_dir = "/sys/bus/pci/devices/" + vf_;
        if (auto e = write_sysfs(vf_dir + "/driver_override", "vfio-pci"); !e.empty()) return e;
        if (!driver_of(vf_).empty())
            if (auto e = write_sysfs(vf_dir + "/driver/unbind", vf_); !e.empty()) return e;
        if (auto e = write_sysfs("/sys/bus/pci/drivers_probe", vf_); !e.empty()) return e;
        if (driver_of(vf_) != "vfio-pci") return vf_ + " did not bind to vfio-pci (driver: '" + driver_of(vf_) + "')";
        return {};
    }

    // Empty on success, else what failed.
    std::string restore() {
        std::string err;
        if (!vf_.empty() && driver_of(vf_) == "vfio-pci")
            (void)write_sysfs("/sys/bus/pci/devices/" + vf_ + "/driver/unbind", vf_);
        vf_.clear();
        if (std::filesystem::exists(pf_dir() + "/sriov_numvfs") && read_line(pf_dir() + "/sriov_numvfs") != "0")
            err = write_sysfs(pf_dir() + "/sriov_numvfs", "0");
        if (auto e = pf_.restore(); !e.empty() && err.empty()) err = e;
        return err;
    }

    KernelNic& pf() { return pf_; }
    const std::string& vf() const { return vf_; }
    static std::string pf_dir() { return std::string("/sys/bus/pci/devices/") + kPf; }

private:
    KernelNic pf_{kPf};
    std::string vf_;
};

}  // namespace vfab::lab
