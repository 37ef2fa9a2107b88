// Header parsing for checksum offload: where the IPv4 header and the TCP/UDP checksum lie in
// an Ethernet frame, and the pseudo-header sum that NICs expect software to seed into the
// TCP/UDP checksum field (RFC 768, RFC 793, RFC 8200 §8.1). Inline: used on the send path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace vfab::net {

struct L4Offsets {
    uint16_t l3 = 0;          // start of the IP header
    uint16_t l4 = 0;          // start of the TCP/UDP header
    uint16_t csum = 0;        // the TCP/UDP checksum field
    bool ipv4 = false;        // else IPv6
    bool tcp = false;         // else UDP
};

// The 16-bit big-endian (network order) value at `p`; no alignment needed.
inline uint16_t load_be16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }
// Writes `v` at `p` in big-endian (network) order; no alignment needed.
inline void store_be16(uint8_t* p, uint16_t v) {
    p[0] = uint8_t(v >> 8);
    p[1] = uint8_t(v);
}

// Finds the offsets in the first `len` bytes of `frame` (Ethernet II, at most one 802.1Q tag,
// IPv4 without fragmentation or IPv6 without extension headers, then TCP or UDP). False when
// the frame is anything else or its headers do not fit in `len`.
inline bool parse_l4(const uint8_t* frame, size_t len, L4Offsets& out) {
    size_t off = 12;
    if (len < off + 2) return false;
    uint16_t type = load_be16(frame + off);
    off += 2;
    if (type == 0x8100) {
        if (len < off + 4) return false;
        type = load_be16(frame + off + 2);
        off += 4;
    }
    out.l3 = uint16_t(off);
    uint8_t proto = 0;
    if (type == 0x0800) {
        if (len < off + 20) return false;
        const uint8_t* ip = frame + off;
        const size_t ihl = size_t(ip[0] & 0x0f) * 4;
        if ((ip[0] >> 4) != 4 || ihl < 20 || len < off + ihl) return false;
        if ((load_be16(ip + 6) & 0x3fff) != 0) return false;   // a fragment
        proto = ip[9];
        out.ipv4 = true;
        off += ihl;
    } else if (type == 0x86dd) {
        if (len < off + 40) return false;
        proto = frame[off + 6];
        out.ipv4 = false;
        off += 40;
    } else {
        return false;
    }
    if (proto == 6) {
        out.tcp = true;
        out.csum = uint16_t(off + 16);
    } else if (proto == 17) {
        out.tcp = false;
        out.csum = uint16_t(off + 6);
    } else {
        return false;
    }
    out.l4 = uint16_t(off);
    return len >= size_t(out.csum) + 2;
}

// Ones'-complement sum of 16-bit big-endian words, not folded.
inline uint32_t sum16(const uint8_t* p, size_t n, uint32_t acc = 0) {
    for (; n >= 2; p += 2, n -= 2) acc += load_be16(p);
    if (n) acc += uint32_t(p[0]) << 8;
    return acc;
}

// Folds a sum16() accumulator to 16 bits, adding the carries back in (RFC 1071); not
// complemented: the checksum field takes ~fold(acc).
inline uint16_t fold(uint32_t acc) {
    while (acc >> 16) acc = (acc & 0xffff) + (acc >> 16);
    return uint16_t(acc);
}

// The pseudo-header sum (not complemented) for a segment of `l4_len` bytes (header + data).
inline uint16_t pseudo_header_sum(const uint8_t* frame, const L4Offsets& o, uint32_t l4_len) {
    const uint8_t* ip = frame + o.l3;
    uint32_t acc = o.tcp ? 6 : 17;
    if (o.ipv4) {
        acc = sum16(ip + 12, 8, acc);   // source and destination
    } else {
        acc = sum16(ip + 8, 32, acc);
        acc += l4_len >> 16;
    }
    acc += l4_len & 0xffff;
    return fold(acc);
}

// The IPv4 header checksum computed in software (tests, and devices without the offload).
inline uint16_t ipv4_header_checksum(const uint8_t* ip) {
    const size_t ihl = size_t(ip[0] & 0x0f) * 4;
    uint32_t acc = sum16(ip, 10);
    acc = sum16(ip + 12, ihl - 12, acc);
    return uint16_t(~fold(acc));
}

// What NICs with checksum offload expect of software (82574L §7.2.5.2, 82576 §7.2.5): the IPv4
// header checksum field zero (the device fills it) and the TCP/UDP checksum field seeded with
// the pseudo-header sum, the L4 length taken from the IP header.
inline void seed_for_offload(uint8_t* frame, const L4Offsets& o) {
    uint32_t l4_len;
    if (o.ipv4) {
        frame[o.l3 + 10] = frame[o.l3 + 11] = 0;
        l4_len = load_be16(frame + o.l3 + 2) - (o.l4 - o.l3);
    } else {
        l4_len = load_be16(frame + o.l3 + 4);
    }
    store_be16(frame + o.csum, pseudo_header_sum(frame, o, l4_len));
}

}  // namespace vfab::net
