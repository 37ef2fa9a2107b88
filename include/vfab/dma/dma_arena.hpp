// A DMA arena: DMA memory mapped whole into an address space (an IOMMU context, or a
// vhost-user memory table, which maps the memory's file) with one mapping, so that any
// buffer inside it has an IOVA by arithmetic — no system call per buffer, and the IOMMU's
// mapping limit (65535 on type1) is never what runs out. Memory registration inside an arena
// costs nothing but a table entry.
#pragma once

#include <memory>
#include <optional>

#include "vfab/dma/dma_memory.hpp"
#include "vfab/iova.hpp"
#include "vfab/vfio/address_space.hpp"

namespace vfab::dma {

class DmaArena {
public:
    // Allocates `len` bytes (rounded up to pages) and maps them for device reads and writes.
    // The IOVA is `iova` when given, else the memory's own virtual address (IOVA = VA) when
    // the IOMMU allows that range; no-IOMMU contexts use the physical address (the arena must
    // then fit in one hugepage).
    static Result<DmaArena> create(std::shared_ptr<vfio::AddressSpace> space, size_t len,
                                   const DmaMemoryOptions& opts = {}, std::optional<Iova> iova = {});
    // The same for memory already allocated.
    static Result<DmaArena> adopt(std::shared_ptr<vfio::AddressSpace> space, DmaMemory mem, std::optional<Iova> iova = {});

    // Takes the arena (memory and mapping) over; `o` is left empty.
    DmaArena(DmaArena&& o) noexcept = default;
    // Unmaps and frees this arena and takes `o`'s over.
    DmaArena& operator=(DmaArena&& o) noexcept;
    DmaArena(const DmaArena&) = delete;
    DmaArena& operator=(const DmaArena&) = delete;
    ~DmaArena();

    // The arena's first byte in this process.
    uint8_t* data() const { return mem_.data(); }
    // Its length in bytes.
    size_t size() const { return mem_.size(); }
    // The device's address of data().
    Iova iova() const { return iova_; }
    // The memory under it.
    const DmaMemory& memory() const { return mem_; }
    // The IOMMU context (or vhost-user memory table) it is mapped into.
    vfio::AddressSpace& address_space() const { return *ctx_; }

    // Whether the `len` bytes at `p` lie inside the arena.
    bool contains(const void* p, size_t len) const noexcept {
        auto off = static_cast<size_t>(static_cast<const uint8_t*>(p) - mem_.data());
        return static_cast<const uint8_t*>(p) >= mem_.data() && off <= mem_.size() && len <= mem_.size() - off;
    }
    // The IOVA of an address inside the arena (unchecked: use contains()).
    Iova iova_of(const void* p) const noexcept {
        return iova_ + static_cast<uint64_t>(static_cast<const uint8_t*>(p) - mem_.data());
    }

private:
    DmaArena(std::shared_ptr<vfio::AddressSpace> ctx, DmaMemory mem, Iova iova)
        : ctx_(std::move(ctx)), mem_(std::move(mem)), iova_(iova) {}
    void unmap();

    std::shared_ptr<vfio::AddressSpace> ctx_;
    DmaMemory mem_;
    Iova iova_;
};

}  // namespace vfab::dma
