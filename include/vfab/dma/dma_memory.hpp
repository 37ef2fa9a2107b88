// Memory a device DMAs into: hugepage-backed when it can be (a memfd with MFD_HUGETLB, so no
// hugetlbfs mount is needed; 2 MiB pages, or 1 GiB when asked), else 4 KiB pages with a single
// warning; placed on the device's NUMA node; zeroed and locked. The memfd stays open so the
// memory can be shared (an arena passes it to its address space: vhost-user hands it to the
// back-end).
#pragma once

#include <cstddef>
#include <cstdint>

#include "vfab/pci_address.hpp"
#include "vfab/result.hpp"

namespace vfab::dma {

enum class PageSize : uint64_t { automatic = 0, k4 = 4096, m2 = 2u << 20, g1 = 1u << 30 };

struct DmaMemoryOptions {
    // automatic: 2 MiB hugepages, else 4 KiB pages (warning once per process).
    // m2 / g1: those hugepages or an error saying how to reserve them. k4: plain pages.
    PageSize page_size = PageSize::automatic;
    int numa_node = -1;   // -1: wherever the kernel puts it (use the device's node: PciSysfs)
};

// Options that put memory on the NUMA node of the device at `addr` (sysfs numa_node; -1 when
// the platform does not say).
DmaMemoryOptions near_device(const PciAddress& addr, PageSize page_size = PageSize::automatic);

class DmaMemory {
public:
    // `len` is rounded up to a whole number of pages.
    static Result<DmaMemory> allocate(size_t len, const DmaMemoryOptions& opts = {});

    // Takes the memory over; `o` is left empty.
    DmaMemory(DmaMemory&& o) noexcept;
    // Frees this memory and takes `o`'s over.
    DmaMemory& operator=(DmaMemory&& o) noexcept;
    DmaMemory(const DmaMemory&) = delete;
    DmaMemory& operator=(const DmaMemory&) = delete;
    ~DmaMemory();

    // The memory's address in this process.
    uint8_t* data() const { return base_; }
    // Its length in bytes: a whole number of pages.
    size_t size() const { return len_; }
    // The page size it got: 4 KiB, 2 MiB or 1 GiB.
    size_t page_size() const { return page_; }
    // Whether it is hugepage memory.
    bool huge() const { return page_ > 4096; }
    // The memfd it lives in (what a vhost-user back-end maps).
    int fd() const { return fd_; }
    // The NUMA node it was asked to be placed on (-1: left to the kernel).
    int numa_node() const { return node_; }

private:
    DmaMemory() = default;
    void release();

    uint8_t* base_ = nullptr;
    size_t len_ = 0;
    size_t page_ = 0;
    int fd_ = -1;
    int node_ = -1;
};

}  // namespace vfab::dma
