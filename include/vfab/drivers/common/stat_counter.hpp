// A statistics counter that its queue's thread adds to and any thread reads (QpStats): one
// add instruction on memory, where a relaxed std::atomic costs a load, an add and a store. The
// location is aligned and has one writer, so a reader's relaxed atomic load sees the old or the
// new value, never a mix (the way the Linux kernel keeps per-CPU statistics).
#pragma once

#include <cstdint>

namespace vfab::queue {

class StatCounter {
public:
    // Adds n, modulo 2^64 (~0 takes one back). The owning thread only; no lock, no fence.
    void add(uint64_t n) noexcept {
#if defined(__x86_64__)
        asm("addq %1, %0" : "+m"(v_) : "er"(n));
#else
        __atomic_store_n(&v_, __atomic_load_n(&v_, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
#endif
    }
    // The count now, from any thread (a relaxed atomic load).
    uint64_t get() const noexcept { return __atomic_load_n(&v_, __ATOMIC_RELAXED); }

private:
    alignas(8) uint64_t v_ = 0;
};

}  // namespace vfab::queue
