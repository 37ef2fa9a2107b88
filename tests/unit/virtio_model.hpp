// Model devices for the virtqueue code: the device side of a split (§2.7) and a packed (§2.8)
// virtqueue, written from the VIRTIO 1.2 text independently of the driver side. They fetch
// available chains, write used entries (one per chain, or one per IN_ORDER batch), write data
// into device-writable buffers, apply both directions of notification suppression (flags and
// EVENT_IDX) and record every place where the driver broke a rule of the specification.
// IOVA = VA: the "device" reads and writes memory directly.
//
// For the unit tests of split_queue.hpp / packed_queue.hpp, and for bench/ (the ring cost of
// the driver's own code, no device, no MMIO).
#pragma once

#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "vfab/drivers/virtio/packed_queue.hpp"
#include "vfab/drivers/virtio/split_queue.hpp"

namespace vfab::virtio::model {

// Page-aligned memory for a queue's three parts (IOVA = VA), filled with garbage to prove the
// queue clears what it must.
class RingMemory {
public:
    explicit RingMemory(const RingLayout& layout)
        : layout_(layout), bytes_((layout.total_bytes() + 4095) & ~size_t(4095)),
          base_(static_cast<uint8_t*>(std::aligned_alloc(4096, bytes_))) {
        std::memset(base_, 0xa5, bytes_);
    }
    ~RingMemory() { std::free(base_); }
    RingMemory(const RingMemory&) = delete;
    RingMemory& operator=(const RingMemory&) = delete;
    QueueMemory queue_memory() const { return QueueMemory::carve(base_, Iova(reinterpret_cast<uint64_t>(base_)), layout_); }

private:
    RingLayout layout_;
    size_t bytes_;
    uint8_t* base_;
};

// One available chain as the device read it.
struct Chain {
    uint16_t id = 0;      // split: head descriptor index; packed: buffer ID
    uint16_t ndesc = 0;   // descriptors in the chain
    uint16_t pos = 0;     // packed: ring position of its first descriptor
    std::vector<Buffer> bufs;
    uint32_t writable() const {
        uint32_t n = 0;
        for (const Buffer& b : bufs) n += b.device_writes ? b.len : 0;
        return n;
    }
    // The device-readable bytes, concatenated (real memory only).
    std::vector<uint8_t> gather() const {
        std::vector<uint8_t> out;
        for (const Buffer& b : bufs)
            if (!b.device_writes) {
                auto* p = reinterpret_cast<const uint8_t*>(b.iova);
                out.insert(out.end(), p, p + b.len);
            }
        return out;
    }
};

// The byte a model writes at `offset` of the chain with id `id` (when write_data is on).
inline uint8_t pattern(uint16_t id, uint32_t offset) { return uint8_t(id * 7 + offset); }

// What both models share: the chains fetched and not yet used, the driver's errors, counters.
class DeviceBase {
public:
    std::deque<Chain>& pending() { return pending_; }
    const std::vector<std::string>& errors() const { return errors_; }
    uint32_t interrupts() const { return interrupts_; }   // used buffer notifications sent
    uint32_t kicks() const { return kicks_; }             // available buffer notifications seen
    void kick() { ++kicks_; }
    bool write_data = false;   // write pattern() into device-writable buffers (real memory)

protected:
    void error(std::string what) { errors_.push_back(std::move(what)); }
    // §2.7.4.2 / §2.8.17: device-writable elements after device-readable ones.
    void check_order(const Chain& c) {
        bool writable = false;
        for (const Buffer& b : c.bufs) {
            if (writable && !b.device_writes) error("device-readable element after a device-writable one");
            writable |= b.device_writes;
        }
    }
    void write(const Chain& c, uint32_t len) {
        if (len > c.writable()) error("test asked the device to write more than the chain holds");
        if (!write_data) return;
        uint32_t off = 0;
        for (const Buffer& b : c.bufs)
            for (uint32_t i = 0; b.device_writes && i < b.len && off < len; ++i, ++off)
                reinterpret_cast<uint8_t*>(b.iova)[i] = pattern(c.id, off);
    }
    Chain take(size_t i) {
        Chain c = pending_.at(i);
        pending_.erase(pending_.begin() + long(i));
        return c;
    }

    std::deque<Chain> pending_;
    std::vector<std::string> errors_;
    uint32_t interrupts_ = 0;
    uint32_t kicks_ = 0;
};

// ---- split ring device (§2.7) -----------------------------------------------------------------
class SplitDevice : public DeviceBase {
public:
    SplitDevice(const QueueMemory& mem, uint32_t size, RingFeatures f)
        : desc_(static_cast<const SplitDesc*>(mem.desc)), avail_(static_cast<uint8_t*>(mem.driver)),
          used_(static_cast<uint8_t*>(mem.device)), size_(size), f_(f) {}

    // Reads the chains made available since the last call (§2.7.13: up to avail->idx).
    uint32_t fetch(uint32_t max = ~0u) {
        const uint16_t idx = load(avail_, avail::kIdxOffset);
        if (uint16_t(idx - last_avail_) > size_) error("avail->idx moved more than the queue size");
        uint32_t n = 0;
        for (; last_avail_ != idx && n < max; ++last_avail_, ++n) {
            mmio::dma_rmb();
            const uint16_t head = load(avail_, avail::kRingOffset + 2 * (last_avail_ % size_));
            pending_.push_back(read_chain(head));
        }
        return n;
    }

    // Marks pending()[i] used, `len` bytes written (§2.7.8), and sends a notification if the
    // driver asked for one (§2.7.7).
    void use(size_t i, uint32_t len) {
        if (f_.in_order && i != 0) error("test used a chain out of order with IN_ORDER");
        const Chain c = take(i);
        write(c, len);
        put_used(c.id, len, 1);
    }
    // IN_ORDER (§2.7.9): one used entry, for the last of the `n` oldest chains, stands for all.
    void use_batch(size_t n, uint32_t last_len) {
        Chain last;
        for (size_t k = 0; k < n; ++k) {
            last = take(0);
            write(last, k + 1 == n ? last_len : last.writable());
        }
        put_used(last.id, last_len, uint16_t(n));
    }

    // A buggy device: one used entry naming head `id` (32 bits wide in a used element), idx
    // moved by `count`, whatever the driver made available.
    void use_any_id(uint32_t id, uint32_t len, uint16_t count = 1) { put_used(id, len, count); }

    // Available buffer notification suppression, the device's side (§2.7.10).
    void set_no_notify(bool on) { store(used_, used::kFlagsOffset, on ? used::F_NO_NOTIFY : 0); }
    void set_avail_event(uint16_t v) { store(used_, used::avail_event_offset(size_), v); }
    void arm_notify() {   // notify me when the entry after those fetched is made available
        if (f_.event_idx) set_avail_event(last_avail_);
        else set_no_notify(false);
    }
    void suppress_notify() {
        if (f_.event_idx) set_avail_event(uint16_t(load(avail_, avail::kIdxOffset) - 1));
        else set_no_notify(true);
    }
    // Must the driver notify, for the entries made available since the last call (§2.7.10)?
    bool notification_due() {
        const uint16_t idx = load(avail_, avail::kIdxOffset);
        bool due = false;
        for (uint16_t i = checked_; i != idx; ++i)
            due |= f_.event_idx ? i == load(used_, used::avail_event_offset(size_))
                                : !(load(used_, used::kFlagsOffset) & used::F_NO_NOTIFY);
        checked_ = idx;
        return due;
    }

    uint16_t used_idx() const { return used_idx_; }
    uint16_t avail_flags() const { return load(avail_, avail::kFlagsOffset); }
    uint16_t used_event() const { return load(avail_, avail::used_event_offset(size_)); }
    // Would the device send a used buffer notification now, having written one more entry?
    bool interrupt_wanted(uint16_t old_idx, uint16_t new_idx) {
        if (f_.event_idx) {
            if (avail_flags() != 0) error("§2.7.7.1: avail->flags not 0 with EVENT_IDX");
            return need_event(used_event(), new_idx, old_idx);
        }
        return !(avail_flags() & avail::F_NO_INTERRUPT);
    }

private:
    static uint16_t load(const uint8_t* base, size_t off) { return detail::load16(base + off); }
    static void store(uint8_t* base, size_t off, uint16_t v) { detail::store16(base + off, v); }

    Chain read_chain(uint16_t head) {
        Chain c;
        c.id = head;
        if (head >= size_) {
            error("available head out of range");
            return c;
        }
        if (f_.in_order && head != next_in_order_) error("IN_ORDER: chain does not start at the next descriptor");
        for (uint16_t d = head;; ++c.ndesc) {
            if (c.ndesc >= size_) {
                error("descriptor chain longer than the queue (a loop?)");
                break;
            }
            const SplitDesc& e = desc_[d];
            if (e.flags & desc_flags::INDIRECT) error("INDIRECT descriptor without the feature");
            c.bufs.push_back({e.addr, e.len, bool(e.flags & desc_flags::WRITE)});
            if (!(e.flags & desc_flags::NEXT)) {
                ++c.ndesc;
                next_in_order_ = uint16_t((d + 1) % size_);
                break;
            }
            if (e.next >= size_) {
                error("next out of range");
                break;
            }
            if (f_.in_order && e.next != (d + 1) % size_) error("IN_ORDER: next is not the following descriptor");
            d = e.next;
        }
        check_order(c);
        return c;
    }
    void put_used(uint32_t id, uint32_t len, uint16_t count) {
        auto* e = reinterpret_cast<UsedElem*>(used_ + used::kRingOffset) + used_idx_ % size_;
        detail::store32(&e->id, id);
        detail::store32(&e->len, len);
        mmio::dma_wmb();   // §2.7.8.1: the entry before idx
        const uint16_t old_idx = used_idx_;
        used_idx_ = uint16_t(used_idx_ + count);
        store(used_, used::kIdxOffset, used_idx_);
        mmio::io_mb();
        if (interrupt_wanted(old_idx, used_idx_)) ++interrupts_;
    }

    const SplitDesc* desc_;
    uint8_t* avail_;
    uint8_t* used_;
    uint32_t size_;
    RingFeatures f_;
    uint16_t last_avail_ = 0, used_idx_ = 0, checked_ = 0, next_in_order_ = 0;
};

// ---- packed ring device (§2.8) ----------------------------------------------------------------
class PackedDevice : public DeviceBase {
public:
    PackedDevice(const QueueMemory& mem, uint32_t size, RingFeatures f)
        : ring_(static_cast<PackedDesc*>(mem.desc)), driver_(static_cast<EventSuppress*>(mem.driver)),
          device_(static_cast<EventSuppress*>(mem.device)), size_(size), f_(f), in_flight_ids_(size) {}

    // Reads the chains made available since the last call (§2.8.1: AVAIL equals the device's
    // view of the driver's wrap counter, USED does not), in ring order.
    uint32_t fetch(uint32_t max = ~0u) {
        uint32_t n = 0;
        while (n < max && available(avail_pos_, avail_wrap_)) {
            mmio::dma_rmb();
            Chain c;
            c.pos = uint16_t(avail_pos_);
            uint16_t flags = 0;
            do {
                if (c.ndesc >= size_ || in_flight_desc_ + c.ndesc >= size_) {
                    error("chain longer than the free ring (the driver overwrote an in-flight descriptor)");
                    return n;
                }
                if (c.ndesc > 0 && !available(avail_pos_, avail_wrap_))
                    error("§2.8.6: a descriptor of a visible chain is not available");
                const PackedDesc& d = ring_[avail_pos_];
                flags = detail::load16(&d.flags);
                if (flags & desc_flags::INDIRECT) error("INDIRECT descriptor without the feature");
                c.bufs.push_back({d.addr, d.len, bool(flags & desc_flags::WRITE)});
                c.id = d.id;   // the ID of the last descriptor counts (§2.8.6)
                ++c.ndesc;
                step(avail_pos_, avail_wrap_, 1);
                lin_fetched_ += 1;
            } while (flags & desc_flags::NEXT);
            if (c.id >= size_ || in_flight_ids_[c.id]) error("buffer ID out of range or already in flight");
            else in_flight_ids_[c.id] = true;
            in_flight_desc_ += c.ndesc;
            check_order(c);
            pending_.push_back(std::move(c));
            ++n;
        }
        return n;
    }

    // Writes a used descriptor for pending()[i] at the next used position and skips the rest
    // of its chain (§2.8.6), then sends a notification if the driver asked for one (§2.8.10).
    void use(size_t i, uint32_t len) {
        if (f_.in_order && i != 0) error("test used a chain out of order with IN_ORDER");
        const Chain c = take(i);
        write(c, len);
        put_used(c.id, len, c.ndesc);
        if (c.id < size_) in_flight_ids_[c.id] = false;
    }
    // IN_ORDER (§2.8.8): one used descriptor, with the ID of the last of the `n` oldest chains,
    // written where the first of them started; the device skips all their descriptors.
    void use_batch(size_t n, uint32_t last_len) {
        uint32_t ndesc = 0;
        Chain last;
        for (size_t k = 0; k < n; ++k) {
            last = take(0);
            write(last, k + 1 == n ? last_len : last.writable());
            ndesc += last.ndesc;
            if (last.id < size_) in_flight_ids_[last.id] = false;
        }
        put_used(last.id, last_len, ndesc);
    }

    // Device Event Suppression (§2.8.10), the device's side.
    void set_device_event(uint16_t flags, uint16_t off = 0, bool wrap = false) {
        detail::store16(&device_->off_wrap, uint16_t(off | (wrap << event_flags::kWrapShift)));
        mmio::dma_wmb();
        detail::store16(&device_->flags, flags);
    }
    void arm_notify() {   // notify me when the descriptor after those fetched is made available
        if (f_.event_idx) set_device_event(event_flags::DESC, uint16_t(avail_pos_), avail_wrap_);
        else set_device_event(event_flags::ENABLE);
    }
    void suppress_notify() { set_device_event(event_flags::DISABLE); }
    // Must the driver notify, for the descriptors made available since the last call?
    bool notification_due() {
        // The frontier: every descriptor the driver has made available so far.
        if (lin_frontier_ < lin_fetched_) {
            lin_frontier_ = lin_fetched_;
            front_pos_ = avail_pos_;
            front_wrap_ = avail_wrap_;
        }
        while (lin_frontier_ - lin_fetched_ < size_ && available(front_pos_, front_wrap_)) {
            step(front_pos_, front_wrap_, 1);
            ++lin_frontier_;
        }
        const uint16_t flags = detail::load16(&device_->flags);
        const uint16_t off_wrap = detail::load16(&device_->off_wrap);
        bool due = false;
        for (uint64_t l = lin_checked_; l < lin_frontier_; ++l) {
            if (flags == event_flags::ENABLE) due = true;
            if (flags == event_flags::DESC) {
                const bool wrap = (l / size_) % 2 == 0;   // the counters start at 1
                due |= (off_wrap & 0x7fff) == l % size_ && bool(off_wrap >> event_flags::kWrapShift) == wrap;
            }
        }
        lin_checked_ = lin_frontier_;
        return due;
    }

    const EventSuppress& driver_event() const { return *driver_; }

    // A buggy device: a used descriptor naming `id` (16 bits wide: the rest is dropped) at the
    // next used position, skipping `ndesc`.
    void use_any_id(uint32_t id, uint32_t len, uint32_t ndesc = 1) { put_used(uint16_t(id), len, ndesc); }

private:
    bool available(uint32_t pos, bool wrap) const {
        const uint16_t f = detail::load16(&ring_[pos].flags);
        return bool(f & desc_flags::AVAIL) == wrap && bool(f & desc_flags::USED) != wrap;
    }
    void step(uint32_t& pos, bool& wrap, uint32_t n) const {
        pos += n;
        if (pos >= size_) {
            pos -= size_;
            wrap = !wrap;
        }
    }
    void put_used(uint16_t id, uint32_t len, uint32_t ndesc) {
        PackedDesc& d = ring_[used_pos_];
        d.id = id;
        d.len = len;
        mmio::dma_wmb();   // the descriptor before its flags
        const uint16_t both = used_wrap_ ? (desc_flags::AVAIL | desc_flags::USED) : 0;
        detail::store16(&d.flags, uint16_t(both | (len ? desc_flags::WRITE : 0)));
        const uint64_t old_lin = lin_used_;
        step(used_pos_, used_wrap_, ndesc);
        lin_used_ += ndesc;
        in_flight_desc_ -= ndesc;
        mmio::io_mb();
        if (interrupt_wanted(old_lin, lin_used_)) ++interrupts_;
    }
    // §2.8.10: DISABLE never, ENABLE always, DESC when the event descriptor (offset and wrap)
    // is among those just used.
    bool interrupt_wanted(uint64_t old_lin, uint64_t new_lin) {
        const uint16_t flags = detail::load16(&driver_->flags);
        if (flags == event_flags::ENABLE) return true;
        if (flags != event_flags::DESC) return false;
        if (!f_.event_idx) error("RING_EVENT_FLAGS_DESC without EVENT_IDX");
        const uint16_t off_wrap = detail::load16(&driver_->off_wrap);
        for (uint64_t l = old_lin; l < new_lin; ++l)
            if ((off_wrap & 0x7fff) == l % size_ && bool(off_wrap >> event_flags::kWrapShift) == ((l / size_) % 2 == 0))
                return true;
        return false;
    }

    PackedDesc* ring_;
    EventSuppress* driver_;
    EventSuppress* device_;
    uint32_t size_;
    RingFeatures f_;
    std::vector<bool> in_flight_ids_;
    uint32_t in_flight_desc_ = 0;
    uint32_t avail_pos_ = 0, used_pos_ = 0, front_pos_ = 0;
    bool avail_wrap_ = true, used_wrap_ = true, front_wrap_ = true;   // §2.8.1: start at 1
    uint64_t lin_fetched_ = 0, lin_used_ = 0, lin_frontier_ = 0, lin_checked_ = 0;   // positions ever
};

// ---- a queue and its device over one block of ring memory ---------------------------------------
template <class Q, class D>
struct Rig {
    using Queue = Q;
    using Device = D;
    RingMemory mem;
    Q q;
    D dev;
    Rig(uint32_t size, RingFeatures f)
        : mem(Q::layout(size)), q(*Q::create(size, mem.queue_memory(), f)), dev(mem.queue_memory(), size, f) {}
    // Whether the queue gives anything back through take_used_run() (`run`) or poll_used().
    bool takes_something(bool run) {
        uint32_t token, len;
        return run ? q.take_used_run().count != 0 : q.poll_used(token, len);
    }
};
using SplitRig = Rig<SplitQueue, SplitDevice>;
using PackedRig = Rig<PackedQueue, PackedDevice>;

}  // namespace vfab::virtio::model
