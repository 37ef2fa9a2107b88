// Peer-to-peer DMA into another device's memory (docs/rdma-p2p.md): QEMU's ivshmem-plain at
// 0000:00:0b.0, whose BAR 2 is 16 MiB of memory, stands in for a GPU's BAR. Its BAR, mmapped
// through VFIO, is registered in the protection domains of two NICs — e1000e and virtio-net,
// through libvfab — (register_device_memory):
//   - the NICs DMA a frame out of the BAR and into it, the CPU writing and checking both ends
//     through the same mapping;
//   - the RDMA transport takes a peer's WRITE, READ and FETCH_ADD on an MR in the BAR;
//   - with iommufd (the iommufd kernel), which cannot map device memory without dma-bufs, the
//     registration fails with what to do, and the port reports no P2P capability.
#include <gtest/gtest.h>

#include <cstring>

#include "../unit/rdma_connect.hpp"
#include "frames.hpp"
#include "lab_env.hpp"
#include "vfab/vfio/device.hpp"
#include "vfab/vfab.hpp"

namespace vfab::lab {
namespace {

using namespace std::chrono_literals;
namespace rdma = vfab::rdma;

constexpr uint32_t kBar = 2;
constexpr uint64_t kMiB = 1 << 20;
constexpr dma::Access kRw = dma::Access::local_write | dma::Access::remote_write | dma::Access::remote_read |
                            dma::Access::remote_atomic;

struct NicPair {
    const char* a;
    const char* b;
};

class P2p : public ::testing::TestWithParam<NicPair> {
protected:
    void SetUp() override {
        if (!in_lab()) GTEST_SKIP() << "needs the lab (scripts/lab)";
        if (!iommu_on()) GTEST_SKIP() << "device memory needs an IOMMU (no-IOMMU mode has no bus address for it)";
        if (!present("ivshmem")) GTEST_SKIP() << "no ivshmem in this lab";
    }
    // ivshmem opened through VFIO (its own container: type1 maps its BAR's mmap for any
    // device of the process) and its BAR 2 mapped.
    void open_memory() {
        vfio::DeviceOptions o;
        o.backend = vfio::IommuBackend::legacy;
        auto d = vfio::Device::open(address_of("ivshmem"), o);
        ASSERT_TRUE(d) << d.error().message;
        memdev_ = std::move(*d);
        auto bar = memdev_->region(kBar);
        ASSERT_TRUE(bar) << bar.error().message;
        ASSERT_TRUE((*bar)->fully_mapped());
        ASSERT_EQ((*bar)->size(), 16 * kMiB);
        bar_ = const_cast<uint8_t*>((*bar)->base());
    }
    std::unique_ptr<vfab::Device> open_nic(const char* name, vfio::IommuBackend backend) {
        OpenOptions o;
        o.backend = backend;
        auto d = vfab::Device::open(address_of(name).to_string(), o);
        EXPECT_TRUE(d) << d.error().message;
        return d ? std::move(*d) : nullptr;
    }
    std::shared_ptr<vfio::Device> memdev_;
    uint8_t* bar_ = nullptr;
};

TEST_P(P2p, NicsSendFromAndReceiveIntoAnotherDevicesBar) {
    ASSERT_NO_FATAL_FAILURE(open_memory());
    auto a = open_nic(GetParam().a, vfio::IommuBackend::legacy);
    auto b = open_nic(GetParam().b, vfio::IommuBackend::legacy);
    ASSERT_TRUE(a && b);
    auto tx_mr = a->pd().register_device_memory(memdev_, kBar, 0, kMiB, dma::Access::local_write);
    ASSERT_TRUE(tx_mr) << tx_mr.error().message;
    auto rx_mr = b->pd().register_device_memory(memdev_, kBar, kMiB, kMiB, dma::Access::local_write);
    ASSERT_TRUE(rx_mr) << rx_mr.error().message;
    EXPECT_TRUE(tx_mr->device_memory && rx_mr->device_memory);
    EXPECT_EQ(tx_mr->addr, bar_);

    auto acq = a->create_cq(64), bcq = b->create_cq(64);
    ASSERT_TRUE(acq && bcq);
    QpInitAttr qa;
    qa.caps = {64, 64, 1, 1};   // a virtqueue needs a descriptor more per WR
    qa.send_cq = qa.recv_cq = *acq;
    auto aqp = a->create_qp(qa);
    qa.send_cq = qa.recv_cq = *bcq;
    auto bqp = b->create_qp(qa);
    ASSERT_TRUE(aqp) << aqp.error().message;
    ASSERT_TRUE(bqp) << bqp.error().message;
    std::memset(bar_ + kMiB, 0, 4096);
    Sge r{reinterpret_cast<uint64_t>(bar_ + kMiB), 2048, rx_mr->lkey};
    RecvWr rw{1, &r, 1, 0};
    ASSERT_TRUE((*bqp)->post_recv(std::span(&rw, 1)));

    // A frame written by the CPU into the BAR: to b, EtherType 0x88b5 (local experimental).
    constexpr uint32_t kLen = 1014;
    std::memcpy(bar_, b->attr().mac, 6);
    std::memcpy(bar_ + 6, a->attr().mac, 6);
    bar_[12] = 0x88;
    bar_[13] = 0xb5;
    for (uint32_t i = 14; i < kLen; ++i) bar_[i] = uint8_t(i * 7 + 1);
    Sge s{reinterpret_cast<uint64_t>(bar_), kLen, tx_mr->lkey};
    SendWr sw{2, &s, 1, send_signaled};
    ASSERT_TRUE((*aqp)->post_send(std::span(&sw, 1)));
    Completion c{};
    bool sent = false, received = false;
    const auto end = std::chrono::steady_clock::now() + 10s;
    while ((!sent || !received) && std::chrono::steady_clock::now() < end) {
        if ((*acq)->poll(std::span(&c, 1)) == 1) {
            EXPECT_EQ(c.status, WcStatus::success);
            sent = true;
        }
        if ((*bcq)->poll(std::span(&c, 1)) == 1) {
            EXPECT_EQ(c.status, WcStatus::success);
            EXPECT_EQ(c.byte_len, kLen);
            received = true;
        }
    }
    ASSERT_TRUE(sent && received);
    // The NIC wrote it into the BAR: the CPU reads it there, byte for byte.
    EXPECT_EQ(std::memcmp(bar_ + kMiB, bar_, kLen), 0);
    (void)(*aqp)->destroy();
    (void)(*bqp)->destroy();
    ASSERT_TRUE(a->pd().deregister(*tx_mr));
    ASSERT_TRUE(b->pd().deregister(*rx_mr));
}

TEST_P(P2p, RdmaWritesReadsAndAtomicsOnAnMrInTheBar) {
    ASSERT_NO_FATAL_FAILURE(open_memory());
    auto da = open_nic(GetParam().a, vfio::IommuBackend::legacy);
    auto db = open_nic(GetParam().b, vfio::IommuBackend::legacy);
    ASSERT_TRUE(da && db);
    rdma::PortConfig ca, cb;
    ca.ipv4 = 0x0a630001;
    cb.ipv4 = 0x0a630002;
    auto pa = rdma::Port::create(*da, ca);
    auto pb = rdma::Port::create(*db, cb);
    ASSERT_TRUE(pa && pb);
    EXPECT_TRUE((*pb)->query_device().vfab_caps & rdma::vfab_cap_p2p_memory);
    std::vector<uint8_t> ma(1 << 20), mb(4096);
    rdma::test::Side a = rdma::test::make_side(**pa, rdma::QpType::rc, ma);
    rdma::test::Side b = rdma::test::make_side(**pb, rdma::QpType::rc, mb);
    rdma::test::connect_rc(a, b, 0x111, 0x222, 3, 16, 7);
    rdma::test::connect_rc(b, a, 0x222, 0x111, 3, 16, 7);
    auto bar_mr = (*pb)->pd().register_device_memory(memdev_, kBar, 4 * kMiB, kMiB, kRw);
    ASSERT_TRUE(bar_mr) << bar_mr.error().message;

    constexpr uint32_t kLen = 65536;
    for (uint32_t i = 0; i < kLen; ++i) ma[i] = uint8_t(i * 13 + (i >> 9));
    std::memset(bar_ + 4 * kMiB, 0, kLen);
    Sge s{reinterpret_cast<uint64_t>(ma.data()), kLen, a.mr.lkey};
    rdma::RdmaSendWr w = rdma::test::wr_of(rdma::WrOpcode::rdma_write, 1, &s);
    w.remote_addr = reinterpret_cast<uint64_t>(bar_mr->addr);
    w.rkey = bar_mr->rkey;
    ASSERT_TRUE(a.qp->post_send(std::span(&w, 1)));
    auto wc = rdma::test::wait_wc(a, b, 1, 60s);
    ASSERT_EQ(wc.size(), 1u);
    ASSERT_EQ(wc[0].status, rdma::RdmaWcStatus::success) << rdma::to_string(wc[0].status);
    EXPECT_EQ(std::memcmp(bar_ + 4 * kMiB, ma.data(), kLen), 0) << "the WRITE is in the BAR";

    for (uint32_t i = 0; i < kLen; ++i) bar_[4 * kMiB + i] = uint8_t(i * 3 + 7);   // the other device's data
    Sge back{reinterpret_cast<uint64_t>(ma.data() + kLen), kLen, a.mr.lkey};
    rdma::RdmaSendWr rd = rdma::test::wr_of(rdma::WrOpcode::rdma_read, 2, &back);
    rd.remote_addr = w.remote_addr;
    rd.rkey = bar_mr->rkey;
    ASSERT_TRUE(a.qp->post_send(std::span(&rd, 1)));
    wc = rdma::test::wait_wc(a, b, 1, 60s);
    ASSERT_EQ(wc.size(), 1u);
    ASSERT_EQ(wc[0].status, rdma::RdmaWcStatus::success);
    EXPECT_EQ(std::memcmp(ma.data() + kLen, bar_ + 4 * kMiB, kLen), 0) << "the READ came from the BAR";

    uint64_t* counter = reinterpret_cast<uint64_t*>(bar_ + 5 * kMiB - 8);
    *counter = 40;
    Sge res{reinterpret_cast<uint64_t>(ma.data()), 8, a.mr.lkey};
    rdma::RdmaSendWr fa = rdma::test::wr_of(rdma::WrOpcode::atomic_fetch_and_add, 3, &res);
    fa.remote_addr = reinterpret_cast<uint64_t>(counter);
    fa.rkey = bar_mr->rkey;
    fa.compare_add = 2;
    ASSERT_TRUE(a.qp->post_send(std::span(&fa, 1)));
    wc = rdma::test::wait_wc(a, b, 1, 60s);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, rdma::RdmaWcStatus::success);
    EXPECT_EQ(*counter, 42u);
    pa->reset();
    pb->reset();
}

TEST_P(P2p, IommufdSaysWhatDeviceMemoryNeeds) {
    if (flavor() != "iommufd") GTEST_SKIP() << "iommufd is in the iommufd lab kernel";
    ASSERT_NO_FATAL_FAILURE(open_memory());
    auto nic = open_nic(GetParam().a, vfio::IommuBackend::iommufd);
    ASSERT_TRUE(nic);
    EXPECT_FALSE(nic->pd().maps_device_memory());
    auto r = nic->pd().register_device_memory(memdev_, kBar, 0, kMiB, dma::Access::local_write);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ENOTSUP);
    EXPECT_NE(r.error().message.find("dma-buf"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("VFAB_IOMMU_BACKEND=legacy"), std::string::npos) << r.error().message;
    auto port = rdma::Port::create(*nic, rdma::PortConfig{.ipv4 = 0x0a630003});
    ASSERT_TRUE(port);
    EXPECT_FALSE((*port)->query_device().vfab_caps & rdma::vfab_cap_p2p_memory);
}

INSTANTIATE_TEST_SUITE_P(Lab, P2p,
                         ::testing::Values(NicPair{"e1000e-0", "e1000e-1"}, NicPair{"virtio-net", "virtio-net-1"}),
                         [](const auto& info) { return std::string(info.param.a[0] == 'e' ? "e1000e" : "virtio_net"); });

}  // namespace
}  // namespace vfab::lab
