// Trapped MMIO for device models in unit tests: every store to a write-protected page of a
// fake BAR runs a callback right after the store, before the next instruction — as a
// hypervisor's device model sees a guest's register write — so registers that depend on
// other registers (device_feature on device_feature_select, device_status refusing
// FEATURES_OK, VIRTIO 1.2 §4.1.4.3) already hold their new value when the driver reads them
// back.
//
// Why not a helper thread that watches the memory: the driver reads such registers in the
// very next instruction after writing (negotiate() re-reads device_status right after setting
// FEATURES_OK, §3.1.1 step 6), so a thread would lose that race almost always and the tests
// would prove nothing. Why not pread/pwrite: the transport insists on mmapped structures.
//
// How (x86-64 Linux only): the page is mapped read-only; a store faults (SIGSEGV, SEGV_ACCERR),
// the handler makes the page writable and sets the trap flag (EFLAGS.TF) in the saved context;
// the store runs again, then the CPU raises a single-step trap (SIGTRAP), whose handler clears
// TF, calls the callback with the offset written and write-protects the page again. Loads
// never fault. Faults elsewhere go to whatever handler was there before (ASan's, or the
// default). One trapped range at a time, for one thread (the test's).
#pragma once

#if defined(__x86_64__) && defined(__linux__)
#define VFAB_MMIO_TRAP 1

#include <signal.h>
#include <sys/mman.h>
#include <sys/ucontext.h>

#include <cstddef>
#include <cstdint>

namespace vfab::testing {
namespace detail {
using TrapCallback = void (*)(void* ctx, uint32_t offset);
struct TrapState {
    uint8_t* base = nullptr;
    size_t len = 0;
    TrapCallback cb = nullptr;
    void* ctx = nullptr;
    struct sigaction old_segv {};
    struct sigaction old_trap {};
    bool pending = false;
    uint32_t offset = 0;
    size_t writes = 0;
};
}  // namespace detail

class MmioTrap {
public:
    using Callback = detail::TrapCallback;

    // `base` page-aligned, `len` a multiple of the page size.
    static bool arm(void* base, size_t len, Callback cb, void* ctx) {
        if (s_.base) return false;
        s_ = detail::TrapState{static_cast<uint8_t*>(base), len, cb, ctx};
        struct sigaction sa {};
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        if (::sigaction(SIGSEGV, &sa, &s_.old_segv) != 0) return false;
        sa.sa_sigaction = on_trap;
        if (::sigaction(SIGTRAP, &sa, &s_.old_trap) != 0) return false;
        return ::mprotect(base, len, PROT_READ) == 0;
    }

    static void disarm() {
        if (!s_.base) return;
        ::mprotect(s_.base, s_.len, PROT_READ | PROT_WRITE);
        ::sigaction(SIGSEGV, &s_.old_segv, nullptr);
        ::sigaction(SIGTRAP, &s_.old_trap, nullptr);
        s_ = detail::TrapState{};
    }

    static size_t trapped_writes() { return s_.writes; }

private:
    static constexpr greg_t kTrapFlag = 0x100;   // EFLAGS.TF

    static inline detail::TrapState s_;

    static void on_segv(int, siginfo_t* si, void* uctx) {
        auto* a = static_cast<uint8_t*>(si->si_addr);
        if (!s_.base || s_.pending || si->si_code != SEGV_ACCERR || a < s_.base || a >= s_.base + s_.len) {
            // Not ours: the access faults again, now for the previous handler.
            ::sigaction(SIGSEGV, &s_.old_segv, nullptr);
            return;
        }
        s_.offset = static_cast<uint32_t>(a - s_.base);
        s_.pending = true;
        ::mprotect(s_.base, s_.len, PROT_READ | PROT_WRITE);
        static_cast<ucontext_t*>(uctx)->uc_mcontext.gregs[REG_EFL] |= kTrapFlag;
    }

    static void on_trap(int, siginfo_t*, void* uctx) {
        if (!s_.pending) {   // a breakpoint or a debugger's: not ours
            ::sigaction(SIGTRAP, &s_.old_trap, nullptr);
            ::raise(SIGTRAP);
            return;
        }
        static_cast<ucontext_t*>(uctx)->uc_mcontext.gregs[REG_EFL] &= ~kTrapFlag;
        s_.pending = false;
        ++s_.writes;
        s_.cb(s_.ctx, s_.offset);   // the page is still writable: the model updates registers
        ::mprotect(s_.base, s_.len, PROT_READ);
    }
};

}  // namespace vfab::testing

#endif
