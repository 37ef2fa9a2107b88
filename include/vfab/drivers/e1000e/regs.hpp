// Intel 82574L (e1000e) registers and bits used by vfab's driver. Offsets and layouts are from
// the 82574 GbE Controller Family Datasheet, chapter 10 (register descriptions); section
// numbers are cited where a value is not obvious.
#pragma once

#include <cstdint>

namespace vfab::e1000e::reg {

// ---- general (§10.2.2) ----------------------------------------------------------------------
inline constexpr uint32_t CTRL = 0x0000;
inline constexpr uint32_t STATUS = 0x0008;
inline constexpr uint32_t CTRL_EXT = 0x0018;

inline constexpr uint32_t CTRL_FD = 1u << 0;
inline constexpr uint32_t CTRL_GIO_MASTER_DISABLE = 1u << 2;
inline constexpr uint32_t CTRL_ASDE = 1u << 5;   // auto speed detection
inline constexpr uint32_t CTRL_SLU = 1u << 6;    // set link up
inline constexpr uint32_t CTRL_FRCSPD = 1u << 11;
inline constexpr uint32_t CTRL_FRCDPX = 1u << 12;
inline constexpr uint32_t CTRL_RST = 1u << 26;   // software reset, self-clearing (§4.6.3)
inline constexpr uint32_t CTRL_VME = 1u << 30;
inline constexpr uint32_t CTRL_PHY_RST = 1u << 31;

inline constexpr uint32_t STATUS_FD = 1u << 0;
inline constexpr uint32_t STATUS_LU = 1u << 1;
inline constexpr uint32_t STATUS_SPEED_SHIFT = 6;   // 00: 10, 01: 100, 1x: 1000 Mb/s
inline constexpr uint32_t STATUS_SPEED_MASK = 3u << STATUS_SPEED_SHIFT;
inline constexpr uint32_t STATUS_GIO_MASTER_ENABLE = 1u << 19;

inline constexpr uint32_t CTRL_EXT_IAME = 1u << 27;     // interrupt acknowledge auto-mask
inline constexpr uint32_t CTRL_EXT_DRV_LOAD = 1u << 28; // a driver owns the device
inline constexpr uint32_t CTRL_EXT_PBA_CLR = 1u << 31;  // MSI-X pending bits cleared on read

// ---- interrupts (§10.2.4) --------------------------------------------------------------------
inline constexpr uint32_t ICR = 0x00c0;   // cause read (write 1 to clear under MSI-X)
inline constexpr uint32_t ITR = 0x00c4;   // throttling: 0 = none
inline constexpr uint32_t ICS = 0x00c8;   // cause set
inline constexpr uint32_t IMS = 0x00d0;   // mask set / read
inline constexpr uint32_t IMC = 0x00d8;   // mask clear
inline constexpr uint32_t EIAC = 0x00dc;  // causes auto-cleared (and auto-masked) when their
                                          // MSI-X vector fires
inline constexpr uint32_t IAM = 0x00e0;
inline constexpr uint32_t IVAR = 0x00e4;  // cause -> MSI-X vector (§10.2.4.9)
inline constexpr uint32_t EITR0 = 0x00e8; // per-vector throttling, 4 bytes apart

inline constexpr uint32_t ICR_TXDW = 1u << 0;
inline constexpr uint32_t ICR_LSC = 1u << 2;    // link status change
inline constexpr uint32_t ICR_RXDMT0 = 1u << 4;
inline constexpr uint32_t ICR_RXO = 1u << 6;    // receiver overrun (no buffer)
inline constexpr uint32_t ICR_RXT0 = 1u << 7;
inline constexpr uint32_t ICR_RXQ0 = 1u << 20;  // MSI-X causes: one per queue and "other"
inline constexpr uint32_t ICR_RXQ1 = 1u << 21;
inline constexpr uint32_t ICR_TXQ0 = 1u << 22;
inline constexpr uint32_t ICR_TXQ1 = 1u << 23;
inline constexpr uint32_t ICR_OTHER = 1u << 24;

// IVAR: a 4-bit field per cause, 3-bit vector number + valid bit.
inline constexpr uint32_t IVAR_VALID = 0x8;
inline constexpr uint32_t IVAR_RXQ0_SHIFT = 0;
inline constexpr uint32_t IVAR_TXQ0_SHIFT = 8;
inline constexpr uint32_t IVAR_OTHER_SHIFT = 16;
inline constexpr uint32_t kMsixVectors = 5;

// ---- receive (§10.2.5) -----------------------------------------------------------------------
inline constexpr uint32_t RCTL = 0x0100;
inline constexpr uint32_t RCTL_EN = 1u << 1;
inline constexpr uint32_t RCTL_SBP = 1u << 2;
inline constexpr uint32_t RCTL_UPE = 1u << 3;    // unicast promiscuous
inline constexpr uint32_t RCTL_MPE = 1u << 4;    // multicast promiscuous
inline constexpr uint32_t RCTL_LPE = 1u << 5;    // long packets
inline constexpr uint32_t RCTL_BAM = 1u << 15;   // accept broadcast
inline constexpr uint32_t RCTL_BSIZE_2048 = 0;   // BSIZE = 00, BSEX = 0
inline constexpr uint32_t RCTL_BSIZE_8192 = 2u << 16 | 1u << 25;   // BSIZE = 10 with BSEX (datasheet 10.2.5.1)
inline constexpr uint32_t RCTL_SECRC = 1u << 26; // strip the Ethernet CRC
inline constexpr uint32_t kRxBufferSize = 2048;
inline constexpr uint32_t kRxBufferSizeJumbo = 8192;   // with RCTL.LPE, for links over 1500 bytes

inline constexpr uint32_t RDBAL = 0x2800;
inline constexpr uint32_t RDBAH = 0x2804;
inline constexpr uint32_t RDLEN = 0x2808;
inline constexpr uint32_t RDH = 0x2810;
inline constexpr uint32_t RDT = 0x2818;
inline constexpr uint32_t RDTR = 0x2820;   // receive delay timer: 0 = write back at once
inline constexpr uint32_t RADV = 0x282c;
inline constexpr uint32_t RXCSUM = 0x5000;
inline constexpr uint32_t RXCSUM_IPOFLD = 1u << 8;   // verify IPv4 header checksums
inline constexpr uint32_t RXCSUM_TUOFLD = 1u << 9;   // verify TCP/UDP checksums
inline constexpr uint32_t RFCTL = 0x5008;
inline constexpr uint32_t RFCTL_EXSTEN = 1u << 15;   // extended receive descriptors (§7.1.5.2)
inline constexpr uint32_t MTA = 0x5200;              // multicast table, 128 registers

// ---- transmit (§10.2.6) ----------------------------------------------------------------------
inline constexpr uint32_t TCTL = 0x0400;
inline constexpr uint32_t TCTL_EN = 1u << 1;
inline constexpr uint32_t TCTL_PSP = 1u << 3;        // pad short packets to 64 bytes
inline constexpr uint32_t TCTL_CT_SHIFT = 4;         // collision threshold (0x0f, §10.2.6.1)
inline constexpr uint32_t TCTL_COLD_SHIFT = 12;      // collision distance (0x3f full duplex)
inline constexpr uint32_t TIPG = 0x0410;
inline constexpr uint32_t kTipgCopper = 8 | 8u << 10 | 6u << 20;   // IPGT 8, IPGR1 8, IPGR2 6

inline constexpr uint32_t TDBAL = 0x3800;
inline constexpr uint32_t TDBAH = 0x3804;
inline constexpr uint32_t TDLEN = 0x3808;
inline constexpr uint32_t TDH = 0x3810;
inline constexpr uint32_t TDT = 0x3818;
inline constexpr uint32_t TIDV = 0x3820;
inline constexpr uint32_t TADV = 0x382c;

// ---- statistics, clear on read (§10.2.7) -----------------------------------------------------
inline constexpr uint32_t CRCERRS = 0x4000;
inline constexpr uint32_t ALGNERRC = 0x4004;
inline constexpr uint32_t SYMERRS = 0x4008;
inline constexpr uint32_t RXERRC = 0x400c;
inline constexpr uint32_t MPC = 0x4010;     // missed packets (no descriptor)
inline constexpr uint32_t SEC = 0x4038;
inline constexpr uint32_t GPRC = 0x4074;    // good packets received
inline constexpr uint32_t BPRC = 0x4078;
inline constexpr uint32_t MPRC = 0x407c;
inline constexpr uint32_t GPTC = 0x4080;    // good packets transmitted
inline constexpr uint32_t GORCL = 0x4088;   // good octets received, low then high (read low first)
inline constexpr uint32_t GORCH = 0x408c;
inline constexpr uint32_t GOTCL = 0x4090;
inline constexpr uint32_t GOTCH = 0x4094;
inline constexpr uint32_t RNBC = 0x40a0;    // receive no buffers
inline constexpr uint32_t RLEC = 0x4040;    // receive length errors

}  // namespace vfab::e1000e::reg
