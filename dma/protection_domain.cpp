#include "vfab/dma/protection_domain.hpp"
#include "vfab/vfio/device.hpp"
#include "vfab/log.hpp"

#include <unistd.h>

namespace vfab::dma {

Result<std::unique_ptr<ProtectionDomain>> ProtectionDomain::create(std::shared_ptr<vfio::AddressSpace> ctx,
                                                                   const PdOptions& opts) {
    if (!ctx) return Error{EINVAL, "ProtectionDomain::create: no address space (use a device's iommu_shared())"};
    auto table = MrTable::create(opts.max_mrs);
    if (!table) return table.take_error();
    std::optional<IovaAllocator> iovas;
    if (ctx->translates()) {
        uint64_t page = std::max<uint64_t>(static_cast<uint64_t>(sysconf(_SC_PAGESIZE)),
                                           ctx->info().page_sizes & -ctx->info().page_sizes);
        auto a = IovaAllocator::create(ctx->info().iova_ranges, page);
        if (!a) return a.take_error();
        // What the context has mapped already is not ours to hand out.
        for (const auto& [iova, len] : ctx->mappings())
            if (auto r = a->reserve(Iova(iova), len); !r) return r.take_error();
        iovas.emplace(std::move(*a));
    }
    return std::unique_ptr<ProtectionDomain>(new ProtectionDomain(std::move(ctx), std::move(iovas), std::move(*table)));
}

ProtectionDomain::ProtectionDomain(std::shared_ptr<vfio::AddressSpace> ctx, std::optional<IovaAllocator> iovas,
                                   MrTable table)
    : ctx_(std::move(ctx)), iovas_(std::move(iovas)), mr_pages_(table.capacity()), mr_devices_(table.capacity()),
      table_(std::move(table)) {}

ProtectionDomain::~ProtectionDomain() {
    // Devices must be quiesced before their domain goes: from here on their DMA faults.
    for (const auto& [pages, m] : user_) {
        auto r = ctx_->unmap_dma(m.iova, pages.len);
        if (!r && r.error().code != ENOENT) log(LogLevel::error, str_cat("protection domain: ", r.error().message));
    }
    arenas_.clear();
}

Result<DmaArena*> ProtectionDomain::create_arena(size_t len, const DmaMemoryOptions& opts) {
    std::lock_guard lock(mu_);
    auto mem = DmaMemory::allocate(len, opts);
    if (!mem) return mem.take_error();
    const size_t size = mem->size();
    std::optional<Iova> iova;
    if (iovas_) {   // IOVA = VA when that range is free, else wherever it fits
        auto i = iovas_->allocate(size, 0, Iova(reinterpret_cast<uintptr_t>(mem->data())));
        if (!i) return i.take_error();
        iova = *i;
    }
    auto arena = DmaArena::adopt(ctx_, std::move(*mem), iova);
    if (!arena) {
        if (iova) (void)iovas_->free(*iova, size);
        return arena.take_error();
    }
    arenas_.push_back(std::make_unique<DmaArena>(std::move(*arena)));
    return arenas_.back().get();
}

const DmaArena* ProtectionDomain::arena_holding(const void* addr, uint64_t len) const {
    for (const auto& a : arenas_)
        if (a->contains(addr, len)) return a.get();
    return nullptr;
}

Result<Iova> ProtectionDomain::map_user(const PageRange& pages) {
    if (auto it = user_.find(pages); it != user_.end()) {
        ++it->second.refs;
        return it->second.iova;
    }
    std::optional<Iova> iova;
    if (iovas_) {
        auto i = iovas_->allocate(pages.len, 0, Iova(pages.start));
        if (!i) return i.take_error();
        iova = *i;
    }
    auto mapped = ctx_->map_dma(reinterpret_cast<void*>(pages.start), pages.len, iova.value_or(Iova()), vfio::kDmaReadWrite);
    if (!mapped) {
        if (iova) (void)iovas_->free(*iova, pages.len);
        return mapped.take_error();
    }
    user_.emplace(pages, UserMapping{*mapped, 1});
    return *mapped;
}

void ProtectionDomain::unmap_user(const PageRange& pages) {
    auto it = user_.find(pages);
    if (it == user_.end() || --it->second.refs > 0) return;
    auto r = ctx_->unmap_dma(it->second.iova, pages.len);
    if (!r && r.error().code != ENOENT) log(LogLevel::error, str_cat("deregistering memory: ", r.error().message));
    if (iovas_) (void)iovas_->free(it->second.iova, pages.len);
    user_.erase(it);
}

Result<MemoryRegion> ProtectionDomain::register_memory(void* addr, uint64_t len, Access access) {
    WriterGuard writer(*this);
    std::lock_guard lock(mu_);
    return register_locked(addr, len, access);
}

Result<MemoryRegion> ProtectionDomain::register_locked(void* addr, uint64_t len, Access access) {
    const auto start = reinterpret_cast<uint64_t>(addr);
    if (len == 0) return Error{EINVAL, "memory registration: the length must not be 0"};
    if (start + len < start)
        return Error{EINVAL, str_cat("memory registration of ", len, " bytes at ", addr, " wraps around the address space")};
    MemoryRegion mr{addr, len, 0, 0, Iova(), access, false};
    std::optional<PageRange> pages;
    if (const DmaArena* arena = arena_holding(addr, len)) {
        mr.iova = arena->iova_of(addr);   // inside an arena: a table entry, no system call
    } else {
        const uint64_t page = iovas_ ? iovas_->page_size() : static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
        uint64_t first = start & ~(page - 1), end = (start + len + page - 1) & ~(page - 1);
        pages = PageRange{first, end - first};
        auto iova = map_user(*pages);
        if (!iova) return iova.take_error();
        mr.iova = *iova + (start - first);
        mr.pinned = true;
    }
    uint64_t base = has(access, Access::zero_based) ? 0 : start;
    auto keys = table_.add(MrEntry{base, len, mr.iova, access}, start);   // zero-based: base 0, memory at start
    if (!keys) {
        if (pages) unmap_user(*pages);
        return keys.take_error();
    }
    mr.lkey = keys->lkey;
    mr.rkey = keys->rkey;
    mr_pages_[key_index(mr.lkey)] = pages;
    return mr;
}

Result<void> ProtectionDomain::set_access(MemoryRegion& mr, Access access) {
    WriterGuard writer(*this);
    std::lock_guard lock(mu_);
    const MrStatus s = table_.set_access(mr.lkey, access);
    if (s != MrStatus::ok)
        return Error{EINVAL, str_cat("new rights 0x", std::hex, uint32_t(access), " for key 0x", mr.lkey, ": ", to_string(s),
                                     " (REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE; the key must be a live registration)")};
    mr.access = (access & ~Access::zero_based) | (mr.access & Access::zero_based);
    return {};
}

Result<void> ProtectionDomain::deregister(const MemoryRegion& mr) {
    WriterGuard writer(*this);
    std::lock_guard lock(mu_);
    MrStatus s = table_.remove(mr.lkey);
    if (s != MrStatus::ok)
        return Error{EINVAL, str_cat("deregistering key 0x", std::hex, mr.lkey, ": ", to_string(s),
                                     " (already deregistered, or not from this protection domain)")};
    auto& pages = mr_pages_[key_index(mr.lkey)];
    if (pages) unmap_user(*pages);
    pages.reset();
    mr_devices_[key_index(mr.lkey)].reset();   // after the unmap: the device may close now
    return {};
}

Result<uint32_t> ProtectionDomain::alloc_mr(uint64_t max_len, uint32_t max_blocks) {
    WriterGuard writer(*this);
    std::lock_guard lock(mu_);
    return table_.alloc_unbound(max_len, max_blocks);
}

Result<uint32_t> ProtectionDomain::alloc_mw(WindowType type) {
    WriterGuard writer(*this);
    std::lock_guard lock(mu_);
    return table_.alloc_window(type);
}

Result<void> ProtectionDomain::dealloc(uint32_t key) {
    WriterGuard writer(*this);
    std::lock_guard lock(mu_);
    const MrStatus s = table_.remove_allocated(key);
    if (s == MrStatus::invalid_state)
        return Error{EINVAL, str_cat("dealloc of key 0x", std::hex, key, ": a registered region — deregister() it")};
    if (s != MrStatus::ok)
        return Error{EINVAL, str_cat("dealloc of key 0x", std::hex, key, ": ", to_string(s),
                                     " (already freed, or not from this protection domain)")};
    return {};
}

std::optional<Iova> ProtectionDomain::iova_of(const void* host, uint64_t len) const {
    if (const DmaArena* arena = arena_holding(host, len)) return arena->iova_of(host);
    const auto start = reinterpret_cast<uint64_t>(host);
    for (const auto& [pages, m] : user_)
        if (start >= pages.start && len <= pages.len && start - pages.start <= pages.len - len)
            return m.iova + (start - pages.start);
    return std::nullopt;
}

MrStatus ProtectionDomain::fast_register(uint32_t key, uint32_t new_key, const void* host, uint64_t len, uint64_t va,
                                         Access access) {
    if (key_index(new_key) != key_index(key)) return MrStatus::bad_key;
    std::lock_guard lock(mu_);
    const std::optional<Iova> iova = iova_of(host, len);
    if (!iova) return MrStatus::out_of_bounds;   // memory the device cannot reach
    const uint64_t base = has(access, Access::zero_based) ? 0 : va;
    return table_.bind(key, key_consumer(new_key), MrEntry{base, len, *iova, access}, reinterpret_cast<uint64_t>(host));
}

MrStatus ProtectionDomain::fast_register_blocks(uint32_t key, uint32_t new_key, const uint64_t* blocks, uint32_t n,
                                                uint64_t block_size, uint64_t first_offset, uint64_t len, uint64_t va,
                                                Access access) {
    if (key_index(new_key) != key_index(key)) return MrStatus::bad_key;
    if (block_size == 0 || first_offset >= block_size || len == 0 || n == 0 ||
        len > n * block_size - first_offset)
        return MrStatus::out_of_bounds;
    n = uint32_t((first_offset + len + block_size - 1) / block_size);   // the blocks it uses
    std::lock_guard lock(mu_);
    const std::span<Block> to = table_.blocks(key, n);
    if (to.empty()) return table_.max_blocks(key) ? MrStatus::out_of_bounds : MrStatus::invalid_state;
    for (uint32_t i = 0; i < n; ++i) {
        // Only the bytes the MR uses must be mapped: from first_offset in the first block, up
        // to its end in the last.
        const uint64_t from = i == 0 ? first_offset : 0;
        const uint64_t end = std::min<uint64_t>(block_size, first_offset + len - uint64_t(i) * block_size);
        const std::optional<Iova> iova = iova_of(reinterpret_cast<const void*>(blocks[i] + from), end - from);
        if (!iova) return MrStatus::out_of_bounds;   // memory the device cannot reach
        to[i] = {blocks[i], Iova(iova->value - from)};
    }
    const uint64_t base = has(access, Access::zero_based) ? 0 : va;
    return table_.bind_blocks(key, key_consumer(new_key), MrEntry{base, len, {}, access}, block_size, first_offset, n);
}

MrStatus ProtectionDomain::bind_window(uint32_t mr_key, uint32_t window_key, uint32_t new_key, uint64_t addr,
                                       uint64_t len, Access access, uint32_t owner_qpn) {
    if (key_index(new_key) != key_index(window_key)) return MrStatus::bad_key;
    std::lock_guard lock(mu_);
    return table_.bind_window(mr_key, window_key, key_consumer(new_key), addr, len, access, owner_qpn);
}

MrStatus ProtectionDomain::invalidate(uint32_t key, uint32_t qpn) {
    std::lock_guard lock(mu_);
    return table_.invalidate(key, qpn);
}

size_t ProtectionDomain::user_mappings() const {
    std::lock_guard lock(mu_);
    return user_.size();
}

}  // namespace vfab::dma
