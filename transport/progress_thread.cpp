// The port's opt-in progress thread (Port::start_progress_thread, ProgressThreadOptions): it runs
// the port's progress in a loop under the port's lock, and sleeps on the device's receive
// interrupt, the timer and a wake-up eventfd once idle. While it runs (and for good after
// share_between_threads()) every call on the port's objects takes that lock (PortGuard).
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "engine.hpp"

namespace vfab::rdma::detail {

Result<void> PortImpl::start_progress_thread(const ProgressThreadOptions& opts) {
    if (thread_.joinable()) return Error{EBUSY, "the port's progress thread already runs"};
    if (opts.cpu >= 0 && opts.cpu >= CPU_SETSIZE) return Error{EINVAL, str_cat("progress thread: no CPU ", opts.cpu)};
    lock_calls();
    stop_.store(false);
    thread_ = std::thread([this, opts] { progress_loop(opts); });
    return {};
}

void PortImpl::stop_progress_thread() {
    if (!thread_.joinable()) return;
    stop_.store(true);
    wake();   // sleeping or about to: it looks at stop_ next
    thread_.join();
    if (!shared_) unlock_calls();   // else the program's own threads still need the lock
}

void PortImpl::share_between_threads() noexcept {
    shared_ = true;
    lock_calls();
}

void PortImpl::lock_calls() noexcept {
    lock_.on.store(true, std::memory_order_release);
    link_->pd().set_writer_lock(&lock_.mu);   // registrations wait for the copies of progress in another thread
}

void PortImpl::unlock_calls() noexcept {
    link_->pd().set_writer_lock(nullptr);
    lock_.on.store(false, std::memory_order_release);
}

void PortImpl::progress_loop(ProgressThreadOptions opts) noexcept {
    if (opts.cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(opts.cpu, &set);
        (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    }
    // Idle time on the precise clock (the coarse one would round the limit up to ticks of
    // several milliseconds), read every kIdleClockRounds idle rounds: under an emulator the
    // precise clock may be a device register (port.cpp, coarse_now_ns).
    constexpr uint32_t kIdleClockRounds = 8;
    const uint64_t idle_limit = uint64_t(opts.sleep_after_us) * 1000u;
    uint64_t idle_since = 0;
    uint32_t idle_rounds = 0;
    uint32_t calls_mark = 0;   // the program's calls when the idle time (or the last nap) began
    while (!stop_.load(std::memory_order_relaxed)) {
        int n;
        {
            std::lock_guard lock(lock_.mu);
            n = run();
        }
        while (lock_.waiting.load(std::memory_order_relaxed) != 0) sched_yield();   // the lock to the program first
        if (n) {
            idle_since = idle_rounds = 0;
            continue;
        }
        sched_yield();
        if (!idle_limit || idle_rounds++ % kIdleClockRounds != 0) continue;
        const uint64_t now = now_ns();
        const uint32_t calls = lock_.calls.load(std::memory_order_relaxed);
        if (!idle_since) {
            idle_since = now;
            calls_mark = calls;
        }
        if (now - idle_since < idle_limit) continue;
        // A program that keeps calling in (busy-polling its CQs: 16 calls or more in the idle
        // time, not the CM thread's few) runs the progress itself: while it does, the thread
        // naps and looks in once per nap instead of arming the device's receive interrupt, which
        // costs register writes and an interrupt per frame (on an emulated NIC, about half the
        // round trip of a small message). A program that armed a CQ is about to block on its
        // channel: it needs the interrupt.
        constexpr uint32_t kBusyCalls = 16;
        const bool waits = program_waits_.exchange(false, std::memory_order_relaxed);
        const bool program_polls = !waits && calls - calls_mark >= kBusyCalls;
        calls_mark = calls;
        if (program_polls) {
            nap();
            continue;
        }
        sleep_until_work();
        idle_since = idle_rounds = 0;
    }
}

// The idle progress thread's sleep: the device's receive interrupt and the timer armed, then a
// last look (a frame may have come before the interrupt was armed), then poll(2) until a frame,
// the next deadline, or kick() from an application call that queued work or an earlier deadline.
void PortImpl::sleep_until_work() noexcept {
    constexpr int kMaxSleepMs = 200;   // a safety net only: every wake-up source above is armed
    {
        std::lock_guard lock(lock_.mu);
        if (!ready_.empty() || !loopback_.empty()) return;
        if (!link_->arm_recv()) return;   // no interrupt to wait for: keep polling
        arm_timer();
        if (run() != 0) return;
        sleep_deadline_ = next_deadline_ ? next_deadline_ : ~uint64_t(0);
        sleeping_.store(true, std::memory_order_relaxed);
        ++stats_.thread_sleeps;
    }
    pollfd fds[3] = {{link_->recv_channel_fd(), POLLIN, 0}, {timer_fd_.get(), POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
    (void)::poll(fds, 3, kMaxSleepMs);
    std::lock_guard lock(lock_.mu);
    sleeping_.store(false, std::memory_order_relaxed);
    sleep_deadline_ = 0;
    uint64_t drain = 0;
    (void)!::read(wake_fd_.get(), &drain, sizeof drain);
    (void)!::read(timer_fd_.get(), &drain, sizeof drain);
    link_->take_recv_events();
    maybe_check_link();
}

// The nap while the program drives the progress: kNapMs, or until stop_progress_thread() or
// program_waits() wakes it.
void PortImpl::nap() noexcept {
    constexpr int kNapMs = 1;
    {
        std::lock_guard lock(lock_.mu);
        ++stats_.thread_naps;
    }
    pollfd fd{wake_fd_.get(), POLLIN, 0};
    if (::poll(&fd, 1, kNapMs) > 0) {
        uint64_t drain = 0;
        (void)!::read(wake_fd_.get(), &drain, sizeof drain);
    }
}

}  // namespace vfab::rdma::detail
