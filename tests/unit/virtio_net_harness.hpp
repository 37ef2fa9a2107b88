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
            // The frame: after the header's descriptor, or after the header in one descriptor.
            const auto& bufs = tx_dev.pending().front().bufs;
            const uint32_t len = bufs.size() > 1 ? bufs[1].len : bufs.empty() ? 0 : bufs[0].len - kNetHdrSize;
            tx_dev.use(0, 0);
            if (!rx_dev.pending().empty()) rx_dev.use(0, uint32_t(sizeof(virtio::NetHdr)) + len);
            ++frames;
        }
        return frames;
    }
};

// The queue pair over the model's rings, through the public ring constructor.
struct FastPathHarness {
    dma::MrTable table = *dma::MrTable::create(16);
    CompletionQueue cq;
    uint16_t doorbell = 0;   // where the "notify" stores land
    uint8_t* hdrs;
    QueuePair qp;

    // headroom: QpInitAttr::hdr_in_headroom (one descriptor per WR, twice the WRs). bell: where
    // the notifications go instead of `doorbell` (bench/mmio_counter.hpp counts them there).
    template <class Q, class D>
    FastPathHarness(LoopbackRings<Q, D>& rings, uint32_t size, virtio::RingFeatures f, bool headroom = false,
                    uint16_t* bell = nullptr)
        // aligned_alloc wants a size that is a multiple of the alignment.
        : hdrs(static_cast<uint8_t*>(std::aligned_alloc(4096, (size_t(2) * size * kHdrSlot + 4095) & ~size_t(4095)))),
          qp(QueueRings<Q>{.rx = std::move(*Q::create(size, rings.rx_mem.queue_memory(), f)),
                           .tx = std::move(*Q::create(size, rings.tx_mem.queue_memory(), f)),
                           .rx_hdrs = hdrs,
                           .rx_hdr_iova = reinterpret_cast<uint64_t>(hdrs),
                           .tx_hdrs = hdrs + size_t(size) * kHdrSlot,
                           .tx_hdr_iova = reinterpret_cast<uint64_t>(hdrs + size_t(size) * kHdrSlot),
                           .rx_bell = {bell ? bell : &doorbell, -1, 0},
                           .tx_bell = {bell ? bell : &doorbell, -1, 1},
                           .mrs = &table,
                           .caps = headroom ? QpCaps{size, size, 1, 1} : QpCaps{size / 2, size / 2, 1, 1},
                           .hdr_in_headroom = headroom},
             cq) {}
    ~FastPathHarness() { std::free(hdrs); }
    FastPathHarness(const FastPathHarness&) = delete;
    FastPathHarness& operator=(const FastPathHarness&) = delete;

    uint32_t register_memory(void* p, uint64_t len) {
        dma::MrEntry e{reinterpret_cast<uint64_t>(p), len, Iova(reinterpret_cast<uint64_t>(p)), dma::Access::local_write};
        return table.add(e)->lkey;
    }
};

}  // namespace vfab::virtio_net
