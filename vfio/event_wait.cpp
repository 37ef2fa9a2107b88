#include "vfab/vfio/event_wait.hpp"

#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <vector>

namespace vfab::vfio {

uint64_t drain_eventfd(int fd) {
    uint64_t count = 0;
    if (::read(fd, &count, sizeof count) != sizeof count) return 0;
    return count;
}

Result<int> wait_any(std::span<const int> fds, int timeout_ms) {
    std::vector<pollfd> pfds;
    pfds.reserve(fds.size());
    for (int fd : fds) pfds.push_back({fd, POLLIN, 0});
    for (;;) {
        int n = ::poll(pfds.data(), pfds.size(), timeout_ms);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return Error::from_errno(errno, "poll on interrupt eventfds");
        if (n == 0) return -1;
        for (size_t i = 0; i < pfds.size(); ++i)
            if (pfds[i].revents & POLLIN) return static_cast<int>(i);
        return Error{EIO, "poll: an interrupt eventfd reported an error"};
    }
}

Result<EventWaiter> EventWaiter::create() {
    int fd = ::epoll_create1(EPOLL_CLOEXEC);
    if (fd < 0) return Error::from_errno(errno, "epoll_create1");
    return EventWaiter(UniqueFd(fd, Sys::real()));
}

Result<void> EventWaiter::add(int fd, uint64_t tag) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) < 0) return Error::from_errno(errno, "epoll_ctl ADD");
    return {};
}

Result<void> EventWaiter::remove(int fd) {
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr) < 0) return Error::from_errno(errno, "epoll_ctl DEL");
    return {};
}

Result<size_t> EventWaiter::wait(std::span<uint64_t> tags, int timeout_ms) {
    epoll_event evs[64];
    int max = static_cast<int>(std::min<size_t>(tags.size(), 64));
    if (max == 0) return Error{EINVAL, "EventWaiter::wait: no room for results"};
    for (;;) {
        int n = ::epoll_wait(epoll_.get(), evs, max, timeout_ms);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return Error::from_errno(errno, "epoll_wait");
        for (int i = 0; i < n; ++i) tags[i] = evs[i].data.u64;
        return static_cast<size_t>(n);
    }
}

}  // namespace vfab::vfio
