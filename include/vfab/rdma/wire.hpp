// RoCEv2 on the wire: the constants and header layouts of the InfiniBand transport (IB spec
// Vol. 1 ch. 9) carried in UDP over IPv4 (Annex A17), and the byte-order helpers to read and
// write them. One place for each protocol fact; the transport (transport/) builds and parses
// frames with these.
//
//   Eth | IPv4 | UDP (dport 4791) | BTH | RETH / AETH / AtomicETH / ... | payload | pad | ICRC
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace vfab::rdma::wire {

// ---- byte order ------------------------------------------------------------------------------

// The 16-bit big-endian (network order) field at `p`; no alignment needed.
inline uint16_t load16(const uint8_t* p) noexcept { return uint16_t(p[0] << 8 | p[1]); }
// The 24-bit big-endian field at `p` (a BTH's DestQP or PSN, 9.2).
inline uint32_t load24(const uint8_t* p) noexcept { return uint32_t(p[0]) << 16 | uint32_t(p[1]) << 8 | p[2]; }
// The 32-bit big-endian field at `p`.
inline uint32_t load32(const uint8_t* p) noexcept {
    return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}
// The 64-bit big-endian field at `p` (a RETH's or AtomicETH's VA, 9.3).
inline uint64_t load64(const uint8_t* p) noexcept { return uint64_t(load32(p)) << 32 | load32(p + 4); }
// Writes `v` at `p`, big-endian; no alignment needed.
inline void store16(uint8_t* p, uint16_t v) noexcept { p[0] = uint8_t(v >> 8); p[1] = uint8_t(v); }
// Writes the low 24 bits of `v` at `p`, big-endian (3 bytes).
inline void store24(uint8_t* p, uint32_t v) noexcept {
    p[0] = uint8_t(v >> 16); p[1] = uint8_t(v >> 8); p[2] = uint8_t(v);
}
// Writes `v` at `p`, big-endian.
inline void store32(uint8_t* p, uint32_t v) noexcept {
    p[0] = uint8_t(v >> 24); p[1] = uint8_t(v >> 16); p[2] = uint8_t(v >> 8); p[3] = uint8_t(v);
}
// Writes `v` at `p`, big-endian.
inline void store64(uint8_t* p, uint64_t v) noexcept { store32(p, uint32_t(v >> 32)); store32(p + 4, uint32_t(v)); }

// ---- Ethernet, IPv4, UDP ---------------------------------------------------------------------

inline constexpr size_t kEthHeader = 14;
inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr uint16_t kEtherTypeArp = 0x0806;
inline constexpr uint16_t kEtherTypeVlan = 0x8100;       // IEEE 802.1Q
inline constexpr size_t kIpv4Header = 20;            // IHL 5: RoCEv2 sends no IP options
inline constexpr uint8_t kIpProtoTcp = 6;
inline constexpr uint8_t kIpProtoUdp = 17;
inline constexpr size_t kUdpHeader = 8;
inline constexpr uint16_t kRoceUdpPort = 4791;       // Annex A17.2.1: the RoCEv2 destination port
inline constexpr uint16_t kRoceSourcePortBase = 0xC000;   // A17.2.1: source ports for entropy
inline constexpr uint8_t kDefaultTtl = 64;
// Everything before the BTH.
inline constexpr size_t kRoceHeadroom = kEthHeader + kIpv4Header + kUdpHeader;
// An ibverbs UD receive buffer starts with the 40-byte GRH; for IPv4 its last 20 bytes hold
// the IPv4 header (Annex A17.4.5.1) and the first 20 are zero.
inline constexpr size_t kGrhSize = 40;

// IPv4 multicast (224.0.0.0/4) and its Ethernet addresses: 01:00:5e and the group's low 23
// bits (RFC 1112 §6.4). RoCEv2 multicast is UD to such a group (Annex A17.4.5.2).
constexpr bool is_ipv4_multicast(uint32_t ip) noexcept { return (ip >> 28) == 0xE; }
// Writes the 6-byte Ethernet address of the group `ip` (host order) to `mac`.
inline void ipv4_multicast_mac(uint32_t ip, uint8_t* mac) noexcept {
    mac[0] = 0x01; mac[1] = 0x00; mac[2] = 0x5e;
    mac[3] = uint8_t((ip >> 16) & 0x7f); mac[4] = uint8_t(ip >> 8); mac[5] = uint8_t(ip);
}

// ARP over Ethernet for IPv4 (RFC 826).
inline constexpr size_t kArpPacket = 28;
inline constexpr uint16_t kArpRequest = 1;
inline constexpr uint16_t kArpReply = 2;

// ---- Base Transport Header (9.2) --------------------------------------------------------------

inline constexpr size_t kBth = 12;
// Byte 1: SE (7), MigReq (6), PadCnt (5:4), TVer (3:0).
inline constexpr uint8_t kBthSolicited = 0x80;
inline constexpr uint8_t kBthMigReq = 0x40;
inline constexpr uint16_t kDefaultPkey = 0xFFFF;
// Byte 8: AckReq (7).
inline constexpr uint8_t kBthAckReq = 0x80;
inline constexpr uint32_t kPsnMask = 0xFFFFFF;
inline constexpr uint32_t kQpnMask = 0xFFFFFF;
inline constexpr uint32_t kMulticastQpn = 0xFFFFFF;   // the DestQP of a multicast datagram (10.5.2.x, as ibv's)
// QP1, the general services interface (GSI): where management datagrams, the connection
// manager's among them, go; it takes datagrams carrying the well-known Q_Key (IB spec 13.5.1).
inline constexpr uint32_t kGsiQpn = 1;
inline constexpr uint32_t kGsiQkey = 0x80010000u;

// Extended transport headers (9.3).
inline constexpr size_t kReth = 16;        // VA, R_Key, DMA length
inline constexpr size_t kAeth = 4;         // syndrome, MSN
inline constexpr size_t kAtomicEth = 28;   // VA, R_Key, swap/add, compare
inline constexpr size_t kAtomicAckEth = 8; // original data
// vfab's masked atomics (docs/rdma-atomics.md): AtomicETH and two masks — VA, R_Key,
// swap/add, compare, swap mask, compare mask (for a masked add: its field boundaries).
inline constexpr size_t kMaskedAtomicEth = 44;
inline constexpr size_t kImmDt = 4;
inline constexpr size_t kIeth = 4;         // R_Key to invalidate
inline constexpr size_t kXrcEth = 4;       // XRC requests: the target's XRC SRQ number (9.3.8)
inline constexpr size_t kDeth = 8;         // Q_Key, source QP
inline constexpr size_t kIcrc = 4;

// Q_Keys with the most significant bit set are controlled: a send WR whose remote Q_Key has
// it uses the QP's own Q_Key instead (10.2.4).
inline constexpr uint32_t kControlledQkey = 0x80000000u;

// ---- opcodes (9.2.1, table 38) -----------------------------------------------------------------

namespace op {
inline constexpr uint8_t kRcBase = 0x00;
inline constexpr uint8_t kUcBase = 0x20;    // UC: RC's SEND and RDMA WRITE codes under transport 001 (9.2.1 table 38)
inline constexpr uint8_t kUdBase = 0x60;
inline constexpr uint8_t kXrcBase = 0xA0;   // XRC: RC's low 5 bits under transport 101 (9.2.1 table 38)
// Low 5 bits within a transport.
inline constexpr uint8_t send_first = 0x00, send_middle = 0x01, send_last = 0x02, send_last_imm = 0x03,
                         send_only = 0x04, send_only_imm = 0x05, write_first = 0x06, write_middle = 0x07,
                         write_last = 0x08, write_last_imm = 0x09, write_only = 0x0A, write_only_imm = 0x0B,
                         read_request = 0x0C, read_response_first = 0x0D, read_response_middle = 0x0E,
                         read_response_last = 0x0F, read_response_only = 0x10, acknowledge = 0x11,
                         atomic_acknowledge = 0x12, cmp_swap = 0x13, fetch_add = 0x14,
                         send_last_inv = 0x16, send_only_inv = 0x17;
inline constexpr uint8_t ud_send_only = kUdBase | send_only, ud_send_only_imm = kUdBase | send_only_imm;
inline constexpr uint8_t cnp = 0x81;   // congestion notification (A17.9.2): dropped
// Manufacturer-specific opcodes (9.2.1 table 38: 110xxxxx) that vfab gives its masked atomics
// on RC queue pairs: a peer that does not know them drops the packet (rxe does), where the
// standard opcodes with other headers would be misread as plain atomics.
inline constexpr uint8_t vfab_masked_cmp_swap = 0xC0, vfab_masked_fetch_add = 0xC1;
}  // namespace op

// What an opcode carries and means.
enum OpFlags : uint32_t {
    has_reth = 1u << 0,
    has_aeth = 1u << 1,
    has_atomic_eth = 1u << 2,
    has_atomic_ack_eth = 1u << 3,
    has_immdt = 1u << 4,
    has_ieth = 1u << 5,
    has_deth = 1u << 6,
    has_payload = 1u << 7,
    is_first = 1u << 8,     // first or only packet of a message
    is_last = 1u << 9,      // last or only packet of a message
    is_request = 1u << 10,  // requester to responder
    is_send = 1u << 11,
    is_write = 1u << 12,
    is_read = 1u << 13,     // the read request
    is_atomic = 1u << 14,   // an atomic request
    is_response = 1u << 15, // ACK, atomic ACK, read responses
    has_masked_atomic_eth = 1u << 16,
    has_xrceth = 1u << 17,  // an XRC request
    is_xrc = 1u << 18,      // any XRC opcode
    is_uc = 1u << 19,       // a UC opcode
};

struct OpInfo {
    uint32_t flags = 0;   // OpFlags; 0: not an opcode this transport knows
    uint32_t ext = 0;     // bytes of its extension headers (ext_header_size), as op_info() gives
    // Whether the opcode is one this transport knows (flags not 0).
    constexpr bool valid() const noexcept { return flags != 0; }
    // Whether every OpFlags bit of `f` is set.
    constexpr bool has(uint32_t f) const noexcept { return (flags & f) == f; }
};

// Header flags of each RC opcode (low 5 bits); UD's two are the RC SEND-only ones plus DETH.
constexpr OpInfo rc_op_info(uint8_t code) noexcept {
    constexpr uint32_t send = is_request | is_send | has_payload;
    constexpr uint32_t write = is_request | is_write | has_payload;
    constexpr uint32_t resp = is_response;
    switch (code) {
    case op::send_first: return {send | is_first};
    case op::send_middle: return {send};
    case op::send_last: return {send | is_last};
    case op::send_last_imm: return {send | is_last | has_immdt};
    case op::send_only: return {send | is_first | is_last};
    case op::send_only_imm: return {send | is_first | is_last | has_immdt};
    case op::write_first: return {write | is_first | has_reth};
    case op::write_middle: return {write};
    case op::write_last: return {write | is_last};
    case op::write_last_imm: return {write | is_last | has_immdt};
    case op::write_only: return {write | is_first | is_last | has_reth};
    case op::write_only_imm: return {write | is_first | is_last | has_reth | has_immdt};
    case op::read_request: return {is_request | is_read | is_first | is_last | has_reth};
    case op::read_response_first: return {resp | has_aeth | has_payload | is_first};
    case op::read_response_middle: return {resp | has_payload};
    case op::read_response_last: return {resp | has_aeth | has_payload | is_last};
    case op::read_response_only: return {resp | has_aeth | has_payload | is_first | is_last};
    case op::acknowledge: return {resp | has_aeth | is_first | is_last};
    case op::atomic_acknowledge: return {resp | has_aeth | has_atomic_ack_eth | is_first | is_last};
    case op::cmp_swap:
    case op::fetch_add: return {is_request | is_atomic | is_first | is_last | has_atomic_eth};
    case op::send_last_inv: return {send | is_last | has_ieth};
    case op::send_only_inv: return {send | is_first | is_last | has_ieth};
    default: return {};
    }
}

// Bytes of the extension headers with these OpFlags, in their wire order: DETH, XRCETH, RETH,
// AtomicETH, AETH, AtomicAckETH, ImmDt, IETH (9.2, figure 35 and tables 38).
constexpr uint32_t ext_header_bytes(uint32_t f) noexcept {
    auto has = [f](uint32_t bit) { return (f & bit) == bit; };
    return uint32_t((has(has_deth) ? kDeth : 0) + (has(has_xrceth) ? kXrcEth : 0) + (has(has_reth) ? kReth : 0) +
                    (has(has_atomic_eth) ? kAtomicEth : 0) + (has(has_masked_atomic_eth) ? kMaskedAtomicEth : 0) +
                    (has(has_aeth) ? kAeth : 0) + (has(has_atomic_ack_eth) ? kAtomicAckEth : 0) +
                    (has(has_immdt) ? kImmDt : 0) + (has(has_ieth) ? kIeth : 0));
}

// What a BTH opcode (9.2.1, table 38) carries: RC's, UC's (is_uc: RC's SENDs and WRITEs), UD's two
// SENDs (with DETH), XRC's (is_xrc, and has_xrceth on requests) and vfab's masked atomics; invalid
// for any other, CNP included.
constexpr OpInfo classify_opcode(uint8_t opcode) noexcept {
    OpInfo i;
    if ((opcode & 0xE0) == op::kRcBase) {
        i = rc_op_info(opcode);
    } else if ((opcode & 0xE0) == op::kUcBase) {   // UC: no READ, atomics or acknowledgements
        if ((opcode & 0x1F) > op::write_only_imm) return {};
        i = rc_op_info(opcode & 0x1F);
        i.flags |= is_uc;
    } else if ((opcode & 0xE0) == op::kXrcBase) {   // XRC: RC's meanings; requests carry XRCETH
        i = rc_op_info(opcode & 0x1F);
        if (i.valid()) i.flags |= is_xrc | (i.has(is_request) ? uint32_t(has_xrceth) : 0u);
    } else if (opcode == op::vfab_masked_cmp_swap || opcode == op::vfab_masked_fetch_add) {
        i.flags = is_request | is_atomic | is_first | is_last | has_masked_atomic_eth;
    } else if (opcode == op::ud_send_only || opcode == op::ud_send_only_imm) {
        i = rc_op_info(opcode & 0x1F);
        i.flags |= has_deth;
    }
    i.ext = ext_header_bytes(i.flags);
    return i;
}

// Every opcode's OpInfo, computed at compile time: the fast path looks one up.
struct OpTable {
    OpInfo info[256];
    constexpr OpTable() noexcept {
        for (uint32_t o = 0; o < 256; ++o) info[o] = classify_opcode(uint8_t(o));
    }
};
inline constexpr OpTable kOpTable{};

// What the BTH opcode `opcode` carries (classify_opcode), looked up in kOpTable.
constexpr OpInfo op_info(uint8_t opcode) noexcept { return kOpTable.info[opcode]; }

// Bytes of the extension headers an opcode carries (op_info() fills it in).
constexpr size_t ext_header_size(OpInfo i) noexcept { return i.ext; }

// ---- AETH syndromes (9.7.5.1, table 43) ---------------------------------------------------------

namespace aeth {
inline constexpr uint8_t kTypeMask = 0x60;
inline constexpr uint8_t kAck = 0x00;       // | credit count (0x1F: invalid credits, as rxe sends)
inline constexpr uint8_t kRnrNak = 0x20;    // | timer code (table 45)
inline constexpr uint8_t kNak = 0x60;       // | NAK code:
inline constexpr uint8_t kNakPsnSeqError = 0x60;
inline constexpr uint8_t kNakInvalidRequest = 0x61;
inline constexpr uint8_t kNakRemoteAccessError = 0x62;
inline constexpr uint8_t kNakRemoteOperationalError = 0x63;
inline constexpr uint8_t kNakInvalidRdRequest = 0x64;
inline constexpr uint8_t kAckNoCredits = 0x1F;
inline constexpr uint32_t kMsnMask = 0xFFFFFF;
}  // namespace aeth

// ---- PSN arithmetic (9.7.1: PSNs are 24-bit and compared within half the space) ------------------

// `psn` advanced by `n`, wrapping in the 24-bit space.
inline constexpr uint32_t psn_add(uint32_t psn, uint32_t n) noexcept { return (psn + n) & kPsnMask; }
// a - b as a signed distance in the 24-bit space.
inline constexpr int32_t psn_diff(uint32_t a, uint32_t b) noexcept {
    return int32_t((a - b) << 8) >> 8;
}

// ---- path MTU and timers -------------------------------------------------------------------------

// IB MTU codes (enum ibv_mtu): 1 = 256 ... 5 = 4096 bytes.
constexpr uint32_t mtu_bytes(uint32_t code) noexcept { return code >= 1 && code <= 5 ? 128u << code : 0; }

// The RNR NAK timer (9.7.5.2.8, table 45): microseconds for a 5-bit timer code.
constexpr uint32_t rnr_timer_us(uint8_t code) noexcept {
    constexpr uint32_t table[32] = {655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
                                    2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920,
                                    122880, 163840, 245760, 327680, 491520};
    return table[code & 31];
}

// Local ACK timeout (9.7.6.1.3): 4.096 us * 2^timeout; 0 means no timer. In nanoseconds.
constexpr uint64_t ack_timeout_ns(uint8_t timeout) noexcept {
    return timeout == 0 ? 0 : (uint64_t(4096) << (timeout > 31 ? 31 : timeout));
}

}  // namespace vfab::rdma::wire
