// RoCEv2 frames: parse and build (see packet.hpp).
#include "packet.hpp"

#include <cstring>

#include "headers.hpp"
#include "vfab/rdma/icrc.hpp"

namespace vfab::rdma {

using namespace wire;
using namespace hdr;

namespace {

constexpr uint8_t kBroadcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

uint32_t pad_of(uint32_t payload_len) noexcept { return (4 - (payload_len & 3)) & 3; }

// The 16-bit one's-complement sum of the IPv4 header's big-endian words (RFC 1071), at most
// 0xFFFF. The sum is taken 32 bits at a time in the host's order and swapped at the end (1071
// section 2: it does not depend on the order).
uint32_t ipv4_sum(const uint8_t* h) noexcept {
    uint64_t sum = 0;
    for (size_t i = 0; i < kIpv4Header; i += 4) {
        uint32_t w;
        std::memcpy(&w, h + i, 4);
        sum += w;
    }
    sum = (sum & 0xFFFFFFFF) + (sum >> 32);
    sum = (sum & 0xFFFF) + (sum >> 16);
    sum = (sum & 0xFFFF) + (sum >> 16);
    sum = (sum & 0xFFFF) + (sum >> 16);
    return __builtin_bswap16(uint16_t(sum));
}

uint16_t fold_checksum(uint32_t sum) noexcept {
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    return uint16_t(~sum);
}

}  // namespace

uint16_t ipv4_checksum(const uint8_t* h) noexcept { return fold_checksum(ipv4_sum(h)); }

uint32_t frame_size(uint8_t opcode, uint32_t payload_len) noexcept {
    return uint32_t(kExtAt + ext_header_size(op_info(opcode)) + payload_len + pad_of(payload_len) + kIcrc);
}

ParseResult parse_frame(const uint8_t* f, uint32_t len, uint32_t local_ip, Packet& p) noexcept {
    if (len < kEthHeader) return ParseResult::other;
    const uint16_t type = at<Eth>(f)->type.get();
    if (type == kEtherTypeArp) return ParseResult::arp;
    if (type != kEtherTypeIpv4 || len < kBthAt) return ParseResult::other;
    const Ipv4& ip = *at<Ipv4>(f + kIpAt);
    // Version 4 with options, fragments, or not UDP: not RoCEv2 as rxe sends it.
    const uint32_t dst = ip.dst.get();
    if (ip.version_ihl != 0x45 || ip.protocol != kIpProtoUdp || (dst != local_ip && !is_ipv4_multicast(dst)))
        return ParseResult::other;
    const Udp& udp = *at<Udp>(f + kUdpAt);
    if (udp.dst_port.get() != kRoceUdpPort) return ParseResult::other;
    if (ip.flags_fragment.get() & Ipv4::kFragmentMask) return ParseResult::malformed;
    const uint32_t ip_len = ip.total_length.get();
    if (ip_len + kEthHeader > len || ip_len < kIpv4Header + kUdpHeader + kBth + kIcrc) return ParseResult::malformed;
    if (ipv4_sum(f + kIpAt) != 0xFFFF) return ParseResult::malformed;   // the checksum included: all ones
    const uint32_t udp_len = udp.length.get();
    if (udp_len != ip_len - kIpv4Header) return ParseResult::malformed;

    const Bth& bth = *at<Bth>(f + kBthAt);
    p.opcode = bth.opcode;
    p.info = op_info(p.opcode);
    if (!p.info.valid()) return ParseResult::malformed;
    if (bth.tver() != 0) return ParseResult::malformed;
    p.solicited = bth.se_m_pad_tver & kBthSolicited;
    p.pad = bth.pad();
    p.pkey = bth.pkey.get();
    if ((p.pkey & 0x7FFF) != (kDefaultPkey & 0x7FFF)) return ParseResult::malformed;
    p.dest_qp = bth.dest_qp.get();
    p.ack_req = bth.ack_req & kBthAckReq;
    p.psn = bth.psn.get();
    p.xrc = p.info.has(is_xrc);
    p.uc = p.info.has(is_uc);
    if (p.xrc || p.uc) p.opcode &= 0x1F;   // the transport compares RC's opcodes; `xrc`/`uc` say which it was

    const uint32_t ext = uint32_t(ext_header_size(p.info));
    const uint32_t fixed = kUdpHeader + kBth + ext + kIcrc;
    if (udp_len < fixed + p.pad) return ParseResult::malformed;
    p.payload_len = udp_len - fixed - p.pad;
    if (!p.info.has(has_payload) && (p.payload_len != 0 || p.pad != 0)) return ParseResult::malformed;
    // The pad makes the payload a multiple of 4 bytes (9.2.2): none on a full-MTU FIRST or MIDDLE.
    if ((p.payload_len + p.pad) & 3) return ParseResult::malformed;

    const uint8_t* end = f + kIpAt + ip_len;
    if (icrc_ipv4(f + kIpAt, ip_len - kIcrc) != load_icrc(end - kIcrc)) return ParseResult::bad_icrc;

    const uint8_t* x = f + kExtAt;
    if (p.info.has(has_deth)) {
        const Deth& d = *at<Deth>(x);
        p.qkey = d.qkey.get();
        p.src_qp = d.src_qp.get();
        x += sizeof d;
    }
    if (p.info.has(has_xrceth)) {
        p.xrc_srqn = at<XrcEth>(x)->srqn.get();
        x += sizeof(XrcEth);
    }
    if (p.info.has(has_reth)) {
        const Reth& r = *at<Reth>(x);
        p.va = r.va.get();
        p.rkey = r.rkey.get();
        p.dma_len = r.dma_len.get();
        x += sizeof r;
    }
    if (p.info.has(has_atomic_eth) || p.info.has(has_masked_atomic_eth)) {
        const AtomicEth& a = *at<AtomicEth>(x);
        p.va = a.va.get();
        p.rkey = a.rkey.get();
        p.swap_add = a.swap_add.get();
        p.compare = a.compare.get();
        if (p.info.has(has_masked_atomic_eth)) {
            const MaskedAtomicEth& m = *at<MaskedAtomicEth>(x);
            p.swap_mask = m.swap_mask.get();
            p.compare_mask = m.compare_mask.get();
            x += sizeof m;
        } else {
            x += sizeof a;
        }
    }
    if (p.info.has(has_aeth)) {
        const Aeth& a = *at<Aeth>(x);
        p.syndrome = a.syndrome;
        p.msn = a.msn.get();
        x += sizeof a;
    }
    if (p.info.has(has_atomic_ack_eth)) {
        p.atomic_orig = at<AtomicAckEth>(x)->orig.get();
        x += sizeof(AtomicAckEth);
    }
    if (p.info.has(has_immdt)) {
        std::memcpy(&p.imm_be, at<ImmDt>(x)->b, sizeof(ImmDt));
        x += sizeof(ImmDt);
    }
    if (p.info.has(has_ieth)) {
        p.inv_rkey = at<Ieth>(x)->rkey.get();
        x += sizeof(Ieth);
    }

    p.frame = f;
    p.frame_len = len;
    p.src_mac = at<Eth>(f)->src;
    p.ipv4 = f + kIpAt;
    p.src_ip = ip.src.get();
    p.dst_ip = dst;
    p.src_port = udp.src_port.get();
    p.payload = x;
    return ParseResult::roce;
}

namespace {

// The opcode on the wire: XRC and UC put RC's under their transport's bits (vfab's
// manufacturer-specific ones have none).
uint8_t wire_opcode(uint8_t opcode, bool xrc, bool uc) noexcept {
    if ((opcode & 0xE0) != op::kRcBase) return opcode;
    return uint8_t((xrc ? op::kXrcBase : uc ? op::kUcBase : op::kRcBase) | opcode);
}

void write_addresses(uint8_t* f, const PacketHeader& h) noexcept {
    Eth& eth = *at<Eth>(f);
    std::memcpy(eth.dst, h.dst_mac, 6);
    std::memcpy(eth.src, h.src_mac, 6);
    eth.type.set(kEtherTypeIpv4);
    Ipv4& ip = *at<Ipv4>(f + kIpAt);
    ip.version_ihl = 0x45;
    ip.tos = h.tos;
    ip.total_length.set(0);
    ip.id.set(0);   // unused: DF is set
    ip.flags_fragment.set(Ipv4::kDontFragment);
    ip.ttl = h.ttl;
    ip.protocol = kIpProtoUdp;
    ip.checksum.set(0);
    ip.src.set(h.src_ip);
    ip.dst.set(h.dst_ip);
    Udp& udp = *at<Udp>(f + kUdpAt);
    udp.src_port.set(h.src_port);
    udp.dst_port.set(kRoceUdpPort);
    udp.length.set(0);
    udp.checksum.set(0);   // none: the ICRC covers the packet (A17.3.1)
    Bth& bth = *at<Bth>(f + kBthAt);
    bth.opcode = 0;
    bth.se_m_pad_tver = 0;
    bth.pkey.set(kDefaultPkey);
    bth.fecn_becn_resv = 0;
    bth.dest_qp.set(h.dest_qp & kQpnMask);
    bth.ack_req = 0;
    bth.psn.set(0);
}

// The lengths, the IPv4 checksum (from the sum of the rest), the BTH's per-packet fields and
// the opcode's extension headers, over Ethernet/IPv4/UDP/BTH bytes already written.
uint8_t* write_packet_fields(uint8_t* f, uint8_t opcode, uint32_t ip_sum, const PacketHeader& h,
                             uint32_t payload_len) noexcept {
    const OpInfo info = op_info(opcode);
    const uint32_t pad = pad_of(payload_len);
    const uint32_t udp_len = uint32_t(kUdpHeader + kBth + ext_header_size(info) + payload_len + pad + kIcrc);
    const uint16_t ip_len = uint16_t(kIpv4Header + udp_len);
    Ipv4& ip = *at<Ipv4>(f + kIpAt);
    ip.total_length.set(ip_len);
    ip.checksum.set(fold_checksum(ip_sum + ip_len));
    at<Udp>(f + kUdpAt)->length.set(uint16_t(udp_len));
    Bth& bth = *at<Bth>(f + kBthAt);
    bth.opcode = opcode;
    bth.se_m_pad_tver = uint8_t((h.solicited ? kBthSolicited : 0) | pad << 4);
    bth.ack_req = h.ack_req ? kBthAckReq : 0;
    bth.psn.set(h.psn & kPsnMask);

    uint8_t* x = f + kExtAt;
    if (info.has(has_deth)) {
        Deth& d = *at<Deth>(x);
        d.qkey.set(h.qkey);
        d.resv = 0;
        d.src_qp.set(h.src_qp);
        x += sizeof d;
    }
    if (info.has(has_xrceth)) {
        XrcEth& e = *at<XrcEth>(x);
        e.resv = 0;
        e.srqn.set(h.xrc_srqn);
        x += sizeof e;
    }
    if (info.has(has_reth)) {
        Reth& r = *at<Reth>(x);
        r.va.set(h.va);
        r.rkey.set(h.rkey);
        r.dma_len.set(h.dma_len);
        x += sizeof r;
    }
    if (info.has(has_atomic_eth) || info.has(has_masked_atomic_eth)) {
        AtomicEth& a = *at<AtomicEth>(x);
        a.va.set(h.va);
        a.rkey.set(h.rkey);
        a.swap_add.set(h.swap_add);
        a.compare.set(h.compare);
        if (info.has(has_masked_atomic_eth)) {
            MaskedAtomicEth& m = *at<MaskedAtomicEth>(x);
            m.swap_mask.set(h.swap_mask);
            m.compare_mask.set(h.compare_mask);
            x += sizeof m;
        } else {
            x += sizeof a;
        }
    }
    if (info.has(has_aeth)) {
        Aeth& a = *at<Aeth>(x);
        a.syndrome = h.syndrome;
        a.msn.set(h.msn);
        x += sizeof a;
    }
    if (info.has(has_atomic_ack_eth)) {
        at<AtomicAckEth>(x)->orig.set(h.atomic_orig);
        x += sizeof(AtomicAckEth);
    }
    if (info.has(has_immdt)) {
        std::memcpy(at<ImmDt>(x)->b, &h.imm_be, sizeof(ImmDt));
        x += sizeof(ImmDt);
    }
    if (info.has(has_ieth)) {
        at<Ieth>(x)->rkey.set(h.inv_rkey);
        x += sizeof(Ieth);
    }
    return x;
}

}  // namespace

uint8_t* write_headers(uint8_t* f, const PacketHeader& h, uint32_t payload_len) noexcept {
    write_addresses(f, h);
    return write_packet_fields(f, wire_opcode(h.opcode, h.xrc, h.uc), ipv4_sum(f + kIpAt), h, payload_len);
}

void make_template(const PacketHeader& h, HeaderTemplate& t) noexcept {
    write_addresses(t.bytes, h);
    t.ip_sum = ipv4_sum(t.bytes + kIpAt);   // total length and checksum are 0 there
    t.xrc = h.xrc;
    t.uc = h.uc;
}

uint8_t* write_headers(uint8_t* f, const HeaderTemplate& t, const PacketHeader& h, uint32_t payload_len) noexcept {
    std::memcpy(f, t.bytes, sizeof t.bytes);
    return write_packet_fields(f, wire_opcode(h.opcode, t.xrc, t.uc), t.ip_sum, h, payload_len);
}

uint32_t finish_frame(uint8_t* f, uint32_t payload_len) noexcept {
    const uint8_t* ip = f + kIpAt;
    const uint32_t ip_len = at<Ipv4>(ip)->total_length.get();
    uint8_t* icrc_at = f + kIpAt + ip_len - kIcrc;
    // The pad's zeros, as four bytes from its start: what spills into the ICRC's place is written next.
    const uint32_t zero = 0;
    std::memcpy(icrc_at - pad_of(payload_len), &zero, 4);
    store_icrc(icrc_at, icrc_ipv4(ip, ip_len - kIcrc));
    return uint32_t(kEthHeader + ip_len);
}

bool parse_arp(const uint8_t* f, uint32_t len, ArpPacket& out) noexcept {
    if (len < kEthHeader + kArpPacket || at<Eth>(f)->type.get() != kEtherTypeArp) return false;
    const Arp& a = *at<Arp>(f + kEthHeader);
    // Ethernet hardware (1), IPv4 protocol, 6- and 4-byte addresses.
    if (a.hw_type.get() != 1 || a.proto_type.get() != kEtherTypeIpv4 || a.hw_len != 6 || a.proto_len != 4) return false;
    out.op = a.op.get();
    out.sender_mac = a.sender_mac;
    out.sender_ip = a.sender_ip.get();
    out.target_ip = a.target_ip.get();
    return true;
}

uint32_t write_arp(uint8_t* f, uint16_t op, const uint8_t* src_mac, uint32_t src_ip, const uint8_t* dst_mac,
                   uint32_t dst_ip) noexcept {
    constexpr uint32_t kMinFrame = 60;
    std::memset(f, 0, kMinFrame);
    Eth& eth = *at<Eth>(f);
    std::memcpy(eth.dst, dst_mac ? dst_mac : kBroadcast, 6);
    std::memcpy(eth.src, src_mac, 6);
    eth.type.set(kEtherTypeArp);
    Arp& a = *at<Arp>(f + kEthHeader);
    a.hw_type.set(1);
    a.proto_type.set(kEtherTypeIpv4);
    a.hw_len = 6;
    a.proto_len = 4;
    a.op.set(op);
    std::memcpy(a.sender_mac, src_mac, 6);
    a.sender_ip.set(src_ip);
    if (dst_mac) std::memcpy(a.target_mac, dst_mac, 6);   // a request leaves the target MAC zero
    a.target_ip.set(dst_ip);
    return kMinFrame;
}

}  // namespace vfab::rdma
