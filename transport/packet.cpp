// RoCEv2 frames: parse and build (see packet.hpp).
#include "packet.hpp"

#include <cstring>

#include "vfab/rdma/icrc.hpp"

namespace vfab::rdma {

using namespace wire;

namespace {

constexpr size_t kIpOff = kEthHeader;
constexpr size_t kUdpOff = kIpOff + kIpv4Header;
constexpr size_t kBthOff = kUdpOff + kUdpHeader;
constexpr size_t kExtOff = kBthOff + kBth;
constexpr uint8_t kBroadcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

uint32_t pad_of(uint32_t payload_len) noexcept { return (4 - (payload_len & 3)) & 3; }

}  // namespace

uint16_t ipv4_checksum(const uint8_t* h) noexcept {
    uint32_t sum = 0;
    for (size_t i = 0; i < kIpv4Header; i += 2) sum += load16(h + i);
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    return uint16_t(~sum);
}

uint32_t frame_size(uint8_t opcode, uint32_t payload_len) noexcept {
    return uint32_t(kExtOff + ext_header_size(op_info(opcode)) + payload_len + pad_of(payload_len) + kIcrc);
}

ParseResult parse_frame(const uint8_t* f, uint32_t len, uint32_t local_ip, Packet& p) noexcept {
    if (len < kEthHeader) return ParseResult::other;
    const uint16_t type = load16(f + 12);
    if (type == kEtherTypeArp) return ParseResult::arp;
    if (type != kEtherTypeIpv4 || len < kBthOff) return ParseResult::other;
    const uint8_t* ip = f + kIpOff;
    // Version 4 with options, fragments, or not UDP: not RoCEv2 as rxe sends it.
    const uint32_t dst = load32(ip + 16);
    if (ip[0] != 0x45 || ip[9] != kIpProtoUdp || (dst != local_ip && !is_ipv4_multicast(dst))) return ParseResult::other;
    const uint8_t* udp = f + kUdpOff;
    if (load16(udp + 2) != kRoceUdpPort) return ParseResult::other;
    if ((load16(ip + 6) & 0x3FFF) != 0) return ParseResult::malformed;   // MF or a fragment offset
    const uint32_t ip_len = load16(ip + 2);
    if (ip_len + kEthHeader > len || ip_len < kIpv4Header + kUdpHeader + kBth + kIcrc) return ParseResult::malformed;
    if (ipv4_checksum(ip) != 0) return ParseResult::malformed;
    const uint32_t udp_len = load16(udp + 4);
    if (udp_len != ip_len - kIpv4Header) return ParseResult::malformed;

    const uint8_t* bth = f + kBthOff;
    p.opcode = bth[0];
    p.info = op_info(p.opcode);
    if (!p.info.valid()) return ParseResult::malformed;
    if ((bth[1] & 0x0F) != 0) return ParseResult::malformed;   // TVer must be 0
    p.solicited = bth[1] & kBthSolicited;
    p.pad = (bth[1] >> 4) & 3;
    p.pkey = load16(bth + 2);
    if ((p.pkey & 0x7FFF) != (kDefaultPkey & 0x7FFF)) return ParseResult::malformed;
    p.dest_qp = load24(bth + 5);
    p.ack_req = bth[8] & kBthAckReq;
    p.psn = load24(bth + 9);
    p.xrc = p.info.has(is_xrc);
    p.uc = p.info.has(is_uc);
    if (p.xrc || p.uc) p.opcode &= 0x1F;   // the transport compares RC's opcodes; `xrc`/`uc` say which it was

    const uint32_t ext = uint32_t(ext_header_size(p.info));
    const uint32_t fixed = kUdpHeader + kBth + ext + kIcrc;
    if (udp_len < fixed + p.pad) return ParseResult::malformed;
    p.payload_len = udp_len - fixed - p.pad;
    if (!p.info.has(has_payload) && (p.payload_len != 0 || p.pad != 0)) return ParseResult::malformed;

    const uint8_t* end = ip + ip_len;
    if (icrc_ipv4(ip, ip_len - kIcrc) != load_icrc(end - kIcrc)) return ParseResult::bad_icrc;

    const uint8_t* x = f + kExtOff;
    if (p.info.has(has_deth)) { p.qkey = load32(x); p.src_qp = load24(x + 5); x += kDeth; }
    if (p.info.has(has_xrceth)) { p.xrc_srqn = load24(x + 1); x += kXrcEth; }
    if (p.info.has(has_reth)) { p.va = load64(x); p.rkey = load32(x + 8); p.dma_len = load32(x + 12); x += kReth; }
    if (p.info.has(has_atomic_eth) || p.info.has(has_masked_atomic_eth)) {   // the masked one: AtomicETH + 2 masks
        p.va = load64(x); p.rkey = load32(x + 8); p.swap_add = load64(x + 12); p.compare = load64(x + 20);
        if (p.info.has(has_masked_atomic_eth)) { p.swap_mask = load64(x + 28); p.compare_mask = load64(x + 36); }
        x += p.info.has(has_masked_atomic_eth) ? kMaskedAtomicEth : kAtomicEth;
    }
    if (p.info.has(has_aeth)) { p.syndrome = x[0]; p.msn = load24(x + 1); x += kAeth; }
    if (p.info.has(has_atomic_ack_eth)) { p.atomic_orig = load64(x); x += kAtomicAckEth; }
    if (p.info.has(has_immdt)) { std::memcpy(&p.imm_be, x, 4); x += kImmDt; }
    if (p.info.has(has_ieth)) { p.inv_rkey = load32(x); x += kIeth; }

    p.frame = f;
    p.frame_len = len;
    p.src_mac = f + 6;
    p.ipv4 = ip;
    p.src_ip = load32(ip + 12);
    p.dst_ip = load32(ip + 16);
    p.src_port = load16(udp);
    p.payload = x;
    return ParseResult::roce;
}

uint8_t* write_headers(uint8_t* f, const PacketHeader& h, uint32_t payload_len) noexcept {
    // XRC, UC: RC's opcodes under their transport's bits (vfab's manufacturer-specific ones have none).
    const bool rc_opcode = (h.opcode & 0xE0) == op::kRcBase;
    const uint8_t base = h.xrc ? op::kXrcBase : h.uc ? op::kUcBase : op::kRcBase;
    const uint8_t opcode = rc_opcode ? uint8_t(base | h.opcode) : h.opcode;
    const OpInfo info = op_info(opcode);
    const uint32_t ext = uint32_t(ext_header_size(info));
    const uint32_t pad = pad_of(payload_len);
    const uint32_t udp_len = uint32_t(kUdpHeader + kBth + ext + payload_len + pad + kIcrc);

    std::memcpy(f, h.dst_mac, 6);
    std::memcpy(f + 6, h.src_mac, 6);
    store16(f + 12, kEtherTypeIpv4);

    uint8_t* ip = f + kIpOff;
    ip[0] = 0x45;
    ip[1] = h.tos;
    store16(ip + 2, uint16_t(kIpv4Header + udp_len));
    store16(ip + 4, 0);        // identification: unused, DF is set
    store16(ip + 6, 0x4000);   // DF
    ip[8] = h.ttl;
    ip[9] = kIpProtoUdp;
    store16(ip + 10, 0);
    store32(ip + 12, h.src_ip);
    store32(ip + 16, h.dst_ip);
    store16(ip + 10, ipv4_checksum(ip));

    uint8_t* udp = f + kUdpOff;
    store16(udp, h.src_port);
    store16(udp + 2, kRoceUdpPort);
    store16(udp + 4, uint16_t(udp_len));
    store16(udp + 6, 0);   // no UDP checksum: the ICRC covers the packet (A17.3.1)

    uint8_t* bth = f + kBthOff;
    bth[0] = opcode;
    bth[1] = uint8_t((h.solicited ? kBthSolicited : 0) | pad << 4);
    store16(bth + 2, kDefaultPkey);
    bth[4] = 0;
    store24(bth + 5, h.dest_qp & kQpnMask);
    bth[8] = h.ack_req ? kBthAckReq : 0;
    store24(bth + 9, h.psn & kPsnMask);

    uint8_t* x = f + kExtOff;
    if (info.has(has_deth)) { store32(x, h.qkey); x[4] = 0; store24(x + 5, h.src_qp); x += kDeth; }
    if (info.has(has_xrceth)) { x[0] = 0; store24(x + 1, h.xrc_srqn); x += kXrcEth; }
    if (info.has(has_reth)) { store64(x, h.va); store32(x + 8, h.rkey); store32(x + 12, h.dma_len); x += kReth; }
    if (info.has(has_atomic_eth) || info.has(has_masked_atomic_eth)) {
        store64(x, h.va); store32(x + 8, h.rkey); store64(x + 12, h.swap_add); store64(x + 20, h.compare);
        if (info.has(has_masked_atomic_eth)) { store64(x + 28, h.swap_mask); store64(x + 36, h.compare_mask); }
        x += info.has(has_masked_atomic_eth) ? kMaskedAtomicEth : kAtomicEth;
    }
    if (info.has(has_aeth)) { x[0] = h.syndrome; store24(x + 1, h.msn); x += kAeth; }
    if (info.has(has_atomic_ack_eth)) { store64(x, h.atomic_orig); x += kAtomicAckEth; }
    if (info.has(has_immdt)) { std::memcpy(x, &h.imm_be, 4); x += kImmDt; }
    if (info.has(has_ieth)) { store32(x, h.inv_rkey); x += kIeth; }
    return x;
}

uint32_t finish_frame(uint8_t* f, uint32_t payload_len) noexcept {
    const uint8_t* ip = f + kIpOff;
    const uint32_t ip_len = load16(ip + 2);
    uint8_t* icrc_at = f + kIpOff + ip_len - kIcrc;
    const uint32_t pad = pad_of(payload_len);
    std::memset(icrc_at - pad, 0, pad);
    store_icrc(icrc_at, icrc_ipv4(ip, ip_len - kIcrc));
    return uint32_t(kEthHeader + ip_len);
}

bool parse_arp(const uint8_t* f, uint32_t len, ArpPacket& out) noexcept {
    if (len < kEthHeader + kArpPacket || load16(f + 12) != kEtherTypeArp) return false;
    const uint8_t* a = f + kEthHeader;
    // Ethernet hardware (1), IPv4 protocol, 6- and 4-byte addresses.
    if (load16(a) != 1 || load16(a + 2) != kEtherTypeIpv4 || a[4] != 6 || a[5] != 4) return false;
    out.op = load16(a + 6);
    out.sender_mac = a + 8;
    out.sender_ip = load32(a + 14);
    out.target_ip = load32(a + 24);
    return true;
}

uint32_t write_arp(uint8_t* f, uint16_t op, const uint8_t* src_mac, uint32_t src_ip, const uint8_t* dst_mac,
                   uint32_t dst_ip) noexcept {
    constexpr uint32_t kMinFrame = 60;
    std::memset(f, 0, kMinFrame);
    std::memcpy(f, dst_mac ? dst_mac : kBroadcast, 6);
    std::memcpy(f + 6, src_mac, 6);
    store16(f + 12, kEtherTypeArp);
    uint8_t* a = f + kEthHeader;
    store16(a, 1);
    store16(a + 2, kEtherTypeIpv4);
    a[4] = 6;
    a[5] = 4;
    store16(a + 6, op);
    std::memcpy(a + 8, src_mac, 6);
    store32(a + 14, src_ip);
    if (dst_mac) std::memcpy(a + 18, dst_mac, 6);   // a request leaves the target MAC zero
    store32(a + 24, dst_ip);
    return kMinFrame;
}

}  // namespace vfab::rdma
