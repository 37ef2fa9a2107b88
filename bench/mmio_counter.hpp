// Counts the driver's MMIO accesses in the fast-path benches, exactly and without touching the
// driver: the model device's "registers" live on pages of their own that are kept
// inaccessible (PROT_NONE) while the driver runs. Each access faults; the SIGSEGV handler
// counts it (a read or a write, from the page fault's error code), opens the page and sets the
// trap flag; after that one instruction, SIGTRAP closes the page again. The model device opens
// the pages while it plays the device (pause()/resume()), so only the driver's accesses count.
// x86-64 Linux only; a bench process, never the library (which installs no signal handler).
// Not under valgrind: the benches count instructions in a run of their own.
#pragma once

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace vfab::bench {

class MmioCounter {
public:
    // `bytes` of register space, zeroed, page-aligned; not yet watched (start()).
    explicit MmioCounter(size_t bytes) : bytes_((bytes + 4095) & ~size_t(4095)) {
        void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            std::perror("mmio counter: mmap");
            std::exit(1);
        }
        base_ = static_cast<uint8_t*>(p);
    }
    ~MmioCounter() {
        stop();
        ::munmap(base_, bytes_);
    }
    MmioCounter(const MmioCounter&) = delete;
    MmioCounter& operator=(const MmioCounter&) = delete;

    uint8_t* data() const { return base_; }
    uint64_t reads() const { return reads_; }
    uint64_t writes() const { return writes_; }

    // Watches the pages from now on: every access by this process counts (one at a time).
    void start() {
        active_ = this;
        struct sigaction sa {};
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO;
        ::sigaction(SIGSEGV, &sa, &old_segv_);
        sa.sa_sigaction = on_trap;
        ::sigaction(SIGTRAP, &sa, &old_trap_);
        reads_ = writes_ = 0;
        close();
    }
    void stop() {
        if (active_ != this) return;
        open();
        ::sigaction(SIGSEGV, &old_segv_, nullptr);
        ::sigaction(SIGTRAP, &old_trap_, nullptr);
        active_ = nullptr;
    }
    // The model device's turn: its accesses are not the driver's.
    void pause() { open(); }
    void resume() { close(); }

private:
    void open() { ::mprotect(base_, bytes_, PROT_READ | PROT_WRITE); }
    void close() { ::mprotect(base_, bytes_, PROT_NONE); }
    bool covers(const void* a) const {
        auto* p = static_cast<const uint8_t*>(a);
        return p >= base_ && p < base_ + bytes_;
    }

    static void on_fault(int, siginfo_t* si, void* ctx) {
        MmioCounter* c = active_;
        if (!c || !c->covers(si->si_addr)) {   // a real crash: die as the process would have
            ::signal(SIGSEGV, SIG_DFL);
            return;
        }
        auto* uc = static_cast<ucontext_t*>(ctx);
        // Page fault error code bit 1: the access was a write.
        (uc->uc_mcontext.gregs[REG_ERR] & 2 ? c->writes_ : c->reads_) += 1;
        c->open();
        uc->uc_mcontext.gregs[REG_EFL] |= kTrapFlag;   // one instruction, then SIGTRAP
    }
    static void on_trap(int, siginfo_t*, void* ctx) {
        auto* uc = static_cast<ucontext_t*>(ctx);
        uc->uc_mcontext.gregs[REG_EFL] &= ~kTrapFlag;
        if (active_) active_->close();
    }

    static constexpr long long kTrapFlag = 0x100;   // EFLAGS.TF
    static inline MmioCounter* active_ = nullptr;
    size_t bytes_;
    uint8_t* base_ = nullptr;
    uint64_t reads_ = 0, writes_ = 0;
    struct sigaction old_segv_ {}, old_trap_ {};
};

}  // namespace vfab::bench
