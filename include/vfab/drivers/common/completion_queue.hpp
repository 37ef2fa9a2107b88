// What every driver's completion queue shares: the queue pairs whose sends and receives it
// takes (one of each at most), polled in alternating order so that neither starves the other
// when the caller's array is small, its capacity hint, MSI-X vector and channel (the vector's
// eventfd), and whether it was destroyed. A driver's CompletionQueue derives from it and adds
// arm() and take_events(), which touch its device; the control path common to all drivers
// (vector choice, destroy, arm's last step, attaching queue pairs) is queue::Control, in the
// drivers' private drivers/common/queue_control.hpp.
//
// A queue pair type Qp offers poll_send/poll_recv(Completion*, max), send_ready/recv_ready()
// and state().
#pragma once

#include <cerrno>
#include <cstdint>
#include <span>

#include "vfab/types.hpp"

namespace vfab::queue {

struct Control;

template <class Qp>
class CompletionQueueCore {
public:
    // Up to out.size() completions, oldest first per queue; -ENODEV once destroyed.
    int poll(std::span<Completion> out) noexcept {
        if (destroyed_) [[unlikely]]
            return -ENODEV;
        return static_cast<int>(poll_queues(out));
    }
    // An eventfd (the MSI-X vector's): readable after arm() once a completion arrives.
    int channel_fd() const noexcept { return efd_; }
    // Whether destroy() succeeded: the object stays (the device owns it), poll() returns -ENODEV.
    bool destroyed() const noexcept { return destroyed_; }
    // The capacity hint given to create_cq (`cqe`); nothing is bounded by it.
    uint32_t capacity() const noexcept { return cqe_; }
    // The MSI-X vector it took at create_cq (the lowest free one); channel_fd() is its eventfd.
    uint32_t vector() const noexcept { return vector_; }

protected:
    friend struct Control;
    CompletionQueueCore() = default;
    // A device's completion queue: its capacity hint, MSI-X vector and that vector's eventfd
    // (owned by the device's VFIO interrupts, not closed here).
    CompletionQueueCore(uint32_t cqe, uint32_t vector, int efd) : cqe_(cqe), vector_(vector), efd_(efd) {}
    ~CompletionQueueCore() = default;

    // poll() without the destroyed check: up to out.size() completions, the receives first on
    // one call and the sends first on the next, so that neither starves. Fast path.
    uint32_t poll_queues(std::span<Completion> out) noexcept {
        const auto max = static_cast<uint32_t>(out.size());
        uint32_t n = 0;
        rx_first_ = !rx_first_;
        if (rx_first_ && recv_qp_) n += recv_qp_->poll_recv(out.data() + n, max - n);
        if (send_qp_) n += send_qp_->poll_send(out.data() + n, max - n);
        if (!rx_first_ && recv_qp_) n += recv_qp_->poll_recv(out.data() + n, max - n);
        return n;
    }
    // A completion is waiting (in the error state: a WR is left to flush).
    bool has_ready() const noexcept {
        return (send_qp_ && send_qp_->send_ready()) || (recv_qp_ && recv_qp_->recv_ready());
    }
    // arm() signals the channel at once: a completion is waiting, or a queue pair left the
    // ready state (a sleeper must look at it).
    bool wake_on_arm() const noexcept {
        return has_ready() || (send_qp_ && send_qp_->state() != QpState::ready) ||
               (recv_qp_ && recv_qp_->state() != QpState::ready);
    }

    Qp* send_qp_ = nullptr;
    Qp* recv_qp_ = nullptr;
    uint32_t cqe_ = 0;
    uint32_t vector_ = 0;
    int efd_ = -1;
    bool destroyed_ = false;
    bool rx_first_ = false;
};

}  // namespace vfab::queue
