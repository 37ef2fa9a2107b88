// Decoding VFIO's region and IOMMU info structs and their capability chains.
#include "vfab/vfio/info.hpp"

#include <gtest/gtest.h>
#include <linux/vfio.h>

#include <cstring>

namespace vfab::vfio {
namespace {

// Builds an info buffer: a header struct followed by capabilities appended at 8-byte offsets.
struct Builder {
    std::vector<uint8_t> buf;
    uint32_t last_cap = 0;   // offset of the last capability header, 0 when none

    template <class T>
    uint32_t append(const T& v) {
        uint32_t off = static_cast<uint32_t>((buf.size() + 7) & ~size_t{7});
        buf.resize(off + sizeof v);
        std::memcpy(buf.data() + off, &v, sizeof v);
        return off;
    }
    void append_raw(const void* p, size_t n) {
        size_t off = buf.size();
        buf.resize(off + n);
        std::memcpy(buf.data() + off, p, n);
    }
    // Links a capability at `off` into the chain that starts at *first.
    void link(uint32_t* first_field_off, uint32_t off) {
        if (last_cap == 0) std::memcpy(buf.data() + *first_field_off, &off, 4);
        else std::memcpy(buf.data() + last_cap + offsetof(vfio_info_cap_header, next), &off, 4);
        last_cap = off;
    }
    template <class T>
    T& at(uint32_t off) { return *reinterpret_cast<T*>(buf.data() + off); }
};

std::vector<uint8_t> region_with_sparse(std::vector<vfio_region_sparse_mmap_area> areas, uint32_t nr = ~0u) {
    Builder b;
    vfio_region_info ri{};
    ri.flags = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE | VFIO_REGION_INFO_FLAG_MMAP |
               VFIO_REGION_INFO_FLAG_CAPS;
    ri.index = 0;
    ri.size = 0x20000;
    ri.offset = 0x1000000;
    b.append(ri);
    vfio_region_info_cap_sparse_mmap sp{};
    sp.header.id = VFIO_REGION_INFO_CAP_SPARSE_MMAP;
    sp.header.version = 1;
    sp.nr_areas = nr == ~0u ? static_cast<uint32_t>(areas.size()) : nr;
    uint32_t off = b.append(sp);
    uint32_t cap_field = offsetof(vfio_region_info, cap_offset);
    b.link(&cap_field, off);
    for (auto& a : areas) b.append_raw(&a, sizeof a);
    vfio_info_cap_header msix{VFIO_REGION_INFO_CAP_MSIX_MAPPABLE, 1, 0};
    b.link(&cap_field, b.append(msix));
    b.at<vfio_region_info>(0).argsz = static_cast<uint32_t>(b.buf.size());
    return b.buf;
}

TEST(RegionInfo, WholeRegionIsMappableWithoutCaps) {
    vfio_region_info ri{};
    ri.argsz = sizeof ri;
    ri.flags = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_MMAP;
    ri.index = 2;
    ri.size = 4096;
    ri.offset = 0x20000000000;
    auto info = parse_region_info({reinterpret_cast<uint8_t*>(&ri), sizeof ri});
    ASSERT_TRUE(info.ok()) << info.error().message;
    EXPECT_EQ(info->index, 2u);
    EXPECT_TRUE(info->readable);
    EXPECT_FALSE(info->writable);
    ASSERT_EQ(info->mmap_areas.size(), 1u);
    EXPECT_EQ(info->mmap_areas[0].offset, 0u);
    EXPECT_EQ(info->mmap_areas[0].size, 4096u);
}

TEST(RegionInfo, SparseAreasAndMsixMappable) {
    auto buf = region_with_sparse({{0, 0x3000}, {0x4000, 0x1c000}});
    auto info = parse_region_info(buf);
    ASSERT_TRUE(info.ok()) << info.error().message;
    ASSERT_EQ(info->mmap_areas.size(), 2u);
    EXPECT_EQ(info->mmap_areas[1].offset, 0x4000u);
    EXPECT_EQ(info->mmap_areas[1].size, 0x1c000u);
    EXPECT_TRUE(info->msix_mappable);
    EXPECT_EQ(info->offset, 0x1000000u);
}

TEST(RegionInfo, SparseCapWithNoAreasMeansNothingMappable) {
    auto info = parse_region_info(region_with_sparse({}));
    ASSERT_TRUE(info.ok());
    EXPECT_TRUE(info->mmappable);
    EXPECT_TRUE(info->mmap_areas.empty());
}

TEST(RegionInfo, AreaCountBeyondTheBufferIsMalformed) {
    auto info = parse_region_info(region_with_sparse({{0, 0x1000}}, 1000000));
    ASSERT_FALSE(info.ok());
    EXPECT_EQ(info.error().code, EPROTO);
}

TEST(RegionInfo, AreaOutsideTheRegionIsMalformed) {
    EXPECT_FALSE(parse_region_info(region_with_sparse({{0x1f000, 0x2000}})).ok());
}

TEST(RegionInfo, LoopingChainIsMalformed) {
    auto buf = region_with_sparse({{0, 0x1000}});
    auto& ri = *reinterpret_cast<vfio_region_info*>(buf.data());
    // Point the first capability's `next` back at itself.
    std::memcpy(buf.data() + ri.cap_offset + offsetof(vfio_info_cap_header, next), &ri.cap_offset, 4);
    EXPECT_FALSE(parse_region_info(buf).ok());
}

TEST(RegionInfo, ChainIntoTheHeaderOrPastTheEndIsMalformed) {
    for (uint32_t bad : {4u, 100000u}) {
        auto buf = region_with_sparse({{0, 0x1000}});
        reinterpret_cast<vfio_region_info*>(buf.data())->cap_offset = bad;
        EXPECT_FALSE(parse_region_info(buf).ok()) << bad;
    }
}

TEST(RegionInfo, TruncatedStructIsAnError) {
    uint8_t tiny[8] = {};
    EXPECT_FALSE(parse_region_info(tiny).ok());
}

TEST(IommuInfo, RangesPageSizesAndMappingsLeft) {
    Builder b;
    vfio_iommu_type1_info info{};
    info.flags = VFIO_IOMMU_INFO_PGSIZES | VFIO_IOMMU_INFO_CAPS;
    info.iova_pgsizes = 0x40201000;   // 4K | 2M | 1G
    b.append(info);
    uint32_t cap_field = offsetof(vfio_iommu_type1_info, cap_offset);
    vfio_iommu_type1_info_cap_iova_range r{};
    r.header.id = VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE;
    r.nr_iovas = 2;
    b.link(&cap_field, b.append(r));
    vfio_iova_range ranges[2] = {{0, 0xfedfffff}, {0xfef00000, (uint64_t{1} << 48) - 1}};
    b.append_raw(ranges, sizeof ranges);
    vfio_iommu_type1_info_dma_avail avail{};
    avail.header.id = VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL;
    avail.avail = 65535;
    b.link(&cap_field, b.append(avail));
    b.at<vfio_iommu_type1_info>(0).argsz = static_cast<uint32_t>(b.buf.size());

    auto out = parse_type1_info(b.buf);
    ASSERT_TRUE(out.ok()) << out.error().message;
    EXPECT_EQ(out->page_sizes, 0x40201000u);
    ASSERT_EQ(out->iova_ranges.size(), 2u);
    EXPECT_EQ(out->iova_ranges[0].last, 0xfedfffffu);
    EXPECT_EQ(out->iova_ranges[1].start, 0xfef00000u);
    EXPECT_EQ(out->dma_mappings_available, 65535u);
}

TEST(IommuInfo, NoRangeCapMeansEverything) {
    vfio_iommu_type1_info info{};
    info.argsz = sizeof info;
    info.flags = VFIO_IOMMU_INFO_PGSIZES;
    info.iova_pgsizes = 4096;
    auto out = parse_type1_info({reinterpret_cast<uint8_t*>(&info), sizeof info});
    ASSERT_TRUE(out.ok());
    ASSERT_EQ(out->iova_ranges.size(), 1u);
    EXPECT_EQ(out->iova_ranges[0].last, ~uint64_t{0});
    EXPECT_FALSE(out->dma_mappings_available.has_value());
}

TEST(IovaRange, ContainsHandlesEdgesAndOverflow) {
    IovaRange r{0x1000, 0x1fff};
    EXPECT_TRUE(r.contains(0x1000, 0x1000));
    EXPECT_FALSE(r.contains(0x1000, 0x1001));
    EXPECT_FALSE(r.contains(0xfff, 2));
    EXPECT_FALSE(r.contains(0x1000, 0));
    IovaRange all{0, ~uint64_t{0}};
    EXPECT_TRUE(all.contains(~uint64_t{0}, 1));
    EXPECT_FALSE(all.contains(~uint64_t{0}, 2));
}

}  // namespace
}  // namespace vfab::vfio
