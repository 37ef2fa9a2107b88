// Ethernet, ARP, IPv4, ICMP echo and UDP frames: builders that write a whole frame into a
// buffer and a parser that takes one apart and verifies its checksums. Header-only, no
// allocation, no exceptions: usable on the fast path of a raw-packet queue pair.
//
//   uint8_t f[1514];
//   size_t n = pkt::build_udp(f, {my_mac, my_ip}, 4000, {peer_mac, peer_ip}, 7, payload);
//   pkt::Frame p = pkt::parse({buf, byte_len});
//   if (p.kind == pkt::Kind::udp && p.checksums_ok()) ...
//
// IPv4 addresses are host-order uint32_t (ipv4(10, 0, 0, 1)); everything on the wire is
// big-endian. Frames shorter than 60 bytes are padded with zeros (the NIC adds the FCS).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "vfab/net/checksum.hpp"

namespace vfab::pkt {

using Mac = std::array<uint8_t, 6>;
inline constexpr Mac kBroadcast = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

inline constexpr uint16_t kEtherIpv4 = 0x0800, kEtherArp = 0x0806;
inline constexpr uint8_t kProtoIcmp = 1, kProtoUdp = 17;
inline constexpr uint16_t kArpRequest = 1, kArpReply = 2;
inline constexpr uint8_t kIcmpEchoReply = 0, kIcmpEchoRequest = 8;
inline constexpr size_t kEthLen = 14, kArpLen = 28, kIpv4Len = 20, kIcmpLen = 8, kUdpLen = 8;
inline constexpr size_t kUdpHeaders = kEthLen + kIpv4Len + kUdpLen;   // 42
inline constexpr size_t kMinFrame = 60;                              // without the FCS

constexpr uint32_t ipv4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
    return uint32_t(a) << 24 | uint32_t(b) << 16 | uint32_t(c) << 8 | d;
}

inline std::string to_string_ip(uint32_t ip) {
    char s[16];
    std::snprintf(s, sizeof s, "%u.%u.%u.%u", ip >> 24, (ip >> 16) & 0xff, (ip >> 8) & 0xff, ip & 0xff);
    return s;
}

inline std::string to_string(const Mac& m) {
    char s[18];
    std::snprintf(s, sizeof s, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
    return s;
}

// "52:54:00:00:00:01" (either case); nullopt for anything else.
inline std::optional<Mac> parse_mac(std::string_view s) {
    Mac m{};
    if (s.size() != 17) return std::nullopt;
    auto hex = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    for (size_t i = 0; i < 6; ++i) {
        const int hi = hex(s[3 * i]), lo = hex(s[3 * i + 1]);
        if (hi < 0 || lo < 0 || (i < 5 && s[3 * i + 2] != ':')) return std::nullopt;
        m[i] = uint8_t(hi << 4 | lo);
    }
    return m;
}

// "10.0.0.1"; nullopt for anything else.
inline std::optional<uint32_t> parse_ip(std::string_view s) {
    uint32_t ip = 0;
    for (int part = 0; part < 4; ++part) {
        if (s.empty() || s[0] < '0' || s[0] > '9') return std::nullopt;
        uint32_t v = 0;
        size_t i = 0;
        for (; i < s.size() && i < 4 && s[i] >= '0' && s[i] <= '9'; ++i) v = v * 10 + uint32_t(s[i] - '0');
        if (v > 255 || i > 3) return std::nullopt;
        ip = ip << 8 | v;
        s.remove_prefix(i);
        if (part < 3) {
            if (s.empty() || s[0] != '.') return std::nullopt;
            s.remove_prefix(1);
        }
    }
    if (!s.empty()) return std::nullopt;
    return ip;
}

inline uint32_t load_be32(const uint8_t* p) { return uint32_t(net::load_be16(p)) << 16 | net::load_be16(p + 2); }
inline void store_be32(uint8_t* p, uint32_t v) {
    net::store_be16(p, uint16_t(v >> 16));
    net::store_be16(p + 2, uint16_t(v));
}

// One end of an IPv4 conversation.
struct Addr {
    Mac mac{};
    uint32_t ip = 0;
};

// How build_udp fills the UDP checksum.
enum class UdpChecksum {
    software,   // computed here (and the IPv4 header checksum too)
    offload,    // left to the NIC: send the frame with vfab::send_ip_csum; both checksum
                // fields hold 0xffff until the driver seeds them and the device fills them
    none,       // 0: "no checksum" (allowed for UDP over IPv4)
};

namespace detail {

inline size_t eth(uint8_t* f, const Mac& dst, const Mac& src, uint16_t type) {
    std::memcpy(f, dst.data(), 6);
    std::memcpy(f + 6, src.data(), 6);
    net::store_be16(f + 12, type);
    return kEthLen;
}

// An IPv4 header without options, DF set, checksum filled unless `csum` is false.
inline void ipv4_header(uint8_t* ip, uint8_t proto, uint32_t src, uint32_t dst, size_t total, uint16_t id, bool csum) {
    ip[0] = 0x45;
    ip[1] = 0;
    net::store_be16(ip + 2, uint16_t(total));
    net::store_be16(ip + 4, id);
    net::store_be16(ip + 6, 0x4000);
    ip[8] = 64;
    ip[9] = proto;
    store_be32(ip + 12, src);
    store_be32(ip + 16, dst);
    net::store_be16(ip + 10, csum ? net::ipv4_header_checksum(ip) : 0xffff);
}

inline size_t pad(uint8_t* f, size_t len) {
    if (len < kMinFrame) {
        std::memset(f + len, 0, kMinFrame - len);
        return kMinFrame;
    }
    return len;
}

// Ones'-complement checksum of a UDP segment of `len` bytes at `udp` with its pseudo-header.
inline uint16_t udp_checksum(const uint8_t* ip, const uint8_t* udp, size_t len) {
    uint32_t acc = net::sum16(ip + 12, 8, kProtoUdp + uint32_t(len));
    acc = net::sum16(udp, len, acc);
    const uint16_t c = uint16_t(~net::fold(acc));
    return c == 0 ? 0xffff : c;   // 0 means "no checksum" (RFC 768)
}

}  // namespace detail

// An ARP request or reply (op) from `sender` about `target`, to Ethernet address `eth_dst`
// (kBroadcast for a request). Returns the frame length (60), or 0 when `out` is too small.
inline size_t build_arp(std::span<uint8_t> out, uint16_t op, const Addr& sender, const Addr& target, const Mac& eth_dst) {
    if (out.size() < kMinFrame) return 0;
    uint8_t* f = out.data();
    uint8_t* a = f + detail::eth(f, eth_dst, sender.mac, kEtherArp);
    net::store_be16(a, 1);        // Ethernet
    net::store_be16(a + 2, kEtherIpv4);
    a[4] = 6;
    a[5] = 4;
    net::store_be16(a + 6, op);
    std::memcpy(a + 8, sender.mac.data(), 6);
    store_be32(a + 14, sender.ip);
    std::memcpy(a + 18, target.mac.data(), 6);
    store_be32(a + 24, target.ip);
    return detail::pad(f, kEthLen + kArpLen);
}

// An ICMP echo request or reply (type) with `data`, checksums computed. 0 when it does not fit.
inline size_t build_icmp_echo(std::span<uint8_t> out, uint8_t type, const Addr& src, const Addr& dst, uint16_t id,
                              uint16_t seq, std::span<const uint8_t> data, uint16_t ip_id = 0) {
    const size_t len = kEthLen + kIpv4Len + kIcmpLen + data.size();
    if (out.size() < std::max(len, kMinFrame) || len - kEthLen > 0xffff) return 0;
    uint8_t* f = out.data();
    detail::eth(f, dst.mac, src.mac, kEtherIpv4);
    uint8_t* ip = f + kEthLen;
    detail::ipv4_header(ip, kProtoIcmp, src.ip, dst.ip, len - kEthLen, ip_id, true);
    uint8_t* icmp = ip + kIpv4Len;
    icmp[0] = type;
    icmp[1] = 0;
    net::store_be16(icmp + 2, 0);
    net::store_be16(icmp + 4, id);
    net::store_be16(icmp + 6, seq);
    if (!data.empty()) std::memmove(icmp + kIcmpLen, data.data(), data.size());
    net::store_be16(icmp + 2, uint16_t(~net::fold(net::sum16(icmp, kIcmpLen + data.size()))));
    return detail::pad(f, len);
}

// A UDP datagram carrying `payload` (which may already lie at its place in `out`, 42 bytes in).
// 0 when it does not fit.
inline size_t build_udp(std::span<uint8_t> out, const Addr& src, uint16_t sport, const Addr& dst, uint16_t dport,
                        std::span<const uint8_t> payload, UdpChecksum csum = UdpChecksum::software, uint16_t ip_id = 0) {
    const size_t len = kUdpHeaders + payload.size();
    if (out.size() < std::max(len, kMinFrame) || len - kEthLen > 0xffff) return 0;
    uint8_t* f = out.data();
    detail::eth(f, dst.mac, src.mac, kEtherIpv4);
    uint8_t* ip = f + kEthLen;
    detail::ipv4_header(ip, kProtoUdp, src.ip, dst.ip, len - kEthLen, ip_id, csum != UdpChecksum::offload);
    uint8_t* udp = ip + kIpv4Len;
    net::store_be16(udp, sport);
    net::store_be16(udp + 2, dport);
    net::store_be16(udp + 4, uint16_t(kUdpLen + payload.size()));
    net::store_be16(udp + 6, 0);
    if (!payload.empty() && payload.data() != udp + kUdpLen) std::memmove(udp + kUdpLen, payload.data(), payload.size());
    if (csum == UdpChecksum::software) net::store_be16(udp + 6, detail::udp_checksum(ip, udp, kUdpLen + payload.size()));
    if (csum == UdpChecksum::offload) net::store_be16(udp + 6, 0xffff);
    return detail::pad(f, len);
}

enum class Kind : uint8_t { other, arp, icmp, udp, ipv4_other, malformed };

inline const char* to_string(Kind k) {
    switch (k) {
    case Kind::other: return "other";
    case Kind::arp: return "ARP";
    case Kind::icmp: return "ICMP";
    case Kind::udp: return "UDP";
    case Kind::ipv4_other: return "IPv4 (other protocol)";
    case Kind::malformed: return "malformed";
    }
    return "?";
}

// A frame taken apart. Only the fields of its kind are meaningful.
struct Frame {
    Kind kind = Kind::other;
    const char* why = "";          // malformed: what is wrong
    Mac eth_dst{}, eth_src{};
    uint16_t ethertype = 0;
    // ARP
    uint16_t arp_op = 0;
    Addr arp_sender, arp_target;
    // IPv4
    uint32_t ip_src = 0, ip_dst = 0;
    uint8_t ip_proto = 0, ttl = 0;
    uint16_t ip_id = 0;
    bool ip_csum_ok = false;       // the IPv4 header checksum is right
    bool l4_csum_ok = false;       // the ICMP / UDP checksum is right (or UDP sent none)
    bool udp_csum_present = false;
    // ICMP (echo)
    uint8_t icmp_type = 0, icmp_code = 0;
    uint16_t icmp_id = 0, icmp_seq = 0;
    // UDP
    uint16_t sport = 0, dport = 0;
    // ICMP echo data or UDP payload
    std::span<const uint8_t> payload;

    bool checksums_ok() const { return ip_csum_ok && l4_csum_ok; }
    Addr src() const { return {eth_src, ip_src}; }
};

inline Frame malformed(Frame f, const char* why) {
    f.kind = Kind::malformed;
    f.why = why;
    return f;
}

// Takes `frame` (as received: Ethernet header first, no FCS, maybe padded) apart.
inline Frame parse(std::span<const uint8_t> frame) {
    Frame p;
    if (frame.size() < kEthLen) return malformed(p, "shorter than an Ethernet header");
    const uint8_t* f = frame.data();
    std::memcpy(p.eth_dst.data(), f, 6);
    std::memcpy(p.eth_src.data(), f + 6, 6);
    p.ethertype = net::load_be16(f + 12);
    const uint8_t* l3 = f + kEthLen;
    const size_t l3_len = frame.size() - kEthLen;
    if (p.ethertype == kEtherArp) {
        if (l3_len < kArpLen) return malformed(p, "ARP shorter than 28 bytes");
        if (net::load_be16(l3) != 1 || net::load_be16(l3 + 2) != kEtherIpv4 || l3[4] != 6 || l3[5] != 4)
            return malformed(p, "ARP not for Ethernet/IPv4");
        p.kind = Kind::arp;
        p.arp_op = net::load_be16(l3 + 6);
        std::memcpy(p.arp_sender.mac.data(), l3 + 8, 6);
        p.arp_sender.ip = load_be32(l3 + 14);
        std::memcpy(p.arp_target.mac.data(), l3 + 18, 6);
        p.arp_target.ip = load_be32(l3 + 24);
        return p;
    }
    if (p.ethertype != kEtherIpv4) return p;   // other
    if (l3_len < kIpv4Len) return malformed(p, "IPv4 header truncated");
    const size_t ihl = size_t(l3[0] & 0x0f) * 4;
    const size_t total = net::load_be16(l3 + 2);
    if ((l3[0] >> 4) != 4 || ihl < kIpv4Len) return malformed(p, "not an IPv4 header");
    if (total < ihl || total > l3_len) return malformed(p, "IPv4 total length beyond the frame");
    p.ip_src = load_be32(l3 + 12);
    p.ip_dst = load_be32(l3 + 16);
    p.ip_proto = l3[9];
    p.ttl = l3[8];
    p.ip_id = net::load_be16(l3 + 4);
    p.ip_csum_ok = net::fold(net::sum16(l3, ihl)) == 0xffff;
    if ((net::load_be16(l3 + 6) & 0x3fff) != 0) {   // a fragment: not taken apart further
        p.kind = Kind::ipv4_other;
        return p;
    }
    const uint8_t* l4 = l3 + ihl;
    const size_t l4_len = total - ihl;
    if (p.ip_proto == kProtoIcmp) {
        if (l4_len < kIcmpLen) return malformed(p, "ICMP header truncated");
        p.kind = Kind::icmp;
        p.icmp_type = l4[0];
        p.icmp_code = l4[1];
        p.icmp_id = net::load_be16(l4 + 4);
        p.icmp_seq = net::load_be16(l4 + 6);
        p.l4_csum_ok = net::fold(net::sum16(l4, l4_len)) == 0xffff;
        p.payload = {l4 + kIcmpLen, l4_len - kIcmpLen};
        return p;
    }
    if (p.ip_proto == kProtoUdp) {
        if (l4_len < kUdpLen) return malformed(p, "UDP header truncated");
        const size_t udp_len = net::load_be16(l4 + 4);
        if (udp_len < kUdpLen || udp_len > l4_len) return malformed(p, "UDP length beyond the IPv4 packet");
        p.kind = Kind::udp;
        p.sport = net::load_be16(l4);
        p.dport = net::load_be16(l4 + 2);
        p.udp_csum_present = net::load_be16(l4 + 6) != 0;
        uint32_t acc = net::sum16(l3 + 12, 8, kProtoUdp + uint32_t(udp_len));
        p.l4_csum_ok = !p.udp_csum_present || net::fold(net::sum16(l4, udp_len, acc)) == 0xffff;
        p.payload = {l4 + kUdpLen, udp_len - kUdpLen};
        return p;
    }
    p.kind = Kind::ipv4_other;
    p.l4_csum_ok = true;
    return p;
}

}  // namespace vfab::pkt
