// Both lab e1000e NICs opened with vfab's direct driver, each with one CQ, one QP and
// registered user memory for 256 send and 512 receive buffers.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "frames.hpp"
#include "lab_env.hpp"
#include "traffic.hpp"
#include "vfab/drivers/e1000e.hpp"

namespace vfab::lab {

struct E1000eNic {
    // Declared first so it is freed last: the device is closed (quiesced) before the memory
    // it may DMA into goes back to the allocator.
    std::unique_ptr<UserBuffer> mem;
    std::unique_ptr<e1000e::Device> dev;
    e1000e::CompletionQueue* cq = nullptr;
    e1000e::QueuePair* qp = nullptr;
    dma::MemoryRegion mr;
    uint8_t* data = nullptr;   // the registered buffers (user memory, or an arena)
    size_t size = 0;

    static constexpr uint32_t kSendSlots = 256, kRecvSlots = 511, kBuf = 2048;

    // Opens `name` ("e1000e-0"); failures are recorded with gtest and leave dev empty.
    void open(const char* name, vfio::IommuBackend backend, e1000e::QpInitAttr extra = {}) {
        e1000e::DeviceOptions o;
        o.vfio.backend = backend;
        auto d = e1000e::Device::open(address_of(name), o);
        ASSERT_TRUE(d.ok()) << d.error().message;
        dev = std::move(*d);
        auto c = dev->create_cq(1024);
        ASSERT_TRUE(c.ok()) << c.error().message;
        cq = *c;
        extra.send_cq = extra.send_cq ? extra.send_cq : cq;
        extra.recv_cq = extra.recv_cq ? extra.recv_cq : cq;
        if (extra.caps.max_send_sge < 2) extra.caps.max_send_sge = 2;
        if (extra.caps.max_recv_wr == 256) extra.caps.max_recv_wr = kRecvSlots;
        auto q = dev->create_qp(extra);
        ASSERT_TRUE(q.ok()) << q.error().message;
        qp = *q;
        const size_t len = size_t(kSendSlots + kRecvSlots) * kBuf;
        uint8_t* base;
        if (backend == vfio::IommuBackend::noiommu) {
            // Without an IOMMU the device sees physical addresses: only memory inside one
            // hugepage of an arena is contiguous. Elsewhere: plain user memory, pinned.
            auto arena = dev->pd().create_arena(len);
            ASSERT_TRUE(arena.ok()) << arena.error().message;
            base = (*arena)->data();
        } else {
            mem = std::make_unique<UserBuffer>(len);
            base = mem->data;
        }
        data = base;
        size = len;
        auto m = dev->pd().register_memory(base, len, dma::Access::local_write);
        ASSERT_TRUE(m.ok()) << m.error().message;
        mr = *m;
    }
    uint8_t* send_buffers() const { return data; }
    uint8_t* recv_buffers() const { return data + size_t(kSendSlots) * kBuf; }
    uint64_t addr(size_t off = 0) const { return reinterpret_cast<uint64_t>(data + off); }
    TrafficSide sender() const { return {dev->attr().mac, send_buffers(), mr.lkey, kSendSlots}; }
    TrafficSide receiver() const { return {dev->attr().mac, recv_buffers(), mr.lkey, qp->caps().max_recv_wr}; }
};

}  // namespace vfab::lab
