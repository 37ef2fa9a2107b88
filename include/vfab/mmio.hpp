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

// Stops the compiler from moving or merging memory accesses across it; emits no instruction.
inline void compiler_barrier() { asm volatile("" ::: "memory"); }

#if defined(__x86_64__) || defined(__i386__)
// Earlier stores to DMA memory before later stores (a descriptor before its doorbell or
// "ready" flag). x86 keeps stores in order: a compiler barrier only.
inline void dma_wmb() { compiler_barrier(); }
// Earlier loads from DMA memory before later loads (a completion's "done" bit before the rest
// of it). x86 keeps loads in order: a compiler barrier only.
inline void dma_rmb() { compiler_barrier(); }
// A full barrier (mfence): every earlier load and store before every later one, the
// store-to-load order included that x86 does not keep (publish an index, then read the
// device's event-suppression flags).
inline void io_mb() { asm volatile("mfence" ::: "memory"); }
#else
// Earlier stores to DMA memory before later stores (a descriptor before its doorbell or
// "ready" flag): a release fence on this architecture.
inline void dma_wmb() { __atomic_thread_fence(__ATOMIC_RELEASE); }
// Earlier loads from DMA memory before later loads (a completion's "done" bit before the rest
// of it): an acquire fence on this architecture.
inline void dma_rmb() { __atomic_thread_fence(__ATOMIC_ACQUIRE); }
// A full barrier: every earlier load and store before every later one, store-to-load order
// included (publish an index, then read the device's event-suppression flags).
inline void io_mb() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
#endif

// Reads a T (1, 2, 4 or 8 bytes, naturally aligned) `offset` bytes into a register mapping as
// one volatile load, which the compiler neither reorders nor merges. Fast path: no system call.
template <class T>
inline T read(const volatile void* base, uint64_t offset) {
    compiler_barrier();
    T v = *reinterpret_cast<const volatile T*>(static_cast<const volatile uint8_t*>(base) + offset);
    compiler_barrier();
    return v;
}

// Writes `value` (1, 2, 4 or 8 bytes, naturally aligned) `offset` bytes into a register mapping
// as one volatile store, which the compiler neither reorders nor merges. Fast path: no system call.
template <class T>
inline void write(volatile void* base, uint64_t offset, T value) {
    compiler_barrier();
    *reinterpret_cast<volatile T*>(static_cast<volatile uint8_t*>(base) + offset) = value;
    compiler_barrier();
}

}  // namespace vfab::mmio
