// The dma layer maps through vfio::AddressSpace only, and hands each mapping the file its
// memory lives in when it has one: an arena passes its DmaMemory's memfd (what a vhost-user
// memory table needs), pinned user memory passes none. An address space that maps only files
// refuses user memory with its own message, and the protection domain is left as it was.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <vector>

#include "vfab/dma/protection_domain.hpp"

namespace vfab {
namespace {

// An address space that records what it is given; with files_only, it maps only memory that
// comes with its file (as the vhost-user memory table does).
class RecordingSpace final : public vfio::AddressSpace {
public:
    struct Call {
        void* va;
        size_t len;
        vfio::MemoryFile file;
    };
    explicit RecordingSpace(bool files_only) : files_only_(files_only) {
        info_.page_sizes = 4096 | (2u << 20);
        info_.iova_ranges = {{0x1000, (uint64_t{1} << 47) - 1}};
    }
    const vfio::IommuInfo& info() const override { return info_; }
    bool translates() const override { return true; }
    Result<Iova> map_dma(void* va, size_t len, Iova iova, unsigned, vfio::MemoryFile file) override {
        calls.push_back({va, len, file});
        if (files_only_ && file.fd < 0) return Error{EINVAL, "this space maps only memory that comes with its file"};
        mappings_[iova.value] = len;
        return iova;
    }
    Result<void> unmap_dma(Iova iova, size_t len) override {
        auto it = mappings_.find(iova.value);
        if (it == mappings_.end() || it->second != len) return Error{ENOENT, "not mapped"};
        mappings_.erase(it);
        return {};
    }
    const std::map<uint64_t, size_t>& mappings() const override { return mappings_; }
    const char* device_memory_refusal() const override { return "no device memory here"; }
    const char* dmabuf_refusal() const override { return "no dma-bufs here"; }

    std::vector<Call> calls;

private:
    bool files_only_;
    vfio::IommuInfo info_;
    std::map<uint64_t, size_t> mappings_;
};

const dma::DmaMemoryOptions k4k{dma::PageSize::k4, -1};

TEST(AddressSpace, AnArenaMapsWithTheFileItsMemoryLivesIn) {
    auto space = std::make_shared<RecordingSpace>(true);
    auto pd = dma::ProtectionDomain::create(space);
    ASSERT_TRUE(pd.ok()) << pd.error().message;
    auto arena = (*pd)->create_arena(64 << 10, k4k);
    ASSERT_TRUE(arena.ok()) << arena.error().message;
    ASSERT_EQ(space->calls.size(), 1u);
    const RecordingSpace::Call& c = space->calls[0];
    EXPECT_EQ(c.va, (*arena)->data());
    EXPECT_EQ(c.len, (*arena)->size());
    EXPECT_EQ(c.file.fd, (*arena)->memory().fd());
    EXPECT_EQ(c.file.offset, 0u);
    struct stat st {};
    ASSERT_EQ(fstat(c.file.fd, &st), 0);   // the memfd itself: as large as the mapping
    EXPECT_GE(uint64_t(st.st_size), c.len);
    // Registering inside the arena maps nothing more.
    auto mr = (*pd)->register_memory((*arena)->data() + 4096, 4096, dma::Access::local_write);
    ASSERT_TRUE(mr.ok()) << mr.error().message;
    EXPECT_EQ(space->calls.size(), 1u);
}

TEST(AddressSpace, UserMemoryComesWithoutAFileAndASpaceThatNeedsOneRefusesIt) {
    auto space = std::make_shared<RecordingSpace>(true);
    auto pd = dma::ProtectionDomain::create(space);
    ASSERT_TRUE(pd.ok()) << pd.error().message;
    void* mem = std::aligned_alloc(4096, 8192);
    ASSERT_NE(mem, nullptr);
    auto mr = (*pd)->register_memory(mem, 8192, dma::Access::local_write);
    ASSERT_FALSE(mr.ok());
    EXPECT_NE(mr.error().message.find("maps only memory that comes with its file"), std::string::npos)
        << mr.error().message;
    ASSERT_EQ(space->calls.size(), 1u);
    EXPECT_EQ(space->calls[0].file.fd, -1);
    EXPECT_EQ((*pd)->user_mappings(), 0u);   // nothing left behind
    EXPECT_TRUE(space->mappings().empty());
    std::free(mem);
}

TEST(AddressSpace, AnIommuStyleSpaceMapsUserMemoryByAddress) {
    auto space = std::make_shared<RecordingSpace>(false);
    auto pd = dma::ProtectionDomain::create(space);
    ASSERT_TRUE(pd.ok()) << pd.error().message;
    void* mem = std::aligned_alloc(4096, 8192);
    ASSERT_NE(mem, nullptr);
    {
        auto mr = (*pd)->register_memory(mem, 8192, dma::Access::local_write);
        ASSERT_TRUE(mr.ok()) << mr.error().message;
        EXPECT_TRUE(mr->pinned);
        ASSERT_TRUE((*pd)->deregister(*mr).ok());
    }
    EXPECT_TRUE(space->mappings().empty());   // unmapped with the last registration
    std::free(mem);
}

TEST(AddressSpace, ItsRefusalsAreWhatTheDomainReports) {
    auto space = std::make_shared<RecordingSpace>(false);
    auto pd = dma::ProtectionDomain::create(space);
    ASSERT_TRUE(pd.ok()) << pd.error().message;
    EXPECT_FALSE((*pd)->maps_device_memory());
    auto r = (*pd)->register_dmabuf(3, 0, 4096, dma::Access::local_write);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().message, "no dma-bufs here");
}

}  // namespace
}  // namespace vfab
