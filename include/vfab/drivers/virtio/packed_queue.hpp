// The driver side of a packed virtqueue (VIRTIO 1.2 §2.8): one ring of descriptors both sides
// write, a Driver Event Suppression structure (the driver's: used buffer notifications) and a
// Device Event Suppression structure (the device's: available buffer notifications). Same
// interface as SplitQueue (concept Virtqueue); fast path inline, no allocation.
//
// Descriptors are written in ring order. A chain becomes available when its first
// descriptor's flags are written, after the rest of it (§2.8.6): add() does that at once, so
// that a polling device starts on the first chain of a post while the driver writes the next
// (as DPDK's and Linux's drivers do; a back-end waiting for a whole batch lost 16% of a
// loop's rate, docs/performance-history.md). publish() has nothing left to do.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>

#include "vfab/drivers/virtio/virtqueue.hpp"
#include "vfab/mmio.hpp"

namespace vfab::virtio {

class PackedQueue final {
public:
    // Sizes and alignments of the three parts for a queue of `size` entries (§2.8.10.1).
    static constexpr RingLayout layout(uint32_t size) {
        return {{16 * size_t(size), kDescAlign}, {sizeof(EventSuppress), kPackedEventAlign},
                {sizeof(EventSuppress), kPackedEventAlign}};
    }

    // A queue of `size` entries (1 to 32768, any number) over `mem`, driven with the negotiated
    // `features`. Clears the memory (§2.8.13: the ring starts zeroed).
    static Result<PackedQueue> create(uint32_t size, const QueueMemory& mem, RingFeatures features);

    // Writes `bufs` as a chain of descriptors and makes it available: the device may use it
    // from now on. false when the ring lacks bufs.size() free descriptors (or bufs is empty).
    [[gnu::always_inline]] bool add(std::span<const Buffer> bufs, uint32_t token) noexcept;
    // add() for a batch, the queue's positions in the caller's registers: each chain's flags
    // store orders every store before it, and a descriptor's store may alias any member, so
    // add() after add() reloads and stores them all again. begin_adds(), then add(cursor, …)
    // per chain — bufs.size() from 1 to cursor.free, checked by the caller — then end_adds();
    // nothing else on the queue in between.
    struct AddCursor;
    // The queue's positions, for add(cursor, …).
    AddCursor begin_adds() noexcept;
    // add() without the room check, on the cursor's positions.
    [[gnu::always_inline]] void add(AddCursor& c, std::span<const Buffer> bufs, uint32_t token) noexcept;
    // The cursor's positions back into the queue.
    void end_adds(const AddCursor& c) noexcept;
    // Makes every chain added so far available: one barrier, one flags store (§2.8.21.1).
    // Nothing: add() made the chains available (SplitQueue's publish() does it for a batch).
    void publish() noexcept {}
    // Must the device be notified of the chains added since it last looked (§2.8.21.2)? Call
    // it after every post.
    bool needs_notify() noexcept;
    // For VIRTIO_F_NOTIFICATION_DATA (§2.9): next_off (bits 14:0) and next_wrap (bit 15).
    uint16_t notify_data() const noexcept { return uint16_t(avail_pos_ | (avail_wrap() << event_flags::kWrapShift)); }

    // The next used buffer: its token and the bytes the device wrote into it (never more than
    // its device-writable length). With IN_ORDER one used descriptor may stand for a batch
    // (§2.8.8): each buffer of it is returned in turn, the ones before the last as completely used.
    [[gnu::always_inline]] bool poll_used(uint32_t& token, uint32_t& len) noexcept;
    // With IN_ORDER only: every buffer the next used element returns, at once (§2.8.8) — the
    // element is read once and the buffers are released together, without a token each (the
    // caller knows them: its oldest `count`). Finishes a batch poll_used() began. {0, 0} when
    // nothing is used or broken().
    [[gnu::always_inline]] UsedRun take_used_run() noexcept;
    // With IN_ORDER only: take_used_run() while elements are used and fewer than `limit`
    // buffers were taken, on_run(UsedRun) for each, oldest first; the buffers taken. The
    // queue's position stays in registers across the elements (a back-end writes one per
    // buffer when their lengths differ, as for receives). An ID that names no available buffer
    // breaks the queue: the runs before it stand, nothing after.
    template <class F>
    [[gnu::always_inline]] uint32_t take_used_runs(uint32_t limit, F&& on_run) noexcept;
    // With IN_ORDER only: every buffer used so far, at once (take_used_run(), then
    // take_used_runs() with no limit if more are used; SplitQueue's reads no used entry). The
    // buffers taken.
    [[gnu::always_inline]] uint32_t take_all_used() noexcept {
        const uint32_t first = take_used_run().count;
        return first != 0 && has_used() ? first + take_used_runs(~0u, [](UsedRun) {}) : first;
    }
    // Whether poll_used() would return a buffer now (one load of the next used position's
    // flags; false once broken()).
    [[gnu::always_inline]] bool has_used() const noexcept;

    // Used buffer notifications through the Driver Event Suppression structure (§2.8.10).
    void disable_interrupts() noexcept;
    // Re-enables them; false when used buffers arrived meanwhile: poll again before sleeping.
    // With EVENT_IDX it asks for one notification (the next used position): call it after each.
    bool enable_interrupts() noexcept;

    // Entries (descriptors) in the queue, as given to create().
    uint32_t size() const noexcept { return size_; }
    // Ring descriptors free for add(): a chain of n buffers takes n.
    uint32_t free_count() const noexcept { return free_; }   // free descriptors
    // Buffers (chains) added that poll_used() has not returned yet.
    uint32_t outstanding() const noexcept { return in_flight_; }   // buffers added, not used
    // The device returned a buffer ID that names no outstanding buffer: poll_used() stops; reset
    // the device, then drain().
    bool broken() const noexcept { return broken_; }
    // The three areas given to create(): the transport gives the device their IOVAs.
    const QueueMemory& memory() const { return mem_; }
    // The ring features given to create().
    RingFeatures features() const { return features_; }

    // Flushes: calls on_token(token) for every buffer added and not yet returned by poll_used()
    // (oldest first with IN_ORDER, else in buffer ID order), then reset(). Only once the device
    // no longer uses the queue.
    template <class F>
    uint32_t drain(F&& on_token);
    // Back to the state create() left: memory cleared, wrap counters 1, nothing outstanding.
    void reset() noexcept;

private:
    struct Slot {            // per buffer ID
        uint32_t token = 0;
        uint32_t writable = 0;   // device-writable bytes in the chain
        uint16_t ndesc = 0;      // 0: not outstanding
        uint16_t next_free = 0;  // free ID list (not with IN_ORDER)
    };

    PackedQueue(uint32_t size, const QueueMemory& mem, RingFeatures features);
    EventSuppress* driver_event() const { return static_cast<EventSuppress*>(mem_.driver); }
    const EventSuppress* device_event() const { return static_cast<const EventSuppress*>(mem_.device); }
    // §2.8.1: a descriptor is used when its AVAIL and USED bits both equal the wrap counter
    // the driver expects for the position it is looking at (`lap`: those two bits as they are
    // then, used_flags_).
    bool is_used(uint16_t flags) const noexcept { return is_used(flags, used_flags_); }
    static bool is_used(uint16_t flags, uint16_t lap) noexcept {
        return (flags & (desc_flags::AVAIL | desc_flags::USED)) == lap;
    }
    bool used_wrap() const noexcept { return used_flags_ != 0; }
    bool avail_wrap() const noexcept { return avail_flags_ == desc_flags::AVAIL; }
    void advance_used(uint16_t n) noexcept {
        used_pos_ = uint16_t(used_pos_ + n);
        if (used_pos_ >= size_) {
            used_pos_ = uint16_t(used_pos_ - size_);
            used_flags_ ^= desc_flags::AVAIL | desc_flags::USED;
        }
    }
    bool take_batch(uint32_t& token, uint32_t& len) noexcept;
    [[gnu::cold]] UsedRun finish_batch() noexcept;
    [[gnu::always_inline]] UsedRun release_run(uint32_t last, uint32_t written) noexcept;
    bool batch_to(uint32_t from, uint32_t in_flight, uint32_t last, uint32_t& count, uint32_t& descs) const noexcept;
    void release(uint16_t id, Slot& s) noexcept;

    QueueMemory mem_;
    RingFeatures features_;
    uint32_t size_ = 0;
    PackedDesc* ring_ = nullptr;
    std::unique_ptr<Slot[]> slots_;

    uint32_t free_ = 0;
    uint16_t free_id_ = 0;
    uint16_t avail_pos_ = 0;       // next descriptor to write, and its wrap counter
    // The driver's wrap counter as the AVAIL/USED bits it gives a descriptor (§2.8.21.1): AVAIL
    // while the counter is 1 (as it starts, §2.8.1), USED while 0 — one load per add.
    uint16_t avail_flags_ = desc_flags::AVAIL;
    uint16_t used_pos_ = 0;        // next descriptor the device writes as used
    // The driver's used wrap counter as a used descriptor's AVAIL and USED bits: both set
    // while it is 1 (as it starts, §2.8.1), both clear while 0.
    uint16_t used_flags_ = desc_flags::AVAIL | desc_flags::USED;
    uint16_t pub_pos_ = 0;         // avail_pos_ when needs_notify() last looked
    bool pub_wrap_ = true;
    uint16_t batch_last_ = 0;      // IN_ORDER used batch being returned: last ID and length
    uint32_t batch_len_ = 0;
    // Buffers (chains) available to the device, not yet used. Not next to free_: GCC pairs
    // the two counters' updates in add() into five vector instructions where two do.
    uint32_t in_flight_ = 0;
    bool in_batch_ = false;
    bool broken_ = false;
};

// Only what add() changes: more (the ring's base and size, say) spill at a post's start and
// are read from the stack after all, which costs what reading the member does.
struct PackedQueue::AddCursor {
    uint32_t free;   // descriptors left
    uint32_t chains = 0;
    uint16_t pos, lap, free_id;
};

static_assert(Virtqueue<PackedQueue>);

// ---- setup -----------------------------------------------------------------------------------

inline PackedQueue::PackedQueue(uint32_t size, const QueueMemory& mem, RingFeatures features)
    : mem_(mem), features_(features), size_(size), ring_(static_cast<PackedDesc*>(mem.desc)),
      slots_(std::make_unique<Slot[]>(size)) {
    reset();
}

inline Result<PackedQueue> PackedQueue::create(uint32_t size, const QueueMemory& mem, RingFeatures features) {
    if (size == 0 || size > kPackedMaxSize)
        return Error{EINVAL, str_cat("packed virtqueue: size ", size, " is not from 1 to 32768")};
    if (auto r = detail::check_memory(mem, layout(size), "packed virtqueue"); !r) return r.take_error();
    return PackedQueue(size, mem, features);
}

inline void PackedQueue::reset() noexcept {
    const RingLayout l = layout(size_);
    std::memset(mem_.desc, 0, l.desc.bytes);
    std::memset(mem_.driver, 0, l.driver.bytes);   // flags ENABLE: interrupts on
    std::memset(mem_.device, 0, l.device.bytes);
    for (uint32_t i = 0; i < size_; ++i) slots_[i] = Slot{0, 0, 0, uint16_t(i + 1)};
    free_ = size_;
    in_flight_ = 0;
    free_id_ = avail_pos_ = used_pos_ = pub_pos_ = batch_last_ = 0;
    pub_wrap_ = true;
    used_flags_ = desc_flags::AVAIL | desc_flags::USED;
    avail_flags_ = desc_flags::AVAIL;
    batch_len_ = 0;
    in_batch_ = broken_ = false;
}

template <class F>
inline uint32_t PackedQueue::drain(F&& on_token) {
    uint32_t n = 0;
    if (features_.in_order) {
        // With IN_ORDER a buffer's ID is the position of its first descriptor: outstanding
        // buffers lie in ring order from the oldest one.
        uint32_t pos = used_pos_;
        for (; n < in_flight_ && slots_[pos].ndesc; ++n) {
            on_token(slots_[pos].token);
            pos = (pos + slots_[pos].ndesc) % size_;
        }
    } else {
        for (uint32_t id = 0; id < size_; ++id)
            if (slots_[id].ndesc) {
                on_token(slots_[id].token);
                ++n;
            }
    }
    reset();
    return n;
}

// ---- fast path -------------------------------------------------------------------------------

inline bool PackedQueue::add(std::span<const Buffer> bufs, uint32_t token) noexcept {
    if (bufs.empty() || bufs.size() > free_) [[unlikely]]
        return false;
    AddCursor c = begin_adds();
    add(c, bufs, token);
    end_adds(c);
    return true;
}

inline PackedQueue::AddCursor PackedQueue::begin_adds() noexcept {
    return {free_, 0, avail_pos_, avail_flags_, free_id_};
}

inline void PackedQueue::end_adds(const AddCursor& c) noexcept {
    free_ = c.free;
    in_flight_ += c.chains;
    avail_pos_ = c.pos;
    avail_flags_ = c.lap;
    free_id_ = c.free_id;
}

inline void PackedQueue::add(AddCursor& c, std::span<const Buffer> bufs, uint32_t token) noexcept {
    const auto n = uint32_t(bufs.size());
    // Buffer ID: with IN_ORDER the position of the chain's first descriptor (buffers are used
    // in order, so IDs free in order too); else from the free list.
    const uint16_t id = features_.in_order ? c.pos : c.free_id;
    if (!features_.in_order) c.free_id = slots_[id].next_free;
    const uint16_t head = c.pos;
    uint16_t pos = head, head_flags = 0, lap = c.lap;
    uint32_t writable = 0;
    for (uint32_t k = 0; k < n; ++k) {
        const Buffer& b = bufs[k];
        // §2.8.21.1: AVAIL equal to the driver's wrap counter, USED its inverse. The ID goes
        // into every descriptor; the device reads it from the last one (§2.8.6).
        const auto flags = uint16_t((b.device_writes ? desc_flags::WRITE : 0) | (k + 1 < n ? desc_flags::NEXT : 0) | lap);
        PackedDesc& d = ring_[pos];
        d.addr = b.iova;
        d.len = b.len;
        d.id = id;
        if (k == 0)
            head_flags = flags;
        else
            detail::store16(&d.flags, flags);
        writable += b.device_writes ? b.len : 0;
        if (++pos == size_) {
            pos = 0;
            lap ^= desc_flags::AVAIL | desc_flags::USED;   // the wrap counter flips
        }
    }
    Slot& s = slots_[id];
    s.token = token;
    s.writable = writable;
    s.ndesc = uint16_t(n);
    c.pos = pos;
    c.lap = lap;
    c.free -= n;
    ++c.chains;
    detail::store16_after(&ring_[head].flags, head_flags);   // §2.8.21.1.1: the chain before its flags
}

inline bool PackedQueue::needs_notify() noexcept {
    // The descriptors added since the last look, from the positions (a post adds at most a
    // ring's worth, and this runs after every post): no counter to keep per add.
    const uint32_t added = uint32_t(avail_pos_ - pub_pos_) + (avail_wrap() != pub_wrap_ ? size_ : 0);
    if (added == 0) return false;
    pub_pos_ = avail_pos_;
    pub_wrap_ = avail_wrap();
    // §2.8.21.2.1: the flags stores before reading the Device Event Suppression structure
    // (store-load order: a full barrier even on x86).
    mmio::io_mb();
    const uint32_t evt = detail::load32(device_event());   // off_wrap and flags in one load
    const uint16_t flags = uint16_t(evt >> 16) & event_flags::MASK;
    if (flags == event_flags::DISABLE) return false;
    if (flags != event_flags::DESC || !features_.event_idx || added > size_) return true;
    // §2.8.10: notify when the event descriptor is one of those just made available. Linear
    // positions: this lap's position p is p, the previous lap's is p - size (mod 2^16); the
    // `added` ones span at most these two laps.
    const auto off_wrap = uint16_t(evt);
    auto event = uint16_t(off_wrap & 0x7fff);
    if (bool(off_wrap >> event_flags::kWrapShift) != pub_wrap_) event = uint16_t(event - size_);
    return need_event(event, pub_pos_, uint16_t(pub_pos_ - added));
}

inline void PackedQueue::release(uint16_t id, Slot& s) noexcept {
    advance_used(s.ndesc);   // §2.8.6: skip the rest of the chain
    free_ += s.ndesc;
    s.ndesc = 0;
    if (!features_.in_order) {
        s.next_free = free_id_;
        free_id_ = id;
    }
    --in_flight_;
}

inline bool PackedQueue::poll_used(uint32_t& token, uint32_t& len) noexcept {
    if (in_batch_) return take_batch(token, len);
    if (broken_ || in_flight_ == 0) return false;
    PackedDesc& d = ring_[used_pos_];
    const uint16_t flags = detail::load16(&d.flags);
    if (!is_used(flags)) return false;
    mmio::dma_rmb();   // §2.8.22: flags first, then the rest of the used descriptor
    const uint16_t id = detail::load16(&d.id);
    // §2.8.4 reserves len for used descriptors with WRITE set, but devices (QEMU's, among
    // others) report what they wrote without setting WRITE, as Linux's driver expects: read
    // it always; it is capped at the chain's device-writable bytes.
    const uint32_t written = detail::load32(&d.len);
    if (features_.in_order) {   // §2.8.8: `id` is the last buffer of a batch
        uint32_t count, descs;
        if (!batch_to(used_pos_, in_flight_, id, count, descs)) [[unlikely]] {
            broken_ = true;
            return false;
        }
        batch_last_ = id;
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
    release(id, s);
    return true;
}

// Returns the oldest buffer of an IN_ORDER batch (its ID is its first position); the ones
// before the batch's last count as completely used (§2.8.8).
inline bool PackedQueue::take_batch(uint32_t& token, uint32_t& len) noexcept {
    const uint16_t id = used_pos_;
    Slot& s = slots_[id];
    if (in_flight_ == 0 || !s.ndesc) [[unlikely]] {   // the ID named no available buffer
        in_batch_ = false;
        broken_ = true;
        return false;
    }
    const bool last = id == batch_last_;
    token = s.token;
    len = last ? std::min(batch_len_, s.writable) : s.writable;
    release(id, s);
    in_batch_ = !last;
    return true;
}

// IN_ORDER: the batch a used descriptor naming `last` returns is the available chains from the
// oldest (at `from`, the used position; its ID is its first position) to `last`: how many, and
// their descriptors. Read only, so that a `last` naming none of the `in_flight` (false) changes
// nothing — the slots of chains already returned keep their lengths, so the walk, not a slot,
// decides.
[[gnu::always_inline]] inline bool PackedQueue::batch_to(uint32_t from, uint32_t in_flight, uint32_t last,
                                                         uint32_t& count, uint32_t& descs) const noexcept {
    uint32_t pos = from;
    count = descs = 0;
    for (;;) {
        if (count == in_flight) return false;
        const uint32_t n = slots_[pos].ndesc;
        ++count;
        descs += n;
        if (pos == last) return true;
        pos += n;
        if (pos >= size_) pos -= size_;
    }
}

inline UsedRun PackedQueue::take_used_run() noexcept {
    if (in_batch_) [[unlikely]]
        return finish_batch();
    if (broken_ || in_flight_ == 0) return {0, 0};
    const PackedDesc& d = ring_[used_pos_];
    if (!is_used(detail::load16(&d.flags))) return {0, 0};
    mmio::dma_rmb();   // §2.8.22: flags first, then the rest of the used descriptor
    const uint32_t last = detail::load16(&d.id);
    const uint32_t written = detail::load32(&d.len);   // see poll_used(): read whether or not WRITE is set
    return release_run(last, written);
}

// The rest of a batch poll_used() began, at once.
inline UsedRun PackedQueue::finish_batch() noexcept {
    in_batch_ = false;
    return release_run(batch_last_, batch_len_);
}

// Releases the batch a used element naming `last`, of `written` bytes, returns: the chains from
// the oldest to it. {0, 0}, and the queue broken, when `last` names none of them.
inline UsedRun PackedQueue::release_run(uint32_t last, uint32_t written) noexcept {
    uint32_t count, descs;
    if (!batch_to(used_pos_, in_flight_, last, count, descs)) [[unlikely]] {
        broken_ = true;
        return {0, 0};
    }
    advance_used(uint16_t(descs));
    free_ += descs;
    in_flight_ -= count;
    return {count, std::min(written, slots_[last].writable)};
}

template <class F>
inline uint32_t PackedQueue::take_used_runs(uint32_t limit, F&& on_run) noexcept {
    uint32_t taken = 0;
    if (in_batch_) [[unlikely]] {
        const UsedRun r = finish_batch();
        if (r.count == 0) return 0;
        on_run(r);
        taken = r.count;
    }
    if (broken_ || taken >= limit) return taken;
    // In registers: the used position and how many available buffers remain; the loop stops
    // at `floor` of them (limit reached) or 0. Descriptors freed: how far the position moved.
    const uint32_t from = used_pos_, before = in_flight_;
    const uint16_t from_lap = used_flags_;
    const uint32_t floor = before > limit - taken ? before - (limit - taken) : 0;
    uint32_t pos = from, in_flight = before;
    uint16_t lap = from_lap;
    while (in_flight > floor) {
        const PackedDesc& d = ring_[pos];
        if (!is_used(detail::load16(&d.flags), lap)) break;
        mmio::dma_rmb();   // §2.8.22: flags first, then the rest of the used descriptor
        const uint32_t last = detail::load16(&d.id);
        const uint32_t written = detail::load32(&d.len);   // see poll_used(): read whether or not WRITE is set
        uint32_t count, n;
        if (!batch_to(pos, in_flight, last, count, n)) [[unlikely]] {
            broken_ = true;
            break;
        }
        pos += n;
        if (pos >= size_) {
            pos -= size_;
            lap ^= desc_flags::AVAIL | desc_flags::USED;
        }
        in_flight -= count;
        on_run(UsedRun{count, std::min(written, slots_[last].writable)});
    }
    used_pos_ = uint16_t(pos);
    used_flags_ = lap;
    free_ += pos - from + (lap != from_lap ? size_ : 0);
    in_flight_ = in_flight;
    return taken + before - in_flight;
}

inline bool PackedQueue::has_used() const noexcept {
    if (in_batch_) return true;
    return !broken_ && in_flight_ && is_used(detail::load16(&ring_[used_pos_].flags));
}

inline void PackedQueue::disable_interrupts() noexcept {
    detail::store16(&driver_event()->flags, event_flags::DISABLE);
}

inline bool PackedQueue::enable_interrupts() noexcept {
    if (features_.event_idx) {   // §2.8.10: an event when the next used descriptor is written
        detail::store16(&driver_event()->off_wrap, uint16_t(used_pos_ | (used_wrap() << event_flags::kWrapShift)));
        mmio::dma_wmb();          // off_wrap before the flags that make the device read it
        detail::store16(&driver_event()->flags, event_flags::DESC);
    } else {
        detail::store16(&driver_event()->flags, event_flags::ENABLE);
    }
    mmio::io_mb();   // the request before the re-check, or a completion slips between
    return !has_used();
}

}  // namespace vfab::virtio
