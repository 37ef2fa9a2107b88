// What the split (§2.7) and packed (§2.8) virtqueues have in common: the buffer type, the ring
// memory handed to a queue, the negotiated ring features and `concept Virtqueue`, so that the
// virtio-net driver is written once as a template over the ring format.
//
// The driver's use of a queue, for either format:
//
//   auto layout = SplitQueue::layout(256);             // or PackedQueue::layout(256)
//   auto arena = dma::DmaArena::create(iommu, layout.total_bytes());
//   auto q = SplitQueue::create(256, QueueMemory::carve(arena->data(), arena->iova(), layout), features);
//   // the transport writes q->memory().desc_iova / driver_iova / device_iova to the device
//   Buffer bufs[2] = {{hdr_iova, 12, false}, {frame_iova, len, false}};
//   q->add(bufs, token);  ...  q->publish();
//   if (q->needs_notify()) transport.notify(queue_index);
//   uint32_t token, len;
//   while (q->poll_used(token, len)) complete(token, len);
//
// A queue is owned by one thread at a time; nothing on its fast path allocates, throws or
// makes a system call.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include <unistd.h>

#include "vfab/drivers/virtio/virtio_spec.hpp"
#include "vfab/mmio.hpp"
#include "vfab/iova.hpp"
#include "vfab/result.hpp"

namespace vfab::virtio {

// One element of a buffer (§2.7.13.1, §2.8.21.1): `len` bytes at `iova`, device-readable or
// device-writable. In a chain, every device-writable element comes after every device-readable
// one (§2.7.4.2): add() does not check this. An aggregate without default values, so that the
// driver's arrays of them cost nothing until filled: brace-initialise it ({} is all zero).
struct Buffer {
    uint64_t iova;
    uint32_t len;
    bool device_writes;
};

// The features that change how a ring is driven, from the negotiated feature bits.
struct RingFeatures {
    bool event_idx = false;   // VIRTIO_F_EVENT_IDX: used_event/avail_event, off_wrap events
    bool in_order = false;    // VIRTIO_F_IN_ORDER: buffers are used in the order they were added
    // EVENT_IDX and IN_ORDER as found in the `negotiated` feature bits.
    static constexpr RingFeatures from(uint64_t negotiated) {
        return {has_feature(negotiated, feature::EVENT_IDX), has_feature(negotiated, feature::IN_ORDER)};
    }
};

// What take_used_run() returns: the oldest `count` outstanding buffers are used, the last of
// them with `last_len` bytes written, the ones before it completely (§2.7.9, §2.8.8 IN_ORDER
// batches). {0, 0}: none.
struct UsedRun {
    uint32_t count;
    uint32_t last_len;
};

// Size and minimum alignment of one of a queue's three parts (§2.6: Descriptor Area, Driver
// Area, Device Area).
struct RingArea {
    size_t bytes = 0;
    size_t align = 0;
};

struct RingLayout {
    static constexpr size_t kCacheLine = 64;
    RingArea desc;
    RingArea driver;
    RingArea device;

    // For one allocation holding all three: each part starts on its own cache line, so the
    // parts the driver writes and the parts the device writes never share one. The block
    // itself must be aligned to kCacheLine (DMA memory is page-aligned).
    static constexpr size_t align_up(size_t v, size_t a) { return (v + a - 1) & ~(a - 1); }
    // Offset of the Descriptor Area in the block: 0.
    constexpr size_t desc_offset() const { return 0; }
    // Offset of the Driver Area: after the descriptors, on the next cache line.
    constexpr size_t driver_offset() const { return align_up(desc.bytes, kCacheLine); }
    // Offset of the Device Area: after the Driver Area, on the next cache line.
    constexpr size_t device_offset() const { return align_up(driver_offset() + driver.bytes, kCacheLine); }
    // Bytes to allocate for the block (a whole number of cache lines): what carve() divides.
    constexpr size_t total_bytes() const { return align_up(device_offset() + device.bytes, kCacheLine); }
};

// Where a queue's three parts are: the driver's view (pointers) and the device's (IOVAs).
struct QueueMemory {
    void* desc = nullptr;
    void* driver = nullptr;
    void* device = nullptr;
    Iova desc_iova;
    Iova driver_iova;
    Iova device_iova;

    // The three parts carved from one block of layout.total_bytes() at `base` (IOVA `iova`).
    static QueueMemory carve(void* base, Iova iova, const RingLayout& layout) {
        auto* p = static_cast<uint8_t*>(base);
        return {p + layout.desc_offset(), p + layout.driver_offset(), p + layout.device_offset(),
                iova + layout.desc_offset(), iova + layout.driver_offset(), iova + layout.device_offset()};
    }
};

// Where a queue's available-buffer notifications go (§2.9): the PCI notification register
// (§4.1.4.4: write the queue index) or, over vhost-user, the vring's kick eventfd.
struct Doorbell {
    volatile uint16_t* mmio = nullptr;
    int kick_fd = -1;
    uint16_t queue = 0;
    // Notifies the device: a 16-bit MMIO store of `queue` to `mmio` when set, else an 8-byte
    // write(2) to `kick_fd` (an error is ignored). Fast path, no allocation: call it after
    // publish() when needs_notify() is true.
    void ring() const noexcept {
        if (mmio) {
            mmio::write<uint16_t>(mmio, 0, queue);
        } else {
            uint64_t one = 1;
            (void)!::write(kick_fd, &one, sizeof one);
        }
    }
};

namespace detail {

// Ring fields shared with the device: single loads and stores the compiler may neither split,
// merge nor drop (plain MOVs on x86). Ordering comes from the mmio barriers around them.
inline uint16_t load16(const void* p) { return __atomic_load_n(static_cast<const uint16_t*>(p), __ATOMIC_RELAXED); }
inline uint32_t load32(const void* p) { return __atomic_load_n(static_cast<const uint32_t*>(p), __ATOMIC_RELAXED); }
inline void store16(void* p, uint16_t v) { __atomic_store_n(static_cast<uint16_t*>(p), v, __ATOMIC_RELAXED); }
inline void store32(void* p, uint32_t v) { __atomic_store_n(static_cast<uint32_t*>(p), v, __ATOMIC_RELAXED); }
// A store that the device sees after every earlier store (a packed descriptor's flags after its
// body): the ordering of dma_wmb() for this one store, without a barrier for the compiler on
// everything else — values the driver holds in registers stay there (x86: a plain MOV).
inline void store16_after(void* p, uint16_t v) { __atomic_store_n(static_cast<uint16_t*>(p), v, __ATOMIC_RELEASE); }

inline bool aligned(const void* p, size_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }
inline bool aligned(Iova v, size_t a) { return (v.value & (a - 1)) == 0; }

// Checks that `mem` satisfies `layout` (§2.7, §2.8.10.1: each part aligned, in the device's view
// and ours).
inline Result<void> check_memory(const QueueMemory& mem, const RingLayout& layout, const char* what) {
    const struct { const void* p; Iova iova; const RingArea& area; const char* name; } parts[] = {
        {mem.desc, mem.desc_iova, layout.desc, "descriptor area"},
        {mem.driver, mem.driver_iova, layout.driver, "driver area"},
        {mem.device, mem.device_iova, layout.device, "device area"},
    };
    for (const auto& part : parts) {
        if (!part.p)
            return Error{EINVAL, str_cat(what, ": no memory for the ", part.name)};
        if (!aligned(part.p, part.area.align) || !aligned(part.iova, part.area.align))
            return Error{EINVAL, str_cat(what, ": the ", part.name, " must be aligned to ", part.area.align,
                                         " bytes (use QueueMemory::carve on DMA memory)")};
    }
    return {};
}

}  // namespace detail

// The interface the virtio-net driver is written against; SplitQueue and PackedQueue satisfy it.
template <class Q>
concept Virtqueue = requires(Q& q, const Q& cq, std::span<const Buffer> bufs, typename Q::AddCursor& cursor,
                             uint32_t& token, uint32_t& len, void (*on_token)(uint32_t)) {
    // Setup: the memory a queue of `size` entries needs, and the queue over that memory.
    { Q::layout(uint32_t{}) } -> std::same_as<RingLayout>;
    { Q::create(uint32_t{}, QueueMemory{}, RingFeatures{}) } -> std::same_as<Result<Q>>;
    // Fast path.
    { q.add(bufs, uint32_t{}) } noexcept -> std::same_as<bool>;
    // A post's adds with the positions in the caller's registers (virtio_net's post loop).
    { q.begin_adds() } noexcept -> std::same_as<typename Q::AddCursor>;
    { q.add(cursor, bufs, uint32_t{}) } noexcept;
    { q.end_adds(cursor) } noexcept;
    { q.publish() } noexcept;
    { q.needs_notify() } noexcept -> std::same_as<bool>;
    { q.notify_data() } noexcept -> std::same_as<uint16_t>;
    { q.poll_used(token, len) } noexcept -> std::same_as<bool>;
    { q.take_used_run() } noexcept -> std::same_as<UsedRun>;
    { q.take_used_runs(1u, [](UsedRun) {}) } noexcept -> std::same_as<uint32_t>;
    { q.take_all_used() } noexcept -> std::same_as<uint32_t>;
    { cq.has_used() } noexcept -> std::same_as<bool>;
    { q.disable_interrupts() } noexcept;
    { q.enable_interrupts() } noexcept -> std::same_as<bool>;
    { cq.free_count() } noexcept -> std::same_as<uint32_t>;
    { cq.outstanding() } noexcept -> std::same_as<uint32_t>;
    { cq.size() } noexcept -> std::same_as<uint32_t>;
    { cq.broken() } noexcept -> std::same_as<bool>;
    // Control path.
    { q.drain(on_token) } -> std::same_as<uint32_t>;
    { q.reset() } noexcept;
    { cq.memory() } -> std::same_as<const QueueMemory&>;
    { cq.features() } -> std::same_as<RingFeatures>;
};

}  // namespace vfab::virtio
