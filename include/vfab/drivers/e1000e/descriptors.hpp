// 82574L descriptor formats (datasheet §7.1.5 receive, §7.2.10 transmit). All little-endian;
// vfab runs on little-endian x86-64 only, so the structs are used as they lie in memory.
#pragma once

#include <cstdint>

namespace vfab::e1000e {

// Extended receive descriptor (RFCTL.EXSTEN = 1, RCTL.DTYP = 00), §7.1.5.2. Software writes
// the read format; the device overwrites it with the write-back format.
union RxDesc {
    struct {
        uint64_t buffer_addr;
        uint64_t reserved;   // bit 0 is DD in the write-back: written 0
    } read;
    struct {
        uint32_t mrq;          // RSS type and queue
        uint16_t ip_id;        // (RSS hash when RXCSUM.PCSD)
        uint16_t csum;
        uint32_t status_error; // extended status (bits 19:0) and errors (31:20)
        uint16_t length;
        uint16_t vlan;
    } wb;
};
static_assert(sizeof(RxDesc) == 16);

namespace rxd {
inline constexpr uint32_t DD = 1u << 0;      // descriptor done
inline constexpr uint32_t EOP = 1u << 1;     // end of packet
inline constexpr uint32_t VP = 1u << 3;
inline constexpr uint32_t UDPCS = 1u << 4;   // UDP checksum computed
inline constexpr uint32_t TCPCS = 1u << 5;   // TCP (or UDP) checksum computed
inline constexpr uint32_t IPCS = 1u << 6;    // IPv4 header checksum computed
// Errors: CRC, symbol, sequence, carrier extension, RX data error.
inline constexpr uint32_t ERR_FRAME = (1u << 24) | (1u << 25) | (1u << 26) | (1u << 28) | (1u << 31);
inline constexpr uint32_t ERR_TCPE = 1u << 29;   // TCP/UDP checksum error
inline constexpr uint32_t ERR_IPE = 1u << 30;    // IPv4 header checksum error
}  // namespace rxd

// Transmit data descriptor (extended, DEXT = 1, DTYP = 0001), §7.2.10.3.
struct TxDataDesc {
    uint64_t buffer_addr;
    uint32_t cmd_len;   // DTALEN 19:0, DTYP 23:20, DCMD 31:24
    uint8_t status;     // STA: bit 0 DD
    uint8_t popts;      // IXSM bit 0, TXSM bit 1
    uint16_t vlan;
};
static_assert(sizeof(TxDataDesc) == 16);

// TCP/IP context descriptor (DEXT = 1, DTYP = 0000), §7.2.10.2: where the checksums go.
struct TxContextDesc {
    uint8_t ipcss;     // IP checksum start
    uint8_t ipcso;     // IP checksum offset
    uint16_t ipcse;    // IP checksum end (inclusive)
    uint8_t tucss;     // TCP/UDP checksum start
    uint8_t tucso;
    uint16_t tucse;    // 0: to the end of the packet
    uint32_t cmd_len;  // PAYLEN 19:0, DTYP 23:20 = 0, TUCMD 31:24
    uint8_t status;
    uint8_t hdr_len;
    uint16_t mss;
};
static_assert(sizeof(TxContextDesc) == 16);

namespace txd {
inline constexpr uint32_t DTYP_DATA = 1u << 20;
inline constexpr uint32_t CMD_EOP = 1u << 24;
inline constexpr uint32_t CMD_IFCS = 1u << 25;   // insert FCS
inline constexpr uint32_t CMD_RS = 1u << 27;     // report status (set DD when done)
inline constexpr uint32_t CMD_DEXT = 1u << 29;   // extended descriptor
inline constexpr uint32_t TUCMD_TCP = 1u << 24;  // context: L4 is TCP (else UDP)
inline constexpr uint32_t TUCMD_IP = 1u << 25;   // context: L3 is IPv4
inline constexpr uint8_t STA_DD = 1u << 0;
inline constexpr uint8_t POPTS_IXSM = 1u << 0;   // insert IP checksum
inline constexpr uint8_t POPTS_TXSM = 1u << 1;   // insert TCP/UDP checksum
inline constexpr uint32_t kMaxDataLen = (1u << 20) - 1;
}  // namespace txd

}  // namespace vfab::e1000e
