// The driver side of a split virtqueue (VIRTIO 1.2 §2.7): a descriptor table, an available
// ring the driver writes and a used ring the device writes. Fast path inline, no allocation.
//
// Buffers are added as chains of descriptors (from a free list; with VIRTIO_F_IN_ORDER in table
// order, §2.7.5), made visible in batches by publish() (one store of avail->idx), and returned
// by poll_used() with the caller's 32-bit token and the number of bytes the device wrote.
#pragma once

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>
#include <span>

#include "vfab/drivers/virtio/virtqueue.hpp"
#include "vfab/mmio.hpp"

namespace vfab::virtio {

class SplitQueue final {
public:
    // Sizes and alignments of the three parts for a queue of `size` entries (§2.7, table).
    static constexpr RingLayout layout(uint32_t size) {
        return {{16 * size_t(size), kDescAlign}, {avail::bytes(size), kSplitAvailAlign},
                {used::bytes(size), kSplitUsedAlign}};
    }

    // A queue of `size` entries (a power of 2 up to 32768, as the device allows) over `mem`,
    // driven with the negotiated `features`. Clears the memory (§2.7.10: used flags start at 0).
    static Result<SplitQueue> create(uint32_t size, const QueueMemory& mem, RingFeatures features);

    // Chains `bufs` into descriptors and queues the chain; the device sees it after publish().
    // false when the queue lacks bufs.size() free descriptors (or bufs is empty).
    [[gnu::always_inline]] bool add(std::span<const Buffer> bufs, uint32_t token) noexcept;
    // add() for a batch, the queue's positions in the caller's registers (a descriptor's or
    // ring entry's store may alias any member, so add() after add() reloads and stores them all
    // again): begin_adds(), then add(cursor, …) per chain — bufs.size() from 1 to cursor.free,
    // checked by the caller — then end_adds(); nothing else on the queue in between.
    struct AddCursor;
    // The queue's positions, for add(cursor, …).
    AddCursor begin_adds() noexcept;
    // add() without the room check, on the cursor's positions.
    [[gnu::always_inline]] void add(AddCursor& c, std::span<const Buffer> bufs, uint32_t token) noexcept;
    // The cursor's positions back into the queue.
    void end_adds(const AddCursor& c) noexcept;
    // Makes every chain added so far visible to the device: one barrier, one store (§2.7.13.3).
    void publish() noexcept;
    // After publish(): must the device be notified (§2.7.10)? Call it after every publish() (it
    // compares with what it saw last; fewer than 65536 chains in between).
    bool needs_notify() noexcept;
    // For VIRTIO_F_NOTIFICATION_DATA (§2.9): next_off and next_wrap, i.e. the available index.
    uint16_t notify_data() const noexcept { return published_; }

    // The next used buffer: its token and the bytes the device wrote into it (never more than
    // its device-writable length). With IN_ORDER one used entry may stand for a batch (§2.7.9):
    // each buffer of it is returned in turn, the ones before the last as completely used.
    [[gnu::always_inline]] bool poll_used(uint32_t& token, uint32_t& len) noexcept;
    // With IN_ORDER only: every buffer the next used element returns, at once (§2.7.9) — the
    // element is read once and the buffers are released together, without a token each (the
    // caller knows them: its oldest `count`). Finishes a batch poll_used() began. {0, 0} when
    // nothing is used or broken().
    [[gnu::always_inline]] UsedRun take_used_run() noexcept;
    // With IN_ORDER only: take_used_run() while entries are used and fewer than `limit`
    // buffers were taken, on_run(UsedRun) for each, oldest first; the buffers taken. used->idx
    // is read once, and the queue's position stays in registers across the entries (a back-end
    // writes one per buffer when their lengths differ, as for receives). An id that names no
    // published chain breaks the queue: the runs before it stand, nothing after.
    template <class F>
    [[gnu::always_inline]] uint32_t take_used_runs(uint32_t limit, F&& on_run) noexcept;
    // With IN_ORDER only: every buffer used so far, at once, its length not read — for buffers
    // the device only reads (a send's): used->idx moves by every buffer of a batch (§2.7.9), and
    // the driver's own available ring names the last one, so no used entry is read. The
    // buffers taken (a batch poll_used() began is finished first); an idx past the published
    // buffers breaks the queue (nothing more taken).
    [[gnu::always_inline]] uint32_t take_all_used() noexcept;
    // Whether poll_used() would return a buffer now (one load of used->idx; false once broken()).
    [[gnu::always_inline]] bool has_used() const noexcept;

    // Used buffer notifications (§2.7.7): a hint to the device, not synchronised with it.
    void disable_interrupts() noexcept;
    // Re-enables them; false when used buffers arrived meanwhile: poll again before sleeping.
    // With EVENT_IDX it asks for one notification (the next used entry): call it after each.
    bool enable_interrupts() noexcept;

    // Entries (descriptors) in the queue, as given to create().
    uint32_t size() const noexcept { return size_; }
    // Descriptors free for add(): a chain of n buffers takes n.
    uint32_t free_count() const noexcept { return free_; }   // free descriptors
    // Buffers (chains) added, published or not, that poll_used() has not returned yet.
    uint32_t outstanding() const noexcept { return outstanding_; }   // buffers added, not used
    // The device returned an id that names no outstanding buffer: poll_used() stops; reset
    // the device, then drain().
    bool broken() const noexcept { return broken_; }
    // The three areas given to create(): the transport gives the device their IOVAs.
    const QueueMemory& memory() const { return mem_; }
    // The ring features given to create().
    RingFeatures features() const { return features_; }

    // Flushes: calls on_token(token) for every buffer added and not yet returned by poll_used()
    // (oldest first with IN_ORDER, else in descriptor order), then reset(). Only once the
    // device no longer uses the queue (after a device or queue reset).
    template <class F>
    uint32_t drain(F&& on_token);
    // Back to the state create() left: memory cleared, nothing outstanding.
    void reset() noexcept;

private:
    struct Slot {            // per chain, indexed by its head descriptor
        uint32_t token = 0;
        uint32_t writable = 0;   // device-writable bytes in the chain
        uint16_t ndesc = 0;      // 0: not outstanding
        uint16_t last = 0;       // last descriptor of the chain
    };

    SplitQueue(uint32_t size, const QueueMemory& mem, RingFeatures features);
    uint16_t* avail_field(size_t off) const { return reinterpret_cast<uint16_t*>(static_cast<uint8_t*>(mem_.driver) + off); }
    uint16_t* used_field(size_t off) const { return reinterpret_cast<uint16_t*>(static_cast<uint8_t*>(mem_.device) + off); }
    uint16_t used_idx() const noexcept { return detail::load16(used_field(used::kIdxOffset)); }
    bool take_batch(uint32_t& token, uint32_t& len) noexcept;
    [[gnu::cold]] UsedRun finish_batch() noexcept;
    [[gnu::always_inline]] UsedRun release_run(uint32_t last, uint32_t written, uint32_t used) noexcept;
    bool batch_to(uint32_t from, uint32_t in_flight, uint32_t last, uint32_t& count, uint32_t& descs) const noexcept;
    void release(uint16_t head, Slot& s) noexcept;

    QueueMemory mem_;
    RingFeatures features_;
    uint32_t size_ = 0;
    uint16_t mask_ = 0;
    SplitDesc* desc_ = nullptr;
    uint16_t* avail_ring_ = nullptr;
    uint16_t* used_event_ = nullptr;    // in the Driver Area, after the available ring
    const UsedElem* used_ring_ = nullptr;
    const uint16_t* avail_event_ = nullptr;   // in the Device Area, after the used ring
    std::unique_ptr<Slot[]> slots_;
    std::unique_ptr<uint16_t[]> next_free_;   // free list links, never read back from the ring

    uint32_t free_ = 0;
    uint32_t outstanding_ = 0;
    uint16_t free_head_ = 0;     // without IN_ORDER: first free descriptor
    uint16_t next_desc_ = 0;     // with IN_ORDER: next descriptor to hand out
    uint16_t oldest_ = 0;        // with IN_ORDER: head of the oldest outstanding chain
    uint16_t avail_idx_ = 0;     // available ring entries written (ahead of avail->idx)
    uint16_t published_ = 0;     // avail->idx as last stored
    uint16_t kicked_ = 0;        // avail->idx when needs_notify() last looked
    uint16_t last_used_ = 0;     // next used ring entry to read
    uint16_t batch_last_ = 0;    // IN_ORDER batch being returned: its last head and length
    uint32_t batch_len_ = 0;
    bool in_batch_ = false;
    bool broken_ = false;
};

// Only what add() changes (see PackedQueue::AddCursor).
struct SplitQueue::AddCursor {
    uint32_t free;   // descriptors left
    uint32_t chains = 0;
    uint16_t next;   // next_desc_ with IN_ORDER, else free_head_
    uint16_t avail_idx;
};

static_assert(Virtqueue<SplitQueue>);

// ---- setup -----------------------------------------------------------------------------------

inline SplitQueue::SplitQueue(uint32_t size, const QueueMemory& mem, RingFeatures features)
    : mem_(mem), features_(features), size_(size), mask_(uint16_t(size - 1)),
      desc_(static_cast<SplitDesc*>(mem.desc)), avail_ring_(avail_field(avail::kRingOffset)),
      used_event_(avail_field(avail::used_event_offset(size))),
      used_ring_(reinterpret_cast<const UsedElem*>(static_cast<uint8_t*>(mem.device) + used::kRingOffset)),
      avail_event_(used_field(used::avail_event_offset(size))),
      slots_(std::make_unique<Slot[]>(size)), next_free_(std::make_unique<uint16_t[]>(size)) {
    reset();
}

inline Result<SplitQueue> SplitQueue::create(uint32_t size, const QueueMemory& mem, RingFeatures features) {
    if (size == 0 || size > kSplitMaxSize || !std::has_single_bit(size))
        return Error{EINVAL, str_cat("split virtqueue: size ", size, " is not a power of 2 from 1 to 32768")};
    if (auto r = detail::check_memory(mem, layout(size), "split virtqueue"); !r) return r.take_error();
    return SplitQueue(size, mem, features);
}

inline void SplitQueue::reset() noexcept {
    const RingLayout l = layout(size_);
    std::memset(mem_.desc, 0, l.desc.bytes);
    std::memset(mem_.driver, 0, l.driver.bytes);
    std::memset(mem_.device, 0, l.device.bytes);
    for (uint32_t i = 0; i < size_; ++i) {
        slots_[i] = Slot{};
        next_free_[i] = uint16_t((i + 1) & mask_);
    }
    free_ = size_;
    outstanding_ = 0;
    free_head_ = next_desc_ = oldest_ = 0;
    avail_idx_ = published_ = kicked_ = last_used_ = 0;
    batch_last_ = 0;
    batch_len_ = 0;
    in_batch_ = broken_ = false;
}

template <class F>
inline uint32_t SplitQueue::drain(F&& on_token) {
    uint32_t n = 0;
    if (features_.in_order) {
        // Outstanding chains lie in table order from the oldest one.
        for (uint16_t h = oldest_; n < outstanding_ && slots_[h].ndesc; h = uint16_t((h + slots_[h].ndesc) & mask_), ++n)
            on_token(slots_[h].token);
    } else {
        for (uint32_t h = 0; h < size_; ++h)
            if (slots_[h].ndesc) {
                on_token(slots_[h].token);
                ++n;
            }
    }
    reset();
    return n;
}

// ---- fast path -------------------------------------------------------------------------------

inline bool SplitQueue::add(std::span<const Buffer> bufs, uint32_t token) noexcept {
    if (bufs.empty() || bufs.size() > free_) [[unlikely]]
        return false;
    AddCursor c = begin_adds();
    add(c, bufs, token);
    end_adds(c);
    return true;
}

inline SplitQueue::AddCursor SplitQueue::begin_adds() noexcept {
    return {free_, 0, features_.in_order ? next_desc_ : free_head_, avail_idx_};
}

inline void SplitQueue::end_adds(const AddCursor& c) noexcept {
    (features_.in_order ? next_desc_ : free_head_) = c.next;
    free_ = c.free;
    outstanding_ += c.chains;
    avail_idx_ = c.avail_idx;
}

inline void SplitQueue::add(AddCursor& c, std::span<const Buffer> bufs, uint32_t token) noexcept {
    const auto n = uint32_t(bufs.size());
    const uint16_t head = c.next;
    uint16_t d = head, last = head;
    uint32_t writable = 0;
    for (uint32_t k = 0; k < n; ++k) {
        const Buffer& b = bufs[k];
        // §2.7.5.2: with IN_ORDER, `next` is the following table entry, wrapping to 0.
        const uint16_t next = features_.in_order ? uint16_t((d + 1) & mask_) : next_free_[d];
        const bool more = k + 1 < n;
        desc_[d] = {b.iova, b.len,
                    uint16_t((b.device_writes ? desc_flags::WRITE : 0) | (more ? desc_flags::NEXT : 0)),
                    more ? next : uint16_t(0)};
        writable += b.device_writes ? b.len : 0;
        last = d;
        d = next;
    }
    c.next = d;
    c.free -= n;
    ++c.chains;
    slots_[head] = {token, writable, uint16_t(n), last};
    // §2.7.13.2: the head goes into the next available entry; avail->idx waits for publish().
    avail_ring_[c.avail_idx & mask_] = head;
    ++c.avail_idx;
}

inline void SplitQueue::publish() noexcept {
    if (avail_idx_ == published_) return;
    mmio::dma_wmb();   // §2.7.13.3.1: descriptors and ring entries before idx
    detail::store16(avail_field(avail::kIdxOffset), avail_idx_);
    published_ = avail_idx_;
}

inline bool SplitQueue::needs_notify() noexcept {
    const uint16_t old_idx = kicked_, new_idx = published_;
    kicked_ = new_idx;
    if (old_idx == new_idx) return false;
    // §2.7.13.4.1: idx must be visible before flags/avail_event are read, or the device may
    // have gone to sleep having seen neither. A store-load order: a full barrier even on x86.
    mmio::io_mb();
    if (features_.event_idx) return need_event(detail::load16(avail_event_), new_idx, old_idx);
    return !(detail::load16(used_field(used::kFlagsOffset)) & used::F_NO_NOTIFY);
}

inline void SplitQueue::release(uint16_t head, Slot& s) noexcept {
    if (!features_.in_order) {   // the chain is still linked in next_free_: splice it in front
        next_free_[s.last] = free_head_;
        free_head_ = head;
    }
    free_ += s.ndesc;
    s.ndesc = 0;
    --outstanding_;
    ++last_used_;
}

inline bool SplitQueue::poll_used(uint32_t& token, uint32_t& len) noexcept {
    if (in_batch_) return take_batch(token, len);
    const uint16_t idx = used_idx();
    if (broken_ || idx == last_used_) return false;
    mmio::dma_rmb();   // §2.7.8.1: the device writes the entry before idx
    const UsedElem* e = &used_ring_[last_used_ & mask_];
    const uint32_t id = detail::load32(&e->id), written = detail::load32(&e->len);
    if (features_.in_order) {   // §2.7.9: `id` is the head of the last buffer of a batch
        uint32_t count, descs;
        if (!batch_to(oldest_, uint16_t(published_ - last_used_), id, count, descs) ||
            count > uint16_t(idx - last_used_)) [[unlikely]] {
            broken_ = true;
            return false;
        }
        batch_last_ = uint16_t(id);
        batch_len_ = written;
        in_batch_ = true;
        return take_batch(token, len);
    }
    if (id >= size_ || !slots_[id].ndesc) [[unlikely]] {
        broken_ = true;
        return false;
    }
    Slot& s = slots_[id];
    token = s.token;
    len = std::min(written, s.writable);
    release(uint16_t(id), s);
    return true;
}

// Returns the oldest chain of an IN_ORDER batch; the buffers before its last one count as
// completely used (§2.7.9), so their length is all of their device-writable bytes.
inline bool SplitQueue::take_batch(uint32_t& token, uint32_t& len) noexcept {
    const uint16_t head = oldest_;
    Slot& s = slots_[head];
    if (last_used_ == published_ || !s.ndesc) [[unlikely]] {   // the id named no published chain
        in_batch_ = false;
        broken_ = true;
        return false;
    }
    const bool last = head == batch_last_;
    token = s.token;
    len = last ? std::min(batch_len_, s.writable) : s.writable;
    oldest_ = uint16_t((head + s.ndesc) & mask_);
    release(head, s);
    in_batch_ = !last;
    return true;
}

// IN_ORDER: the batch a used entry naming head `last` returns is the published chains from the
// oldest to `last`: how many, and their descriptors. Read only, so that a `last` naming none of
// them (false) changes nothing — the slots of chains already returned keep their lengths, so
// the walk decides. The caller also checks the count against how far idx moved (§2.7.9: by
// every buffer of the batch).
[[gnu::always_inline]] inline bool SplitQueue::batch_to(uint32_t from, uint32_t in_flight, uint32_t last,
                                                        uint32_t& count, uint32_t& descs) const noexcept {
    uint32_t head = from;
    count = descs = 0;
    for (;;) {
        if (count == in_flight) return false;
        const uint32_t n = slots_[head].ndesc;
        ++count;
        descs += n;
        if (head == last) return true;
        head = (head + n) & mask_;
    }
}

inline UsedRun SplitQueue::take_used_run() noexcept {
    if (in_batch_) [[unlikely]]
        return finish_batch();
    const uint16_t idx = used_idx();
    if (broken_ || idx == last_used_) return {0, 0};
    mmio::dma_rmb();   // §2.7.8.1: the device writes the entry before idx
    const UsedElem* e = &used_ring_[last_used_ & mask_];
    const uint32_t last = detail::load32(&e->id), written = detail::load32(&e->len);
    return release_run(last, written, uint16_t(idx - last_used_));
}

// The rest of a batch poll_used() began (checked against idx then), at once.
inline UsedRun SplitQueue::finish_batch() noexcept {
    in_batch_ = false;
    return release_run(batch_last_, batch_len_, ~0u);
}

// Releases the batch a used entry naming head `last`, of `written` bytes, returns: the chains
// from the oldest to it, no more than the `used` entries idx moved by (§2.7.9: by every buffer
// of a batch). {0, 0}, and the queue broken, when `last` names none of them or too many.
inline UsedRun SplitQueue::release_run(uint32_t last, uint32_t written, uint32_t used) noexcept {
    uint32_t count, descs;
    if (!batch_to(oldest_, uint16_t(published_ - last_used_), last, count, descs) || count > used) [[unlikely]] {
        broken_ = true;
        return {0, 0};
    }
    oldest_ = uint16_t((last + slots_[last].ndesc) & mask_);
    free_ += descs;
    outstanding_ -= count;
    last_used_ = uint16_t(last_used_ + count);
    return {count, std::min(written, slots_[last].writable)};
}

template <class F>
inline uint32_t SplitQueue::take_used_runs(uint32_t limit, F&& on_run) noexcept {
    uint32_t taken = 0;
    if (in_batch_) [[unlikely]] {
        const UsedRun r = finish_batch();
        if (r.count == 0) return 0;
        on_run(r);
        taken = r.count;
    }
    if (broken_ || taken >= limit) return taken;
    // In registers: the next used entry and the oldest chain. idx moves by every buffer of a
    // batch (§2.7.9): the entries up to it, and no more than `limit`, are taken.
    const uint16_t from = last_used_, idx = used_idx();
    if (idx == from) return taken;
    mmio::dma_rmb();   // §2.7.8.1: the device writes the entries before idx
    const uint32_t stop = std::min<uint32_t>(uint16_t(idx - from), limit - taken);
    uint16_t last_used = from;
    uint32_t oldest = oldest_, descs = 0;
    do {
        const UsedElem* e = &used_ring_[last_used & mask_];
        const uint32_t last = detail::load32(&e->id), written = detail::load32(&e->len);
        uint32_t count, n;
        if (!batch_to(oldest, uint16_t(published_ - last_used), last, count, n) ||
            count > uint16_t(idx - last_used)) [[unlikely]] {
            broken_ = true;
            break;
        }
        oldest = (last + slots_[last].ndesc) & mask_;
        last_used = uint16_t(last_used + count);
        descs += n;
        on_run(UsedRun{count, std::min(written, slots_[last].writable)});
    } while (uint16_t(last_used - from) < stop);
    free_ += descs;
    oldest_ = uint16_t(oldest);
    last_used_ = last_used;
    outstanding_ -= uint16_t(last_used - from);
    return taken + uint16_t(last_used - from);
}

inline uint32_t SplitQueue::take_all_used() noexcept {
    uint32_t taken = 0;
    if (in_batch_) [[unlikely]]
        taken = finish_batch().count;
    const uint16_t idx = used_idx();
    const auto count = uint16_t(idx - last_used_);
    if (broken_ || count == 0) return taken;
    mmio::dma_rmb();   // idx before the descriptors are reused
    // The chains are in table order from oldest_: the last one's head is in the available
    // entry for the last buffer (driver memory, masked all the same).
    const uint16_t last = avail_ring_[uint16_t(idx - 1) & mask_] & mask_;
    const uint16_t ndesc = slots_[last].ndesc;
    if (count > uint16_t(published_ - last_used_) || ndesc == 0) [[unlikely]] {
        broken_ = true;
        return taken;
    }
    const auto oldest = uint16_t((last + ndesc) & mask_);
    const uint32_t released = ((oldest - oldest_ - 1u) & mask_) + 1u;   // 1 to size descriptors
    if (released > size_ - free_) [[unlikely]] {   // more than are out: the ring was rewritten
        broken_ = true;
        return taken;
    }
    free_ += released;
    oldest_ = oldest;
    last_used_ = idx;
    outstanding_ -= count;
    return taken + count;
}

inline bool SplitQueue::has_used() const noexcept {
    return in_batch_ || (!broken_ && used_idx() != last_used_);
}

inline void SplitQueue::disable_interrupts() noexcept {
    // §2.7.7.1: with EVENT_IDX flags stay 0; used_event just behind the driver's position
    // means "not before the used index has gone once round" (a spurious one is allowed).
    if (features_.event_idx)
        detail::store16(used_event_, uint16_t(last_used_ - 1));
    else
        detail::store16(avail_field(avail::kFlagsOffset), avail::F_NO_INTERRUPT);
}

inline bool SplitQueue::enable_interrupts() noexcept {
    if (features_.event_idx)
        detail::store16(used_event_, last_used_);   // notify on the next used entry
    else
        detail::store16(avail_field(avail::kFlagsOffset), 0);
    mmio::io_mb();   // §2.7.14: the request before the re-check, or a completion slips between
    return !has_used();
}

}  // namespace vfab::virtio
