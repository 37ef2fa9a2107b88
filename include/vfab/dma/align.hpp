// Power-of-two arithmetic shared by the DMA allocators, written so that it never overflows
// silently: IOVA ranges may reach the top of the 64-bit space.
#pragma once

#include <cstdint>

namespace vfab::dma {

// Whether `x` is a power of two (0 is not).
constexpr bool is_pow2(uint64_t x) noexcept { return x != 0 && (x & (x - 1)) == 0; }

// Rounds `x` up to a multiple of `align` (a power of two). Returns false, leaving `out`
// untouched, when the result does not fit in 64 bits.
constexpr bool align_up(uint64_t x, uint64_t align, uint64_t& out) noexcept {
    const uint64_t mask = align - 1;
    if (x > UINT64_MAX - mask) return false;
    out = (x + mask) & ~mask;
    return true;
}

// Whether `x` is a multiple of `align`, which must be a power of two.
constexpr bool is_aligned(uint64_t x, uint64_t align) noexcept { return (x & (align - 1)) == 0; }

}  // namespace vfab::dma
