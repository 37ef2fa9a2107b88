// A lab NIC lent to the guest kernel's own driver for the life of a KernelNic: take() moves it
// from vfio-pci to the kernel driver (loading the modules where they are ones; a virtio NIC's
// interface hangs off its virtio device), configure() gives its interface an IPv4 address and
// waits for link; set_tx_checksum() turns the interface's checksum offload on or off; the destructor (or restore()) gives the
// NIC back to vfio-pci, where the lab's other tests expect it, whatever happened in between.
// Plus the kernel-side views a test checks: the neighbour (ARP) table and the SNMP counters.
#pragma once

#include <arpa/inet.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "packet.hpp"
#include "pci_removal.hpp"   // driver_of
#include "spawn.hpp"

namespace vfab::lab {

// A socket or other descriptor that closes itself.
class Fd {
public:
    explicit Fd(int fd = -1) : fd_(fd) {}
    Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    Fd& operator=(Fd&& o) noexcept {
        std::swap(fd_, o.fd_);
        return *this;
    }
    ~Fd() {
        if (fd_ >= 0) ::close(fd_);
    }
    int get() const { return fd_; }
    explicit operator bool() const { return fd_ >= 0; }

private:
    int fd_;
};

inline std::string read_line(const std::string& path) {
    std::ifstream in(path);
    std::string s;
    std::getline(in, s);
    return s;
}

// Writes `value` to a sysfs attribute; empty on success, else what failed.
inline std::string write_sysfs(const std::string& path, const std::string& value) {
    std::ofstream out(path);
    if (!out) return "cannot open " + path + ": " + std::strerror(errno);
    out << value << std::flush;
    if (!out) return "writing '" + value + "' to " + path + " failed: " + std::strerror(errno);
    return {};
}

template <class Pred>
bool wait_for(Pred pred, std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!pred()) {
        if (std::chrono::steady_clock::now() > end) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
}

class KernelNic {
public:
    explicit KernelNic(std::string bdf) : bdf_(std::move(bdf)), dev_("/sys/bus/pci/devices/" + bdf_) {}
    ~KernelNic() {
        if (taken_) {
            std::string err = restore();
            if (!err.empty()) std::fprintf(stderr, "KernelNic: %s\n", err.c_str());
        }
    }
    KernelNic(const KernelNic&) = delete;
    KernelNic& operator=(const KernelNic&) = delete;

    // Moves the NIC to the kernel's PCI `driver` and waits for its network interface; on a
    // kernel with modules it loads `modules` first (for a virtio NIC the network driver,
    // virtio_net, which binds the virtio device the PCI driver creates). Empty on success,
    // else what failed.
    std::string take(const std::string& driver, const std::vector<std::string>& modules = {}) {
        const std::string was = driver_of(bdf_);
        taken_ = true;   // from here on the destructor puts it back on vfio-pci
        const bool modular = std::filesystem::exists("/lib/modules/" + kernel_release());
        for (std::string m : modules) {
            for (char& c : m) c = c == '-' ? '_' : c;
            if (!modular || std::filesystem::exists("/sys/module/" + m)) continue;
            Outcome r = run_program({"modprobe", m}, std::chrono::seconds(30));
            if (r.rc != 0) return "modprobe " + m + ": " + r.summary();
            loaded_module_ = true;
        }
        if (!was.empty() && was != driver)
            if (auto e = write_sysfs(dev_ + "/driver/unbind", bdf_); !e.empty()) return e;
        if (auto e = write_sysfs(dev_ + "/driver_override", "\n"); !e.empty()) return e;
        const std::string drv_dir = "/sys/bus/pci/drivers/" + driver;
        if (!std::filesystem::exists(drv_dir)) {   // a module (debian flavor); loading it probes the NIC
            Outcome m = run_program({"modprobe", driver}, std::chrono::seconds(30));
            if (m.rc != 0) return "modprobe " + driver + ": " + m.summary();
            loaded_module_ = true;
        }
        if (driver_of(bdf_) != driver)
            if (auto e = write_sysfs(drv_dir + "/bind", bdf_); !e.empty()) return e;
        if (!wait_for([&] { return !interface().empty(); }, std::chrono::seconds(10)))
            return bdf_ + " bound to " + driver_of(bdf_) + " but no network interface appeared within 10 s";
        ifname_ = interface();
        return {};
    }

    // Address, netmask, up; then waits for carrier. Empty on success.
    std::string configure(uint32_t ip, int prefix_len, std::chrono::milliseconds link_timeout) {
        Fd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
        if (!s) return std::string("socket: ") + std::strerror(errno);
        ifreq ifr{};
        std::strncpy(ifr.ifr_name, ifname_.c_str(), IFNAMSIZ - 1);
        auto set_addr = [&](unsigned long req, uint32_t v, const char* what) -> std::string {
            auto* sin = reinterpret_cast<sockaddr_in*>(&ifr.ifr_addr);
            *sin = {};
            sin->sin_family = AF_INET;
            sin->sin_addr.s_addr = htonl(v);
            if (::ioctl(s.get(), req, &ifr) != 0) return std::string(what) + " " + ifname_ + ": " + std::strerror(errno);
            return {};
        };
        if (auto e = set_addr(SIOCSIFADDR, ip, "SIOCSIFADDR"); !e.empty()) return e;
        if (auto e = set_addr(SIOCSIFNETMASK, prefix_len ? ~0u << (32 - prefix_len) : 0, "SIOCSIFNETMASK"); !e.empty())
            return e;
        return bring_up(link_timeout);
    }

    // Up, with no address (a PF that only carries its VFs' traffic); then waits for carrier.
    // Empty on success.
    std::string bring_up(std::chrono::milliseconds link_timeout) {
        Fd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
        if (!s) return std::string("socket: ") + std::strerror(errno);
        ifreq ifr{};
        std::strncpy(ifr.ifr_name, ifname_.c_str(), IFNAMSIZ - 1);
        if (::ioctl(s.get(), SIOCGIFFLAGS, &ifr) != 0) return "SIOCGIFFLAGS " + ifname_ + ": " + std::strerror(errno);
        ifr.ifr_flags |= IFF_UP;
        if (::ioctl(s.get(), SIOCSIFFLAGS, &ifr) != 0) return "SIOCSIFFLAGS " + ifname_ + ": " + std::strerror(errno);
        const auto t0 = std::chrono::steady_clock::now();
        if (!wait_for([&] { return read_line("/sys/class/net/" + ifname_ + "/carrier") == "1"; }, link_timeout))
            return ifname_ + ": no link within " + std::to_string(link_timeout.count()) + " ms";
        link_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        return {};
    }

    // The NIC stays with the kernel's driver when this object goes.
    void keep() { taken_ = false; }

    // Back to vfio-pci (driver_override set, so no other driver takes it). Empty on success.
    std::string restore() {
        taken_ = false;
        const std::string drv = driver_of(bdf_);
        if (drv == "vfio-pci") return {};
        if (!drv.empty())
            if (auto e = write_sysfs(dev_ + "/driver/unbind", bdf_); !e.empty()) return "restore: " + e;
        if (auto e = write_sysfs(dev_ + "/driver_override", "vfio-pci"); !e.empty()) return "restore: " + e;
        if (auto e = write_sysfs("/sys/bus/pci/drivers_probe", bdf_); !e.empty()) return "restore: " + e;
        if (driver_of(bdf_) != "vfio-pci")
            return "restore: " + bdf_ + " is bound to '" + driver_of(bdf_) + "', not vfio-pci";
        return {};
    }

    // The interface's transmit checksum offload (ethtool -K IF tx on|off, through the legacy
    // ETHTOOL_STXCSUM). Turning off what the driver cannot turn on (a fixed "off") is fine:
    // the result is read back. Empty on success.
    std::string set_tx_checksum(bool on) {
        ethtool_value v{ETHTOOL_STXCSUM, on ? 1u : 0u};
        const int rc = ethtool(&v);
        const int err = errno;
        tx_checksum_set_ = rc == 0 ? "done" : std::string("refused: ") + std::strerror(err);
        auto now = tx_checksum();
        if (!now) return "ETHTOOL_GTXCSUM " + ifname_ + ": " + std::strerror(errno);
        if (*now != on)
            return "ETHTOOL_STXCSUM " + ifname_ + ": " + (rc ? std::strerror(err) : "no error") + ", and it is still " +
                   (*now ? "on" : "off");
        return {};
    }
    // How the last set_tx_checksum()'s ioctl went: "done", or "refused: <error>" (Operation
    // not supported where the driver cannot change it).
    const std::string& tx_checksum_set() const { return tx_checksum_set_; }
    std::optional<bool> tx_checksum() const {
        ethtool_value v{ETHTOOL_GTXCSUM, 0};
        if (ethtool(&v) != 0) return std::nullopt;
        return v.data != 0;
    }

    const std::string& ifname() const { return ifname_; }
    bool loaded_module() const { return loaded_module_; }   // take() had to modprobe the driver
    double link_ms() const { return link_ms_; }
    int ifindex() const { return int(::if_nametoindex(ifname_.c_str())); }
    std::optional<pkt::Mac> mac() const { return pkt::parse_mac(read_line("/sys/class/net/" + ifname_ + "/address")); }

private:
    static std::string kernel_release() {
        std::string r = read_line("/proc/sys/kernel/osrelease");
        return r.empty() ? std::string("?") : r;
    }

    // The interface under the PCI device (NIC drivers) or under its virtio device (virtio_net).
    std::string interface() const {
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator(dev_ + "/net", ec)) return e.path().filename().string();
        for (const auto& v : std::filesystem::directory_iterator(dev_, ec)) {
            if (v.path().filename().string().rfind("virtio", 0) != 0) continue;
            std::error_code ec2;
            for (const auto& e : std::filesystem::directory_iterator(v.path() / "net", ec2)) return e.path().filename().string();
        }
        return {};
    }

    int ethtool(void* cmd) const {
        Fd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
        if (!s) return -1;
        ifreq ifr{};
        std::strncpy(ifr.ifr_name, ifname_.c_str(), IFNAMSIZ - 1);
        ifr.ifr_data = static_cast<char*>(cmd);
        return ::ioctl(s.get(), SIOCETHTOOL, &ifr);
    }

    std::string bdf_, dev_, ifname_, tx_checksum_set_;
    bool taken_ = false, loaded_module_ = false;
    double link_ms_ = 0;
};

// The kernel's complete ARP entry for `ip` on `ifname` (/proc/net/arp), if it has one.
inline std::optional<pkt::Mac> kernel_arp_entry(uint32_t ip, const std::string& ifname) {
    std::ifstream in("/proc/net/arp");
    std::string line;
    std::getline(in, line);   // header
    while (std::getline(in, line)) {
        std::istringstream f(line);
        std::string addr, hwtype, flags, hw, mask, dev;
        f >> addr >> hwtype >> flags >> hw >> mask >> dev;
        if (addr == pkt::to_string_ip(ip) && dev == ifname && (std::stoul(flags, nullptr, 16) & ATF_COM)) return pkt::parse_mac(hw);
    }
    return std::nullopt;
}

// Deletes the kernel's ARP entry for `ip` on `ifname` (none there is fine). Empty on success.
inline std::string kernel_forget_neighbor(uint32_t ip, const std::string& ifname) {
    Fd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    arpreq r{};
    auto* sin = reinterpret_cast<sockaddr_in*>(&r.arp_pa);
    sin->sin_family = AF_INET;
    sin->sin_addr.s_addr = htonl(ip);
    std::strncpy(r.arp_dev, ifname.c_str(), sizeof r.arp_dev - 1);
    if (::ioctl(s.get(), SIOCDARP, &r) != 0 && errno != ENXIO) return std::string("SIOCDARP: ") + std::strerror(errno);
    return {};
}

// One group of /proc/net/snmp ("Udp", "Icmp", "Ip"): counter name -> value.
inline std::map<std::string, long long> kernel_snmp(const std::string& group) {
    std::ifstream in("/proc/net/snmp");
    std::string names, values;
    std::map<std::string, long long> out;
    while (std::getline(in, names) && std::getline(in, values)) {
        if (names.rfind(group + ":", 0) != 0) continue;
        std::istringstream n(names.substr(group.size() + 1)), v(values.substr(group.size() + 1));
        std::string name;
        long long value;
        while (n >> name && v >> value) out[name] = value;
        break;
    }
    return out;
}

// ---- kernel sockets for the peer tests ----------------------------------------------------

inline std::vector<uint8_t> pattern_bytes(size_t n, uint8_t seed) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = uint8_t(seed * 37 + i * 11);
    return v;
}

inline sockaddr_in inet(uint32_t ip, uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(ip);
    a.sin_port = htons(port);
    return a;
}

// A kernel UDP socket bound to ip:port (0: any port), with a receive time limit.
inline Fd udp_socket(uint32_t ip, uint16_t port) {
    Fd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    const sockaddr_in a = inet(ip, port);
    const timeval tv{5, 0};
    if (!s || ::bind(s.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 ||
        ::setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0)
        return Fd();
    return s;
}

inline uint16_t local_port(const Fd& s) {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    ::getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len);
    return ntohs(a.sin_port);
}

}  // namespace vfab::lab
