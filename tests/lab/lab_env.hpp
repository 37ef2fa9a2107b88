// What a lab test knows about the guest it runs in (set by scripts/lab.d/guest-init).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <unistd.h>

#include "vfab/pci_address.hpp"
#include "vfab/vfio/iommu.hpp"

namespace vfab::lab {

// "debian" or "iommufd"; empty outside the lab.
inline std::string flavor() {
    const char* f = std::getenv("VFAB_LAB_FLAVOR");
    return f ? f : "";
}
inline bool in_lab() { return std::getenv("VFAB_LAB") != nullptr; }
inline bool iommu_on() {
    const char* i = std::getenv("VFAB_LAB_IOMMU");
    return i && std::string(i) == "on";
}

struct LabDevice {
    const char* name;
    const char* bdf;
    uint16_t vendor;
    uint16_t device;
};

// The devices scripts/lab.d/qemu.sh gives the guest, at fixed slots.
inline const std::vector<LabDevice>& devices() {
    static const std::vector<LabDevice> all = {
        {"edu", "0000:00:01.0", 0x1234, 0x11e8},
        {"e1000e-0", "0000:00:02.0", 0x8086, 0x10d3},
        {"e1000e-1", "0000:00:03.0", 0x8086, 0x10d3},
        {"virtio-net", "0000:00:04.0", 0x1af4, 0x1041},
        {"igb", "0000:00:05.0", 0x8086, 0x10c9},
        {"igb-1", "0000:00:0a.0", 0x8086, 0x10c9},   // on hub 2 with igb
        {"virtio-net-1", "0000:00:06.0", 0x1af4, 0x1041},
        {"virtio-net-no-platform", "0000:00:07.0", 0x1af4, 0x1041},   // no VIRTIO_F_ACCESS_PLATFORM
        // On taps in QEMU's network namespace (absent where namespaces are not allowed):
        {"virtio-net-mq", "0000:00:08.0", 0x1af4, 0x1041},    // 4 queue pairs, RSS
        {"virtio-net-tap", "0000:00:09.0", 0x1af4, 0x1041},   // bridged to virtio-net-mq
        {"ivshmem", "0000:00:0b.0", 0x1af4, 0x1110},          // BAR 2: 16 MiB of memory, for P2P DMA
    };
    return all;
}

// The IOMMU backends this boot offers: legacy everywhere the IOMMU is on, iommufd on the
// iommufd kernel, and only no-IOMMU mode when the guest booted without an IOMMU.
inline std::vector<vfio::IommuBackend> backends() {
    if (!iommu_on()) return {vfio::IommuBackend::noiommu};
    if (flavor() == "iommufd") return {vfio::IommuBackend::legacy, vfio::IommuBackend::iommufd};
    return {vfio::IommuBackend::legacy};
}

inline PciAddress address_of(const char* name) {
    for (const LabDevice& d : devices())
        if (std::string(d.name) == name) return *PciAddress::parse(d.bdf);
    return {};
}

// Is the device there? (The tap-backed ones need a network namespace on the host.)
inline bool present(const char* name) {
    return ::access(("/sys/bus/pci/devices/" + address_of(name).to_string()).c_str(), F_OK) == 0;
}

// Asks the lab's host to take QEMU net client `netdev` (a NIC's hubport peer: p0 for e1000e-0,
// p4 for igb, ...; scripts/lab.d/qemu.sh) down or up with QMP set_link: a console line the
// host answers within about two seconds.
inline void ask_set_link(const char* netdev, bool up) {
    std::printf("@@host set_link %s %s\n", netdev, up ? "on" : "off");
    std::fflush(stdout);
}

// Name for parametrized tests: "legacy", "iommufd", "noiommu".
struct BackendName {
    template <class P>
    std::string operator()(const P& info) const { return vfio::to_string(info.param); }
};

}  // namespace vfab::lab
