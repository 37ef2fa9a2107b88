// The transport's completion queues: a ring of work completions filled by the port's progress,
// and a channel (an epoll descriptor) that wakes a sleeping application for a completion, a
// received frame or the next retransmission deadline.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <bit>

#include "engine.hpp"

namespace vfab::rdma::detail {

CqImpl::CqImpl(PortImpl& port, uint32_t capacity) : port_(port), ring_(std::bit_ceil(capacity)) {}

Result<void> Channel::open(PortImpl& port, const char* who) {
    vfio::Sys& sys = vfio::Sys::real();
    event_ = vfio::UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), sys);
    if (!event_) return Error::from_errno(errno, str_cat(who, ": eventfd"));
    epoll_ = vfio::UniqueFd(epoll_create1(EPOLL_CLOEXEC), sys);
    if (!epoll_) return Error::from_errno(errno, str_cat(who, ": epoll_create1"));
    for (int fd : {event_.get(), port.link().recv_channel_fd(), port.timer_fd()}) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = fd;
        if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
            return Error::from_errno(errno, str_cat(who, ": adding the port's descriptors to the channel"));
    }
    return {};
}

void Channel::notify() noexcept {
    if (!armed_) return;
    armed_ = false;
    const uint64_t one = 1;
    (void)!::write(event_.get(), &one, sizeof one);
    if (hook_) hook_(hook_ctx_);
}

Result<void> Channel::arm(PortImpl& port, bool waiting) {
    armed_ = true;
    if (auto r = port.link().arm_recv(); !r) return r;
    port.arm_timer();
    if (waiting) notify();
    return {};
}

uint64_t Channel::take(PortImpl& port) noexcept {
    // Progress first, so that the completions it makes are counted and their notification does
    // not leave the channel readable for nothing once the caller has polled them. What comes
    // later is caught by the next arm(), which checks the CQ, the raw CQ and the deadline again.
    port.run();
    uint64_t events = 0, drain = 0;
    (void)!::read(event_.get(), &events, sizeof events);
    (void)!::read(port.timer_fd(), &drain, sizeof drain);
    port.link().take_recv_events();
    return events;
}

Result<void> CqImpl::init() { return channel_.open(port_, "create_cq"); }

bool CqImpl::push(const Wc& wc, bool solicited) noexcept {
    if (tail_ - head_ == ring_.size()) {
        ++overruns_;
        if (!overran && !ignore_overrun_) {
            overran = true;
            port_.cq_overran(this);
        }
        return false;
    }
    ring_[tail_++ & (ring_.size() - 1)] = wc;
    if (!solicited_only_ || solicited || wc.status != RdmaWcStatus::success) channel_.notify();
    return true;
}

int CqImpl::poll(std::span<Wc> out) noexcept {
    PortImpl::Guard g(port_);
    if (destroyed) return -ENODEV;
    port_.run();
    int n = 0;
    while (n < int(out.size()) && head_ != tail_) out[n++] = ring_[head_++ & (ring_.size() - 1)];
    return n;
}

Result<void> CqImpl::arm(bool solicited_only) {
    PortImpl::Guard g(port_);
    if (destroyed) return Error{ENODEV, "arm: the completion queue was destroyed"};
    solicited_only_ = solicited_only;
    port_.program_waits();
    return channel_.arm(port_, head_ != tail_);
}

uint64_t CqImpl::overruns() const noexcept {
    PortImpl::Guard g(port_);
    return overruns_;
}

void CqImpl::set_ignore_overrun(bool on) noexcept {
    PortImpl::Guard g(port_);
    ignore_overrun_ = on;
}

uint64_t CqImpl::take_events() noexcept {
    PortImpl::Guard g(port_);
    return channel_.take(port_);
}

void CqImpl::set_notify_hook(void (*hook)(void*), void* ctx) noexcept {
    PortImpl::Guard g(port_);
    channel_.set_hook(hook, ctx);
}

Result<uint32_t> CqImpl::resize(uint32_t cqe) {
    PortImpl::Guard g(port_);
    if (destroyed) return Error{ENODEV, "resize: the completion queue was destroyed"};
    const uint64_t waiting = tail_ - head_;
    if (cqe == 0 || cqe > kMaxCqe || cqe < waiting)
        return Error{EINVAL, str_cat("resize_cq: ", cqe, " entries; ask for ", std::max<uint64_t>(waiting, 1), " to ", kMaxCqe,
                                     " (", waiting, " completions wait)")};
    std::vector<Wc> ring(std::bit_ceil(cqe));
    for (uint64_t i = 0; i < waiting; ++i) ring[i] = ring_[(head_ + i) & (ring_.size() - 1)];
    ring_.swap(ring);
    head_ = 0;
    tail_ = waiting;
    return uint32_t(ring_.size());
}

Result<void> CqImpl::destroy() {
    PortImpl::Guard g(port_);
    if (destroyed) return Error{ENODEV, "completion queue already destroyed"};
    if (users) return Error{EBUSY, str_cat("destroy CQ: ", users, " queue pair(s) still use it — destroy them first")};
    destroyed = true;
    return {};
}

}  // namespace vfab::rdma::detail
