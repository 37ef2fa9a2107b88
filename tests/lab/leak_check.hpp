// "Nothing leaked", as the fault suite checks it after each case (docs/reliability.md):
//
//  - pinned pages: every IOMMU mapping of user memory (VFIO type1, iommufd) and every page the
//    no-IOMMU mode pins holds a FOLL_PIN reference, counted system-wide in /proc/vmstat
//    (nr_foll_pin_acquired - nr_foll_pin_released); back at its baseline means no mapping and no
//    pinned page is left behind;
//  - hugepages: HugePages_Free in /proc/meminfo back at its baseline;
//  - VFIO and iommufd files: no process holds /dev/vfio/... or /dev/iommu open;
//  - this process: its open fds, VmLck (locked memory, where VFIO type1 accounts its pins) and
//    VmPin, for the cases that open and close devices in the test process itself.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace vfab::lab {

// A value from a "name value" file (/proc/vmstat) or "Name: value kB" file (/proc/meminfo,
// /proc/self/status); -1 when absent.
inline int64_t proc_value(const char* file, const std::string& name) {
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
        if (!line.starts_with(name)) continue;
        std::string rest = line.substr(name.size());
        if (!rest.empty() && rest[0] == ':') rest.erase(0, 1);
        if (rest.empty() || (rest[0] != ' ' && rest[0] != '\t')) continue;   // a longer name
        return std::stoll(rest);
    }
    return -1;
}

// Processes that hold a VFIO group, a VFIO device cdev or /dev/iommu open, as "pid:path".
inline std::vector<std::string> vfio_holders() {
    namespace fs = std::filesystem;
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& p : fs::directory_iterator("/proc", ec)) {
        const std::string pid = p.path().filename();
        if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
        std::error_code ec2;
        for (const auto& fd : fs::directory_iterator(p.path() / "fd", ec2)) {
            std::error_code ec3;
            const std::string target = fs::read_symlink(fd.path(), ec3).string();
            if (target.starts_with("/dev/vfio/") || target == "/dev/iommu") out.push_back(pid + ":" + target);
        }
    }
    return out;
}

// Whether process `pid` has a VFIO group or device open (it has opened its port).
inline bool holds_vfio(pid_t pid) {
    namespace fs = std::filesystem;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec))
        if (fs::read_symlink(e.path(), ec).string().starts_with("/dev/vfio/")) return true;
    return false;
}

struct SystemState {
    int64_t pinned_pages = 0;
    int64_t hugepages_free = 0;
    std::vector<std::string> holders;

    static SystemState now() {
        SystemState s;
        s.pinned_pages = proc_value("/proc/vmstat", "nr_foll_pin_acquired") - proc_value("/proc/vmstat", "nr_foll_pin_released");
        s.hugepages_free = proc_value("/proc/meminfo", "HugePages_Free");
        s.holders = vfio_holders();
        return s;
    }
    // The state once the kernel has finished releasing what an ended process held (a closed
    // container or iommufd may unpin a moment after its process is gone): the pinned-page count
    // unchanged over 100 ms, within `limit`.
    static SystemState settled(std::chrono::milliseconds limit = std::chrono::seconds(3)) {
        const auto end = std::chrono::steady_clock::now() + limit;
        SystemState s = now();
        for (int same = 0; same < 5 && std::chrono::steady_clock::now() < end;) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            SystemState t = now();
            same = t.pinned_pages == s.pinned_pages && t.holders == s.holders ? same + 1 : 0;
            s = std::move(t);
        }
        return s;
    }
    // "" when `later` holds nothing more than this did, else what it holds more.
    std::string differences(const SystemState& later) const {
        std::ostringstream d;
        if (later.pinned_pages > pinned_pages)
            d << "pinned pages " << pinned_pages << " -> " << later.pinned_pages << "; ";
        if (later.hugepages_free < hugepages_free)
            d << "free hugepages " << hugepages_free << " -> " << later.hugepages_free << "; ";
        for (const std::string& h : later.holders) d << "still open: " << h << "; ";
        return d.str();
    }
};

// Polls until the system holds no more than at `base` (a killed process's files are released as it
// exits, a device reset may take the kernel a moment): "" then, else what is still different
// after `limit`.
inline std::string wait_until_back(const SystemState& base, std::chrono::milliseconds limit = std::chrono::seconds(3)) {
    const auto end = std::chrono::steady_clock::now() + limit;
    for (;;) {
        std::string d = base.differences(SystemState::now());
        if (d.empty() || std::chrono::steady_clock::now() >= end) return d;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

struct ProcessState {
    size_t fds = 0;
    int64_t locked_kb = 0, pinned_kb = 0;

    static ProcessState now() {
        namespace fs = std::filesystem;
        ProcessState s;
        std::error_code ec;
        for (auto it = fs::directory_iterator("/proc/self/fd", ec); !ec && it != fs::directory_iterator(); it.increment(ec))
            ++s.fds;
        s.locked_kb = proc_value("/proc/self/status", "VmLck");
        s.pinned_kb = proc_value("/proc/self/status", "VmPin");
        return s;
    }
    std::string differences(const ProcessState& later) const {
        std::ostringstream d;
        if (later.fds != fds) d << "open fds " << fds << " -> " << later.fds << "; ";
        if (later.locked_kb != locked_kb) d << "VmLck " << locked_kb << " -> " << later.locked_kb << " kB; ";
        if (later.pinned_kb != pinned_kb) d << "VmPin " << pinned_kb << " -> " << later.pinned_kb << " kB; ";
        return d.str();
    }
};

}  // namespace vfab::lab
