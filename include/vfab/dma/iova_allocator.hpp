// IovaAllocator: hands out I/O virtual address ranges inside the ranges an IOMMU allows.
//
// Policy: allocate() returns the caller's preferred address when that range is free and
// suitably aligned — this is how IOVA = VA is done for memory whose virtual address lies in an
// allowed range — and otherwise the lowest-addressed free range that fits (first fit). free()
// merges a range with its free neighbours, so allocating and freeing never leaves the free
// list more fragmented than the live allocations force; once everything is freed the free
// list is exactly the allowed ranges again.
//
// All lengths are rounded up to the page size, in allocate(), reserve() and free() alike, so
// a range is freed with the same (iova, len) it was allocated with.
//
// Setup path only (the free list is a std::map); not thread-safe: callers serialise.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "vfab/iova.hpp"
#include "vfab/result.hpp"
#include "vfab/vfio/info.hpp"

namespace vfab::dma {

class IovaAllocator {
public:
    // `ranges`: where the device may DMA (IommuContext::info().iova_ranges; `last` inclusive).
    // `page_size`: a power of two, the smallest unit handed out (the IOMMU's smallest page, or
    // the CPU's when that is larger). Ranges are shrunk to whole pages, sorted and merged;
    // an error when no whole page is left.
    static Result<IovaAllocator> create(std::vector<vfio::IovaRange> ranges, uint64_t page_size);

    // A free range of `len` bytes (rounded up to the page size) aligned to `align` (a power of
    // two; 0 or anything below the page size means the page size). `preferred` is returned
    // when [preferred, preferred + len) is free and aligned; otherwise the lowest fit.
    Result<Iova> allocate(uint64_t len, uint64_t align = 0, std::optional<Iova> preferred = std::nullopt);

    // Marks [iova, iova + len) used, e.g. a mapping that already exists. It must be free.
    Result<void> reserve(Iova iova, uint64_t len);

    // Returns [iova, iova + len) — allocated or reserved — to the free list. Freeing a range
    // that is (partly) free already or outside the allowed ranges is an error, not a crash.
    Result<void> free(Iova iova, uint64_t len);

    // The unit of allocation in bytes, as given to create(): every range handed out is a
    // multiple of it and aligned to it.
    uint64_t page_size() const { return page_; }
    // The allowed ranges after normalisation (page-aligned, sorted, merged).
    const std::vector<vfio::IovaRange>& ranges() const { return allowed_; }
    // The free list, lowest address first.
    std::vector<vfio::IovaRange> free_ranges() const;
    // Bytes free in total (saturating at UINT64_MAX, which only a range covering the whole
    // 64-bit space reaches).
    uint64_t free_bytes() const;
    // Bytes in the largest free range, the most one allocate() can get (saturating likewise).
    uint64_t largest_free() const;

private:
    using FreeMap = std::map<uint64_t, uint64_t>;   // start -> last (inclusive)

    IovaAllocator(std::vector<vfio::IovaRange> allowed, uint64_t page);
    Result<uint64_t> page_length(uint64_t len, const char* what) const;
    FreeMap::iterator free_range_holding(uint64_t first, uint64_t last);
    void carve(FreeMap::iterator it, uint64_t first, uint64_t last);
    bool in_allowed(uint64_t first, uint64_t last) const;
    std::optional<uint64_t> first_fit(uint64_t len, uint64_t align) const;
    Error exhausted(uint64_t len, uint64_t align) const;

    std::vector<vfio::IovaRange> allowed_;
    uint64_t page_;
    FreeMap free_;
};

}  // namespace vfab::dma
