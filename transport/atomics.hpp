// The responder's atomic operations on host memory (IB spec 9.4.5; vfab's masked ones in
// docs/rdma-atomics.md), atomic with respect to the CPU's own accesses (IBV_ATOMIC_GLOB): each
// returns the value the target held before.
#pragma once

#include <atomic>
#include <cstdint>

namespace vfab::rdma::detail {

// A masked add: `boundaries` has a bit set at the most significant bit of each field (bit 63
// always ends one); each field of `value` gets its field of `add`, and its carry stops there.
constexpr uint64_t masked_sum(uint64_t value, uint64_t add, uint64_t boundaries) noexcept {
    uint64_t out = 0;
    int low = 0;
    for (int bit = 0; bit < 64; ++bit) {
        if (bit != 63 && !((boundaries >> bit) & 1)) continue;
        const uint64_t field = (bit - low == 63 ? ~uint64_t(0) : ((uint64_t(1) << (bit - low + 1)) - 1)) << low;
        out |= ((value & field) + (add & field)) & field;
        low = bit + 1;
    }
    return out;
}

// A masked compare and swap: when `value` equals `compare` in the bits of `compare_mask`, the
// bits of `swap_mask` take `swap`'s; otherwise `value` stays.
constexpr uint64_t masked_swap(uint64_t value, uint64_t compare, uint64_t compare_mask, uint64_t swap,
                               uint64_t swap_mask) noexcept {
    if ((value ^ compare) & compare_mask) return value;
    return (value & ~swap_mask) | (swap & swap_mask);
}

inline uint64_t atomic_masked_fetch_add(std::atomic_ref<uint64_t> t, uint64_t add, uint64_t boundaries) noexcept {
    uint64_t old = t.load();
    while (!t.compare_exchange_weak(old, masked_sum(old, add, boundaries))) {
    }
    return old;
}

inline uint64_t atomic_masked_cmp_swap(std::atomic_ref<uint64_t> t, uint64_t compare, uint64_t compare_mask,
                                       uint64_t swap, uint64_t swap_mask) noexcept {
    uint64_t old = t.load();
    for (;;) {
        const uint64_t next = masked_swap(old, compare, compare_mask, swap, swap_mask);
        if (next == old || t.compare_exchange_weak(old, next)) return old;
    }
}

}  // namespace vfab::rdma::detail
