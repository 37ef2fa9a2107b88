// vfab's driver for the Intel 82574L (e1000e), direct API: final classes, the fast path
// (post_send, post_recv, poll) inline in this header, no virtual calls.
//
//   auto dev = vfab::e1000e::Device::open(*vfab::PciAddress::parse("0000:03:00.0"));
//   auto* cq = *(*dev)->create_cq(512);
//   auto* qp = *(*dev)->create_qp({.send_cq = cq, .recv_cq = cq});
//   auto mr = (*dev)->pd().register_memory(buf, len, vfab::dma::Access::local_write);
//   vfab::Sge sge{addr, 2048, mr->lkey};
//   vfab::RecvWr wr{.wr_id = 1, .sg_list = &sge, .num_sge = 1};
//   qp->post_recv({&wr, 1});
//   vfab::Completion wc[32];
//   int n = cq->poll(wc);
//
// The device owns its completion queues and queue pair (as an ibv_context does): destroy()
// releases one early, and using it afterwards returns ENODEV instead of touching freed memory.
// The device quiesces the hardware (receive and transmit off, software reset) before any ring
// or registered memory is released.
//
// Thread model: one thread at a time per queue pair / completion queue (no locks on the fast
// path); control calls (create, destroy, stats, reset, events) are thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cerrno>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "vfab/pci_id.hpp"
#include "vfab/dma/dma_arena.hpp"
#include "vfab/dma/protection_domain.hpp"
#include "vfab/drivers/e1000e/descriptors.hpp"
#include "vfab/drivers/common/completion_queue.hpp"
#include "vfab/drivers/intel/queue_pair.hpp"
#include "vfab/drivers/intel/device_handle.hpp"
#include "vfab/drivers/intel/queue_set.hpp"
#include "vfab/mmio.hpp"
#include "vfab/net/checksum.hpp"
#include "vfab/types.hpp"
#include "vfab/vfio/device_options.hpp"

namespace vfab::e1000e {

// The devices this driver drives: the 82574 family it follows (datasheet §5.6). The one list:
// the driver's check, the provider registry and vfio-devctl read it.
inline constexpr PciId kPciIds[] = {
    {0x8086, 0x10d3},   // 82574L
    {0x8086, 0x10f6},   // 82574LA
};

inline constexpr uint32_t kMaxSendSge = intel::kMaxSendSge;
inline constexpr uint32_t kEthHeader = intel::kEthHeader;
inline constexpr uint32_t kMaxQueueDepth = intel::kMaxQueueDepth;
inline constexpr uint32_t kMaxCq = 4;           // MSI-X vectors 0-3; vector 4 is "other"
inline constexpr uint32_t kOtherVector = 4;

struct DeviceOptions {
    vfio::DeviceOptions vfio;        // IOMMU backend, a shared IOMMU context
    bool promiscuous = false;        // accept every unicast and multicast frame
    bool rx_checksum = true;         // verify IPv4/TCP/UDP checksums on receive
    int link_timeout_ms = 3000;      // how long open() waits for link (0: not at all)
    std::optional<std::array<uint8_t, 6>> mac;   // replace the address from the EEPROM
    dma::PdOptions pd;
    // The link's MTU (largest frame mtu + 14 bytes): 0 for 1500. Up to kMaxMtu: long packets
    // (RCTL.LPE) into 8 KiB receive buffers, which receives must then hold.
    uint32_t mtu = 0;
};
inline constexpr uint32_t kMaxMtu = 8000;

// The 82574L's side of the Intel queue core (intel::QueuePairCore): its descriptor formats
// and bits (§7.1.5, §7.2.10).
struct FastPathHarness;
struct QueueTraits {
    using Harness = FastPathHarness;   // unit tests and bench/: the fast path over plain memory
    using TxDesc = TxDataDesc;
    using TxContextDesc = e1000e::TxContextDesc;
    using RxDesc = e1000e::RxDesc;
    struct TxContext {
        uint8_t ipcss, ipcso, tucss, tucso;
        uint32_t tucmd;
        // post_send writes a context descriptor only when the context changes.
        bool operator==(const TxContext&) const = default;
    };
    static constexpr uint32_t kRxDD = rxd::DD, kRxEOP = rxd::EOP, kRxErrFrame = rxd::ERR_FRAME;

    // The device wrote DD back (RS is set on a packet's last data descriptor), §7.2.10.3.
    static bool tx_done(const volatile TxDesc& d) noexcept { return d.status & txd::STA_DD; }
    // send_ip_csum's context from the parsed headers (§7.2.10.2): the IPv4 header checksum at
    // l3 + 10, the TCP/UDP one from l4 to the end; popts IXSM (IPv4) and TXSM. False when the
    // L4 header starts past byte 255 (the descriptor's offsets are one byte).
    static bool make_context(const net::L4Offsets& o, TxContext& ctx, uint32_t& popts) noexcept {
        if (o.l4 > 255) return false;   // the context's offsets are one byte
        ctx = {uint8_t(o.l3), uint8_t(o.l3 + 10), uint8_t(o.l4), uint8_t(o.csum),
               (o.tcp ? txd::TUCMD_TCP : 0) | (o.ipv4 ? txd::TUCMD_IP : 0)};
        popts = (o.ipv4 ? txd::POPTS_IXSM : 0) | txd::POPTS_TXSM;
        return true;
    }
    // The TCP/IP context descriptor (§7.2.10.2): IPCSE the byte before the L4 header (0 for
    // IPv6), TUCSE 0 (to the end of the packet).
    static void write_context(TxContextDesc& c, const TxContext& ctx) noexcept {
        c = {ctx.ipcss, ctx.ipcso, uint16_t(ctx.tucss - 1), ctx.tucss, ctx.tucso, 0, txd::CMD_DEXT | ctx.tucmd, 0, 0, 0};
        if (!(ctx.tucmd & txd::TUCMD_IP)) c.ipcse = 0;
    }
    // An extended data descriptor (§7.2.10.3) for one SGE: the FCS inserted, EOP on the
    // packet's last, popts in each. RS: report_status().
    static void write_data(TxDesc& d, uint64_t iova, uint32_t len, bool /*first*/, bool last, uint32_t /*total*/,
                           uint32_t popts, uint32_t /*flags*/) noexcept {
        d.buffer_addr = iova;
        d.cmd_len = len | txd::DTYP_DATA | txd::CMD_DEXT | txd::CMD_IFCS | (last ? txd::CMD_EOP : 0);
        d.status = 0;
        d.popts = uint8_t(popts);   // in every data descriptor of the packet
        d.vlan = 0;
    }
    // RS on a post's last descriptor: the device writes DD back into it when done (§7.2.10.3),
    // and into no other.
    static void report_status(TxDesc& d) noexcept { d.cmd_len |= txd::CMD_RS; }
    // Hands the device a buffer: the extended receive descriptor's read format (§7.1.5.2), DD
    // cleared.
    static void write_rx(RxDesc& d, uint64_t iova) noexcept {
        d.read.buffer_addr = iova;
        d.read.reserved = 0;
    }
    // wc_ip_csum_ok: the device checked the IPv4 header and TCP/UDP checksums (IPCS, TCPCS) and
    // found no error (IPE, TCPE); never for IPv6.
    static bool rx_csum_ok(uint32_t se) noexcept {
        return (se & (rxd::IPCS | rxd::TCPCS)) == (rxd::IPCS | rxd::TCPCS) && !(se & (rxd::ERR_IPE | rxd::ERR_TCPE));
    }
};

using CompletionQueue = intel::CompletionQueue<QueueTraits>;
using QueuePair = intel::QueuePair<QueueTraits>;
using QpInitAttr = intel::QpInitAttr<QueueTraits>;

// One queue pair (queue 0), up to kMaxCq completion queues.
class DeviceImpl;   // the control path: drivers/e1000e/device_impl.hpp

// One queue pair (queue 0), up to kMaxCq completion queues; no RSS (configure_rss: ENOTSUP;
// attr().rss_table_size is 0); a 4096-bit multicast hash filter (a frame of another group
// that hashes alike gets through too).
class Device final : public intel::DeviceHandle<Device, DeviceImpl, QueueTraits, DeviceOptions> {

private:
    friend class intel::DeviceHandle<Device, DeviceImpl, QueueTraits, DeviceOptions>;
    explicit Device(std::unique_ptr<DeviceImpl> impl);
};

// The driver's classes by role, for code written once for every driver
// (examples::BasicPort<e1000e::Driver>, the lab's MqPort).
struct Driver {
    using Device = e1000e::Device;
    using DeviceOptions = e1000e::DeviceOptions;
    using CompletionQueue = e1000e::CompletionQueue;
    using QueuePair = e1000e::QueuePair;
    using QpInitAttr = e1000e::QpInitAttr;
};

}  // namespace vfab::e1000e
