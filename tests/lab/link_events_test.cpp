// Link changes through real VFIO: QEMU takes a NIC's link down and up (QMP set_link on the
// hubport that is its peer, asked for by a console line: scripts/lab.d/qemu.sh), and the
// device's next_event() must say link_down, then link_up, and link() agree — e1000e and igb
// from STATUS.LU, virtio-net from its config status: every time before its queues start, and
// once they run only when config_generation moves (virtio 1.2 §2.5.1), so both ways.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <ostream>
#include <thread>

#include "lab_env.hpp"
#include "vfab/vfab.hpp"

namespace vfab::lab {
namespace {
using namespace std::chrono_literals;

struct Nic {
    const char* device;   // lab_env.hpp's name
    const char* netdev;   // its peer in scripts/lab.d/qemu.sh
    bool with_qp;         // a queue pair first (virtio-net: the device is then running)
    friend void PrintTo(const Nic& n, std::ostream* os) { *os << n.device << (n.with_qp ? " with a queue pair" : ""); }
};

// next_event() until `want` comes (true), a device event ends it or 30 s pass (false).
bool wait_for(Device& dev, EventType want) {
    for (auto end = std::chrono::steady_clock::now() + 30s; std::chrono::steady_clock::now() < end;) {
        for (Event e = dev.next_event(); e.type != EventType::none; e = dev.next_event()) {
            if (e.type == want) return true;
            if (e.type != EventType::link_up && e.type != EventType::link_down) {
                ADD_FAILURE() << "unexpected event " << to_string(e.type);
                return false;
            }
        }
        std::this_thread::sleep_for(10ms);
    }
    return false;
}

// link() until it says up (true) or 30 s pass (false).
bool wait_link_up(Device& dev) {
    for (auto end = std::chrono::steady_clock::now() + 30s; !dev.link().up && std::chrono::steady_clock::now() < end;)
        std::this_thread::sleep_for(50ms);
    return dev.link().up;
}

// Whatever the test did, the link is asked up again and awaited before the next test starts.
struct LinkBackUp {
    Device& dev;
    const char* netdev;
    ~LinkBackUp() {
        if (dev.link().up) return;
        ask_set_link(netdev, true);
        (void)wait_link_up(dev);
    }
};

class LinkEvents : public ::testing::TestWithParam<Nic> {};

TEST_P(LinkEvents, DownAndUpAreReportedOnce) {
    const Nic& nic = GetParam();
    OpenOptions opts;
    opts.backend = backends().front();
    auto d = Device::open(address_of(nic.device).to_string(), opts);
    ASSERT_TRUE(d.ok()) << d.error().message;
    Device& dev = **d;
    if (nic.with_qp) {
        auto cq = dev.create_cq(64);
        ASSERT_TRUE(cq.ok()) << cq.error().message;
        QpInitAttr a;
        a.send_cq = a.recv_cq = *cq;
        a.caps = {64, 64, 1, 1};   // fits every lab NIC's rings (virtio-net: 256 descriptors)
        auto qp = dev.create_qp(a);
        ASSERT_TRUE(qp.ok()) << qp.error().message;
    }
    LinkBackUp guard{dev, nic.netdev};
    // The link comes up after open (autonegotiation in QEMU's Intel models): wait for it.
    ASSERT_TRUE(wait_link_up(dev)) << nic.device << ": the link never came up after open";
    while (dev.next_event().type != EventType::none) {
    }

    ask_set_link(nic.netdev, false);
    ASSERT_TRUE(wait_for(dev, EventType::link_down)) << nic.device << ": no link_down within 30 s of set_link off";
    EXPECT_FALSE(dev.link().up);
    EXPECT_EQ(dev.next_event().type, EventType::none) << "a link change is reported once";

    ask_set_link(nic.netdev, true);
    ASSERT_TRUE(wait_for(dev, EventType::link_up)) << nic.device << ": no link_up within 30 s of set_link on";
    EXPECT_TRUE(dev.link().up);
    EXPECT_EQ(dev.next_event().type, EventType::none) << "a link change is reported once";
}

INSTANTIATE_TEST_SUITE_P(Lab, LinkEvents,
                         ::testing::Values(Nic{"e1000e-0", "p0", true}, Nic{"igb", "p4", true},
                                           Nic{"virtio-net", "p2", false}, Nic{"virtio-net", "p2", true}),
                         [](const auto& info) {
                             std::string n = info.param.device;
                             for (char& c : n)
                                 if (c == '-') c = '_';
                             return n + (info.param.with_qp ? "_with_a_queue_pair" : "_without_queues");
                         });

}  // namespace
}  // namespace vfab::lab
