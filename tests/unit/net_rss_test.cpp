// The software Toeplitz hash against Microsoft's RSS verification suite (the key and the
// IPv4 vectors published with the RSS specification), and frame parsing per hash type.
#include <gtest/gtest.h>

#include <vector>

#include "vfab/net/rss.hpp"

namespace {

using vfab::net::kDefaultRssKey;
using vfab::net::toeplitz_hash;

struct Vector {
    uint8_t src[4], dst[4];
    uint16_t sport, dport;
    uint32_t ip_hash, tcp_hash;
};
// "Verifying the RSS Hash Calculation", IPv4 table.
constexpr Vector kVectors[] = {
    {{66, 9, 149, 187}, {161, 142, 100, 80}, 2794, 1766, 0x323e8fc2, 0x51ccc178},
    {{199, 92, 111, 2}, {65, 69, 140, 83}, 14230, 4739, 0xd718262a, 0xc626b0ea},
    {{24, 19, 198, 95}, {12, 22, 207, 184}, 12898, 38024, 0xd2d0a5de, 0x5c2b394a},
    {{38, 27, 205, 30}, {209, 142, 163, 6}, 48228, 2217, 0x82989176, 0xafc7327f},
    {{153, 39, 163, 191}, {202, 188, 127, 2}, 44251, 1303, 0x5d1809c5, 0x10e828a2},
};

std::vector<uint8_t> udp_frame(const Vector& v, bool tcp) {
    std::vector<uint8_t> f(14 + 20 + 20, 0);
    f[12] = 0x08;
    f[14] = 0x45;
    f[14 + 3] = uint8_t(f.size() - 14);
    f[14 + 9] = tcp ? 6 : 17;
    std::copy(v.src, v.src + 4, f.begin() + 14 + 12);
    std::copy(v.dst, v.dst + 4, f.begin() + 14 + 16);
    vfab::net::store_be16(&f[34], v.sport);
    vfab::net::store_be16(&f[36], v.dport);
    return f;
}

TEST(Toeplitz, MatchesTheVerificationSuite) {
    for (const Vector& v : kVectors) {
        uint8_t ip[8], tcp[12];
        std::copy(v.src, v.src + 4, ip);
        std::copy(v.dst, v.dst + 4, ip + 4);
        std::copy(ip, ip + 8, tcp);
        vfab::net::store_be16(tcp + 8, v.sport);
        vfab::net::store_be16(tcp + 10, v.dport);
        EXPECT_EQ(toeplitz_hash(kDefaultRssKey, ip), v.ip_hash);
        EXPECT_EQ(toeplitz_hash(kDefaultRssKey, tcp), v.tcp_hash);
    }
}

TEST(Toeplitz, AKeyTooShortForTheInputGivesZero) {
    const uint8_t input[12] = {1};
    EXPECT_EQ(toeplitz_hash(std::span(kDefaultRssKey).first(15), input), 0u);
}

TEST(RssInput, FollowsTheEnabledHashTypes) {
    const Vector& v = kVectors[0];
    const auto tcp = udp_frame(v, true), udp = udp_frame(v, false);
    auto hash = [&](const std::vector<uint8_t>& f, uint32_t types) {
        const auto in = vfab::net::rss_input(f.data(), f.size(), types);
        return in.size ? toeplitz_hash(kDefaultRssKey, in.span()) : 0u;
    };
    EXPECT_EQ(hash(tcp, vfab::rss_tcp_ipv4), v.tcp_hash);
    EXPECT_EQ(hash(tcp, vfab::rss_ipv4), v.ip_hash);
    EXPECT_EQ(hash(tcp, vfab::rss_ipv4 | vfab::rss_udp_ipv4), v.ip_hash);   // UDP's type does not apply
    EXPECT_EQ(hash(udp, vfab::rss_ipv4 | vfab::rss_udp_ipv4), v.tcp_hash);  // same tuple, same hash
    EXPECT_EQ(vfab::net::rss_input(udp.data(), udp.size(), vfab::rss_tcp_ipv4 | vfab::rss_ipv6).size, 0u);
}

TEST(RssQueue, PicksTheTableEntryOrTheFirstForUnclassifiedFrames) {
    const uint16_t table[4] = {3, 1, 2, 0};
    const vfab::RssConfig cfg{kDefaultRssKey, table, vfab::rss_udp_ipv4};
    for (const Vector& v : kVectors) {
        const auto f = udp_frame(v, false);
        EXPECT_EQ(vfab::net::rss_queue(f.data(), f.size(), cfg), table[v.tcp_hash & 3]);
    }
    const std::vector<uint8_t> arp(60, 0);
    EXPECT_EQ(vfab::net::rss_queue(arp.data(), arp.size(), cfg), 3);
}

}  // namespace
