// The network interfaces behind a PCI device: sysfs <device>/net/<name>, their IFF_UP flag
// and their addresses (getifaddrs; a fake sysfs tree's names match no real interface).
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include "devctl_devices.hpp"
#include "devctl_fs.hpp"

namespace vfab::devctl {
namespace {

std::string address_text(const sockaddr* sa) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
    else
        inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
    return buf;
}

std::vector<std::string> addresses_of(const std::string& name) {
    std::vector<std::string> out;
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) return out;
    for (ifaddrs* a = list; a; a = a->ifa_next) {
        if (!a->ifa_addr || name != a->ifa_name) continue;
        if (a->ifa_addr->sa_family == AF_INET || a->ifa_addr->sa_family == AF_INET6)
            out.push_back(address_text(a->ifa_addr));
    }
    freeifaddrs(list);
    return out;
}

}  // namespace

std::vector<NetInterface> net_interfaces(const Context& ctx, const PciAddress& addr) {
    std::vector<NetInterface> out;
    std::string net = ctx.device_dir(addr) + "/net";
    for (const std::string& name : list_dir(net)) {
        NetInterface nif;
        nif.name = name;
        auto flags = read_number(str_cat(net, "/", name, "/flags"), 16);
        nif.up = flags && (*flags & IFF_UP);
        nif.addresses = addresses_of(name);
        out.push_back(std::move(nif));
    }
    return out;
}

}  // namespace vfab::devctl
