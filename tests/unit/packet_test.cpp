// examples/common/packet.hpp: frames built and taken apart again, checksums against values
// computed independently, and the parser's refusals.
#include <gtest/gtest.h>

#include <vector>

#include "packet.hpp"

namespace vfab::pkt {
namespace {

const Addr kA{{0x52, 0x54, 0, 0, 0, 1}, ipv4(10, 77, 0, 1)};
const Addr kB{{0x52, 0x54, 0, 0, 0, 2}, ipv4(10, 77, 0, 2)};

TEST(Packet, AddressesParseAndPrint) {
    EXPECT_EQ(to_string_ip(ipv4(192, 168, 0, 199)), "192.168.0.199");
    EXPECT_EQ(parse_ip("10.77.0.2"), ipv4(10, 77, 0, 2));
    for (const char* bad : {"", "10.77.0", "10.77.0.256", "10.77.0.2.", "1..2.3", "a.b.c.d", "10.77.0.2 "})
        EXPECT_FALSE(parse_ip(bad)) << bad;
    EXPECT_EQ(to_string(kA.mac), "52:54:00:00:00:01");
    EXPECT_EQ(parse_mac("52:54:00:AB:cd:02"), (Mac{0x52, 0x54, 0, 0xab, 0xcd, 2}));
    for (const char* bad : {"", "52:54:00:00:00", "52-54-00-00-00-01", "52:54:00:00:00:0g", "52:54:00:00:00:011"})
        EXPECT_FALSE(parse_mac(bad)) << bad;
}

TEST(Packet, ArpRequestRoundTrip) {
    uint8_t f[64];
    ASSERT_EQ(build_arp(f, kArpRequest, kA, {{}, kB.ip}, kBroadcast), kMinFrame);
    Frame p = parse({f, kMinFrame});
    ASSERT_EQ(p.kind, Kind::arp);
    EXPECT_EQ(p.eth_dst, kBroadcast);
    EXPECT_EQ(p.eth_src, kA.mac);
    EXPECT_EQ(p.arp_op, kArpRequest);
    EXPECT_EQ(p.arp_sender.mac, kA.mac);
    EXPECT_EQ(p.arp_sender.ip, kA.ip);
    EXPECT_EQ(p.arp_target.ip, kB.ip);
    EXPECT_EQ(p.arp_target.mac, Mac{});
    EXPECT_EQ(build_arp({f, 59}, kArpRequest, kA, kB, kBroadcast), 0u) << "too small a buffer";
}

// An IPv4 header whose checksum is known: 0xb861 (the usual worked example).
TEST(Packet, Ipv4HeaderChecksumMatchesAKnownValue) {
    const uint8_t ip[20] = {0x45, 0, 0, 0x73, 0, 0, 0x40, 0, 0x40, 0x11, 0, 0, 0xc0, 0xa8, 0, 1, 0xc0, 0xa8, 0, 0xc7};
    EXPECT_EQ(net::ipv4_header_checksum(ip), 0xb861);
}

TEST(Packet, IcmpEchoRoundTripWithValidChecksums) {
    std::vector<uint8_t> data(56);
    for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i);
    uint8_t f[256];
    const size_t n = build_icmp_echo(f, kIcmpEchoRequest, kA, kB, 0x1234, 7, data, 99);
    ASSERT_EQ(n, kEthLen + kIpv4Len + kIcmpLen + 56);
    Frame p = parse({f, n});
    ASSERT_EQ(p.kind, Kind::icmp);
    EXPECT_TRUE(p.checksums_ok());
    EXPECT_EQ(p.icmp_type, kIcmpEchoRequest);
    EXPECT_EQ(p.icmp_id, 0x1234);
    EXPECT_EQ(p.icmp_seq, 7);
    EXPECT_EQ(p.ip_id, 99);
    EXPECT_EQ(p.ttl, 64);
    EXPECT_EQ(p.ip_src, kA.ip);
    EXPECT_EQ(p.ip_dst, kB.ip);
    EXPECT_TRUE(std::equal(p.payload.begin(), p.payload.end(), data.begin(), data.end()));
    f[pkt::kEthLen + kIpv4Len + kIcmpLen + 3] ^= 1;   // one data bit
    EXPECT_FALSE(parse({f, n}).l4_csum_ok);
    EXPECT_TRUE(parse({f, n}).ip_csum_ok);
}

TEST(Packet, UdpChecksumModes) {
    const uint8_t data[5] = {'h', 'e', 'l', 'l', 'o'};
    uint8_t f[128];
    // Short: padded to 60 bytes; the parser goes by the IPv4 and UDP lengths, not the frame's.
    const size_t n = build_udp(f, kA, 4000, kB, 7, data);
    ASSERT_EQ(n, kMinFrame);
    Frame p = parse({f, n});
    ASSERT_EQ(p.kind, Kind::udp);
    EXPECT_TRUE(p.checksums_ok());
    EXPECT_TRUE(p.udp_csum_present);
    EXPECT_EQ(p.sport, 4000);
    EXPECT_EQ(p.dport, 7);
    ASSERT_EQ(p.payload.size(), 5u);
    EXPECT_EQ(p.payload[4], 'o');
    // The checksum net::pseudo_header_sum + net::sum16 compute independently.
    net::L4Offsets o;
    ASSERT_TRUE(net::parse_l4(f, n, o));
    EXPECT_EQ(net::fold(net::sum16(f + o.l4, kUdpLen + 5, net::pseudo_header_sum(f, o, kUdpLen + 5))), 0xffff);

    ASSERT_EQ(build_udp(f, kA, 4000, kB, 7, data, UdpChecksum::none), kMinFrame);
    p = parse({f, kMinFrame});
    EXPECT_FALSE(p.udp_csum_present);
    EXPECT_TRUE(p.checksums_ok()) << "no UDP checksum is a valid one over IPv4";

    ASSERT_EQ(build_udp(f, kA, 4000, kB, 7, data, UdpChecksum::offload), kMinFrame);
    p = parse({f, kMinFrame});
    EXPECT_FALSE(p.ip_csum_ok) << "left for the NIC";
    EXPECT_FALSE(p.l4_csum_ok) << "left for the NIC";
}

TEST(Packet, UdpPayloadAlreadyInPlace) {
    uint8_t f[1514];
    for (size_t i = 0; i < 1472; ++i) f[kUdpHeaders + i] = uint8_t(i * 3);
    ASSERT_EQ(build_udp(f, kA, 1, kB, 2, {f + kUdpHeaders, 1472}), 1514u);
    Frame p = parse({f, 1514});
    ASSERT_EQ(p.kind, Kind::udp);
    EXPECT_TRUE(p.checksums_ok());
    EXPECT_EQ(p.payload[1471], uint8_t(1471 * 3));
    EXPECT_EQ(build_udp({f, 1513}, kA, 1, kB, 2, {f + kUdpHeaders, 1472}), 0u);
}

TEST(Packet, ParserRefusesTruncatedAndInconsistentFrames) {
    uint8_t f[128];
    const uint8_t data[40] = {};
    const size_t n = build_udp(f, kA, 1, kB, 2, data);
    EXPECT_EQ(parse({f, 10}).kind, Kind::malformed);
    EXPECT_EQ(parse({f, 30}).kind, Kind::malformed);
    EXPECT_STREQ(parse({f, n - 1}).why, "IPv4 total length beyond the frame");
    uint8_t g[128];
    std::memcpy(g, f, n);
    net::store_be16(g + kEthLen + kIpv4Len + 4, 200);   // UDP length beyond the packet
    EXPECT_EQ(parse({g, n}).kind, Kind::malformed);
    g[kEthLen] = 0x65;                                  // IPv6 version in an IPv4 frame
    EXPECT_EQ(parse({g, n}).kind, Kind::malformed);
    net::store_be16(f + 12, 0x86dd);
    EXPECT_EQ(parse({f, n}).kind, Kind::other);
}

}  // namespace
}  // namespace vfab::pkt
