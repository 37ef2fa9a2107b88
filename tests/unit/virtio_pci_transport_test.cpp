// The virtio PCI transport and the virtio-net driver's bring-up against a fake virtio-net
// function (virtio_pci_fake.hpp) that misbehaves in ways QEMU cannot be made to: a device that
// does not keep FEATURES_OK (VIRTIO 1.2 §3.1.1 step 6), one without VERSION_1 or
// ACCESS_PLATFORM, one whose reset never completes (§4.1.4.3.2). Each failure must say what
// went wrong, and leave no fd, mapping or eventfd behind.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "fake_sysfs.hpp"
#include "virtio_pci_fake.hpp"
#include "vfab/drivers/virtio/virtio_spec.hpp"
#include "vfab/drivers/virtio_net.hpp"

namespace vfab::virtio {
namespace {

using testing::FakeVirtioKernel;
namespace vf = feature;
namespace nf = net_feature;

constexpr const char* kBdf = "0000:00:04.0";
constexpr uint8_t kAck = kStatusAcknowledge, kDrv = kStatusDriver, kFOk = kStatusFeaturesOk;

#if defined(__SANITIZE_ADDRESS__)
// ASan's allocator maps anonymous memory as tests allocate (and keeps freed memory in
// quarantine), so only named mappings are compared: files, memfds (the fake BAR is one, as a
// real BAR is a mapping of the VFIO device fd), [stack] and the like.
constexpr bool kNamedMappingsOnly = true;
#else
constexpr bool kNamedMappingsOnly = false;
#endif

// What the process holds: open fds and mappings (lines of /proc/self/maps).
struct Resources {
    size_t fds = 0, maps = 0;
    static Resources now() {
        Resources r;
        for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++r.fds;
        std::ifstream maps("/proc/self/maps");
        for (std::string line; std::getline(maps, line);) {
            std::istringstream fields(line);
            std::string range, perms, offset, dev, inode, path;
            fields >> range >> perms >> offset >> dev >> inode >> path;
            r.maps += !kNamedMappingsOnly || !path.empty();
        }
        return r;
    }
};

// Whether any line of /proc/self/maps covers `p`.
bool mapped(const void* p) {
    std::ifstream maps("/proc/self/maps");
    const auto a = reinterpret_cast<uintptr_t>(p);
    for (std::string line; std::getline(maps, line);) {
        uintptr_t lo = std::stoull(line, nullptr, 16), hi = std::stoull(line.substr(line.find('-') + 1), nullptr, 16);
        if (a >= lo && a < hi) return true;
    }
    return false;
}

void expect_mentions(const Error& e, const std::string& what) {
    EXPECT_NE(e.message.find(what), std::string::npos) << "'" << e.message << "' should mention '" << what << "'";
}

std::string hex(uint64_t v) {
    char b[32];
    std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
    return b;
}

class VirtioPciFake : public ::testing::Test {
protected:
    void SetUp() override {
#ifndef VFAB_MMIO_TRAP
        GTEST_SKIP() << "the fake device's trapped registers need x86-64 Linux";
#endif
        tree_.add_device(kBdf, "0x1af4", "0x1041", "vfio-pci", 6);
        unsetenv("VFAB_IOMMU_BACKEND");
        // What QEMU's virtio-net-pci offers with disable-legacy=on,iommu_platform=on (the bits
        // the driver looks at).
        sys_.model.offered = feature_bit(vf::VERSION_1) | feature_bit(vf::ACCESS_PLATFORM) |
                             feature_bit(vf::EVENT_IDX) | feature_bit(vf::RING_PACKED) | feature_bit(nf::MAC) |
                             feature_bit(nf::STATUS);
        const uint8_t mac[6] = {0x52, 0x54, 0x00, 0x12, 0x34, 0x56};
        std::memcpy(sys_.net_config.data(), mac, 6);
        sys_.net_config[6] = net_status::LINK_UP;
        sys_.build_config();
        before_ = Resources::now();
    }

    // Every test closes what it opened before this runs: nothing of the device may remain.
    void TearDown() override {
        if (IsSkipped()) return;
        EXPECT_TRUE(sys_.kernel.open_fds.empty()) << sys_.kernel.open_fds.size() << " VFIO fd(s) left open";
        EXPECT_TRUE(sys_.kernel.mmaps.empty()) << sys_.kernel.mmaps.size() << " region mapping(s) left";
        EXPECT_EQ(sys_.eventfds_open(), 0u) << "eventfds left open";
        EXPECT_FALSE(sys_.bar_mapped()) << "BAR 0 still mapped";
        EXPECT_FALSE(sys_.config[pci::kCommand] & pci::kCommandBusMaster) << "bus mastering left on";
        for (uint32_t index = 0; index < VFIO_PCI_NUM_IRQS; ++index) {   // each index ends disabled
            const vfio_irq_set* last = nullptr;
            for (const auto& set : sys_.kernel.irq_sets)
                if (set.index == index) last = &set;
            if (last) {
                EXPECT_EQ(last->count, 0u) << "interrupt index " << index << " left enabled";
            }
        }
        if (bar_seen_) {
            EXPECT_FALSE(mapped(bar_seen_)) << "BAR 0's memory is still in /proc/self/maps";
        }
        const Resources after = Resources::now();
        EXPECT_EQ(after.fds, before_.fds) << "/proc/self/fd: fds left open";
        EXPECT_EQ(after.maps, before_.maps) << "/proc/self/maps: mappings left";
    }

    Result<std::unique_ptr<vfio::Device>> open_vfio() {
        return vfio::Device::open(*PciAddress::parse(kBdf), vfio_options());
    }
    Result<std::unique_ptr<virtio_net::Device>> open_net(virtio_net::DeviceOptions opts = {}) {
        opts.vfio = vfio_options();
        auto d = virtio_net::Device::open(*PciAddress::parse(kBdf), opts);
        note_bar();
        return d;
    }
    vfio::DeviceOptions vfio_options() {
        vfio::DeviceOptions o;
        o.backend = vfio::IommuBackend::legacy;
        o.sys = &sys_;
        o.sysfs_root = tree_.root();
        return o;
    }
    void note_bar() {
        if (sys_.bar()) bar_seen_ = sys_.bar();
    }

    std::vector<uint8_t> statuses() const { return sys_.model.status_history(); }

    vfab::testing::FakeSysfsTree tree_;
    FakeVirtioKernel sys_;
    Resources before_;
    const void* bar_seen_ = nullptr;
};

// ---- The transport alone -------------------------------------------------------------------

// The control: a device that keeps FEATURES_OK sees exactly the accepted set, and the model
// answers device_feature per device_feature_select (so the refusals below are the device's).
TEST_F(VirtioPciFake, TransportNegotiatesWithAWillingDevice) {
    auto dev = open_vfio();
    ASSERT_TRUE(dev.ok()) << dev.error().message;
    auto t = PciTransport::attach(**dev);
    ASSERT_TRUE(t.ok()) << t.error().message;
    note_bar();
    ASSERT_TRUE(t->reset().ok());
    EXPECT_EQ(t->device_features(), sys_.model.offered);
    t->add_status(kAck);
    t->add_status(kDrv);
    const uint64_t required = feature_bit(vf::VERSION_1) | feature_bit(vf::ACCESS_PLATFORM);
    auto accepted = t->negotiate(feature_bit(nf::MAC) | feature_bit(vf::IN_ORDER), required);
    ASSERT_TRUE(accepted.ok()) << accepted.error().message;
    EXPECT_EQ(*accepted, required | feature_bit(nf::MAC));   // IN_ORDER is not offered
    EXPECT_EQ(sys_.model.driver_features, *accepted);
    EXPECT_EQ(t->status(), kAck | kDrv | kFOk);
    EXPECT_EQ(statuses(), (std::vector<uint8_t>{0, kAck, kAck | kDrv, kAck | kDrv | kFOk}));
    EXPECT_GT(vfab::testing::MmioTrap::trapped_writes(), 0u);
}

// §3.1.1 step 6: FEATURES_OK did not stick, so the device does not support the subset; the
// driver gives up and says so with FAILED (§3.1.1: "SHOULD set the FAILED status bit").
TEST_F(VirtioPciFake, TransportReportsFeaturesOkNotKeptAndSetsFailed) {
    sys_.model.refused = feature_bit(vf::RING_PACKED);
    auto dev = open_vfio();
    ASSERT_TRUE(dev.ok()) << dev.error().message;
    auto t = PciTransport::attach(**dev);
    ASSERT_TRUE(t.ok()) << t.error().message;
    note_bar();
    ASSERT_TRUE(t->reset().ok());
    t->add_status(kAck);
    t->add_status(kDrv);
    const uint64_t required = feature_bit(vf::VERSION_1) | feature_bit(vf::ACCESS_PLATFORM);
    auto accepted = t->negotiate(feature_bit(vf::RING_PACKED) | feature_bit(nf::MAC), required);
    ASSERT_FALSE(accepted.ok());
    EXPECT_EQ(accepted.error().code, ENOTSUP);
    expect_mentions(accepted.error(), kBdf);
    expect_mentions(accepted.error(), "refused the features " +
                                          hex(required | feature_bit(vf::RING_PACKED) | feature_bit(nf::MAC)));
    expect_mentions(accepted.error(), "FEATURES_OK not kept");
    EXPECT_EQ(t->status(), kAck | kDrv | kStatusFailed);
    EXPECT_EQ(statuses(), (std::vector<uint8_t>{0, kAck, kAck | kDrv, kAck | kDrv | kFOk,
                                                uint8_t(kAck | kDrv | kStatusFailed)}));
}

// A device without a required feature: refused before FEATURES_OK is ever claimed.
TEST_F(VirtioPciFake, TransportNamesMissingRequiredFeatures) {
    sys_.model.offered &= ~feature_bit(vf::ACCESS_PLATFORM);
    auto dev = open_vfio();
    ASSERT_TRUE(dev.ok()) << dev.error().message;
    auto t = PciTransport::attach(**dev);
    ASSERT_TRUE(t.ok()) << t.error().message;
    note_bar();
    ASSERT_TRUE(t->reset().ok());
    auto accepted = t->negotiate(0, feature_bit(vf::VERSION_1) | feature_bit(vf::ACCESS_PLATFORM));
    ASSERT_FALSE(accepted.ok());
    EXPECT_EQ(accepted.error().code, ENOTSUP);
    expect_mentions(accepted.error(), "lacks required features " + hex(feature_bit(vf::ACCESS_PLATFORM)));
    expect_mentions(accepted.error(), "it offers " + hex(sys_.model.offered));
    EXPECT_FALSE(sys_.model.status_ever_had(kFOk));
}

// §4.1.4.3.2: after writing 0 the driver waits for 0; a device that never gets there is
// reported after the timeout, not waited on forever.
TEST_F(VirtioPciFake, TransportResetTimesOutOnAWedgedDevice) {
    sys_.model.wedged = true;
    sys_.model.initial_status = kAck | kDrv | kFOk | kStatusDriverOk;   // left running
    auto dev = open_vfio();
    ASSERT_TRUE(dev.ok()) << dev.error().message;
    auto t = PciTransport::attach(**dev);
    ASSERT_TRUE(t.ok()) << t.error().message;
    note_bar();
    const auto start = std::chrono::steady_clock::now();
    auto r = t->reset();
    ASSERT_FALSE(r.ok());
    EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
    EXPECT_EQ(r.error().code, EIO);
    expect_mentions(r.error(), kBdf);
    expect_mentions(r.error(), "did not finish its reset within 1 s");
    EXPECT_EQ(t->status(), sys_.model.initial_status);
}

TEST_F(VirtioPciFake, TransportRefusesALegacyOnlyDevice) {
    sys_.build_config(0x1041, /*virtio_caps=*/false);
    auto dev = open_vfio();
    ASSERT_TRUE(dev.ok()) << dev.error().message;
    auto t = PciTransport::attach(**dev);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.error().code, ENODEV);
    expect_mentions(t.error(), "no virtio common configuration capability");
    expect_mentions(t.error(), "disable-legacy=on");
}

// ---- The virtio-net driver: Device::open --------------------------------------------------

// The control: the fake is good enough for the driver to open it, and closing resets it.
TEST_F(VirtioPciFake, DriverOpensAndClosesAWillingDevice) {
    {
        auto dev = open_net();
        ASSERT_TRUE(dev.ok()) << dev.error().message;
        EXPECT_EQ(sys_.model.driver_features & ~sys_.model.offered, 0u);
        EXPECT_TRUE(sys_.model.driver_features & feature_bit(vf::RING_PACKED));
        EXPECT_EQ((*dev)->attr().mac[5], 0x56);
        EXPECT_TRUE((*dev)->link().up);
        EXPECT_EQ(sys_.model.status(), kAck | kDrv | kFOk);
    }
    EXPECT_EQ(statuses(), (std::vector<uint8_t>{0, kAck, kAck | kDrv, kAck | kDrv | kFOk, 0}));
}

// A reset nobody asked vfab for (a function-level reset through sysfs): the next look at the
// events says the device stopped working, once, and the queues are in the error state.
TEST_F(VirtioPciFake, DriverSeesAResetBehindItsBack) {
    auto dev = open_net();
    ASSERT_TRUE(dev.ok()) << dev.error().message;
    EXPECT_EQ((*dev)->next_event().type, EventType::none);
    sys_.model.reset_behind_the_drivers_back();
    EXPECT_EQ((*dev)->next_event().type, EventType::device_fatal);
    EXPECT_EQ((*dev)->next_event().type, EventType::none) << "reported once";
}

// 1. FEATURES_OK not kept (here: the device will not do packed rings after all).
TEST_F(VirtioPciFake, DriverReportsFeaturesOkNotKept) {
    sys_.model.refused = feature_bit(vf::RING_PACKED);
    auto dev = open_net();
    ASSERT_FALSE(dev.ok());
    EXPECT_EQ(dev.error().code, ENOTSUP);
    expect_mentions(dev.error(), kBdf);
    expect_mentions(dev.error(), "refused the features");
    expect_mentions(dev.error(), "FEATURES_OK not kept");
    // FAILED right after the refusal (§3.1.1), then the reset of the failed open (nothing of
    // the device keeps running once its memory is gone).
    EXPECT_EQ(statuses(), (std::vector<uint8_t>{0, kAck, kAck | kDrv, kAck | kDrv | kFOk,
                                                uint8_t(kAck | kDrv | kStatusFailed), 0}));
    EXPECT_EQ(sys_.model.status(), 0);
}

// Split rings instead: the same device, a subset it supports, opens.
TEST_F(VirtioPciFake, DriverOpensTheRefusingDeviceWithSplitRings) {
    sys_.model.refused = feature_bit(vf::RING_PACKED);
    virtio_net::DeviceOptions o;
    o.ring = virtio_net::RingFormat::split;
    auto dev = open_net(o);
    ASSERT_TRUE(dev.ok()) << dev.error().message;
    EXPECT_FALSE(sys_.model.driver_features & feature_bit(vf::RING_PACKED));
}

// 2. No VERSION_1: a legacy device as far as features go.
TEST_F(VirtioPciFake, DriverRefusesADeviceWithoutVersion1) {
    sys_.model.offered &= ~(feature_bit(vf::VERSION_1) | feature_bit(vf::ACCESS_PLATFORM));
    auto dev = open_net();
    ASSERT_FALSE(dev.ok());
    EXPECT_EQ(dev.error().code, ENOTSUP);
    expect_mentions(dev.error(), kBdf);
    expect_mentions(dev.error(), "does not offer VIRTIO_F_VERSION_1 (a legacy device)");
    expect_mentions(dev.error(), "disable-legacy=on,iommu_platform=on");
    EXPECT_FALSE(sys_.model.status_ever_had(kFOk));
    // ACKNOWLEDGE, DRIVER, then FAILED (§3.1.1), and the reset on the way out.
    EXPECT_EQ(statuses(), (std::vector<uint8_t>{0, kAck, kAck | kDrv, kAck | kDrv | 128, 0}));   // reset on the way out
}

// 2. VERSION_1 without ACCESS_PLATFORM: the device would bypass the IOMMU.
TEST_F(VirtioPciFake, DriverRefusesADeviceWithoutAccessPlatform) {
    sys_.model.offered &= ~feature_bit(vf::ACCESS_PLATFORM);
    auto dev = open_net();
    ASSERT_FALSE(dev.ok());
    EXPECT_EQ(dev.error().code, ENOTSUP);
    expect_mentions(dev.error(), "does not offer VIRTIO_F_ACCESS_PLATFORM");
    expect_mentions(dev.error(), "only through the IOMMU");
    expect_mentions(dev.error(), "iommu_platform=on");
    EXPECT_FALSE(sys_.model.status_ever_had(kFOk));
    // ACKNOWLEDGE, DRIVER, then FAILED (§3.1.1), and the reset on the way out.
    EXPECT_EQ(statuses(), (std::vector<uint8_t>{0, kAck, kAck | kDrv, kAck | kDrv | 128, 0}));
}

// 2. A legacy-only device ID (§4.1.2.1: 0x1000 is transitional virtio-net).
TEST_F(VirtioPciFake, DriverRefusesALegacyDeviceId) {
    sys_.build_config(0x1000);
    auto dev = open_net();
    ASSERT_FALSE(dev.ok());
    EXPECT_EQ(dev.error().code, ENODEV);
    expect_mentions(dev.error(), "not a modern virtio-net device (1af4:1041)");
    expect_mentions(dev.error(), "transitional");
    EXPECT_TRUE(statuses().empty());   // never touched
}

// 3. A device that never reads back 0 after the reset: the timeout, and the driver goes no
// further (no ACKNOWLEDGE to a device in an unknown state).
TEST_F(VirtioPciFake, DriverReportsAWedgedReset) {
    sys_.model.wedged = true;
    sys_.model.initial_status = kAck | kDrv | kFOk | kStatusDriverOk;
    auto dev = open_net();
    ASSERT_FALSE(dev.ok());
    EXPECT_EQ(dev.error().code, EIO);
    expect_mentions(dev.error(), kBdf);
    expect_mentions(dev.error(), "did not finish its reset within 1 s");
    EXPECT_EQ(statuses(), (std::vector<uint8_t>{0, 0}));   // open's reset, then close's
}

}  // namespace
}  // namespace vfab::virtio
