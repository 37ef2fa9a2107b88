// A completion queue's channel (the transport's CQs and the raw queue's): an eventfd for its
// own notifications in an epoll descriptor beside the port's raw receive channel and its
// retransmission timer, so that a sleeping application wakes for a completion, a received
// frame or a deadline (cq.cpp).
#pragma once

#include <cstdint>

#include "vfab/result.hpp"
#include "vfab/vfio/unique_fd.hpp"

namespace vfab::rdma::detail {

class PortImpl;

class Channel {
public:
    Result<void> open(PortImpl& port, const char* who);
    int fd() const noexcept { return epoll_.get(); }
    // A notification, if arm() asked for one.
    void notify() noexcept;
    // The next notification asked for; the raw receive CQ and the timer armed. `waiting`:
    // something is already there, which notifies at once.
    Result<void> arm(PortImpl& port, bool waiting);
    // Progress, then the notifications cleared; how many there were.
    uint64_t take(PortImpl& port) noexcept;
    bool armed() const noexcept { return armed_; }
    void set_hook(void (*hook)(void*), void* ctx) noexcept { hook_ = hook, hook_ctx_ = ctx; }

private:
    vfio::UniqueFd event_, epoll_;
    bool armed_ = false;
    void (*hook_)(void*) = nullptr;
    void* hook_ctx_ = nullptr;
};

}  // namespace vfab::rdma::detail
