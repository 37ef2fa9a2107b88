// An address space: what a device's DMA addresses mean, and how memory is made reachable at
// one. The dma layer (arenas, protection domains) maps memory through this interface only.
// Two kinds implement it:
//   IommuContext (this folder)  an IOMMU's I/O address space: memory is pinned and mapped
//                               by address (legacy container, iommufd IOAS, no-IOMMU);
//   a vhost-user memory table   (drivers/virtio) memory shared with a back-end process, which
//                               maps the file the memory lives in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

#include "vfab/iova.hpp"
#include "vfab/result.hpp"
#include "vfab/vfio/info.hpp"

namespace vfab::vfio {

enum DmaAccess : unsigned { kDmaRead = 1, kDmaWrite = 2, kDmaReadWrite = 3 };

// The file that holds memory being mapped, and where in it: DMA memory (dma::DmaMemory) is
// always a memfd. Address spaces that share memory with another process need it; an IOMMU
// maps by address and ignores it. fd -1: anonymous or foreign memory.
struct MemoryFile {
    int fd = -1;
    uint64_t offset = 0;
};

// Thread-safe in every implementation: memory may be mapped and unmapped from any thread.
class AddressSpace {
public:
    virtual ~AddressSpace() = default;

    // The page sizes it maps (bit n set: 2^n-byte pages) and where IOVAs may lie.
    virtual const IommuInfo& info() const = 0;
    // False when the device sees physical addresses (no-IOMMU): map_dma then returns the
    // physical address and ignores `iova`, and no IOVA is allocated.
    virtual bool translates() const = 0;

    // Makes [va, va + len) reachable by the devices at `iova` for `access`; `file` is where
    // the memory lives, when known. va, len and iova page-aligned. Returns the address the
    // device must use. Errors say what to do (a limit to raise, memory to allocate otherwise).
    virtual Result<Iova> map_dma(void* va, size_t len, Iova iova, unsigned access = kDmaReadWrite,
                                 MemoryFile file = {}) = 0;
    // Exactly what one map_dma mapped.
    virtual Result<void> unmap_dma(Iova iova, size_t len) = 0;
    // Live mappings (iova -> length). Not to be read while another thread maps or unmaps.
    virtual const std::map<uint64_t, size_t>& mappings() const = 0;

    // Why another device's memory (a BAR's mmap) cannot be mapped, with what to do; null when
    // it can. ProtectionDomain::register_device_memory fails with ENOTSUP and this text.
    virtual const char* device_memory_refusal() const = 0;
    // Why a dma-buf cannot be mapped, with what to do; null when it can.
    // ProtectionDomain::register_dmabuf fails with ENOTSUP and this text.
    virtual const char* dmabuf_refusal() const = 0;
    // Whether another device's memory can be mapped: device_memory_refusal() is null.
    bool maps_device_memory() const { return device_memory_refusal() == nullptr; }

protected:
    AddressSpace() = default;
    AddressSpace(const AddressSpace&) = delete;
    AddressSpace& operator=(const AddressSpace&) = delete;
};

}  // namespace vfab::vfio
