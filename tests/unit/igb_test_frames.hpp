// What the igb fast-path unit tests share besides the model device: a buffer area to
// register, a builder of Ethernet/IPv4/IPv6/UDP/TCP frames, and checks of checksums and
// the queue pair's counters.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "igb_harness.hpp"

namespace vfab::igb {

constexpr uint32_t kDtypMask = 0xfu << 20;

struct Buffers {
    std::vector<uint8_t> mem = std::vector<uint8_t>(256 * 2048);
    uint8_t* ptr(size_t slot, size_t off = 0) { return mem.data() + slot * 2048 + off; }
    uint64_t addr(size_t slot, size_t off = 0) { return reinterpret_cast<uint64_t>(ptr(slot, off)); }
};

// Ethernet (optionally 802.1Q-tagged), IPv4 with `ihl` words or IPv6, UDP or TCP, then
// `payload` bytes. The IPv4 checksum field holds garbage the driver must clear. Returns the length.
inline size_t build_frame(uint8_t* f, bool v6, bool tcp, size_t payload, bool vlan = false, int ihl = 5) {
    for (int i = 0; i < 12; ++i) f[i] = uint8_t(0x10 + i);
    size_t off = 12;
    if (vlan) {
        net::store_be16(f + 12, 0x8100);
        net::store_be16(f + 14, 7);
        off = 16;
    }
    net::store_be16(f + off, v6 ? 0x86dd : 0x0800);
    off += 2;
    const size_t l3 = off, l4_len = (tcp ? 20 : 8) + payload, ip_len = v6 ? 40 : size_t(ihl) * 4;
    std::memset(f + l3, 0, ip_len + (tcp ? 20 : 8));
    if (v6) {
        f[l3] = 0x60;
        net::store_be16(f + l3 + 4, uint16_t(l4_len));
        f[l3 + 6] = tcp ? 6 : 17;
        f[l3 + 7] = 64;
        for (int i = 0; i < 16; ++i) f[l3 + 8 + i] = uint8_t(i), f[l3 + 24 + i] = uint8_t(0x80 + i);
    } else {
        f[l3] = uint8_t(0x40 | ihl);
        net::store_be16(f + l3 + 2, uint16_t(ip_len + l4_len));
        f[l3 + 8] = 64;
        f[l3 + 9] = tcp ? 6 : 17;
        f[l3 + 10] = 0xab, f[l3 + 11] = 0xcd;
        const uint8_t addrs[8] = {10, 0, 0, 1, 10, 0, 0, 2};
        std::memcpy(f + l3 + 12, addrs, 8);
    }
    off = l3 + ip_len;
    net::store_be16(f + off, 1234);
    net::store_be16(f + off + 2, 5678);
    if (tcp)
        f[off + 12] = 0x50;   // data offset: 5 words
    else
        net::store_be16(f + off + 4, uint16_t(l4_len));
    for (size_t k = 0; k < payload; ++k) f[off + (tcp ? 20 : 8) + k] = uint8_t(k * 7 + 3);
    return off + l4_len;
}

// Both checksums of a frame as it left the device verify.
inline void expect_checksums_valid(const std::vector<uint8_t>& frame) {
    const uint8_t* f = frame.data();
    net::L4Offsets o;
    ASSERT_TRUE(net::parse_l4(f, frame.size(), o));
    if (o.ipv4) {
        EXPECT_EQ(net::load_be16(f + o.l3 + 10), net::ipv4_header_checksum(f + o.l3));
    }
    const auto l4_len = uint32_t(frame.size() - o.l4);
    EXPECT_EQ(net::fold(net::sum16(f + o.l4, l4_len, net::pseudo_header_sum(f, o, l4_len))), 0xffff);
}

inline void expect_stats(const QpStats& s, uint64_t tx_packets, uint64_t tx_bytes, uint64_t rx_packets, uint64_t rx_bytes) {
    EXPECT_EQ(s.tx_packets, tx_packets);
    EXPECT_EQ(s.tx_bytes, tx_bytes);
    EXPECT_EQ(s.rx_packets, rx_packets);
    EXPECT_EQ(s.rx_bytes, rx_bytes);
}

inline const Completion* find(const Completion* wc, int n, WcOpcode op) {
    for (int i = 0; i < n; ++i)
        if (wc[i].opcode == op) return &wc[i];
    return nullptr;
}

}  // namespace vfab::igb
