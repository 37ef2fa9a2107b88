// CRC-32 by slicing-by-8 (eight 256-entry tables, built at compile time) and the RoCEv2 ICRC's
// masking of the variant header fields (Annex A17.3.3).
#include "vfab/rdma/icrc.hpp"

#include <array>
#include <cstring>

#include "vfab/rdma/wire.hpp"

namespace vfab::rdma {
namespace {

constexpr uint32_t kPoly = 0xEDB88320u;

using Tables = std::array<std::array<uint32_t, 256>, 8>;
constexpr Tables make_tables() {
    Tables t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (c & 1 ? kPoly : 0);
        t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
        for (size_t s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
    return t;
}
constexpr Tables kTables = make_tables();

}  // namespace

void Crc32::update(const uint8_t* p, size_t n) noexcept {
    uint32_t c = reg;
    while (n >= 8) {
        uint32_t lo, hi;
        std::memcpy(&lo, p, 4);
        std::memcpy(&hi, p + 4, 4);
        lo ^= c;   // little-endian host (x86-64)
        c = kTables[7][lo & 0xFF] ^ kTables[6][(lo >> 8) & 0xFF] ^ kTables[5][(lo >> 16) & 0xFF] ^
            kTables[4][lo >> 24] ^ kTables[3][hi & 0xFF] ^ kTables[2][(hi >> 8) & 0xFF] ^
            kTables[1][(hi >> 16) & 0xFF] ^ kTables[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xFF];
    reg = c;
}

Crc32 icrc_begin_ipv4(const uint8_t* ipv4) noexcept {
    constexpr size_t kHeaders = wire::kIpv4Header + wire::kUdpHeader + wire::kBth;
    uint8_t masked[8 + kHeaders];
    std::memset(masked, 0xFF, 8);   // the dummy LRH
    uint8_t* h = masked + 8;
    std::memcpy(h, ipv4, kHeaders);
    h[1] = 0xFF;                              // IPv4 TOS (DSCP, ECN)
    h[8] = 0xFF;                              // TTL
    h[10] = h[11] = 0xFF;                     // header checksum
    h[wire::kIpv4Header + 6] = h[wire::kIpv4Header + 7] = 0xFF;   // UDP checksum
    h[wire::kIpv4Header + wire::kUdpHeader + 4] = 0xFF;            // BTH: FECN, BECN, reserved
    Crc32 c;
    c.update(masked, sizeof masked);
    return c;
}

uint32_t icrc_ipv4(const uint8_t* ipv4, size_t len) noexcept {
    constexpr size_t kHeaders = wire::kIpv4Header + wire::kUdpHeader + wire::kBth;
    Crc32 c = icrc_begin_ipv4(ipv4);
    c.update(ipv4 + kHeaders, len - kHeaders);
    return c.value();
}

}  // namespace vfab::rdma
