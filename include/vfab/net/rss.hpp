// Receive-side scaling in software: the Toeplitz hash NICs compute over a frame's addresses
// and ports (Microsoft's RSS specification, also VIRTIO 1.2 §5.1.6.4.3.1), the input a frame
// gives for each hash type, and the queue a redirection table picks. Tests use it to predict
// where a device puts each flow; applications can use it to place flows on purpose.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "vfab/net/checksum.hpp"
#include "vfab/types.hpp"

namespace vfab::net {

// The 40-byte key of Microsoft's RSS verification suite, the usual default.
inline constexpr std::array<uint8_t, 40> kDefaultRssKey = {
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3,
    0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3,
    0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};

// For each set bit of the input, from the most significant bit of its first byte, XOR in the
// 32 key bits starting at that bit position. The key must be at least input.size() + 4 bytes.
inline uint32_t toeplitz_hash(std::span<const uint8_t> key, std::span<const uint8_t> input) {
    if (key.size() < input.size() + 4) return 0;
    uint32_t hash = 0;
    uint32_t window = uint32_t(key[0]) << 24 | uint32_t(key[1]) << 16 | uint32_t(key[2]) << 8 | key[3];
    for (size_t i = 0; i < input.size(); ++i) {
        const uint8_t next = key[i + 4];
        for (int b = 7; b >= 0; --b) {
            if (input[i] & (1u << b)) hash ^= window;
            window = window << 1 | ((next >> b) & 1u);
        }
    }
    return hash;
}

// The bytes a frame is hashed over under `hash_types` (RssHash): source address, destination
// address, then source and destination ports when a TCP/UDP type is enabled for its protocol.
// Empty when no enabled type applies (the frame is "unclassified").
struct RssInput {
    std::array<uint8_t, 36> bytes{};
    size_t size = 0;
    // The first `size` bytes of `bytes`: what toeplitz_hash() takes as its input.
    std::span<const uint8_t> span() const { return {bytes.data(), size}; }
};

// The hash input of the first `len` bytes of `frame` under `hash_types` (RssHash bits), as
// described at RssInput; size 0 when no enabled type applies or the frame is not TCP or UDP
// over IPv4/IPv6 as parse_l4() reads it (an IPv4 fragment, another protocol). No allocation.
inline RssInput rss_input(const uint8_t* frame, size_t len, uint32_t hash_types) {
    RssInput in;
    L4Offsets o;
    if (!parse_l4(frame, len, o)) return in;   // TCP/UDP only here: what the tests send
    const uint32_t ports = o.ipv4 ? (o.tcp ? rss_tcp_ipv4 : rss_udp_ipv4) : (o.tcp ? rss_tcp_ipv6 : rss_udp_ipv6);
    const uint32_t addrs = o.ipv4 ? rss_ipv4 : rss_ipv6;
    const size_t alen = o.ipv4 ? 4 : 16, aoff = o.l3 + (o.ipv4 ? 12 : 8);
    if (!(hash_types & (ports | addrs))) return in;
    for (size_t i = 0; i < 2 * alen; ++i) in.bytes[i] = frame[aoff + i];
    in.size = 2 * alen;
    if (hash_types & ports) {
        for (size_t i = 0; i < 4; ++i) in.bytes[in.size + i] = frame[o.l4 + i];
        in.size += 4;
    }
    return in;
}

// The queue RSS picks for a frame: the table entry the hash selects; table[0] when the frame
// is unclassified (what vfab's drivers program as the default queue).
inline uint16_t rss_queue(const uint8_t* frame, size_t len, const RssConfig& cfg) {
    if (cfg.table.empty()) return 0;
    const RssInput in = rss_input(frame, len, cfg.hash_types);
    if (in.size == 0) return cfg.table[0];
    return cfg.table[toeplitz_hash(cfg.key, in.span()) & (cfg.table.size() - 1)];
}

}  // namespace vfab::net
