// Header parsing and checksums used by checksum offload (include/vfab/net/checksum.hpp).
#include <gtest/gtest.h>

#include "vfab/net/checksum.hpp"

namespace vfab::net {
namespace {

// An IPv4 header from RFC 1071's usual example family: checksum 0xb861.
const uint8_t kIpv4[20] = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                           0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};

std::vector<uint8_t> eth(uint16_t type, std::initializer_list<uint8_t> tail, size_t pad = 64) {
    std::vector<uint8_t> f(12, 0);
    f.push_back(uint8_t(type >> 8));
    f.push_back(uint8_t(type));
    f.insert(f.end(), tail);
    f.resize(std::max(f.size(), pad));
    return f;
}

TEST(NetChecksum, Ipv4HeaderChecksumMatchesAKnownHeader) { EXPECT_EQ(ipv4_header_checksum(kIpv4), 0xb861); }

TEST(NetChecksum, ParsesUdpAndTcpOverIpv4) {
    std::vector<uint8_t> f = eth(0x0800, {});
    std::copy(kIpv4, kIpv4 + 20, f.begin() + 14);
    f.resize(14 + 0x73);
    L4Offsets o;
    ASSERT_TRUE(parse_l4(f.data(), f.size(), o));
    EXPECT_TRUE(o.ipv4);
    EXPECT_FALSE(o.tcp);
    EXPECT_EQ(o.l3, 14);
    EXPECT_EQ(o.l4, 34);
    EXPECT_EQ(o.csum, 40);
    f[14 + 9] = 6;
    ASSERT_TRUE(parse_l4(f.data(), f.size(), o));
    EXPECT_TRUE(o.tcp);
    EXPECT_EQ(o.csum, 34 + 16);
}

TEST(NetChecksum, RefusesWhatItCannotOffload) {
    std::vector<uint8_t> f = eth(0x0800, {});
    std::copy(kIpv4, kIpv4 + 20, f.begin() + 14);
    L4Offsets o;
    EXPECT_FALSE(parse_l4(f.data(), 30, o)) << "truncated IP header";
    EXPECT_FALSE(parse_l4(f.data(), 36, o)) << "checksum field beyond the buffer";
    f[14 + 6] = 0x20;   // more fragments
    EXPECT_FALSE(parse_l4(f.data(), f.size(), o));
    f[14 + 6] = 0x40;
    f[14 + 9] = 1;   // ICMP
    EXPECT_FALSE(parse_l4(f.data(), f.size(), o));
    std::vector<uint8_t> arp = eth(0x0806, {});
    EXPECT_FALSE(parse_l4(arp.data(), arp.size(), o));
    f[14] = 0x44;   // IHL 4 words: invalid
    EXPECT_FALSE(parse_l4(f.data(), f.size(), o));
}

TEST(NetChecksum, VlanTaggedAndIpv6) {
    std::vector<uint8_t> v = eth(0x8100, {0x00, 0x05, 0x86, 0xdd}, 14 + 4 + 40 + 8);
    v[18 + 6] = 17;   // next header UDP
    L4Offsets o;
    ASSERT_TRUE(parse_l4(v.data(), v.size(), o));
    EXPECT_FALSE(o.ipv4);
    EXPECT_EQ(o.l3, 18);
    EXPECT_EQ(o.l4, 58);
    EXPECT_EQ(o.csum, 64);
}

// The pseudo-header sum plus the segment's sum, checksum field holding its complement,
// folds to 0xffff: the receiver's check (RFC 768).
TEST(NetChecksum, PseudoHeaderSumMakesAValidUdpChecksum) {
    std::vector<uint8_t> f = eth(0x0800, {});
    std::copy(kIpv4, kIpv4 + 20, f.begin() + 14);
    f.resize(14 + 0x73);
    for (size_t i = 42; i < f.size(); ++i) f[i] = uint8_t(i * 13);
    const uint32_t l4_len = 0x73 - 20;
    store_be16(f.data() + 34, 1234);
    store_be16(f.data() + 36, 53);
    store_be16(f.data() + 38, uint16_t(l4_len));
    L4Offsets o;
    ASSERT_TRUE(parse_l4(f.data(), f.size(), o));
    store_be16(f.data() + o.csum, 0);
    uint32_t acc = sum16(f.data() + o.l4, l4_len, pseudo_header_sum(f.data(), o, l4_len));
    store_be16(f.data() + o.csum, uint16_t(~fold(acc)));
    acc = sum16(f.data() + o.l4, l4_len, pseudo_header_sum(f.data(), o, l4_len));
    EXPECT_EQ(fold(acc), 0xffff);
}

}  // namespace
}  // namespace vfab::net
