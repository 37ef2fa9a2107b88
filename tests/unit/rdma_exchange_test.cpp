// The pingpong examples' TCP side channel (rdma/exchange.hpp) over loopback: the exchange both
// ways, its time limits, and its watch — what lets a program stop waiting for a peer when its
// device is taken away.
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>

#include "vfab/rdma/exchange.hpp"

namespace vfab::rdma {
namespace {
using namespace std::chrono_literals;

// A port per test and process, so that parallel runs do not meet.
uint16_t test_port(int n) { return uint16_t(20000 + (::getpid() % 4000) * 8 + n); }

Endpoint endpoint(uint32_t qpn) {
    Endpoint e;
    e.qpn = qpn;
    e.psn = 0x1234;
    e.gid = Gid::from_ipv4(0x0a4d0001);
    return e;
}

// An eventfd standing in for a device's event_fd().
struct Event {
    int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ~Event() { ::close(fd); }
    void fire() const {
        const uint64_t one = 1;
        (void)!::write(fd, &one, sizeof one);
    }
    void drain() const {
        uint64_t v;
        (void)!::read(fd, &v, sizeof v);
    }
};

TEST(Exchange, ClientAndServerLearnEachOthersEndpoints) {
    const uint16_t port = test_port(0);
    auto server = std::async(std::launch::async, [&] {
        return exchange_as_server(port, endpoint(0x11), [](const Endpoint&) -> Result<void> { return {}; }, 5000);
    });
    Result<Endpoint> from_server = Error{EAGAIN, ""};
    for (int i = 0; i < 100; ++i, std::this_thread::sleep_for(20ms))   // until the server listens
        if ((from_server = exchange_as_client("127.0.0.1", port, endpoint(0x22), 5000)) || from_server.error().code != ECONNREFUSED)
            break;
    ASSERT_TRUE(from_server) << from_server.error().message;
    Result<Endpoint> from_client = server.get();
    ASSERT_TRUE(from_client) << from_client.error().message;
    EXPECT_EQ(from_server->qpn, 0x11u);
    EXPECT_EQ(from_client->qpn, 0x22u);
    EXPECT_EQ(from_client->gid, endpoint(0).gid);
}

TEST(Exchange, NoServerIsRefusedWithAHint) {
    auto r = exchange_as_client("127.0.0.1", test_port(1), endpoint(1), 2000);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ECONNREFUSED);
    EXPECT_NE(r.error().message.find("is the server running?"), std::string::npos) << r.error().message;
}

TEST(Exchange, NoClientTimesOut) {
    auto r = exchange_as_server(test_port(2), endpoint(1), [](const Endpoint&) -> Result<void> { return {}; }, 100);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ETIMEDOUT);
    EXPECT_NE(r.error().message.find("waiting for a client"), std::string::npos) << r.error().message;
}

TEST(Exchange, TheWatchStopsAServerWaitingForAClient) {
    Event ev;
    int asked = 0;
    ExchangeWatch watch{ev.fd, [&] {
                            ev.drain();
                            return ++asked < 2;   // the first event is harmless, the second ends it
                        }};
    std::thread events([&] {
        std::this_thread::sleep_for(50ms);
        ev.fire();
        std::this_thread::sleep_for(50ms);
        ev.fire();
    });
    const auto t0 = std::chrono::steady_clock::now();
    auto r = exchange_as_server(test_port(3), endpoint(1), [](const Endpoint&) -> Result<void> { return {}; }, 30000, watch);
    events.join();
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ECANCELED);
    EXPECT_EQ(asked, 2);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s) << "it stopped when asked, long before the time limit";
}

TEST(Exchange, TheWatchStopsAClientWaitingForTheServersAnswer) {
    // A server that accepts and then says nothing: the client waits for its address.
    const uint16_t port = test_port(4);
    Event ev;
    std::promise<void> stop_server;
    auto server = std::async(std::launch::async, [&] {
        return exchange_as_server(port, endpoint(1), [&](const Endpoint&) -> Result<void> {
            stop_server.get_future().wait();
            return Error{EIO, "never answers"};
        }, 30000);
    });
    ExchangeWatch watch{ev.fd, [&] { return false; }};
    std::thread events([&] {
        std::this_thread::sleep_for(200ms);
        ev.fire();
    });
    Result<Endpoint> r = Error{EAGAIN, ""};
    for (int i = 0; i < 100; ++i, std::this_thread::sleep_for(20ms))
        if ((r = exchange_as_client("127.0.0.1", port, endpoint(2), 30000, watch)) || r.error().code != ECONNREFUSED) break;
    events.join();
    stop_server.set_value();
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ECANCELED);
    EXPECT_NE(r.error().message.find("waiting for the server's address"), std::string::npos) << r.error().message;
    EXPECT_FALSE(server.get());
}

}  // namespace
}  // namespace vfab::rdma
