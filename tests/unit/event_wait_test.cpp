// Waiting on interrupt eventfds, with plain eventfds standing in for interrupts.
#include "vfab/vfio/event_wait.hpp"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <thread>

namespace vfab::vfio {
namespace {

struct EventFd {
    EventFd() : fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
    ~EventFd() { ::close(fd); }
    void signal(uint64_t n = 1) const { ASSERT_EQ(::write(fd, &n, sizeof n), 8); }
    int fd;
};

TEST(WaitAny, TimesOutWhenNothingFires) {
    EventFd a, b;
    int fds[] = {a.fd, b.fd};
    auto r = wait_any(fds, 10);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, -1);
}

TEST(WaitAny, ReportsTheReadyOneAndDrainCountsAndClears) {
    EventFd a, b;
    b.signal(3);
    int fds[] = {a.fd, b.fd};
    auto r = wait_any(fds, 1000);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, 1);
    EXPECT_EQ(drain_eventfd(b.fd), 3u);
    EXPECT_EQ(drain_eventfd(b.fd), 0u);
}

TEST(WaitAny, WakesUpForAnotherThreadsSignal) {
    EventFd a;
    std::thread t([&] { a.signal(); });
    int fds[] = {a.fd};
    auto r = wait_any(fds, 5000);
    t.join();
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, 0);
}

TEST(EventWaiter, ReportsTagsOfReadyFds) {
    auto w = EventWaiter::create();
    ASSERT_TRUE(w.ok());
    EventFd rx, tx, other;
    ASSERT_TRUE(w->add(rx.fd, 10).ok());
    ASSERT_TRUE(w->add(tx.fd, 20).ok());
    ASSERT_TRUE(w->add(other.fd, 30).ok());
    rx.signal();
    other.signal();
    uint64_t tags[8];
    auto n = w->wait(tags, 1000);
    ASSERT_TRUE(n.ok());
    ASSERT_EQ(*n, 2u);
    EXPECT_TRUE((tags[0] == 10 && tags[1] == 30) || (tags[0] == 30 && tags[1] == 10));
    drain_eventfd(rx.fd);
    drain_eventfd(other.fd);
    ASSERT_TRUE(w->remove(tx.fd).ok());
    tx.signal();
    n = w->wait(tags, 10);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, 0u) << "a removed fd must not be reported";
    EXPECT_FALSE(w->add(-1, 1).ok());
}

}  // namespace
}  // namespace vfab::vfio
