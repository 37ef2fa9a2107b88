// The igb driver's fast path (post_send, post_recv, poll) over plain memory, with a model of
// what the 82576 does with one queue pair's rings: fetch transmit descriptors up to TDT
// (advanced data and context descriptors, datasheet §7.2.2), insert the checksums the
// context and POPTS ask for, write DD back into descriptors with RS, and deliver each frame
// into the next receive descriptor up to RDT (a loopback), in the advanced one-buffer
// write-back format (§7.1.5.2). IOVA = VA, so the "device" reads and writes memory directly.
//
// The model also checks what the driver wrote against the datasheet's rules and counts every
// departure in `violations` (tests expect none), so a descriptor the real device would
// misread fails here rather than only in the lab.
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
#include "vfab/drivers/igb.hpp"
#include "vfab/drivers/igb/regs.hpp"
#include "vfab/net/checksum.hpp"

namespace vfab::igb {

struct FastPathHarness {
    static constexpr size_t kBarSize = 128 * 1024;

    std::vector<uint8_t> bar = std::vector<uint8_t>(kBarSize);
    uint8_t* regs;   // the register space: bar's, or kBarSize bytes the caller gives (bench/mmio_counter.hpp)
    dma::MrTable table = *dma::MrTable::create(64);
    uint8_t* ring_mem = nullptr;
    uint32_t queue = 0;
    intel::RingView<QueueTraits> rings;
    CompletionQueue cq;
    QueuePair qp;
    uint32_t rx_status_extra = 0;    // OR'ed into every receive write-back (tests of errors)
    bool rx_eop = true;              // false: write-backs without EOP (a frame that did not fit)
    bool offload = true;             // insert the checksums POPTS asks for, as the device does
    uint32_t device_tdh = 0, device_rdh = 0;

    // What the model saw, for the tests.
    struct Seen {
        uint64_t contexts = 0;        // context descriptors fetched
        uint64_t data = 0;            // data descriptors fetched
        uint64_t frames = 0;          // EOPs
        uint64_t dropped = 0;         // frames with no receive descriptor
        uint64_t csum_frames = 0;     // frames with IXSM or TXSM
        uint64_t timestamped = 0;     // frames whose first descriptor asks for a timestamp
    } seen;
    std::vector<std::string> violations;
    std::vector<uint8_t> frame;      // the transmit frame being gathered
    std::vector<uint8_t> last_frame; // the last one transmitted, after checksum insertion

    // A loaded context (slot 0; the driver uses no other): valid once one was fetched.
    bool ctx_valid = false;
    TxContextDesc ctx{};

    // Rings sized as Device::create_qp sizes them; tx_entries (a power of 2) overrides the
    // transmit ring for tests of a full ring.
    FastPathHarness(uint32_t send_depth, uint32_t recv_depth, uint32_t max_send_sge = 2, uint32_t queue_index = 0,
                    uint32_t tx_entries = 0, uint8_t* registers = nullptr)
        : regs(registers ? registers : bar.data()), queue(queue_index),
          rings(model_rings(send_depth, recv_depth, max_send_sge, tx_entries)), qp(rings, cq) {
        frame.reserve(16384);
        last_frame.reserve(16384);
    }
    intel::RingView<QueueTraits> model_rings(uint32_t send_depth, uint32_t recv_depth, uint32_t max_send_sge,
                                             uint32_t tx_entries) {
        intel::RingView<QueueTraits> v{.bar = regs, .tdt = reg::TDT(queue), .rdt = reg::RDT(queue), .mrs = &table,
                                       .queue = queue, .rx_buffer = reg::kRxBufferSize};
        intel::model_rings(v, ring_mem, send_depth, recv_depth, max_send_sge, tx_entries);
        return v;
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
    uint32_t tdt() const { return reg(reg::TDT(queue)); }
    uint32_t rdt() const { return reg(reg::RDT(queue)); }
    TxDesc& tx_desc(uint32_t i) { return rings.tx[i & (rings.tx_entries - 1)]; }
    const TxContextDesc& ctx_desc(uint32_t i) { return *reinterpret_cast<const TxContextDesc*>(&tx_desc(i)); }
    RxDesc& rx_desc(uint32_t i) { return rings.rx[i & (rings.rx_entries - 1)]; }
    uint32_t tx_ring_size() const { return rings.tx_entries; }
    void set_state(QpState s) { qp.state_ = s; }
    void signal_all() { qp.sig_all_ = send_signaled; }
    void destroy_cq() { cq.destroyed_ = true; }
    bool cq_ready() const { return cq.has_ready(); }

    // The device: transmit everything up to TDT; each frame is looped back into the next
    // receive buffer if one is posted (else dropped, as on a port with no buffer; SRRCTL.DROP_EN).
    // Returns the number of frames transmitted.
    uint32_t device_step() {
        const uint32_t tdt = this->tdt(), rdt = this->rdt();
        uint32_t frames = 0, first_olinfo = 0, paylen = 0;
        bool first = true;
        while (device_tdh != tdt) {
            TxDesc& d = rings.tx[device_tdh];
            device_tdh = (device_tdh + 1) & (rings.tx_entries - 1);
            const uint32_t cmd = d.cmd_type_len;
            if (!(cmd & txd::CMD_DEXT)) violation("a legacy descriptor (DEXT clear)");
            if ((cmd & (0xfu << 20)) == txd::DTYP_CONTEXT) {
                fetch_context(*reinterpret_cast<const TxContextDesc*>(&d), first);
                continue;
            }
            if ((cmd & (0xfu << 20)) != txd::DTYP_DATA) {
                violation("descriptor type neither data nor context");
                continue;
            }
            ++seen.data;
            const uint32_t len = cmd & txd::kMaxDataLen;
            if (len == 0) violation("a data descriptor with DTALEN 0");
            if (!(cmd & txd::CMD_IFCS)) violation("IFCS clear: the frame would leave without an FCS");
            if (first) {
                // §7.2.2.3: PAYLEN (the whole frame without TSO) and POPTS come from the first
                // descriptor of a packet only.
                first_olinfo = d.olinfo_status;
                paylen = first_olinfo >> txd::PAYLEN_SHIFT;
                if (first_olinfo & 0xff) violation("STA/IDX bits set in a data descriptor");
                if (cmd & txd::CMD_TSTAMP) ++seen.timestamped;
            } else if (d.olinfo_status != 0) {
                violation("olinfo_status set in a packet's later descriptor");
            }
            if (!first && (cmd & txd::CMD_TSTAMP)) violation("TSTAMP in a packet's later descriptor (§7.2.2.3: first only)");
            first = false;
            const auto* src = reinterpret_cast<const uint8_t*>(d.buffer_addr);
            frame.insert(frame.end(), src, src + len);
            if (cmd & txd::CMD_RS) d.olinfo_status |= txd::STA_DD;   // dword3 | DD, as written back
            if (!(cmd & txd::CMD_EOP)) continue;
            if (paylen != frame.size()) violation("PAYLEN differs from the frame's length");
            ++frames;
            ++seen.frames;
            if (first_olinfo & (txd::POPTS_IXSM | txd::POPTS_TXSM)) insert_checksums(first_olinfo);
            last_frame = frame;
            if (device_rdh != rdt) {
                RxDesc& r = rings.rx[device_rdh];
                device_rdh = (device_rdh + 1) & (rings.rx_entries - 1);
                std::memcpy(reinterpret_cast<void*>(r.read.pkt_addr), frame.data(), frame.size());
                r.wb = {};
                r.wb.length = uint16_t(frame.size());
                r.wb.status_error = rxd::DD | (rx_eop ? rxd::EOP : 0) | rx_status_extra;
            } else {
                ++seen.dropped;
            }
            frame.clear();
            first = true;
        }
        if (!first) violation("TDT ends inside a packet (no EOP yet)");
        // RS on a post's last descriptor only: the one before TDT must have it, or the driver
        // would never see its frames complete.
        const TxDesc& newest = rings.tx[(tdt - 1) & (rings.tx_entries - 1)];
        if (frames != 0 && !(newest.cmd_type_len & txd::CMD_RS))
            violation("the descriptor before TDT without RS: the driver would never see its frames complete");
        return frames;
    }

private:
    void violation(const char* what) { violations.emplace_back(what); }

    // §7.2.2.2: a context descriptor sits between packets, never inside one.
    void fetch_context(const TxContextDesc& c, bool between_packets) {
        ++seen.contexts;
        if (!between_packets) violation("a context descriptor inside a packet");
        if ((c.mss_l4len_idx >> 4) & 7) violation("context IDX other than 0");
        ctx = c;
        ctx_valid = true;
    }

    // The device's checksum insertion: IXSM computes the IPv4 header checksum at MACLEN;
    // TXSM sums from MACLEN + IPLEN to the end of the frame, starting from the pseudo-header
    // sum software left in the checksum field (§7.2.5), and stores the complement there.
    void insert_checksums(uint32_t olinfo) {
        ++seen.csum_frames;
        if (!ctx_valid) {
            violation("checksum offload with no context loaded");
            return;
        }
        const uint32_t maclen = (ctx.vlan_macip_lens >> txd::MACLEN_SHIFT) & 0x7f;
        const uint32_t iplen = ctx.vlan_macip_lens & 0x1ff;
        const bool ipv4 = ctx.type_tucmd_mlhl & txd::TUCMD_IPV4, tcp = ctx.type_tucmd_mlhl & txd::TUCMD_L4T_TCP;
        const size_t l4 = maclen + iplen, csum = l4 + (tcp ? 16 : 6);
        if ((olinfo & txd::POPTS_IXSM) && !ipv4) violation("IXSM for a context that is not IPv4");
        if (csum + 2 > frame.size()) {
            violation("MACLEN + IPLEN point past the frame");
            return;
        }
        if (!offload) return;
        uint8_t* f = frame.data();
        if (olinfo & txd::POPTS_IXSM) net::store_be16(f + maclen + 10, net::ipv4_header_checksum(f + maclen));
        if (olinfo & txd::POPTS_TXSM) {
            uint16_t sum = uint16_t(~net::fold(net::sum16(f + l4, frame.size() - l4)));
            if (!tcp && sum == 0) sum = 0xffff;   // UDP: 0 means "no checksum"
            net::store_be16(f + csum, sum);
        }
    }
};

}  // namespace vfab::igb
