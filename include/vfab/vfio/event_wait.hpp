// Waiting for interrupts. Every VFIO interrupt is an eventfd: an application can put it in
// its own epoll/io_uring loop, or use these helpers.
#pragma once

#include <cstdint>
#include <span>

#include "vfab/result.hpp"
#include "vfab/vfio/unique_fd.hpp"

namespace vfab::vfio {

// Reads and clears an eventfd's counter: the number of interrupts since the last read, 0 if
// none (the eventfds vfab creates are non-blocking).
uint64_t drain_eventfd(int fd);

// Waits until one of `fds` is readable, or `timeout_ms` passes (-1: forever). Returns the
// index of a ready fd, or -1 on timeout. Does not drain it.
Result<int> wait_any(std::span<const int> fds, int timeout_ms);

// An epoll set for waiting on many interrupts repeatedly without rebuilding the set.
class EventWaiter {
public:
    // An empty epoll set (close-on-exec), closed when the waiter goes; epoll_create1's errno
    // on failure.
    static Result<EventWaiter> create();
    // Watches fd; `tag` is what wait() reports when it fires.
    Result<void> add(int fd, uint64_t tag);
    // Stops watching `fd`; epoll_ctl's errno on failure (ENOENT when it was not watched).
    Result<void> remove(int fd);
    // Fills `tags` with the tags of ready fds; returns how many (0 on timeout).
    Result<size_t> wait(std::span<uint64_t> tags, int timeout_ms);
    // The epoll fd itself, readable while any watched fd is: nests the set in an application's
    // own epoll or io_uring loop. Owned by the waiter.
    int fd() const { return epoll_.get(); }

private:
    explicit EventWaiter(UniqueFd epoll) : epoll_(std::move(epoll)) {}
    UniqueFd epoll_;
};

}  // namespace vfab::vfio
