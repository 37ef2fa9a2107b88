// vfab-hello-e1000e: the same start through a driver's direct API (vfab::e1000e, inline fast
// path, no virtual call), linked from the installed SDK's static driver library.
//
//   vfab-hello-e1000e 0000:00:02.0
#include <vfab/drivers/e1000e.hpp>
#include <vfab/log.hpp>

#include <cstdio>

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s PCI-ADDRESS   (an Intel 82574L bound to vfio-pci)\n", argv[0]);
        return 2;
    }
    vfab::set_log_handler(vfab::log_to_stderr, nullptr, vfab::LogLevel::warning);
    auto addr = vfab::PciAddress::parse(argv[1]);
    if (!addr) return std::fprintf(stderr, "%s: %s\n", argv[0], addr.error().message.c_str()), 1;
    auto dev = vfab::e1000e::Device::open(*addr);
    if (!dev) return std::fprintf(stderr, "%s: %s\n", argv[0], dev.error().message.c_str()), 1;
    const auto& m = (*dev)->attr().mac;
    std::printf("%s: %s, MAC %02x:%02x:%02x:%02x:%02x:%02x, link %s\n", argv[1], (*dev)->attr().name.c_str(), m[0], m[1],
                m[2], m[3], m[4], m[5], (*dev)->link().up ? "up" : "down");
    return 0;
}
