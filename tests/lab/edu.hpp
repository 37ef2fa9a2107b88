// QEMU's edu device, as the lab tests use it (QEMU docs/specs/edu.rst): registers, a DMA that
// waits for completion, and a check of the kernel log for an IOMMU (DMAR) write fault.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "vfab/vfio/region.hpp"

namespace vfab::lab::edu {

constexpr uint64_t kId = 0x00, kLiveness = 0x04, kIrqStatus = 0x24, kIrqRaise = 0x60, kIrqAck = 0x64;
constexpr uint64_t kDmaSrc = 0x80, kDmaDst = 0x88, kDmaCount = 0x90, kDmaCmd = 0x98;
constexpr uint64_t kDmaStart = 1, kDmaToRam = 2;
constexpr uint64_t kBuffer = 0x40000;   // the device's 4 KiB DMA buffer

// One edu DMA, waited for. to_ram: from the device's buffer to `dst`; else from `src` to it.
inline void dma(vfio::Region* bar, uint64_t src, uint64_t dst, uint64_t len, bool to_ram) {
    bar->write64(kDmaSrc, src);
    bar->write64(kDmaDst, dst);
    bar->write64(kDmaCount, len);
    bar->write64(kDmaCmd, kDmaStart | (to_ram ? kDmaToRam : 0));
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (bar->read64(kDmaCmd) & kDmaStart) {
        ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "edu DMA never completed";
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
}

inline void clear_kernel_log() { (void)!std::system("dmesg -c >/dev/null"); }

// True when the kernel logged an IOMMU (DMAR) fault since clear_kernel_log(). The fault
// interrupt is handled asynchronously, so this waits up to 2 s for it. When a fault is still
// pending, QEMU's VT-d model does not record the next one ("compression of faults"), and the
// kernel then logs only "handling fault status": that counts too.
inline bool dmar_write_fault_logged() {
    for (int attempt = 0; attempt < 40; ++attempt) {
        FILE* p = popen("dmesg", "r");
        if (!p) return false;
        char line[512];
        bool fault = false;
        while (fgets(line, sizeof line, p))
            fault |= std::strstr(line, "DMAR") &&
                     (std::strstr(line, "PTE Write access is not set") || std::strstr(line, "handling fault status"));
        pclose(p);
        if (fault) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
}

}  // namespace vfab::lab::edu
