// What all IOMMU backends share: argument checks, the mapping table, error explanations.
#include "vfab/log.hpp"
#include "vfab/vfio/iommu.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>

#include "vfio/backends.hpp"

namespace vfab::vfio {

const char* to_string(IommuBackend b) {
    switch (b) {
    case IommuBackend::automatic: return "auto";
    case IommuBackend::legacy: return "legacy";
    case IommuBackend::iommufd: return "iommufd";
    case IommuBackend::noiommu: return "noiommu";
    }
    return "?";
}

Result<IommuBackend> parse_iommu_backend(std::string_view text) {
    for (IommuBackend b : {IommuBackend::automatic, IommuBackend::legacy, IommuBackend::iommufd,
                           IommuBackend::noiommu})
        if (text == to_string(b)) return b;
    return Error{EINVAL, str_cat("unknown IOMMU backend '", text, "': use auto, legacy, iommufd or noiommu")};
}

std::string memlock_limit_text() {
    rlimit rl{};
    getrlimit(RLIMIT_MEMLOCK, &rl);
    return rl.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : str_cat(rl.rlim_cur, " bytes");
}

Result<IommuBackend> iommu_backend_from_env() {
    const char* env = std::getenv("VFAB_IOMMU_BACKEND");
    if (!env || !*env) return IommuBackend::automatic;
    auto b = parse_iommu_backend(env);
    if (!b) return Error{EINVAL, str_cat("VFAB_IOMMU_BACKEND: ", b.error().message)};
    return b;
}

Result<std::shared_ptr<IommuContext>> IommuContext::create(IommuBackend backend, Sys& sys) {
    switch (backend) {
    case IommuBackend::legacy: return create_legacy_container(sys, false);
    case IommuBackend::noiommu: return create_legacy_container(sys, true);
    case IommuBackend::iommufd: return create_iommufd_context(sys);
    case IommuBackend::automatic: break;
    }
    return Error{EINVAL, "IommuContext::create needs a concrete backend; Device::open picks one "
                         "automatically"};
}

Result<Iova> IommuContext::map_dma(void* va, size_t len, Iova iova, unsigned access, MemoryFile) {
    std::lock_guard lock(mutex_);
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const auto addr = reinterpret_cast<uintptr_t>(va);
    if (len == 0 || (addr | len | (translates() ? iova.value : 0)) & (page - 1))
        return Error{EINVAL, str_cat("DMA mapping of ", len, " bytes at ", va, " -> IOVA 0x", std::hex,
                                     iova.value, ": address, IOVA and length must be non-zero multiples "
                                     "of the page size (", std::dec, page, ")")};
    if (access == 0 || access > kDmaReadWrite)
        return Error{EINVAL, "DMA mapping: access must be kDmaRead, kDmaWrite or both"};
    if (devices_ == 0)
        return Error{ENODEV, "DMA mapping: no device in this IOMMU context yet — open a device into "
                             "it first (its IOMMU is set up when the first device joins)"};
    if (translates()) {
        bool inside = false;
        for (const IovaRange& r : info_.iova_ranges) inside |= r.contains(iova.value, len);
        if (!inside) {
            std::string ranges;
            for (const IovaRange& r : info_.iova_ranges)
                ranges += str_cat(ranges.empty() ? "" : ", ", "[0x", std::hex, r.start, ", 0x", r.last, "]");
            return Error{ERANGE, str_cat("IOVA range [0x", std::hex, iova.value, ", 0x", iova.value + len,
                                         ") is outside the IOMMU's usable ranges ", ranges,
                                         " — choose an IOVA inside one of them")};
        }
        if (auto it = mappings_.upper_bound(iova.value + len - 1); it != mappings_.begin()) {
            --it;
            if (it->first + it->second > iova.value)
                return Error{EEXIST, str_cat("IOVA 0x", std::hex, iova.value, " overlaps the mapping at 0x",
                                             it->first, " — unmap it first")};
        }
    }
    auto r = do_map(va, len, iova, access);
    if (!r) return r;
    mappings_.emplace(r->value, len);
    return r;
}

Result<void> IommuContext::unmap_dma(Iova iova, size_t len) {
    std::lock_guard lock(mutex_);
    auto it = mappings_.find(iova.value);
    if (it == mappings_.end() || it->second != len)
        return Error{ENOENT, str_cat("no DMA mapping of ", len, " bytes at IOVA 0x", std::hex, iova.value,
                                     ": unmap exactly what map_dma mapped")};
    auto r = do_unmap(iova, len);
    if (!r) return r;
    mappings_.erase(it);
    return r;
}

void IommuContext::unmap_all() {
    std::lock_guard lock(mutex_);
    for (auto& [iova, len] : mappings_) {
        auto r = do_unmap(Iova(iova), len);
        if (!r) log(LogLevel::error, str_cat("unmapping IOVA 0x", std::hex, iova, " failed: ", r.error().message));
    }
    mappings_.clear();
}

const char* IommuContext::device_memory_refusal() const {
    switch (backend_) {
    case IommuBackend::legacy: return nullptr;
    case IommuBackend::iommufd:
        return "iommufd maps only host memory it can pin; another device's memory needs a dma-buf of it "
               "(register_dmabuf, IOMMU_IOAS_MAP_FILE). Open the NIC with the legacy VFIO container "
               "(VFAB_IOMMU_BACKEND=legacy), which maps a BAR's mmap";
    default:
        return "without an IOMMU the NIC needs the memory's bus address, which vfab does not look up for a BAR "
               "yet: use an IOMMU (legacy backend)";
    }
}

const char* IommuContext::dmabuf_refusal() const {
    if (backend_ != IommuBackend::iommufd)
        return "dma-buf registration goes through iommufd, and this domain's IOMMU context is not an iommufd IOAS "
               "(VFAB_IOMMU_BACKEND=iommufd)";
    return "dma-buf registration needs iommufd's IOMMU_IOAS_MAP_FILE accepting dma-bufs (newer kernels than the 6.12 "
           "headers this build has): not available here; for a VFIO device's BAR use register_device_memory with the "
           "legacy container";
}

Error IommuContext::explain_map_failure(int err, size_t len, Iova iova) const {
    std::string what = str_cat("mapping ", len, " bytes for DMA at IOVA 0x", std::hex, iova.value, std::dec,
                               " (", to_string(backend_), " backend)");
    if (err == ENOMEM) {
        return Error{ENOMEM, str_cat(what, " failed: out of lockable memory. RLIMIT_MEMLOCK is ", memlock_limit_text(),
                                     " and this mapping needs ", len, " more bytes pinned — ", kRaiseMemlock)};
    }
    if (err == ENOSPC) {
        std::string left = info_.dma_mappings_available
                               ? str_cat(" (the container allowed ", *info_.dma_mappings_available, ")")
                               : std::string();
        return Error{ENOSPC, str_cat(what, " failed: out of DMA mappings", left,
                                     " — map fewer, larger regions (vfab's DMA arenas do), or raise "
                                     "vfio_iommu_type1's dma_entry_limit module parameter")};
    }
    if (err == EEXIST) return Error{EEXIST, str_cat(what, " failed: the IOVA range is already mapped")};
    if (err == EFAULT)
        return Error{EFAULT, str_cat(what, " failed: the memory is not mapped in this process")};
    return Error::from_errno(err, str_cat(what, " failed"));
}

}  // namespace vfab::vfio
