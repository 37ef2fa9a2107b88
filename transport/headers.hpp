// The headers of a RoCEv2 frame as typed views: each field's place defined once, here, and
// read and written through these by parse_frame/write_headers (packet.cpp), the ICRC's mask
// (icrc.cpp) and the raw-packet flows' keys (raw_packet.cpp). Every struct is bytes only
// (alignment 1, no padding): one lies over a frame at any offset; the static_asserts hold the
// offsets to the specs': Ethernet II, IPv4 (RFC 791), UDP (RFC 768), ARP (RFC 826), and the
// InfiniBand transport headers (IB spec Vol. 1 9.2-9.3; RoCEv2's encapsulation, Annex A17.4).
#pragma once

#include <cstddef>
#include <cstdint>

#include "vfab/rdma/wire.hpp"

namespace vfab::rdma::hdr {

// Big-endian fields of 2, 3, 4 and 8 bytes.
struct Be16 {
    uint8_t b[2];
    uint16_t get() const noexcept { return wire::load16(b); }
    void set(uint16_t v) noexcept { wire::store16(b, v); }
};
struct Be24 {
    uint8_t b[3];
    uint32_t get() const noexcept { return wire::load24(b); }
    void set(uint32_t v) noexcept { wire::store24(b, v); }
};
struct Be32 {
    uint8_t b[4];
    uint32_t get() const noexcept { return wire::load32(b); }
    void set(uint32_t v) noexcept { wire::store32(b, v); }
};
struct Be64 {
    uint8_t b[8];
    uint64_t get() const noexcept { return wire::load64(b); }
    void set(uint64_t v) noexcept { wire::store64(b, v); }
};

struct Eth {
    uint8_t dst[6];
    uint8_t src[6];
    Be16 type;
};

struct Vlan {   // 802.1Q: after the MACs, before the ethertype it carries
    Be16 tpid;
    Be16 tci;
    Be16 type;
};

struct Ipv4 {
    uint8_t version_ihl;   // 0x45: version 4, 5 words (RoCEv2 sends no options)
    uint8_t tos;           // DSCP, ECN
    Be16 total_length;
    Be16 id;
    Be16 flags_fragment;   // DF 0x4000, MF 0x2000, offset 0x1FFF
    uint8_t ttl;
    uint8_t protocol;
    Be16 checksum;
    Be32 src;
    Be32 dst;
    static constexpr uint16_t kDontFragment = 0x4000;
    static constexpr uint16_t kFragmentMask = 0x3FFF;   // MF and the offset: a fragment
};

struct Udp {
    Be16 src_port;
    Be16 dst_port;
    Be16 length;
    Be16 checksum;   // 0: none (RoCEv2's ICRC covers the packet, A17.3.1)
};

struct Arp {   // over Ethernet for IPv4
    Be16 hw_type;   // 1: Ethernet
    Be16 proto_type;
    uint8_t hw_len;
    uint8_t proto_len;
    Be16 op;
    uint8_t sender_mac[6];
    Be32 sender_ip;
    uint8_t target_mac[6];
    Be32 target_ip;
};

// Base Transport Header (9.2).
struct Bth {
    uint8_t opcode;
    uint8_t se_m_pad_tver;   // solicited event 0x80, MigReq 0x40, pad count <<4, TVer (low 4 bits)
    Be16 pkey;
    uint8_t fecn_becn_resv;  // RoCEv2: reserved, masked out of the ICRC
    Be24 dest_qp;
    uint8_t ack_req;         // AckReq 0x80, the rest reserved
    Be24 psn;
    uint8_t pad() const noexcept { return (se_m_pad_tver >> 4) & 3; }
    uint8_t tver() const noexcept { return se_m_pad_tver & 0x0F; }
};

struct Deth {   // Datagram (9.3.3)
    Be32 qkey;
    uint8_t resv;
    Be24 src_qp;
};
struct XrcEth {   // XRC (9.3.8)
    uint8_t resv;
    Be24 srqn;
};
struct Reth {   // RDMA (9.3.4)
    Be64 va;
    Be32 rkey;
    Be32 dma_len;
};
struct AtomicEth {   // atomic (9.3.5)
    Be64 va;
    Be32 rkey;
    Be64 swap_add;
    Be64 compare;
};
struct MaskedAtomicEth {   // vfab's masked atomics: AtomicETH and two masks (docs/rdma-atomics.md)
    AtomicEth atomic;
    Be64 swap_mask;
    Be64 compare_mask;
};
struct Aeth {   // ACK (9.3.6)
    uint8_t syndrome;
    Be24 msn;
};
struct AtomicAckEth {   // 9.3.7
    Be64 orig;
};
struct ImmDt {   // kept as on the wire (network order): applications see it so
    uint8_t b[4];
};
struct Ieth {   // the R_Key a SEND with invalidate names (9.3.9)
    Be32 rkey;
};

// Where each starts in a RoCEv2 frame over IPv4 (A17.4.5): Ethernet, IPv4, UDP, BTH, then the
// opcode's extension headers in the order of 9.3 (wire::ext_header_size).
inline constexpr size_t kIpAt = sizeof(Eth);
inline constexpr size_t kUdpAt = kIpAt + sizeof(Ipv4);
inline constexpr size_t kBthAt = kUdpAt + sizeof(Udp);
inline constexpr size_t kExtAt = kBthAt + sizeof(Bth);

template <class H>
H* at(uint8_t* p) noexcept { return reinterpret_cast<H*>(p); }
template <class H>
const H* at(const uint8_t* p) noexcept { return reinterpret_cast<const H*>(p); }

static_assert(sizeof(Eth) == wire::kEthHeader && offsetof(Eth, type) == 12);
static_assert(sizeof(Vlan) == 6);
static_assert(sizeof(Ipv4) == wire::kIpv4Header && offsetof(Ipv4, tos) == 1 && offsetof(Ipv4, total_length) == 2 &&
              offsetof(Ipv4, flags_fragment) == 6 && offsetof(Ipv4, ttl) == 8 && offsetof(Ipv4, protocol) == 9 &&
              offsetof(Ipv4, checksum) == 10 && offsetof(Ipv4, src) == 12 && offsetof(Ipv4, dst) == 16);
static_assert(sizeof(Udp) == wire::kUdpHeader && offsetof(Udp, dst_port) == 2 && offsetof(Udp, length) == 4 &&
              offsetof(Udp, checksum) == 6);
static_assert(sizeof(Arp) == wire::kArpPacket && offsetof(Arp, op) == 6 && offsetof(Arp, sender_mac) == 8 &&
              offsetof(Arp, sender_ip) == 14 && offsetof(Arp, target_mac) == 18 && offsetof(Arp, target_ip) == 24);
static_assert(sizeof(Bth) == wire::kBth && offsetof(Bth, pkey) == 2 && offsetof(Bth, fecn_becn_resv) == 4 &&
              offsetof(Bth, dest_qp) == 5 && offsetof(Bth, ack_req) == 8 && offsetof(Bth, psn) == 9);
static_assert(sizeof(Deth) == wire::kDeth && offsetof(Deth, src_qp) == 5);
static_assert(sizeof(XrcEth) == wire::kXrcEth && offsetof(XrcEth, srqn) == 1);
static_assert(sizeof(Reth) == wire::kReth && offsetof(Reth, rkey) == 8 && offsetof(Reth, dma_len) == 12);
static_assert(sizeof(AtomicEth) == wire::kAtomicEth && offsetof(AtomicEth, rkey) == 8 &&
              offsetof(AtomicEth, swap_add) == 12 && offsetof(AtomicEth, compare) == 20);
static_assert(sizeof(MaskedAtomicEth) == wire::kMaskedAtomicEth && offsetof(MaskedAtomicEth, swap_mask) == 28 &&
              offsetof(MaskedAtomicEth, compare_mask) == 36);
static_assert(sizeof(Aeth) == wire::kAeth && offsetof(Aeth, msn) == 1);
static_assert(sizeof(AtomicAckEth) == wire::kAtomicAckEth && sizeof(ImmDt) == wire::kImmDt && sizeof(Ieth) == wire::kIeth);
static_assert(alignof(Ipv4) == 1 && alignof(AtomicEth) == 1 && alignof(MaskedAtomicEth) == 1);

}  // namespace vfab::rdma::hdr
