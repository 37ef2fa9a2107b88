// The port as a queue pair sees it: send buffers, the port's list of queue pairs with something
// to send, deadlines, ARP, asynchronous events, counters, multicast groups and the memory keys.
// A queue pair reaches nothing else of the port, and the port reaches a queue pair through its
// public calls only (qp.hpp). The calls are PortImpl's, inline (port.hpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "vfab/rdma/rdma.hpp"

namespace vfab::rdma {
struct Packet;
}

namespace vfab::rdma::detail {

class PortImpl;
class QpImpl;
class SrqImpl;

// The lock every API call takes while the port's progress thread runs (or for good after
// share_between_threads()); none otherwise. A call that finds it taken says so in `waiting`: the
// progress thread, which takes the lock round after round, lets it go to the call then (a mutex
// is not fair: a woken waiter finds it taken again and again, and a program's thread starved
// for a minute on a busy emulated port). `calls` counts the calls that took it, so the thread
// can tell a program that drives the progress itself (progress_loop).
struct PortLock {
    std::atomic<bool> on{false};
    std::mutex mu;
    std::atomic<uint32_t> waiting{0};
    std::atomic<uint32_t> calls{0};
};

class [[nodiscard]] PortGuard {
public:
    explicit PortGuard(PortLock& l) : m_(l.on.load(std::memory_order_acquire) ? &l.mu : nullptr) {
        if (!m_) return;
        l.calls.fetch_add(1, std::memory_order_relaxed);
        if (m_->try_lock()) return;
        l.waiting.fetch_add(1, std::memory_order_relaxed);
        m_->lock();
        l.waiting.fetch_sub(1, std::memory_order_relaxed);
    }
    ~PortGuard() {
        if (m_) m_->unlock();
    }
    PortGuard(const PortGuard&) = delete;
    PortGuard& operator=(const PortGuard&) = delete;

private:
    std::mutex* m_;
};

class QpPort {
public:
    explicit QpPort(PortImpl& port) noexcept : port_(port) {}
    PortGuard guard() const noexcept;

    // Send buffers: a free one (null when none), one queued for the wire, one given back
    // unsent; tx_flush() hands the queued ones to the device.
    uint8_t* tx_buffer() noexcept;
    void tx_queue(uint8_t* buf, uint32_t len) noexcept;
    void tx_release(uint8_t* buf) noexcept;
    void tx_flush() noexcept;
    // `qp` has something to send: the port calls its pump() when buffers allow.
    void mark_ready(QpImpl* qp) noexcept;
    // `qp` has a deadline at `when` (ns, now_ns()): the port calls its on_timer() then.
    void note_deadline(uint64_t when) noexcept;
    // ARP: the MAC of `ip` when known (true); starts resolving it otherwise. `failed` is set
    // when the peer did not answer; the port calls on_arp_change() of its queue pairs.
    bool resolve(uint32_t ip, uint8_t* mac, bool& failed) noexcept;

    const uint8_t* mac() const noexcept;
    uint32_t ipv4() const noexcept;
    uint8_t ttl() const noexcept;
    uint32_t active_mtu() const noexcept;   // the IB MTU code
    dma::MrTable& mrs() noexcept;
    dma::ProtectionDomain& pd() noexcept;

    void raise(const AsyncEvent& e) noexcept;
    SrqImpl* find_srq(uint32_t srqn) noexcept;   // XRC: the SRQ a message names, null when none
    Result<void> join(QpImpl* qp, uint32_t group);
    Result<void> leave(QpImpl* qp, uint32_t group);
    void leave_all(QpImpl* qp) noexcept;
    // A datagram this port sent to a multicast group: its members here get it too.
    void loop_multicast(const Packet& p, const QpImpl* sender) noexcept;
    void count_retransmit() noexcept;
    void count_nak_sent() noexcept;

private:
    PortImpl& port_;
};

}  // namespace vfab::rdma::detail
