// The "kernel keeps the PF, the application takes a VF" set-up for lab tests: the guest
// kernel's igb driver takes the 82576 at 00:0a.0 (dca, i2c-algo-bit, igb), makes one virtual
// function through sriov_numvfs, and the VF (8086:10ca) goes to vfio-pci as `vfio-devctl bind`
// would put it (add_vf() does that again after SR-IOV was turned off). restore() (or the
// destructor) removes the VF and gives the PF back to vfio-pci, where the lab's other tests
// expect it, whatever happened in between.
#pragma once

#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/socket.h>

#include <cstring>
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
        return add_vf();
    }

    // The PF (already on igb) makes one VF, which goes to vfio-pci. Also after SR-IOV was
    // turned off under the VF. Empty on success, else what failed.
    std::string add_vf() {
        namespace fs = std::filesystem;
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
    const std::string& vf() const { return vf_; }
    static std::string pf_dir() { return std::string("/sys/bus/pci/devices/") + kPf; }

private:
    KernelNic pf_{kPf};
    std::string vf_;
};

}  // namespace vfab::lab
