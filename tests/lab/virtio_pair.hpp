// The lab's virtio-net devices opened with vfab's direct driver: one CQ, one QP (64 sends of
// up to 2 SGEs, 64 receives) and registered memory for 64 send and 64 receive buffers.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "frames.hpp"
#include "lab_env.hpp"
#include "traffic.hpp"
#include "vfab/drivers/virtio_net.hpp"

namespace vfab::lab {

struct VirtioNic {
    std::unique_ptr<UserBuffer> mem;   // freed after the device is closed
    std::unique_ptr<virtio_net::Device> dev;
    virtio_net::CompletionQueue* cq = nullptr;
    virtio_net::QueuePair* qp = nullptr;
    dma::MemoryRegion mr;
    uint8_t* data = nullptr;
    static constexpr uint32_t kSlots = 64, kBuf = 2048, kRoom = 64;
    uint32_t room = 0;   // kRoom with the virtio-net header in the frames' headroom

    // in_order: negotiate VIRTIO_F_IN_ORDER when the device offers it (04.0 and 06.0 do).
    void open(const char* name, vfio::IommuBackend backend, virtio_net::RingFormat ring, bool headroom = false,
              bool in_order = true) {
        room = headroom ? kRoom : 0;
        virtio_net::DeviceOptions o;
        o.vfio.backend = backend;
        o.ring = ring;
        o.in_order = in_order;
        auto d = virtio_net::Device::open(address_of(name), o);
        ASSERT_TRUE(d.ok()) << d.error().message;
        dev = std::move(*d);
        ASSERT_EQ(dev->ring_format(), ring);
        auto c = dev->create_cq(256);
        ASSERT_TRUE(c.ok()) << c.error().message;
        cq = *c;
        virtio_net::QpInitAttr attr;
        attr.send_cq = attr.recv_cq = cq;
        attr.caps = {kSlots, kSlots, 2, 1};
        attr.hdr_in_headroom = headroom;
        auto q = dev->create_qp(attr);
        ASSERT_TRUE(q.ok()) << q.error().message;
        qp = *q;
        const size_t len = size_t(2 * kSlots) * kBuf;
        if (backend == vfio::IommuBackend::noiommu) {
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
    // At most kSlots buffers each way (with the header in headroom the queues hold more WRs).
    TrafficSide sender() const { return {dev->attr().mac, data, mr.lkey, std::min(kSlots, qp->caps().max_send_wr), room}; }
    TrafficSide receiver() const {
        return {dev->attr().mac, data + size_t(kSlots) * kBuf, mr.lkey, std::min(kSlots, qp->caps().max_recv_wr), room};
    }
};

}  // namespace vfab::lab
