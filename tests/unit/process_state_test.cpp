// What an embedding application may do from any thread (docs/api.md, "Process-wide state"):
// open, close and reopen devices concurrently and across threads — the provider registry loads
// its plugin once and stays consistent — and the C API's last error belongs to the thread that
// failed. Against libvfab.so and the fake provider plugin (plugins/fake_provider.cpp).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fake_sysfs.hpp"
#include "vfab/vfab.h"
#include "vfab/vfab.hpp"

namespace vfab {
namespace {

class ProcessState : public ::testing::Test {
protected:
    void SetUp() override {
        for (int i = 0; i < 4; ++i)
            sysfs.add_device("0000:00:0" + std::to_string(4 + i) + ".0", "0x1234", "0xfa4e", "vfio-pci", 4 + i);
    }
    OpenOptions opts() const {
        OpenOptions o;
        o.provider_dir = VFAB_TEST_PROVIDERS "/fake";
        o.sysfs_root = sysfs.root();
        return o;
    }
    testing::FakeSysfsTree sysfs;
};

// Four threads open, use and close their own device 50 times each, all at once.
TEST_F(ProcessState, ThreadsOpenAndCloseDevicesConcurrently) {
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            const std::string addr = "0000:00:0" + std::to_string(4 + t) + ".0";
            for (int i = 0; i < 50; ++i) {
                auto d = Device::open(addr, opts());
                if (!d || (*d)->attr().address.to_string() != addr || !(*d)->create_cq(16)) ++failures;
            }
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(failures.load(), 0);
}

// A device opened on one thread is used and closed on another, then reopened on a third.
TEST_F(ProcessState, ADeviceMovesBetweenThreads) {
    std::unique_ptr<Device> dev;
    std::thread([&] {
        auto d = Device::open("0000:00:04.0", opts());
        ASSERT_TRUE(d.ok()) << d.error().message;
        dev = std::move(*d);
    }).join();
    ASSERT_TRUE(dev);
    std::thread([&] {
        auto cq = dev->create_cq(16);
        EXPECT_TRUE(cq.ok());
        dev.reset();
    }).join();
    std::thread([&] {
        auto d = Device::open("0000:00:04.0", opts());
        EXPECT_TRUE(d.ok()) << d.error().message;
    }).join();
}

// vfab_last_error() is the calling thread's: a failure on one thread is not seen on another,
// and a later success on the failing thread's peer does not clear it.
TEST_F(ProcessState, TheCApisLastErrorBelongsToItsThread) {
    const std::string root = sysfs.root();
    std::string failed_here, seen_elsewhere = "unset";
    std::thread([&] {
        vfab_open_opts o{};
        o.provider_dir = VFAB_TEST_PROVIDERS "/fake";
        o.sysfs_root = root.c_str();
        EXPECT_EQ(vfab_open("0000:00:1f.7", &o), nullptr);   // no such device
        std::thread([&] { seen_elsewhere = vfab_last_error(); }).join();
        vfab_device* ok = vfab_open("0000:00:04.0", &o);
        EXPECT_NE(ok, nullptr) << vfab_last_error();
        vfab_close(ok);
        failed_here = vfab_last_error();
    }).join();
    EXPECT_EQ(seen_elsewhere, "");
    EXPECT_NE(failed_here.find("0000:00:1f.7"), std::string::npos) << failed_here;
}

}  // namespace
}  // namespace vfab
