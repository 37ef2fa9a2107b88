// The multiplexed API picks the virtio-net provider by PCI ID (1af4:1041) and carries the same
// verified traffic as the direct API, 00:04.0 -> 00:06.0.
#include <gtest/gtest.h>

#include "frames.hpp"
#include "lab_env.hpp"
#include "traffic.hpp"
#include "vfab/vfab.hpp"

namespace vfab::lab {
namespace {

struct Nic {
    std::unique_ptr<UserBuffer> mem;   // freed after the device is closed
    std::unique_ptr<Device> dev;
    CompletionQueue* cq = nullptr;
    QueuePair* qp = nullptr;
    uint8_t* data = nullptr;
    dma::MemoryRegion mr;
    static constexpr uint32_t kSlots = 64, kBuf = 2048;

    void open(const char* name, const OpenOptions& opts) {
        auto d = Device::open(address_of(name).to_string(), opts);
        ASSERT_TRUE(d.ok()) << d.error().message;
        dev = std::move(*d);
        auto c = dev->create_cq(256);
        ASSERT_TRUE(c.ok()) << c.error().message;
        cq = *c;
        QpInitAttr a;
        a.send_cq = a.recv_cq = cq;
        a.caps = {kSlots, kSlots, 2, 1};
        auto q = dev->create_qp(a);
        ASSERT_TRUE(q.ok()) << q.error().message;
        qp = *q;
        const size_t len = size_t(2 * kSlots) * kBuf;
        if (opts.backend == vfio::IommuBackend::noiommu) {
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
    TrafficSide sender() const { return {dev->attr().mac, data, mr.lkey, qp->caps().max_send_wr}; }
    TrafficSide receiver() const { return {dev->attr().mac, data + size_t(kSlots) * kBuf, mr.lkey, qp->caps().max_recv_wr}; }
};

class VfabVirtioNet : public ::testing::TestWithParam<vfio::IommuBackend> {};

TEST_P(VfabVirtioNet, TheProviderIsPickedByIdAndCarriesTraffic) {
    OpenOptions opts;
    opts.backend = GetParam();
    Nic a, b;
    ASSERT_NO_FATAL_FAILURE(a.open("virtio-net", opts));
    ASSERT_NO_FATAL_FAILURE(b.open("virtio-net-1", opts));
    EXPECT_EQ(a.dev->attr().provider, "virtio-net");
    EXPECT_EQ(a.dev->attr().vendor_id, 0x1af4);
    TrafficResult r = run_traffic(*a.qp, *a.cq, *b.qp, *b.cq, a.sender(), b.receiver(), 20000);
    ASSERT_TRUE(r.error.empty()) << r.error;
    EXPECT_EQ(b.dev->stats().rx_packets, 20000u);
}

INSTANTIATE_TEST_SUITE_P(Lab, VfabVirtioNet, ::testing::ValuesIn(backends()), BackendName());

}  // namespace
}  // namespace vfab::lab
