// A protection domain: the memory a device may touch, and the keys that name it.
//
//   auto pd = ProtectionDomain::create(device->iommu_shared());
//   DmaArena* arena = *(*pd)->create_arena(64 << 20);            // one IOMMU mapping
//   auto mr = (*pd)->register_memory(arena->data(), 4096, Access::local_write);   // no syscall
//   auto big = (*pd)->register_memory(malloced, 1 << 30, Access::local_write);    // pinned + mapped
//   Translation t = (*pd)->translate(mr->lkey, addr, len, Access::local_write);  // O(1)
//
// Memory inside one of the domain's arenas registers with a table entry only. Any other user
// memory (malloc'ed, anywhere) is pinned and mapped through the IOMMU, page-aligned, at
// IOVA = VA when the IOMMU allows it; registrations of the same pages share one mapping
// (reference-counted). Keys are index << 8 | an 8-bit consumer key (MrTable).
//
// Control calls (create_arena, register_memory, deregister) are thread-safe. translate() is
// the fast path: lock-free, and must not race the deregistration of the same key — a consumer
// that translates on a thread of its own (an RDMA port's progress thread) names the lock it
// translates under with set_writer_lock(), and the calls that change keys take it too.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "vfab/dma/dma_arena.hpp"
#include "vfab/dma/iova_allocator.hpp"
#include "vfab/dma/mr_table.hpp"
#include "vfab/vfio/address_space.hpp"

namespace vfab::vfio {
class Device;
}  // namespace vfab::vfio

namespace vfab::dma {

struct MemoryRegion {
    void* addr = nullptr;
    uint64_t length = 0;
    uint32_t lkey = 0;
    uint32_t rkey = 0;
    Iova iova;                 // of addr
    Access access = Access::none;
    bool pinned = false;       // user memory mapped for this registration (not in an arena)
    bool device_memory = false;   // another device's memory (register_device_memory)
};

struct PdOptions {
    uint32_t max_mrs = 1u << 16;   // size of the key table (memory windows included)
};

class ProtectionDomain {
public:
    // `space`: a device's iommu_shared(), or any other address space (vfio/address_space.hpp).
    static Result<std::unique_ptr<ProtectionDomain>> create(std::shared_ptr<vfio::AddressSpace> space,
                                                            const PdOptions& opts = {});
    ~ProtectionDomain();
    ProtectionDomain(const ProtectionDomain&) = delete;
    ProtectionDomain& operator=(const ProtectionDomain&) = delete;

    // DMA memory mapped into the domain's IOMMU context with one mapping; it lives as long as
    // the domain.
    Result<DmaArena*> create_arena(size_t len, const DmaMemoryOptions& opts = {});

    // Registers the `len` bytes at `addr` with `access`. Inside one of the domain's arenas: a
    // table entry, no system call. Elsewhere its pages are pinned and mapped, shared with other
    // registrations of the same pages.
    // EINVAL for a zero length, a wrapping range or rights MrTable::add refuses, ENOSPC when
    // the key table is full, and the address space's mapping errors (ENOMEM: RLIMIT_MEMLOCK).
    Result<MemoryRegion> register_memory(void* addr, uint64_t len, Access access);
    // Memory of another device — `len` bytes from `offset` of region (BAR) `bar` of the VFIO
    // device `dev`, as a GPU's memory would be — for peer-to-peer DMA: this domain's device
    // reads and writes it directly, and the CPU through its mmap (MemoryRegion::addr), so the
    // RDMA transport uses it as any MR (docs/rdma-p2p.md; libfabric's FI_MR_P2P). The region
    // must be mmapped whole; `dev` stays open until the registration goes (the IOMMU holds no
    // reference on device memory). The legacy type1 container maps it; iommufd pins only
    // host memory (device memory needs a dma-buf: register_dmabuf) and no-IOMMU mode has no
    // bus address for it: both are ENOTSUP with what to do.
    Result<MemoryRegion> register_device_memory(std::shared_ptr<vfio::Device> dev, uint32_t bar, uint64_t offset,
                                                uint64_t len, Access access);
    // A dma-buf (ibv_reg_dmabuf_mr): `len` bytes from `offset` of the buffer `fd` exports.
    // It needs iommufd's IOMMU_IOAS_MAP_FILE, which this build's kernel headers lack: ENOTSUP
    // naming the kernel feature.
    Result<MemoryRegion> register_dmabuf(int fd, uint64_t offset, uint64_t len, Access access);
    // Whether register_device_memory works with this domain's IOMMU backend.
    bool maps_device_memory() const noexcept;
    // Invalidates the keys (a later use reads stale_key or bad_key) and, for user memory,
    // unmaps it once no other registration shares the mapping: the device's DMA to it faults.
    Result<void> deregister(const MemoryRegion& mr);
    // New rights for a registration, its keys and mapping unchanged (MrTable::set_access); on
    // success mr.access holds them. EINVAL when the rights break the table's rules or `mr` is
    // not a live registration of this domain.
    Result<void> set_access(MemoryRegion& mr, Access access);

    // MrTable::translate() for a local access (windows refuse it): O(1), no lock, no
    // allocation. Must not race deregister() or dealloc() of the same key.
    Translation translate(uint32_t key, uint64_t addr, uint64_t len, Access required) const noexcept {
        return table_.translate(key, addr, len, required);
    }

    // The key table, for fast-path lookups (translate_span, window_type, max_blocks). Not
    // locked: change registrations through the domain, which keeps its mappings in step.
    MrTable& table() { return table_; }

    // A lock that the calls changing keys from outside the fast path (register_*, deregister,
    // set_access, alloc_mr, alloc_mw, dealloc) take before the domain's own, so that they wait
    // for a thread translating and copying under it: after deregister() returns, nothing
    // touches the memory. nullptr: none. An RDMA port sets its lock while its progress thread
    // runs. The memory-management verbs below do not take it (the transport calls them under it).
    void set_writer_lock(std::mutex* m) noexcept { writer_lock_.store(m, std::memory_order_release); }

    // The memory-management verbs below are serialised with registration (the RDMA transport's
    // work requests and a peer's SEND_WITH_INV come here from the queue pair's thread).
    // An MR with no memory, invalid until fast_register() (ibv_alloc_mr), of at most `max_len`
    // bytes in up to `max_blocks` scattered blocks (max_num_sg); errors as MrTable::alloc_unbound.
    Result<uint32_t> alloc_mr(uint64_t max_len, uint32_t max_blocks = MrTable::kDefaultMaxBlocks);
    // A memory window (ibv_alloc_mw), invalid until bind_window(); its key. EINVAL for an
    // unknown type, ENOSPC when the key table is full.
    Result<uint32_t> alloc_mw(WindowType type);
    // Frees what alloc_mr / alloc_mw gave (register_memory's regions: deregister()).
    Result<void> dealloc(uint32_t key);
    // Binds the unbound MR `key` to the `len` bytes at `host` (which must lie in memory this
    // domain maps: an arena or registered memory), answering to addresses from `va` (0 and
    // ZERO_BASED: offsets), under key `new_key` (the same index, a new consumer key).
    MrStatus fast_register(uint32_t key, uint32_t new_key, const void* host, uint64_t len, uint64_t va, Access access);
    // The same for `n` scattered blocks of `block_size` bytes at the CPU addresses `blocks`,
    // the MR starting `first_offset` into the first (each block must lie in memory this domain
    // maps; at most the MR's max_blocks).
    MrStatus fast_register_blocks(uint32_t key, uint32_t new_key, const uint64_t* blocks, uint32_t n,
                                  uint64_t block_size, uint64_t first_offset, uint64_t len, uint64_t va, Access access);
    // Binds window `window_key` to the `len` bytes at `addr` of MR `mr_key`, with `access`, as
    // MrTable::bind_window; `new_key` is the window's whole new key (bad_key unless it has
    // window_key's index). A type 2B window is tied to queue pair `owner_qpn`.
    MrStatus bind_window(uint32_t mr_key, uint32_t window_key, uint32_t new_key, uint64_t addr, uint64_t len,
                         Access access, uint32_t owner_qpn);
    // LOCAL_INV, or a peer's SEND_WITH_INV arriving on queue pair `qpn` (MrTable::invalidate):
    // fast-register MRs and type 2B windows become invalid; regions, type 1 windows and windows
    // tied to another queue pair give invalid_state.
    MrStatus invalidate(uint32_t key, uint32_t qpn);
    // The IOVA of [host, host + len) when this domain maps all of it.
    std::optional<Iova> iova_of(const void* host, uint64_t len) const;
    // The address space (IOMMU context or vhost-user memory table) the domain maps into; the
    // domain holds it.
    vfio::AddressSpace& address_space() const { return *ctx_; }
    // IOMMU mappings made for user memory (not arenas), shared ones counted once.
    size_t user_mappings() const;

private:
    struct PageRange {
        uint64_t start;
        uint64_t len;
        auto operator<=>(const PageRange&) const = default;
    };
    struct UserMapping {
        Iova iova;
        uint32_t refs = 0;
    };
    ProtectionDomain(std::shared_ptr<vfio::AddressSpace> ctx, std::optional<IovaAllocator> iovas, MrTable table);
    Result<Iova> map_user(const PageRange& pages);
    void unmap_user(const PageRange& pages);
    const DmaArena* arena_holding(const void* addr, uint64_t len) const;

    // set_writer_lock()'s lock, held (when set) for the life of a control call.
    class WriterGuard {
    public:
        explicit WriterGuard(const ProtectionDomain& pd) : m_(pd.writer_lock_.load(std::memory_order_acquire)) {
            if (m_) m_->lock();
        }
        ~WriterGuard() {
            if (m_) m_->unlock();
        }
        WriterGuard(const WriterGuard&) = delete;
        WriterGuard& operator=(const WriterGuard&) = delete;

    private:
        std::mutex* m_;
    };
    std::atomic<std::mutex*> writer_lock_{nullptr};
    mutable std::mutex mu_;
    std::shared_ptr<vfio::AddressSpace> ctx_;
    std::optional<IovaAllocator> iovas_;          // none in no-IOMMU mode: IOVA = physical
    std::vector<std::unique_ptr<DmaArena>> arenas_;
    std::map<PageRange, UserMapping> user_;
    std::vector<std::optional<PageRange>> mr_pages_;   // by key index: the user mapping it uses
    std::vector<std::shared_ptr<vfio::Device>> mr_devices_;   // by key index: the device whose memory it is
    MrTable table_;
    Result<MemoryRegion> register_locked(void* addr, uint64_t len, Access access);
};

}  // namespace vfab::dma
