// The 82576's queue pairs and completion queues (igb family, datasheet §7.1 receive, §7.2
// transmit, advanced descriptors), shared by the physical function's driver (igb.hpp) and the
// virtual function's (igbvf.hpp), whose queues have the same layout. The fast path is inline:
// no virtual call, no allocation, errors are return codes.
//
// Thread model: one thread at a time per queue pair / completion queue (no locks on the fast
// path; different queue pairs on different threads need nothing); control calls are
// thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cerrno>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "vfab/dma/dma_arena.hpp"
#include "vfab/dma/protection_domain.hpp"
#include "vfab/drivers/common/completion_queue.hpp"
#include "vfab/drivers/igb/descriptors.hpp"
#include "vfab/drivers/intel/queue_pair.hpp"
#include "vfab/drivers/intel/queue_set.hpp"
#include "vfab/mmio.hpp"
#include "vfab/net/checksum.hpp"
#include "vfab/types.hpp"

namespace vfab::igb {

inline constexpr uint32_t kMaxSendSge = intel::kMaxSendSge;
inline constexpr uint32_t kMaxQueueDepth = intel::kMaxQueueDepth;
inline constexpr uint32_t kEthHeader = intel::kEthHeader;

// The 82576's side of the Intel queue core (intel::QueuePairCore): advanced descriptors
// (§7.1.5, §7.2.2), checksum context in slot 0, IEEE 1588 latches.
struct FastPathHarness;
struct QueueTraits {
    using Harness = FastPathHarness;   // unit tests and bench/: the fast path over plain memory
    using TxDesc = igb::TxDesc;
    using TxContextDesc = igb::TxContextDesc;
    using RxDesc = igb::RxDesc;
    struct TxContext {   // what the device's context slot 0 holds (§7.2.2.2)
        uint32_t vlan_macip_lens, type_tucmd;
        // post_send writes a context descriptor only when the context changes.
        bool operator==(const TxContext&) const = default;
    };
    static constexpr uint32_t kRxDD = rxd::DD, kRxEOP = rxd::EOP, kRxErrFrame = rxd::ERR_FRAME;

    // The device wrote DD back into olinfo_status (RS is set on a packet's last data
    // descriptor), §7.2.2.3.
    static bool tx_done(const volatile TxDesc& d) noexcept { return d.olinfo_status & txd::STA_DD; }
    // send_ip_csum's context (§7.2.2.2): MACLEN l3, IPLEN l4 - l3, TUCMD IPv4 and L4T (TCP or
    // UDP); popts TXSM and IXSM (IPv4). False when MACLEN (7 bits) or IPLEN (9) cannot hold them.
    static bool make_context(const net::L4Offsets& o, TxContext& ctx, uint32_t& popts) noexcept {
        if (o.l3 > 127 || o.l4 - o.l3 > 511) return false;   // MACLEN is 7 bits, IPLEN 9
        ctx.vlan_macip_lens = uint32_t(o.l4 - o.l3) | uint32_t(o.l3) << txd::MACLEN_SHIFT;
        ctx.type_tucmd = txd::DTYP_CONTEXT | txd::CMD_DEXT | (o.ipv4 ? txd::TUCMD_IPV4 : 0) | (o.tcp ? txd::TUCMD_L4T_TCP : 0);
        popts = txd::POPTS_TXSM | (o.ipv4 ? txd::POPTS_IXSM : 0);
        return true;
    }
    // The advanced context descriptor for slot 0 (IDX 0), §7.2.2.2.
    static void write_context(TxContextDesc& c, const TxContext& ctx) noexcept { c = {ctx.vlan_macip_lens, 0, ctx.type_tucmd, 0}; }
    // An advanced data descriptor (§7.2.2.3) for one SGE: the FCS inserted, EOP on the
    // packet's last; on its first PAYLEN (the frame's bytes), popts and send_timestamp's TSTAMP.
    // RS: report_status().
    static void write_data(TxDesc& d, uint64_t iova, uint32_t len, bool first, bool last, uint32_t total, uint32_t popts,
                           uint32_t flags) noexcept {
        static_assert(txd::CMD_TSTAMP == uint32_t(send_timestamp) << 11);
        d.buffer_addr = iova;
        // The timestamp request, PAYLEN and the offload options go in the packet's first
        // data descriptor only.
        d.cmd_type_len = len | txd::DTYP_DATA | txd::CMD_DEXT | txd::CMD_IFCS | (last ? txd::CMD_EOP : 0) |
                         (first ? (flags & send_timestamp) << 11 : 0);
        d.olinfo_status = first ? total << txd::PAYLEN_SHIFT | popts : 0;
    }
    // RS on a post's last descriptor: the device writes it back done (DD, §7.2.2.3), and no
    // other.
    static void report_status(TxDesc& d) noexcept { d.cmd_type_len |= txd::CMD_RS; }
    // Hands the device a buffer: the advanced one-buffer read format (§7.1.5.1), no header
    // buffer, DD cleared.
    static void write_rx(RxDesc& d, uint64_t iova) noexcept {
        d.read.pkt_addr = iova;
        d.read.hdr_addr = 0;
    }
    // wc_ip_csum_ok: the device checked the IPv4 header and TCP/UDP checksums (IPCS, L4CS) and
    // found no error (IPE, L4E); never for IPv6.
    static bool rx_csum_ok(uint32_t se) noexcept {
        return (se & (rxd::IPCS | rxd::L4CS)) == (rxd::IPCS | rxd::L4CS) && !(se & (rxd::ERR_IPE | rxd::ERR_L4E));
    }
    // wc_timestamped when the device latched the frame's arrival time (TS, §7.9): read it with
    // igb::Device::take_rx_timestamp().
    static uint32_t rx_any_flags(uint32_t se) noexcept { return se & rxd::TS ? uint32_t(wc_timestamped) : 0; }
};

using CompletionQueue = intel::CompletionQueue<QueueTraits>;
using QueuePair = intel::QueuePair<QueueTraits>;
using QpInitAttr = intel::QpInitAttr<QueueTraits>;


}  // namespace vfab::igb
