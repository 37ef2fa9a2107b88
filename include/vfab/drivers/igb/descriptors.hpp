// Intel 82576 advanced descriptor formats (datasheet §7.1.5 receive, §7.2.2 transmit). All
// little-endian; vfab runs on little-endian x86-64 only.
#pragma once

#include <cstdint>

namespace vfab::igb {

// Advanced receive descriptor, one buffer (SRRCTL.DESCTYPE = 001), §7.1.5.1-2.
union RxDesc {
    struct {
        uint64_t pkt_addr;
        uint64_t hdr_addr;   // bit 0 is DD in the write-back: written 0
    } read;
    struct {
        uint32_t info;          // RSS type 3:0, packet type 16:4, header length 30:21
        uint32_t rss_hash;      // with RXCSUM.PCSD (else fragment checksum / IP id)
        uint32_t status_error;  // extended status 19:0, errors 31:20
        uint16_t length;
        uint16_t vlan;
    } wb;
};
static_assert(sizeof(RxDesc) == 16);

namespace rxd {
inline constexpr uint32_t DD = 1u << 0;
inline constexpr uint32_t EOP = 1u << 1;
inline constexpr uint32_t UDPCS = 1u << 4;
inline constexpr uint32_t L4CS = 1u << 5;    // TCP/UDP checksum checked
inline constexpr uint32_t IPCS = 1u << 6;    // IPv4 header checksum checked
inline constexpr uint32_t TS = 1u << 16;     // IEEE 1588: the arrival time was latched
inline constexpr uint32_t ERR_FRAME = (1u << 24) | (1u << 25) | (1u << 26) | (1u << 28) | (1u << 31);
inline constexpr uint32_t ERR_L4E = 1u << 29;
inline constexpr uint32_t ERR_IPE = 1u << 30;
inline constexpr uint32_t RSS_TYPE_MASK = 0xf;   // 0: no hash computed
}  // namespace rxd

// Advanced transmit data descriptor (DTYP = 0011), §7.2.2.3; the device writes DD into
// olinfo_status when RS was set.
struct TxDesc {
    uint64_t buffer_addr;
    uint32_t cmd_type_len;    // DTALEN 15:0, DTYP 23:20, DCMD 31:24
    uint32_t olinfo_status;   // STA 3:0 (DD), IDX 6:4, POPTS 13:8, PAYLEN 31:14
};
static_assert(sizeof(TxDesc) == 16);

// Advanced transmit context descriptor (DTYP = 0010), §7.2.2.2: the offsets checksum offload
// needs, kept by the device in context slot IDX until replaced.
struct TxContextDesc {
    uint32_t vlan_macip_lens;   // IPLEN 8:0, MACLEN 15:9, VLAN 31:16
    uint32_t seqnum_seed;
    uint32_t type_tucmd_mlhl;   // TUCMD 19:9 (IPV4 bit 10, L4T 12:11), DTYP 23:20, DCMD 31:24
    uint32_t mss_l4len_idx;     // IDX 6:4, L4LEN 15:8, MSS 31:16
};
static_assert(sizeof(TxContextDesc) == 16);

namespace txd {
inline constexpr uint32_t DTYP_DATA = 3u << 20;
inline constexpr uint32_t DTYP_CONTEXT = 2u << 20;
inline constexpr uint32_t CMD_TSTAMP = 1u << 19;   // IEEE 1588: latch the departure time
inline constexpr uint32_t CMD_EOP = 1u << 24;
inline constexpr uint32_t CMD_IFCS = 1u << 25;
inline constexpr uint32_t CMD_RS = 1u << 27;
inline constexpr uint32_t CMD_DEXT = 1u << 29;
inline constexpr uint32_t STA_DD = 1u << 0;
inline constexpr uint32_t POPTS_IXSM = 1u << 8;    // insert the IPv4 header checksum
inline constexpr uint32_t POPTS_TXSM = 1u << 9;    // insert the TCP/UDP checksum
inline constexpr uint32_t PAYLEN_SHIFT = 14;
inline constexpr uint32_t MACLEN_SHIFT = 9;
inline constexpr uint32_t TUCMD_IPV4 = 1u << 10;
inline constexpr uint32_t TUCMD_L4T_TCP = 1u << 11;   // else UDP
inline constexpr uint32_t kMaxDataLen = 0xffff;
}  // namespace txd

}  // namespace vfab::igb
