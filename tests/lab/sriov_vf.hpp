// The "kernel keeps the PF, the application takes a VF" set-up for lab tests: the guest
// kernel's igb driver takes the 82576 at 00:0a.0 (dca, i2c-algo-bit, igb), makes virtual
// functions through sriov_numvfs, and the VFs (8086:10ca) go to vfio-pci as `vfio-devctl bind`
// would put them (add_vfs() does that again after SR-IOV was turned off). restore() (or the
// destructor, unless keep() was called) removes the VFs and gives the PF back to vfio-pci,
// where the lab's other tests expect it, whatever happened in between; it reads what to undo
// from sysfs, so another process (lab-sriov) may undo this one's set-up.
#pragma once

#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/socket.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "kernel_nic.hpp"

namespace vfab::lab {

class SriovVf {
public:
    static constexpr const char* kPf = "0000:00:0a.0";

    SriovVf() = default;
    ~SriovVf() {
        if (!kept_) (void)restore();
    }
    SriovVf(const SriovVf&) = delete;
    SriovVf& operator=(const SriovVf&) = delete;

    // `vfs` VFs. Empty on success, else what failed.
    std::string create(unsigned vfs = 1) {
        namespace fs = std::filesystem;
        if (!fs::exists(pf_dir() + "/sriov_totalvfs")) return std::string(kPf) + " offers no SR-IOV";
        if (auto e = pf_.take("igb", {"dca", "i2c-algo-bit", "igb"}); !e.empty()) return e;
        return add_vfs(vfs);
    }

    // The PF (already on igb) makes `n` VFs, which go to vfio-pci. Also after SR-IOV was turned
    // off under the VFs. Empty on success, else what failed.
    std::string add_vfs(unsigned n = 1) {
        namespace fs = std::filesystem;
        // VFs left by an earlier run: the kernel takes a new count only from zero.
        if (read_line(pf_dir() + "/sriov_numvfs") != "0")
            if (auto e = write_sysfs(pf_dir() + "/sriov_numvfs", "0"); !e.empty()) return e;
        if (auto e = write_sysfs(pf_dir() + "/sriov_numvfs", std::to_string(n)); !e.empty()) return e;
        vfs_.clear();
        for (unsigned i = 0; i < n; ++i) {
            const std::string link = pf_dir() + "/virtfn" + std::to_string(i);
            if (!wait_for([&] { return fs::exists(link); }, std::chrono::seconds(5))) return "no " + link + " within 5 s";
            const std::string vf = fs::read_symlink(link).filename().string();
            const std::string vf_dir = "/sys/bus/pci/devices/" + vf;
            if (auto e = write_sysfs(vf_dir + "/driver_override", "vfio-pci"); !e.empty()) return e;
            if (!driver_of(vf).empty())
                if (auto e = write_sysfs(vf_dir + "/driver/unbind", vf); !e.empty()) return e;
            if (auto e = write_sysfs("/sys/bus/pci/drivers_probe", vf); !e.empty()) return e;
            if (driver_of(vf) != "vfio-pci") return vf + " did not bind to vfio-pci (driver: '" + driver_of(vf) + "')";
            vfs_.push_back(vf);
        }
        return {};
    }

    // Empty on success, else what failed.
    std::string restore() {
        namespace fs = std::filesystem;
        std::string err;
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(pf_dir(), ec))
            if (const std::string vf = e.path().filename().string(); vf.rfind("virtfn", 0) == 0) {
                const std::string addr = fs::read_symlink(e.path(), ec).filename().string();
                if (!addr.empty() && driver_of(addr) == "vfio-pci")
                    (void)write_sysfs("/sys/bus/pci/devices/" + addr + "/driver/unbind", addr);
            }
        vfs_.clear();
        if (fs::exists(pf_dir() + "/sriov_numvfs") && read_line(pf_dir() + "/sriov_numvfs") != "0")
            err = write_sysfs(pf_dir() + "/sriov_numvfs", "0");
        if (auto e = pf_.restore(); !e.empty() && err.empty()) err = e;
        return err;
    }

    // The set-up outlives this object (a tool that makes it for others; restore() undoes it).
    void keep() {
        kept_ = true;
        pf_.keep();
    }

    // `ip link set PF vf 0 mac MAC`, as an administrator fixes a VF's address (the guest's
    // busybox ip has no "vf"), through rtnetlink: RTM_SETLINK on the PF carrying
    // IFLA_VFINFO_LIST { IFLA_VF_INFO { IFLA_VF_MAC } }. An all-zero MAC lifts the choice.
    // Empty on success, else what failed.
    std::string set_vf_mac(const pkt::Mac& mac) {
        const unsigned ifindex = ::if_nametoindex(pf_.ifname().c_str());
        if (ifindex == 0) return "no interface '" + pf_.ifname() + "' for " + kPf;
        struct {
            nlmsghdr nh;
            ifinfomsg ifi;
            alignas(NLMSG_ALIGNTO) char attrs[128];
        } req{};
        size_t len = NLMSG_LENGTH(sizeof(ifinfomsg));
        auto* base = reinterpret_cast<char*>(&req);
        auto put = [&](uint16_t type, const void* data, size_t n) {
            auto* a = reinterpret_cast<rtattr*>(base + NLMSG_ALIGN(len));
            a->rta_type = type;
            a->rta_len = uint16_t(RTA_LENGTH(n));
            if (n) std::memcpy(RTA_DATA(a), data, n);
            len = NLMSG_ALIGN(len) + RTA_ALIGN(a->rta_len);
            return a;
        };
        auto close_nest = [&](rtattr* a) { a->rta_len = uint16_t(base + len - reinterpret_cast<char*>(a)); };
        rtattr* list = put(IFLA_VFINFO_LIST | NLA_F_NESTED, nullptr, 0);
        rtattr* info = put(IFLA_VF_INFO | NLA_F_NESTED, nullptr, 0);
        ifla_vf_mac vf_mac{};
        vf_mac.vf = 0;
        std::memcpy(vf_mac.mac, mac.data(), mac.size());
        put(IFLA_VF_MAC, &vf_mac, sizeof vf_mac);
        close_nest(info);
        close_nest(list);
        req.nh.nlmsg_len = uint32_t(len);
        req.nh.nlmsg_type = RTM_SETLINK;
        req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
        req.ifi.ifi_family = AF_UNSPEC;
        req.ifi.ifi_index = int(ifindex);

        Fd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
        if (!fd) return std::string("netlink socket: ") + std::strerror(errno);
        if (::send(fd.get(), &req, len, 0) != ssize_t(len)) return std::string("RTM_SETLINK: ") + std::strerror(errno);
        char reply[512];
        if (::recv(fd.get(), reply, sizeof reply, 0) < ssize_t(NLMSG_LENGTH(sizeof(nlmsgerr))))
            return "RTM_SETLINK: no acknowledgement";
        auto* h = reinterpret_cast<nlmsghdr*>(reply);
        if (h->nlmsg_type != NLMSG_ERROR) return "RTM_SETLINK: unexpected reply type " + std::to_string(h->nlmsg_type);
        if (const int e = static_cast<nlmsgerr*>(NLMSG_DATA(h))->error; e != 0)
            return std::string("RTM_SETLINK (vf 0 mac) on ") + pf_.ifname() + ": " + std::strerror(-e);
        return {};
    }

    KernelNic& pf() { return pf_; }
    const std::string& vf() const {
        static const std::string none;
        return vfs_.empty() ? none : vfs_.front();
    }
    const std::vector<std::string>& vfs() const { return vfs_; }
    static std::string pf_dir() { return std::string("/sys/bus/pci/devices/") + kPf; }

private:
    KernelNic pf_{kPf};
    std::vector<std::string> vfs_;
    bool kept_ = false;
};

}  // namespace vfab::lab
