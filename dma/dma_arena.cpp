#include "vfab/dma/dma_arena.hpp"

#include "vfab/log.hpp"

namespace vfab::dma {

Result<DmaArena> DmaArena::create(std::shared_ptr<vfio::AddressSpace> ctx, size_t len, const DmaMemoryOptions& opts,
                                  std::optional<Iova> iova) {
    if (!ctx) return Error{EINVAL, "DmaArena::create: no IOMMU context (open a device first: its iommu_shared())"};
    auto mem = DmaMemory::allocate(len, opts);
    if (!mem) return mem.take_error();
    return adopt(std::move(ctx), std::move(*mem), iova);
}

Result<DmaArena> DmaArena::adopt(std::shared_ptr<vfio::AddressSpace> ctx, DmaMemory mem, std::optional<Iova> iova) {
    if (!ctx) return Error{EINVAL, "DmaArena::adopt: no IOMMU context (open a device first: its iommu_shared())"};
    Iova want = iova.value_or(Iova(reinterpret_cast<uintptr_t>(mem.data())));
    if (!iova && ctx->translates()) {
        bool fits = false;
        for (const vfio::IovaRange& r : ctx->info().iova_ranges) fits |= r.contains(want.value, mem.size());
        if (!fits)
            return Error{ERANGE, str_cat("DMA arena at ", static_cast<void*>(mem.data()), " (", mem.size(),
                                         " bytes): IOVA = VA is outside the IOMMU's usable ranges — pass an "
                                         "IOVA from an IovaAllocator")};
    }
    auto mapped = ctx->map_dma(mem.data(), mem.size(), want, vfio::kDmaReadWrite, {mem.fd(), 0});
    if (!mapped) return mapped.take_error();   // the memory is freed with `mem`
    return DmaArena(std::move(ctx), std::move(mem), *mapped);
}

DmaArena& DmaArena::operator=(DmaArena&& o) noexcept {
    if (this != &o) {
        unmap();
        ctx_ = std::move(o.ctx_);
        mem_ = std::move(o.mem_);
        iova_ = o.iova_;
    }
    return *this;
}

DmaArena::~DmaArena() { unmap(); }

// The device must be quiesced first: after this, its DMA to the arena faults.
void DmaArena::unmap() {
    if (!ctx_ || !mem_.data()) return;
    auto r = ctx_->unmap_dma(iova_, mem_.size());
    // After the last device left a legacy container the kernel has dropped the mapping already.
    if (!r && r.error().code != ENOENT) log(LogLevel::error, str_cat("DMA arena: ", r.error().message));
    ctx_.reset();
}

}  // namespace vfab::dma
