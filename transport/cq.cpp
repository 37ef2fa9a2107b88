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

CqImpl::~CqImpl() {
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    if (event_fd_ >= 0) ::close(event_fd_);
}

Result<void> open_channel(PortImpl& port, int& event_fd, int& epoll_fd, const char* who) {
    event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (event_fd < 0) return Error::from_errno(errno, str_cat(who, ": eventfd"));
    epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd < 0) return Error::from_errno(errno, str_cat(who, ": epoll_create1"));
    for (int fd : {event_fd, port.raw_recv_cq()->channel_fd(), port.timer_fd()}) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = fd;
        if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0)
            return Error::from_errno(errno, str_cat(who, ": adding the port's descriptors to the channel"));
    }
    return {};
}

void signal_channel(int event_fd) noexcept {
    const uint64_t one = 1;
    (void)!::write(event_fd, &one, sizeof one);
}

Result<void> arm_channel(PortImpl& port, bool& armed, bool waiting, int event_fd) {
    armed = true;
    if (auto r = port.raw_recv_cq()->arm(); !r) return r;
    port.arm_timer();
    if (waiting) {   // a completion already there signals at once
        armed = false;
        signal_channel(event_fd);
    }
    return {};
}

uint64_t take_channel_events(PortImpl& port, int event_fd) noexcept {
    // Progress first, so that the completions it makes are counted and their notification does
    // not leave the channel readable for nothing once the caller has polled them. What comes
    // later is caught by the next arm(), which checks the CQ, the raw CQ and the deadline again.
    port.run();
    uint64_t events = 0, drain = 0;
    (void)!::read(event_fd, &events, sizeof events);
    (void)!::read(port.timer_fd(), &drain, sizeof drain);
    (void)port.raw_recv_cq()->take_events();
    return events;
}

Result<void> CqImpl::init() { return open_channel(port_, event_fd_, epoll_fd_, "create_cq"); }

bool CqImpl::push(const Wc& wc, bool solicited) noexcept {
    if (tail_ - head_ == ring_.size()) {
        ++overruns_;
        return false;
    }
    ring_[tail_++ & (ring_.size() - 1)] = wc;
    const bool notify = armed_ && (!solicited_only_ || solicited || wc.status != WcStatus::success);
    if (notify) {
        armed_ = false;
        signal_channel(event_fd_);
    }
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
    return arm_channel(port_, armed_, head_ != tail_, event_fd_);
}

uint64_t CqImpl::take_events() noexcept {
    PortImpl::Guard g(port_);
    return take_channel_events(port_, event_fd_);
}

Result<void> CqImpl::destroy() {
    PortImpl::Guard g(port_);
    if (destroyed) return Error{ENODEV, "completion queue already destroyed"};
    if (users) return Error{EBUSY, str_cat("destroy CQ: ", users, " queue pair(s) still use it — destroy them first")};
    destroyed = true;
    return {};
}

}  // namespace vfab::rdma::detail
