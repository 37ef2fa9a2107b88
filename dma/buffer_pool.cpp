// BufferPool: validation and construction (see the header; the fast path is inline there).
#include "vfab/dma/buffer_pool.hpp"

#include <cerrno>

#include "vfab/dma/align.hpp"

namespace vfab::dma {

const char* to_string(PutStatus s) noexcept {
    switch (s) {
    case PutStatus::ok: return "ok";
    case PutStatus::foreign: return "not a buffer of this pool";
    case PutStatus::not_buffer_start: return "not the start of a buffer";
    case PutStatus::double_put: return "buffer returned twice";
    }
    return "?";
}

Result<BufferPool> BufferPool::create(DmaRegion region, size_t buf_size, uint32_t count, size_t align) {
    const auto base = reinterpret_cast<uintptr_t>(region.base);
    if (!region.base || region.len == 0) return Error{EINVAL, "buffer pool: empty region — pass mapped DMA memory"};
    if (buf_size == 0) return Error{EINVAL, "buffer pool: zero buffer size"};
    if (!is_pow2(align)) return Error{EINVAL, str_cat("buffer pool: alignment ", align, " is not a power of two")};
    if (!is_aligned(base, align) || !is_aligned(region.iova.value, align))
        return Error{EINVAL, str_cat("buffer pool: region at ", region.base, " (IOVA 0x", std::hex, region.iova.value,
                                     std::dec, ") is not aligned to ", align, " — align both addresses")};
    if (region.iova.value > UINT64_MAX - (region.len - 1))
        return Error{EINVAL, "buffer pool: the region's IOVA range wraps past 2^64"};
    uint64_t stride = 0;
    if (!align_up(buf_size, align, stride)) return Error{EINVAL, "buffer pool: buffer size too large"};
    const uint64_t fit = region.len / stride;
    if (count == 0) count = fit > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(fit);
    if (count == 0 || count > fit)
        return Error{ENOSPC, str_cat("buffer pool: a region of ", region.len, " bytes holds ", fit, " buffers of ",
                                     stride, " bytes (", buf_size, " aligned to ", align, "), not ",
                                     count == 0 ? 1 : count, " — use a larger region or fewer buffers")};
    return BufferPool(static_cast<uint8_t*>(region.base), region.iova, buf_size, stride, count);
}

BufferPool::BufferPool(uint8_t* base, Iova iova, size_t buf_size, size_t stride, uint32_t count)
    : base_(base), iova_(iova), buf_size_(buf_size), stride_(stride), free_(count), in_pool_(count, 1),
      top_(count) {
    // The stack's top holds index 0, so a fresh pool hands out buffers in address order.
    for (uint32_t i = 0; i < count; ++i) free_[i] = count - 1 - i;
}

}  // namespace vfab::dma
