// vfab's multiplexed API (libvfab.so) on the lab's two 82574L NICs: each opened by PCI address
// with the provider its ID selects — the e1000e provider built into libvfab, and the same
// provider loaded as the plugin libvfab-e1000e.so from a provider directory — and the traffic
// of e1000e_traffic_test through them, one virtual call per batch.
//
// The plugin comes from the directory of this binary when it is there (the lab copies it into
// /vfab/bin beside the test), else from the build tree's provider directory.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <tuple>

#include "frames.hpp"
#include "lab_env.hpp"
#include "traffic.hpp"
#include "vfab/provider.hpp"
#include "vfab/vfab.hpp"

namespace vfab::lab {
namespace {
namespace fs = std::filesystem;
using vfio::IommuBackend;

enum class Source { builtin, plugin };

std::string plugin_dir() {
    std::error_code ec;
    fs::path self = fs::read_symlink("/proc/self/exe", ec).parent_path();
    if (!ec && fs::exists(self / "libvfab-e1000e.so", ec)) return self.string();
    return VFAB_BUILD_PROVIDER_DIR;
}

// A provider directory with no plugin in it: the built-in providers only.
const std::string& empty_dir() {
    static const std::string dir = [] {
        char tmpl[] = "/tmp/vfab-no-providers.XXXXXX";
        return std::string(mkdtemp(tmpl));
    }();
    return dir;
}

// The file holding the code behind an object's virtual functions (its vtable's file).
std::string code_file(const void* object) {
    Dl_info info{};
    if (!dladdr(*static_cast<void* const*>(object), &info) || !info.dli_fname) return "?";
    return info.dli_fname;
}

struct VfabNic {
    // Declared first so it is freed last: the device is closed (quiesced) before the memory
    // it may DMA into goes back to the allocator.
    std::unique_ptr<UserBuffer> mem;
    std::unique_ptr<Device> dev;
    CompletionQueue* cq = nullptr;
    QueuePair* qp = nullptr;
    uint8_t* data = nullptr;   // the registered buffers (user memory, or an arena)
    dma::MemoryRegion mr;

    static constexpr uint32_t kSendSlots = 256, kRecvSlots = 511, kBuf = 2048;

    void open(const char* name, const OpenOptions& opts) {
        auto d = Device::open(address_of(name).to_string(), opts);
        ASSERT_TRUE(d.ok()) << d.error().message;
        dev = std::move(*d);
        auto c = dev->create_cq(1024);
        ASSERT_TRUE(c.ok()) << c.error().message;
        cq = *c;
        QpInitAttr a;
        a.send_cq = a.recv_cq = cq;
        a.caps.max_send_sge = 2;
        a.caps.max_recv_wr = kRecvSlots;
        auto q = dev->create_qp(a);
        ASSERT_TRUE(q.ok()) << q.error().message;
        qp = *q;
        const size_t len = size_t(kSendSlots + kRecvSlots) * kBuf;
        if (opts.backend == IommuBackend::noiommu) {
            // Without an IOMMU the device sees physical addresses: only memory inside one
            // hugepage of an arena is contiguous. Elsewhere: plain user memory, pinned.
            auto arena = dev->pd().create_arena(len);
            ASSERT_TRUE(arena.ok()) << arena.error().message;
            data = (*arena)->data();
        } else {
            mem = std::make_unique<UserBuffer>(len);
            data = mem->data;
        }
        auto m = dev->pd().register_memory(data, len, dma::Access::local_write);
        ASSERT_TRUE(m.ok()) << m.error().message;
        mr = *m;
    }
    TrafficSide sender() const { return {dev->attr().mac, data, mr.lkey, kSendSlots}; }
    TrafficSide receiver() const { return {dev->attr().mac, data + size_t(kSendSlots) * kBuf, mr.lkey, qp->caps().max_recv_wr}; }
};

class VfabApi : public ::testing::TestWithParam<std::tuple<IommuBackend, Source>> {
protected:
    void SetUp() override {
        opts.backend = std::get<0>(GetParam());
        opts.provider_dir = std::get<1>(GetParam()) == Source::plugin ? plugin_dir() : empty_dir();
        ASSERT_NO_FATAL_FAILURE(nic0.open("e1000e-0", opts));
        ASSERT_NO_FATAL_FAILURE(nic1.open("e1000e-1", opts));
    }
    OpenOptions opts;
    VfabNic nic0, nic1;
};

TEST_P(VfabApi, TheProviderIsPickedByTheDevicesId) {
    const DeviceAttr& a = nic0.dev->attr();
    EXPECT_EQ(a.provider, "e1000e");
    EXPECT_EQ(a.vendor_id, 0x8086);
    EXPECT_EQ(a.device_id, 0x10d3);
    EXPECT_EQ(a.address, address_of("e1000e-0"));
    EXPECT_TRUE(nic0.dev->link().up);
    auto p = provider::find_provider(0x8086, 0x10d3, opts);
    ASSERT_TRUE(p.ok()) << p.error().message;
    const std::string code = code_file(nic0.dev.get());
    if (std::get<1>(GetParam()) == Source::plugin) {
        EXPECT_EQ(p->origin, opts.provider_dir + "/libvfab-e1000e.so");
        EXPECT_EQ(fs::path(code).filename(), "libvfab-e1000e.so") << code;
    } else {
        EXPECT_EQ(p->origin, "built in");
        EXPECT_NE(fs::path(code).filename().string().find("libvfab.so"), std::string::npos) << code;
    }
    std::printf("provider e1000e from %s (code in %s)\n", p->origin.c_str(), code.c_str());
}

TEST_P(VfabApi, HundredThousandFramesArriveIntactAndInOrder) {
    TrafficResult r = run_traffic(*nic0.qp, *nic0.cq, *nic1.qp, *nic1.cq, nic0.sender(), nic1.receiver(), 100000);
    ASSERT_TRUE(r.error.empty()) << r.error;
    EXPECT_EQ(r.frames, 100000u);
    std::printf("e1000e multiplexed (%s): %lu frames NIC0 -> NIC1 in %.2f s (%.0f frames/s)\n",
                std::get<1>(GetParam()) == Source::plugin ? "plugin" : "built in", (unsigned long)r.frames, r.seconds,
                double(r.frames) / r.seconds);
    DeviceStats tx = nic0.dev->stats(), rx = nic1.dev->stats();
    EXPECT_EQ(tx.tx_packets, 100000u);
    EXPECT_EQ(rx.rx_packets, 100000u);
    EXPECT_EQ(rx.rx_missed, 0u);
    EXPECT_GT(rx.rx_bytes, 100000u * 60);
}

TEST_P(VfabApi, DestroyedQueuesAnswerEnodev) {
    EXPECT_EQ(nic0.cq->destroy().error().code, EBUSY);
    ASSERT_TRUE(nic0.qp->destroy().ok());
    EXPECT_EQ(nic0.qp->state(), QpState::destroyed);
    Sge sge{reinterpret_cast<uint64_t>(nic0.data), 64, nic0.mr.lkey};
    SendWr wr{1, &sge, 1, send_signaled};
    EXPECT_EQ(nic0.qp->post_send({&wr, 1}).error, ENODEV);
    ASSERT_TRUE(nic0.cq->destroy().ok());
    Completion wc[4];
    EXPECT_EQ(nic0.cq->poll(wc), -ENODEV);
    EXPECT_EQ(nic0.qp->destroy().error().code, ENODEV);
}

std::vector<std::tuple<IommuBackend, Source>> params() {
    std::vector<std::tuple<IommuBackend, Source>> out;
    for (IommuBackend b : backends())
        for (Source s : {Source::builtin, Source::plugin}) out.emplace_back(b, s);
    return out;
}

INSTANTIATE_TEST_SUITE_P(Lab, VfabApi, ::testing::ValuesIn(params()), [](const auto& info) {
    return std::string(vfio::to_string(std::get<0>(info.param))) +
           (std::get<1>(info.param) == Source::plugin ? "_plugin" : "_builtin");
});

// What Device::open says when it cannot help.
TEST(VfabOpen, ErrorsNameTheDeviceAndTheWayOut) {
    OpenOptions o;
    o.provider_dir = empty_dir();
    auto edu = Device::open("0000:00:01.0", o);
    ASSERT_FALSE(edu.ok());
    EXPECT_NE(edu.error().message.find("0000:00:01.0 (1234:11e8): no vfab provider for PCI ID 1234:11e8 — known providers: "
                                       "e1000e (8086:10d3 8086:10f6, built in)"),
              std::string::npos)
        << edu.error().message;
    o.provider = "virtio-nope";
    auto named = Device::open("0000:00:02.0", o);
    ASSERT_FALSE(named.ok());
    EXPECT_NE(named.error().message.find("no vfab provider named 'virtio-nope'"), std::string::npos)
        << named.error().message;
    auto absent = Device::open("0000:07:00.0");
    ASSERT_FALSE(absent.ok());
    EXPECT_NE(absent.error().message.find("no PCI device 0000:07:00.0"), std::string::npos) << absent.error().message;
}

}  // namespace
}  // namespace vfab::lab
