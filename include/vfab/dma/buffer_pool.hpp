// BufferPool: fixed-size buffers carved from a contiguous DMA region, for packet rings.
//
// The caller owns the region ({base, iova, len}: memory mapped for the device, e.g. a slice of
// a DmaArena) and keeps it mapped while the pool lives. Buffer i sits at base + i * stride,
// IOVA iova + i * stride, with stride = buf_size rounded up to the alignment; so iova_of() and
// index_of() are arithmetic, O(1).
//
// Free buffers are a LIFO stack of indices: the buffer put last is handed out next, while its
// cache lines are still warm. get/put and their bulk forms are O(1) per buffer, noexcept and
// never allocate (everything is sized in create()).
//
// One thread at a time: no locks, no atomics. Give each polling thread its own pool, or
// serialise.
//
// put() trusts its argument: returning a buffer twice, or one from elsewhere, trips an assert
// in debug builds and is undefined in release builds. put_checked() detects both and says
// which, for buffers coming back from places that are not trusted.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "vfab/iova.hpp"
#include "vfab/result.hpp"

namespace vfab::dma {

struct DmaRegion {
    void* base = nullptr;
    Iova iova;          // the device's address of `base`
    size_t len = 0;
};

struct Buffer {
    void* addr = nullptr;
    Iova iova;
    uint32_t index = 0;
};

enum class PutStatus : uint8_t {
    ok,
    foreign,            // not inside the pool's buffers
    not_buffer_start,   // inside the pool, but not where a buffer starts
    double_put,         // the buffer is in the pool already
};
// A short description ("buffer returned twice"), for messages; "?" for another value.
const char* to_string(PutStatus s) noexcept;

class BufferPool {
public:
    static constexpr size_t kDefaultAlign = 64;   // a cache line

    // `count` buffers of `buf_size` bytes each aligned to `align` (a power of two); count 0
    // means as many as fit. region.base and region.iova must both be aligned to `align`.
    static Result<BufferPool> create(DmaRegion region, size_t buf_size, uint32_t count,
                                     size_t align = kDefaultAlign);

    // Takes a free buffer; false when none is left.
    [[nodiscard]] bool get(Buffer& out) noexcept;
    // Fills the front of `out` with as many free buffers as there are (up to out.size());
    // returns how many.
    size_t get_bulk(std::span<Buffer> out) noexcept;
    // Returns buffers taken with get()/get_bulk() (see the header comment on checking).
    void put(const Buffer& b) noexcept { put_index(b.index); }
    // The same by address: the buffer holding `addr` (interior pointers too). A division:
    // hot paths should put the Buffer.
    void put(const void* addr) noexcept { put_index(index_of(addr)); }
    // put() for each of `bufs`, trusted as put() trusts them.
    void put_bulk(std::span<const Buffer> bufs) noexcept;
    // put() for an address from an untrusted place, which must be where a buffer starts:
    // ok when the buffer went back, else why not (foreign, not_buffer_start, double_put),
    // the pool left unchanged.
    PutStatus put_checked(const void* addr) noexcept;

    // Any address inside the pool's buffers (interior pointers too).
    bool contains(const void* addr) const noexcept { return offset(addr) < uint64_t(stride_) * capacity(); }
    // The device's address of `addr` (interior pointers too). Unchecked: contains() first
    // for an address of unknown origin.
    Iova iova_of(const void* addr) const noexcept { return iova_ + offset(addr); }
    // The buffer holding `addr`. Division: hot paths should carry Buffer::index instead.
    uint32_t index_of(const void* addr) const noexcept { return static_cast<uint32_t>(offset(addr) / stride_); }
    // The CPU address of buffer `index` (unchecked: index < capacity()).
    void* addr_of(uint32_t index) const noexcept { return base_ + size_t(index) * stride_; }
    // Buffer `index` as get() describes it; it is not taken from the free stack (unchecked).
    Buffer buffer(uint32_t index) const noexcept { return {addr_of(index), iova_ + uint64_t(index) * stride_, index}; }

    // The number of buffers, fixed at create().
    uint32_t capacity() const noexcept { return static_cast<uint32_t>(free_.size()); }
    // Buffers free now: get() succeeds this many times.
    uint32_t available() const noexcept { return top_; }
    // The buffer size in bytes, as given to create().
    size_t buf_size() const noexcept { return buf_size_; }
    // Bytes from one buffer to the next: buf_size() rounded up to the alignment.
    size_t stride() const noexcept { return stride_; }

private:
    BufferPool(uint8_t* base, Iova iova, size_t buf_size, size_t stride, uint32_t count);
    // Wraps for addresses below base, so one unsigned compare rejects both sides.
    uint64_t offset(const void* addr) const noexcept {
        return uint64_t(reinterpret_cast<uintptr_t>(addr) - reinterpret_cast<uintptr_t>(base_));
    }
    void put_index(uint32_t index) noexcept;

    uint8_t* base_;
    Iova iova_;
    size_t buf_size_;
    size_t stride_;
    std::vector<uint32_t> free_;     // free_[0, top_) are the free indices, top = next out
    std::vector<uint8_t> in_pool_;   // 1 while buffer i is free: catches double puts
    uint32_t top_;
};

// ---- fast path ---------------------------------------------------------------------------

inline bool BufferPool::get(Buffer& out) noexcept {
    if (top_ == 0) return false;
    const uint32_t index = free_[--top_];
    in_pool_[index] = 0;
    out = buffer(index);
    return true;
}

inline size_t BufferPool::get_bulk(std::span<Buffer> out) noexcept {
    const size_t n = out.size() < top_ ? out.size() : top_;
    for (size_t i = 0; i < n; ++i) {
        const uint32_t index = free_[--top_];
        in_pool_[index] = 0;
        out[i] = buffer(index);
    }
    return n;
}

inline void BufferPool::put_index(uint32_t index) noexcept {
    assert(index < capacity() && "BufferPool::put: not a buffer of this pool");
    assert(!in_pool_[index] && "BufferPool::put: buffer returned twice");
    in_pool_[index] = 1;
    free_[top_++] = index;
}

inline void BufferPool::put_bulk(std::span<const Buffer> bufs) noexcept {
    for (const Buffer& b : bufs) put_index(b.index);
}

inline PutStatus BufferPool::put_checked(const void* addr) noexcept {
    if (!contains(addr)) return PutStatus::foreign;
    if (offset(addr) % stride_ != 0) return PutStatus::not_buffer_start;
    const uint32_t index = index_of(addr);
    if (in_pool_[index]) return PutStatus::double_put;
    put_index(index);
    return PutStatus::ok;
}

}  // namespace vfab::dma
