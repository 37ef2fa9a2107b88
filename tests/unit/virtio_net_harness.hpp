// The virtio-net driver's fast path (post_send, post_recv, poll) over ring memory in this
// process, with the model devices of virtio_model.hpp playing the device: each frame fetched
// from the transmit queue is "received" into the next receive chain (length only: the bench
// counts the driver's instructions, not data movement). IOVA = VA. No device, no system call.
#pragma once

#include <cstdlib>
#include <memory>

#include "virtio_model.hpp"
#include "vfab/drivers/virtio_net.hpp"

namespace vfab::virtio_net {

template <class Q, class D>
struct LoopbackRings {
    virtio::model::RingMemory tx_mem, rx_mem;
    D tx_dev, rx_dev;
    LoopbackRings(uint32_t size, virtio::RingFeatures f)
        : tx_mem(Q::layout(size)), rx_mem(Q::layout(size)), tx_dev(tx_mem.queue_memory(), size, f),
          rx_dev(rx_mem.queue_memory(), size, f) {}
    // The device: every transmitted chain completes, its frame lands in the oldest receive chain.
    uint32_t step() {
        tx_dev.fetch();
        rx_dev.fetch();
        uint32_t frames = 0;
        while (!tx_dev.pending().empty()) {
            const uint32_t len = tx_dev.pending().front().bufs.size() > 1 ? tx_dev.pending().front().bufs[1].len : 0;
            tx_dev.use(0, 0);
            if (!rx_dev.pending().empty()) rx_dev.use(0, uint32_t(sizeof(virtio::NetHdr)) + len);
            ++frames;
        }
        return frames;
    }
};

struct FastPathHarness {
    dma::MrTable table = *dma::MrTable::create(16);
    QueuePair qp;
    CompletionQueue cq;
    uint16_t doorbell = 0;   // where the "notify" stores land
    uint8_t* hdrs = nullptr;

    template <class Q, class D>
    void attach(LoopbackRings<Q, D>& rings, uint32_t size, virtio::RingFeatures f, bool packed) {
        hdrs = static_cast<uint8_t*>(std::aligned_alloc(4096, size_t(2) * size * kHdrSlot));
        auto tx = Q::create(size, rings.tx_mem.queue_memory(), f);
        auto rx = Q::create(size, rings.rx_mem.queue_memory(), f);
        if constexpr (std::is_same_v<Q, virtio::PackedQueue>) {
            qp.ptx_.emplace(std::move(*tx));
            qp.prx_.emplace(std::move(*rx));
        } else {
            qp.stx_.emplace(std::move(*tx));
            qp.srx_.emplace(std::move(*rx));
        }
        qp.packed_ = packed;
        for (auto [ring, off] : {std::pair{&qp.rq_, size_t(0)}, std::pair{&qp.sq_, size_t(size) * kHdrSlot}}) {
            ring->slots.resize(size);
            ring->mask = size - 1;
            ring->hdrs = hdrs + off;
            ring->hdr_iova = reinterpret_cast<uint64_t>(hdrs + off);
        }
        qp.caps_ = {size / 2, size / 2, 1, 1};
        qp.mrs_ = &table;
        qp.tx_bell_ = {&doorbell, -1, 1};
        qp.rx_bell_ = {&doorbell, -1, 0};
        qp.send_cq_ = qp.recv_cq_ = &cq;
        cq.send_qp_ = cq.recv_qp_ = &qp;
    }
    ~FastPathHarness() { std::free(hdrs); }

    uint32_t register_memory(void* p, uint64_t len) {
        dma::MrEntry e{reinterpret_cast<uint64_t>(p), len, Iova(reinterpret_cast<uint64_t>(p)), dma::Access::local_write};
        return table.add(e)->lkey;
    }
};

}  // namespace vfab::virtio_net
