// The e1000e driver's fast path (post_send, post_recv, poll) over plain memory, with a
// minimal model of what the 82574L does with the rings: fetch transmit descriptors up to TDT
// and write back DD, and deliver each transmitted frame into the next receive descriptor up
// to RDT (a loopback), writing the extended write-back format (datasheet §7.1.5.2).
// IOVA = VA, so the "device" reads and writes memory directly.
//
// For unit tests of descriptor encoding and completion handling, and for bench/'s
// instruction counts of the driver's own code (no device, no MMIO cost).
#pragma once

#include <bit>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "intel_ring_model.hpp"
#include "vfab/drivers/e1000e.hpp"
#include "vfab/drivers/e1000e/regs.hpp"

namespace vfab::e1000e {

struct FastPathHarness {
    static constexpr size_t kBarSize = 128 * 1024;

    std::vector<uint8_t> bar = std::vector<uint8_t>(kBarSize);
    uint8_t* regs;   // the register space: bar's, or kBarSize bytes the caller gives (bench/mmio_counter.hpp)
    dma::MrTable table = *dma::MrTable::create(64);
    uint8_t* ring_mem = nullptr;
    intel::RingView<QueueTraits> rings;
    CompletionQueue cq;
    QueuePair qp;
    uint32_t rx_status_extra = 0;    // OR'ed into every receive write-back (tests of errors)
    uint32_t device_tdh = 0, device_rdh = 0;
    std::vector<uint8_t> frame;      // gathered transmit frame
    std::vector<std::string> violations;   // what the device model found wrong

    // Rings sized as Device::create_qp sizes them.
    FastPathHarness(uint32_t send_depth, uint32_t recv_depth, uint32_t max_send_sge = 2, uint8_t* registers = nullptr)
        : regs(registers ? registers : bar.data()), rings(model_rings(send_depth, recv_depth, max_send_sge)), qp(rings, cq) {
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
        std::memcpy(&v, regs + off, 4);
        return v;
    }
    TxDataDesc& tx_desc(uint32_t i) { return rings.tx[i & (rings.tx_entries - 1)]; }
    RxDesc& rx_desc(uint32_t i) { return rings.rx[i & (rings.rx_entries - 1)]; }
    void set_state(QpState s) { qp.state_ = s; }

    intel::RingView<QueueTraits> model_rings(uint32_t send_depth, uint32_t recv_depth, uint32_t max_send_sge) {
        intel::RingView<QueueTraits> v{.bar = regs, .tdt = reg::TDT, .rdt = reg::RDT, .mrs = &table,
                                       .rx_buffer = reg::kRxBufferSize};
        intel::model_rings(v, ring_mem, send_depth, recv_depth, max_send_sge);
        return v;
    }

    // The device: transmit everything up to TDT; each frame is looped back into the next
    // receive buffer if one is posted (else dropped, as on a real port with no buffer).
    // Returns the number of frames transmitted.
    uint32_t device_step() {
        const uint32_t tdt = reg(reg::TDT), rdt = reg(reg::RDT);
        uint32_t frames = 0;
        while (device_tdh != tdt) {
            TxDataDesc& d = rings.tx[device_tdh];
            device_tdh = (device_tdh + 1) & (rings.tx_entries - 1);
            if (!(d.cmd_len & txd::DTYP_DATA)) continue;   // a context descriptor
            const auto* src = reinterpret_cast<const uint8_t*>(d.buffer_addr);
            frame.insert(frame.end(), src, src + (d.cmd_len & txd::kMaxDataLen));
            if (d.cmd_len & txd::CMD_RS) d.status |= txd::STA_DD;
            if (!(d.cmd_len & txd::CMD_EOP)) continue;
            ++frames;
            if (device_rdh != rdt) {
                RxDesc& r = rings.rx[device_rdh];
                device_rdh = (device_rdh + 1) & (rings.rx_entries - 1);
                std::memcpy(reinterpret_cast<void*>(r.read.buffer_addr), frame.data(), frame.size());
                r.wb = {};
                r.wb.length = uint16_t(frame.size());
                r.wb.status_error = rxd::DD | rxd::EOP | rx_status_extra;
            }
            frame.clear();
        }
        // RS on a post's last descriptor only: the one before TDT must have it, or the driver
        // would never see its sends complete.
        if (frames != 0 && !(rings.tx[(tdt - 1) & (rings.tx_entries - 1)].cmd_len & txd::CMD_RS))
            violations.emplace_back("the descriptor before TDT without RS");
        return frames;
    }
};

}  // namespace vfab::e1000e
