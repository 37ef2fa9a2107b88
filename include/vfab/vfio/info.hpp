// What VFIO reports about regions, interrupts and the IOMMU, decoded from the kernel's
// variable-size info structs and their capability chains (linux/vfio.h: vfio_info_cap_header,
// each capability's `next` an offset from the start of the info struct, 0 ending the chain).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "vfab/iova.hpp"
#include "vfab/result.hpp"

namespace vfab::vfio {

struct SparseArea {
    uint64_t offset = 0;  // within the region
    uint64_t size = 0;
};

struct RegionInfo {
    uint32_t index = 0;
    uint64_t size = 0;
    uint64_t offset = 0;  // of the region within the device fd (for mmap and pread/pwrite)
    bool readable = false;
    bool writable = false;
    bool mmappable = false;
    // When mmappable: the parts that may be mmapped. The whole region unless the kernel sent a
    // sparse-mmap capability (e.g. a BAR holding an MSI-X table that must not be mapped).
    std::vector<SparseArea> mmap_areas;
    bool msix_mappable = false;  // VFIO_REGION_INFO_CAP_MSIX_MAPPABLE
    std::optional<std::pair<uint32_t, uint32_t>> type;  // VFIO_REGION_INFO_CAP_TYPE (type, subtype)
};

struct IrqInfo {
    uint32_t index = 0;
    uint32_t count = 0;
    bool eventfd = false;
    bool maskable = false;
    bool automasked = false;  // INTx: masked by the kernel on each interrupt until unmasked
    bool noresize = false;    // the vector count cannot change while enabled
};

struct IovaRange {
    uint64_t start = 0;
    uint64_t last = 0;  // inclusive
    // Whether [iova, iova + len) lies wholly inside the range; false for len 0. Cannot
    // overflow, even for a range ending at 2^64 - 1.
    bool contains(uint64_t iova, uint64_t len) const {
        return len != 0 && iova >= start && iova - start <= last - start && len - 1 <= last - iova;
    }
};

struct IommuInfo {
    uint64_t page_sizes = 0;                 // bitmap: bit n set = 2^n-byte pages supported
    std::vector<IovaRange> iova_ranges;      // where the device may DMA
    std::optional<uint32_t> dma_mappings_available;  // legacy type1: what is left of the limit
};

// Decode a vfio_region_info (as filled by VFIO_DEVICE_GET_REGION_INFO with a buffer of
// `buf.size()` bytes) and its capabilities. Malformed chains are errors, never a crash.
Result<RegionInfo> parse_region_info(std::span<const uint8_t> buf);

// Decode a vfio_iommu_type1_info (VFIO_IOMMU_GET_INFO) and its capabilities.
Result<IommuInfo> parse_type1_info(std::span<const uint8_t> buf);

}  // namespace vfab::vfio
