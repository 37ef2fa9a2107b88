// Memory-mapped register access and the barriers that order it against DMA memory.
//
// Device registers live in uncached (UC) BAR mappings. On x86 the CPU keeps UC accesses in
// program order with each other and with stores to ordinary (WB) memory, so only the
// compiler must be stopped from reordering or merging: `volatile` plus a compiler barrier.
// Elsewhere the barriers become real fences. Drivers use:
//   dma_wmb()  between writing a descriptor in DMA memory and writing its doorbell register;
//   dma_rmb()  between reading a completion's "done" bit and reading the rest of it.
#pragma once

#include <cstdint>

namespace vfab::mmio {

inline void compiler_barrier() { asm volatile("" ::: "memory"); }

#if defined(__x86_64__) || defined(__i386__)
inline void dma_wmb() { compiler_barrier(); }
inline void dma_rmb() { compiler_barrier(); }
inline void io_mb() { asm volatile("mfence" ::: "memory"); }
#else
inline void dma_wmb() { __atomic_thread_fence(__ATOMIC_RELEASE); }
inline void dma_rmb() { __atomic_thread_fence(__ATOMIC_ACQUIRE); }
inline void io_mb() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
#endif

template <class T>
inline T read(const volatile void* base, uint64_t offset) {
    compiler_barrier();
    T v = *reinterpret_cast<const volatile T*>(static_cast<const volatile uint8_t*>(base) + offset);
    compiler_barrier();
    return v;
}

template <class T>
inline void write(volatile void* base, uint64_t offset, T value) {
    compiler_barrier();
    *reinterpret_cast<volatile T*>(static_cast<volatile uint8_t*>(base) + offset) = value;
    compiler_barrier();
}

}  // namespace vfab::mmio
