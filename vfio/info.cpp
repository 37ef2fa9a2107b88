#include "vfab/vfio/info.hpp"

#include <linux/vfio.h>

#include <cstring>

namespace vfab::vfio {
namespace {

// Copies a T out of buf at `off` if it fits (the buffer may be unaligned).
template <class T>
bool load(std::span<const uint8_t> buf, uint64_t off, T& out) {
    if (off > buf.size() || buf.size() - off < sizeof(T)) return false;
    std::memcpy(&out, buf.data() + off, sizeof(T));
    return true;
}

Error malformed(const char* what, uint64_t off) {
    return Error{EPROTO, str_cat("malformed ", what, " capability chain at offset ", off,
                                 " (kernel/vfab mismatch? please report)")};
}

// Calls fn(header, offset) for each capability; offsets must strictly increase, so a
// corrupt chain cannot loop.
template <class Fn>
Result<void> walk_caps(std::span<const uint8_t> buf, uint64_t first, uint64_t min_off, const char* what, Fn fn) {
    uint64_t prev = 0;
    for (uint64_t off = first; off != 0;) {
        vfio_info_cap_header hdr;
        if (off < min_off || off <= prev || !load(buf, off, hdr)) return malformed(what, off);
        if (!fn(hdr, off)) return malformed(what, off);
        prev = off;
        off = hdr.next;
    }
    return {};
}

}  // namespace

Result<RegionInfo> parse_region_info(std::span<const uint8_t> buf) {
    vfio_region_info ri;
    if (!load(buf, 0, ri)) return Error{EPROTO, "region info shorter than struct vfio_region_info"};
    RegionInfo out;
    out.index = ri.index;
    out.size = ri.size;
    out.offset = ri.offset;
    out.readable = ri.flags & VFIO_REGION_INFO_FLAG_READ;
    out.writable = ri.flags & VFIO_REGION_INFO_FLAG_WRITE;
    out.mmappable = ri.flags & VFIO_REGION_INFO_FLAG_MMAP;
    bool sparse = false;
    if ((ri.flags & VFIO_REGION_INFO_FLAG_CAPS) && ri.argsz <= buf.size()) {
        auto r = walk_caps(buf, ri.cap_offset, sizeof ri, "region info", [&](const vfio_info_cap_header& h, uint64_t off) {
            switch (h.id) {
            case VFIO_REGION_INFO_CAP_SPARSE_MMAP: {
                vfio_region_info_cap_sparse_mmap sp;
                if (!load(buf, off, sp)) return false;
                uint64_t areas = off + sizeof sp;
                if (sp.nr_areas > (buf.size() - std::min<uint64_t>(areas, buf.size())) / sizeof(vfio_region_sparse_mmap_area))
                    return false;
                sparse = true;
                for (uint32_t i = 0; i < sp.nr_areas; ++i) {
                    vfio_region_sparse_mmap_area a;
                    load(buf, areas + i * sizeof a, a);
                    if (a.size == 0) continue;
                    if (a.offset > out.size || a.size > out.size - a.offset) return false;
                    out.mmap_areas.push_back({a.offset, a.size});
                }
                return true;
            }
            case VFIO_REGION_INFO_CAP_TYPE: {
                vfio_region_info_cap_type t;
                if (!load(buf, off, t)) return false;
                out.type = std::make_pair(t.type, t.subtype);
                return true;
            }
            case VFIO_REGION_INFO_CAP_MSIX_MAPPABLE:
                out.msix_mappable = true;
                return true;
            default:
                return true;  // capabilities we do not use are skipped
            }
        });
        if (!r) return r.take_error();
    }
    if (out.mmappable && !sparse && out.size) out.mmap_areas.push_back({0, out.size});
    return out;
}

Result<IommuInfo> parse_type1_info(std::span<const uint8_t> buf) {
    vfio_iommu_type1_info info;
    if (!load(buf, 0, info)) return Error{EPROTO, "IOMMU info shorter than struct vfio_iommu_type1_info"};
    IommuInfo out;
    if (info.flags & VFIO_IOMMU_INFO_PGSIZES) out.page_sizes = info.iova_pgsizes;
    if ((info.flags & VFIO_IOMMU_INFO_CAPS) && info.argsz <= buf.size()) {
        auto r = walk_caps(buf, info.cap_offset, sizeof info, "IOMMU info", [&](const vfio_info_cap_header& h, uint64_t off) {
            switch (h.id) {
            case VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE: {
                vfio_iommu_type1_info_cap_iova_range cap;
                if (!load(buf, off, cap)) return false;
                uint64_t ranges = off + sizeof cap;
                for (uint32_t i = 0; i < cap.nr_iovas; ++i) {
                    vfio_iova_range r;
                    if (!load(buf, ranges + i * uint64_t{sizeof r}, r) || r.end < r.start) return false;
                    out.iova_ranges.push_back({r.start, r.end});
                }
                return true;
            }
            case VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL: {
                vfio_iommu_type1_info_dma_avail cap;
                if (!load(buf, off, cap)) return false;
                out.dma_mappings_available = cap.avail;
                return true;
            }
            default:
                return true;
            }
        });
        if (!r) return r.take_error();
    }
    if (out.iova_ranges.empty()) out.iova_ranges.push_back({0, ~uint64_t{0}});  // kernels before 5.4
    return out;
}

}  // namespace vfab::vfio
