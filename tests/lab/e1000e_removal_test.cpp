// The kernel takes an e1000e back while vfab's driver has traffic queued: another thread
// removes the PCI device through sysfs, vfio-pci signals the request interrupt, the driver
// reports device_removal, the queue pair goes to the error state and flushes, nothing hangs,
// and closing the device lets the removal finish. The device is then rescanned and given back
// to vfio-pci for the tests that follow in the same boot.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "e1000e_pair.hpp"
#include "pci_removal.hpp"

namespace vfab::lab {
namespace {
namespace fs = std::filesystem;

const std::string kBdf = "0000:00:03.0";

TEST(E1000eRemoval, RequestInterruptPutsQueuesInErrorAndCloseLetsRemovalFinish) {
    E1000eNic nic;
    ASSERT_NO_FATAL_FAILURE(nic.open("e1000e-1", backends().front()));
    const uint32_t depth = nic.qp->caps().max_recv_wr;
    for (uint32_t i = 0; i < depth; ++i) {
        Sge sge{nic.addr(size_t(i % 8) * 2048), 2048, nic.mr.lkey};
        RecvWr wr{i, &sge, 1, 0};
        ASSERT_TRUE(nic.qp->post_recv({&wr, 1}));
    }

    std::atomic<bool> removed{false};
    std::thread remover([&] {
        remove_device(kBdf);   // blocks until released
        removed = true;
    });

    // The application's loop: poll, and look at the device's events now and then.
    Event ev{};
    const auto start = std::chrono::steady_clock::now();
    while (ev.type == EventType::none && std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
        Completion wc[16];
        ASSERT_GE(nic.cq->poll(wc), 0);
        ev = nic.dev->next_event();
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_EQ(ev.type, EventType::device_removal) << to_string(ev.type);
    EXPECT_FALSE(removed.load()) << "the removal finished while the device was still open";
    EXPECT_EQ(nic.qp->state(), QpState::error);
    std::vector<Completion> wc(depth);
    int n = nic.cq->poll(wc);
    EXPECT_EQ(n, int(depth));
    for (int i = 0; i < n; ++i) EXPECT_EQ(wc[i].status, WcStatus::wr_flush_error);
    Sge sge{nic.addr(), 2048, nic.mr.lkey};
    RecvWr wr{1, &sge, 1, 0};
    EXPECT_EQ(nic.qp->post_recv({&wr, 1}).error, EIO);
    EXPECT_FALSE(nic.dev->reset().ok());

    nic.dev.reset();   // close: vfio-pci can now let the device go
    remover.join();
    EXPECT_TRUE(removed.load());
    EXPECT_FALSE(fs::exists("/sys/bus/pci/devices/" + kBdf));

    give_back_to_vfio(kBdf);
    EXPECT_EQ(driver_of(kBdf), "vfio-pci");
    E1000eNic again;
    ASSERT_NO_FATAL_FAILURE(again.open("e1000e-1", backends().front()));
    EXPECT_TRUE(again.dev->link().up);
}

}  // namespace
}  // namespace vfab::lab
