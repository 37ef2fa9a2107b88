// A fake of the kernel's VFIO interface, behind vfio::Sys, for unit-testing the VFIO layer's
// error paths and resource handling without a device. It models just enough: a legacy
// container, groups, device fds with regions and IRQs, eventfds and mmaps — and counts every
// fd and mapping, so tests can prove that nothing is left behind.
#pragma once

#include <linux/vfio.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "vfab/vfio/sys.hpp"

namespace vfab::vfio::testing {

class FakeKernel final : public Sys {
public:
    // Knobs.
    int api_version = VFIO_API_VERSION;
    bool type1v2 = true;
    bool group_viable = true;
    std::map<std::string, int> open_errno;       // path -> errno for open()
    int get_device_fd_errno = 0;
    int map_dma_errno = 0;
    int set_irqs_errno = 0;
    uint32_t msix_count = 5;
    std::vector<uint8_t> bar0_info;              // when set: VFIO_DEVICE_GET_REGION_INFO(0) answer

    // What happened.
    std::set<int> open_fds;
    std::map<void*, size_t> mmaps;
    std::vector<vfio_irq_set> irq_sets;          // headers of every SET_IRQS
    int map_calls = 0, unmap_calls = 0;

    int open(const char* path, int) override {
        if (auto it = open_errno.find(path); it != open_errno.end()) return fail(it->second);
        std::string p = path;
        Kind k = p == "/dev/vfio/vfio" ? Kind::container : p.rfind("/dev/vfio/", 0) == 0 ? Kind::group : Kind::other;
        if (k == Kind::other) return fail(ENOENT);
        return add(k);
    }
    int close(int fd) override {
        if (!open_fds.erase(fd)) return fail(EBADF);
        kinds_.erase(fd);
        return 0;
    }
    int eventfd(unsigned, int) override { return add(Kind::event); }
    void* mmap(void*, size_t len, int, int, int fd, off_t) override {
        if (!open_fds.count(fd)) {
            errno = EBADF;
            return MAP_FAILED;
        }
        void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        mmaps[p] = len;
        return p;
    }
    int munmap(void* p, size_t len) override {
        if (!mmaps.erase(p)) return fail(EINVAL);
        return ::munmap(p, len);
    }
    ssize_t pread(int, void* buf, size_t len, off_t) override {
        std::memset(buf, 0, len);
        return static_cast<ssize_t>(len);
    }
    ssize_t pwrite(int, const void*, size_t len, off_t) override { return static_cast<ssize_t>(len); }

    int ioctl(int fd, unsigned long req, void* arg) override {
        auto it = kinds_.find(fd);
        if (it == kinds_.end()) return fail(EBADF);
        switch (req) {
        case VFIO_GET_API_VERSION: return api_version;
        case VFIO_CHECK_EXTENSION:
            return reinterpret_cast<uintptr_t>(arg) == VFIO_TYPE1v2_IOMMU && type1v2;
        case VFIO_SET_IOMMU: return 0;
        case VFIO_IOMMU_GET_INFO: {
            auto* info = static_cast<vfio_iommu_type1_info*>(arg);
            info->flags = VFIO_IOMMU_INFO_PGSIZES;
            info->iova_pgsizes = 0x40201000;
            return 0;
        }
        case VFIO_IOMMU_MAP_DMA: ++map_calls; return map_dma_errno ? fail(map_dma_errno) : 0;
        case VFIO_IOMMU_UNMAP_DMA: ++unmap_calls; return 0;
        case VFIO_GROUP_GET_STATUS:
            static_cast<vfio_group_status*>(arg)->flags = group_viable ? VFIO_GROUP_FLAGS_VIABLE : 0;
            return 0;
        case VFIO_GROUP_SET_CONTAINER: return 0;
        case VFIO_GROUP_GET_DEVICE_FD: return get_device_fd_errno ? fail(get_device_fd_errno) : add(Kind::device);
        case VFIO_DEVICE_GET_INFO: {
            auto* info = static_cast<vfio_device_info*>(arg);
            info->flags = VFIO_DEVICE_FLAGS_PCI | VFIO_DEVICE_FLAGS_RESET;
            info->num_regions = VFIO_PCI_NUM_REGIONS;
            info->num_irqs = VFIO_PCI_NUM_IRQS;
            return 0;
        }
        case VFIO_DEVICE_GET_REGION_INFO: return region_info(static_cast<vfio_region_info*>(arg));
        case VFIO_DEVICE_GET_IRQ_INFO: {
            auto* info = static_cast<vfio_irq_info*>(arg);
            info->flags = VFIO_IRQ_INFO_EVENTFD;
            if (info->index == VFIO_PCI_INTX_IRQ_INDEX) info->flags |= VFIO_IRQ_INFO_MASKABLE | VFIO_IRQ_INFO_AUTOMASKED;
            info->count = info->index == VFIO_PCI_MSIX_IRQ_INDEX ? msix_count : 1;
            return 0;
        }
        case VFIO_DEVICE_SET_IRQS:
            irq_sets.push_back(*static_cast<vfio_irq_set*>(arg));
            return set_irqs_errno ? fail(set_irqs_errno) : 0;
        default: return fail(ENOTTY);
        }
    }

    size_t eventfds() const {
        size_t n = 0;
        for (auto& [fd, k] : kinds_) n += k == Kind::event;
        return n;
    }

private:
    enum class Kind { container, group, device, event, other };
    int fail(int e) {
        errno = e;
        return -1;
    }
    int add(Kind k) {
        int fd = next_fd_++;
        open_fds.insert(fd);
        kinds_[fd] = k;
        return fd;
    }
    int region_info(vfio_region_info* ri) {
        if (ri->index == VFIO_PCI_BAR0_REGION_INDEX && !bar0_info.empty()) {
            uint32_t asked = ri->argsz;
            std::memcpy(ri, bar0_info.data(), std::min<size_t>(asked, bar0_info.size()));
            ri->argsz = static_cast<uint32_t>(bar0_info.size());   // what it needs
            return 0;
        }
        uint32_t index = ri->index;
        std::memset(reinterpret_cast<uint8_t*>(ri) + 4, 0, sizeof *ri - 4);
        ri->index = index;
        ri->flags = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
        ri->size = index == VFIO_PCI_CONFIG_REGION_INDEX ? 256 : index == 0 ? 0x20000 : 0;
        ri->offset = uint64_t{index} << 40;
        if (index == 0) ri->flags |= VFIO_REGION_INFO_FLAG_MMAP;
        return 0;
    }
    int next_fd_ = 100;
    std::map<int, Kind> kinds_;
};

}  // namespace vfab::vfio::testing
