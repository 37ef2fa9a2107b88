// The e1000e driver's fast path (post_send, post_recv, poll) over plain memory, with a
// minimal model of what the 82574L does with the rings: fetch transmit descriptors up to TDT
// and write back DD, and deliver each transmitted frame into the next receive descriptor up
// to RDT (a loopback), writing the extended write-back format (datasheet §7.1.5.2).
// IOVA = VA, so the "device" reads and writes memory directly.
//
// For unit tests of descriptor encoding and completion handling, and for bench/'s
// instruction counts of the driver's own code (no device, no MMIO cost).
#pragma once

#include <cstdlib>
#include <cstring>
#include <vector>

#include "vfab/drivers/e1000e.hpp"

namespace vfab::e1000e {

struct FastPathHarness {
    static constexpr size_t kBarSize = 128 * 1024;

    std::vector<uint8_t> bar = std::vector<uint8_t>(kBarSize);
    dma::MrTable table = *dma::MrTable::create(64);
    QueuePair qp;
    CompletionQueue cq;
    uint8_t* ring_mem = nullptr;
    uint32_t rx_status_extra = 0;    // OR'ed into every receive write-back (tests of errors)
    uint32_t device_tdh = 0, device_rdh = 0;
    std::vector<uint8_t> frame;      // gathered transmit frame

    FastPathHarness(uint32_t send_depth, uint32_t recv_depth, uint32_t max_send_sge = 2) {
        const uint32_t sq = std::bit_ceil(std::max(send_depth, 8u));
        const uint32_t tx = std::bit_ceil(sq * (max_send_sge + 1) + 1);
        const uint32_t rx = std::bit_ceil(std::max(recv_depth + 1, 8u));
        // aligned_alloc wants a size that is a multiple of the alignment
        ring_mem = static_cast<uint8_t*>(std::aligned_alloc(4096, (size_t(tx + rx) * 16 + 4095) & ~size_t(4095)));
        std::memset(ring_mem, 0, (tx + rx) * 16);
        qp.rx_ = reinterpret_cast<RxDesc*>(ring_mem);
        qp.tx_ = reinterpret_cast<TxDataDesc*>(ring_mem + rx * 16);
        qp.rx_mask_ = rx - 1;
        qp.tx_mask_ = tx - 1;
        qp.sq_storage_.resize(sq);
        qp.rq_storage_.resize(rx);
        qp.sq_ = qp.sq_storage_.data();
        qp.rq_ = qp.rq_storage_.data();
        qp.sq_mask_ = sq - 1;
        qp.rq_mask_ = rx - 1;
        qp.caps_ = {sq, rx - 1, max_send_sge, 1};
        qp.bar_ = bar.data();
        qp.mrs_ = &table;
        qp.send_cq_ = qp.recv_cq_ = &cq;
        cq.send_qp_ = cq.recv_qp_ = &qp;
        frame.reserve(16384);
    }
    ~FastPathHarness() { std::free(ring_mem); }
    FastPathHarness(const FastPathHarness&) = delete;
    FastPathHarness& operator=(const FastPathHarness&) = delete;

    // Registers [p, p + len) at IOVA = VA.
    uint32_t register_memory(void* p, uint64_t len, dma::Access access = dma::Access::local_write) {
        dma::MrEntry e{reinterpret_cast<uint64_t>(p), len, Iova(reinterpret_cast<uint64_t>(p)), access};
        return table.add(e)->lkey;
    }

    uint32_t reg(uint32_t off) const {
        uint32_t v;
        std::memcpy(&v, bar.data() + off, 4);
        return v;
    }
    TxDataDesc& tx_desc(uint32_t i) { return qp.tx_[i & qp.tx_mask_]; }
    RxDesc& rx_desc(uint32_t i) { return qp.rx_[i & qp.rx_mask_]; }
    void set_state(QpState s) { qp.state_ = s; }

    // The device: transmit everything up to TDT; each frame is looped back into the next
    // receive buffer if one is posted (else dropped, as on a real port with no buffer).
    // Returns the number of frames transmitted.
    uint32_t device_step() {
        const uint32_t tdt = reg(reg::TDT), rdt = reg(reg::RDT);
        uint32_t frames = 0;
        while (device_tdh != tdt) {
            TxDataDesc& d = qp.tx_[device_tdh];
            device_tdh = (device_tdh + 1) & qp.tx_mask_;
            if (!(d.cmd_len & txd::DTYP_DATA)) continue;   // a context descriptor
            const auto* src = reinterpret_cast<const uint8_t*>(d.buffer_addr);
            frame.insert(frame.end(), src, src + (d.cmd_len & txd::kMaxDataLen));
            if (d.cmd_len & txd::CMD_RS) d.status |= txd::STA_DD;
            if (!(d.cmd_len & txd::CMD_EOP)) continue;
            ++frames;
            if (device_rdh != rdt) {
                RxDesc& r = qp.rx_[device_rdh];
                device_rdh = (device_rdh + 1) & qp.rx_mask_;
                std::memcpy(reinterpret_cast<void*>(r.read.buffer_addr), frame.data(), frame.size());
                r.wb = {};
                r.wb.length = uint16_t(frame.size());
                r.wb.status_error = rxd::DD | rxd::EOP | rx_status_extra;
            }
            frame.clear();
        }
        return frames;
    }
};

}  // namespace vfab::e1000e
