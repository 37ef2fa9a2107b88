// Intel 82576 (igb) registers and bits used by vfab's driver: the Intel 82576EB GbE Controller
// Datasheet, chapter 8 (register descriptions); sections are cited where a value is not
// obvious. The physical function only; the virtual function's registers are elsewhere.
#pragma once

#include <cstdint>

namespace vfab::igb::reg {

// ---- general (§8.2) --------------------------------------------------------------------------
inline constexpr uint32_t CTRL = 0x0000;
inline constexpr uint32_t STATUS = 0x0008;
inline constexpr uint32_t CTRL_EXT = 0x0018;

inline constexpr uint32_t CTRL_GIO_MASTER_DISABLE = 1u << 2;
inline constexpr uint32_t CTRL_SLU = 1u << 6;    // set link up
inline constexpr uint32_t CTRL_FRCSPD = 1u << 11;
inline constexpr uint32_t CTRL_FRCDPX = 1u << 12;
inline constexpr uint32_t CTRL_RST = 1u << 26;   // device reset, self-clearing (§4.3.1)
inline constexpr uint32_t CTRL_VME = 1u << 30;
inline constexpr uint32_t CTRL_PHY_RST = 1u << 31;

inline constexpr uint32_t STATUS_FD = 1u << 0;
inline constexpr uint32_t STATUS_LU = 1u << 1;
inline constexpr uint32_t STATUS_SPEED_SHIFT = 6;   // 00: 10, 01: 100, 1x: 1000 Mb/s
inline constexpr uint32_t STATUS_SPEED_MASK = 3u << STATUS_SPEED_SHIFT;
inline constexpr uint32_t STATUS_GIO_MASTER_ENABLE = 1u << 19;

inline constexpr uint32_t CTRL_EXT_DRV_LOAD = 1u << 28;   // a driver owns the device

// PHY access (§8.2.4): MDIC carries one read or write of a PHY register (§8.23: the internal
// PHY is at address 1). Link comes up through the PHY's auto-negotiation, restarted after
// every reset (QEMU's model also waits for it: CTRL.SLU alone does not raise STATUS.LU).
inline constexpr uint32_t MDIC = 0x0020;
inline constexpr uint32_t MDIC_REG_SHIFT = 16;
inline constexpr uint32_t MDIC_PHY_SHIFT = 21;
inline constexpr uint32_t MDIC_OP_WRITE = 1u << 26;
inline constexpr uint32_t MDIC_READY = 1u << 28;
inline constexpr uint32_t MDIC_ERROR = 1u << 30;
inline constexpr uint32_t kPhyAddr = 1;
inline constexpr uint32_t PHY_BMCR = 0;                  // IEEE 802.3 clause 22 control
inline constexpr uint32_t BMCR_RESTART_AN = 1u << 9;
inline constexpr uint32_t BMCR_FULL_DUPLEX = 1u << 8;
inline constexpr uint32_t BMCR_AN_ENABLE = 1u << 12;
inline constexpr uint32_t BMCR_SPEED1000 = 1u << 6;

// ---- interrupts (§8.8, §7.3) -----------------------------------------------------------------
inline constexpr uint32_t ICR = 0x00c0;    // other causes (link change)
inline constexpr uint32_t IMS = 0x00d0;
inline constexpr uint32_t IMC = 0x00d8;
inline constexpr uint32_t ICR_LSC = 1u << 2;   // link status change

inline constexpr uint32_t EICS = 0x1520;   // extended causes: one bit per MSI-X vector
inline constexpr uint32_t EIMS = 0x1524;
inline constexpr uint32_t EIMC = 0x1528;
inline constexpr uint32_t EIAC = 0x152c;   // auto-clear EICR bits when their vector fires
inline constexpr uint32_t EIAM = 0x1530;   // auto-mask: EIMS bits cleared when the vector fires
inline constexpr uint32_t EICR = 0x1580;
inline constexpr uint32_t GPIE = 0x1514;
inline constexpr uint32_t GPIE_NSICR = 1u << 0;        // ICR bits cleared on read
inline constexpr uint32_t GPIE_MULTIPLE_MSIX = 1u << 4;
inline constexpr uint32_t GPIE_EIAME = 1u << 30;       // EIAM applies on MSI-X messages
inline constexpr uint32_t GPIE_PBA = 1u << 31;
// EITR[v]: vector v's interrupt throttling (§8.8); the driver writes 0 to every vector.
constexpr uint32_t EITR(uint32_t v) { return 0x1680 + 4 * v; }   // throttling; 0: none

// IVAR0[n] maps queue causes to vectors (§8.8.15): rx queue q in byte 0 (q < 8) or byte 2,
// tx queue q in byte 1 or byte 3, of IVAR0[q & 7]; bit 7 of each byte marks it valid.
inline constexpr uint32_t IVAR0 = 0x1700;
inline constexpr uint32_t IVAR_MISC = 0x1740;   // byte 1: the "other" cause's vector
inline constexpr uint32_t IVAR_VALID = 0x80;
// The IVAR0 register that holds queue q's causes.
constexpr uint32_t ivar_reg(uint32_t q) { return IVAR0 + 4 * (q & 7); }
// The bit where receive queue q's byte starts in it: 0 (q < 8) or 16.
constexpr uint32_t ivar_rx_shift(uint32_t q) { return (q & 8) << 1; }
// The bit where transmit queue q's byte starts in it: 8 (q < 8) or 24.
constexpr uint32_t ivar_tx_shift(uint32_t q) { return ((q & 8) << 1) + 8; }

// ---- receive (§8.10) -------------------------------------------------------------------------
inline constexpr uint32_t RCTL = 0x0100;
inline constexpr uint32_t RCTL_EN = 1u << 1;
inline constexpr uint32_t RCTL_UPE = 1u << 3;    // unicast promiscuous
inline constexpr uint32_t RCTL_MPE = 1u << 4;    // multicast promiscuous
inline constexpr uint32_t RCTL_LPE = 1u << 5;    // long packets, up to RLPML (§8.10.1)
inline constexpr uint32_t RLPML = 0x5004;        // receive long packet maximum length, FCS included (§8.10.27)
inline constexpr uint32_t RCTL_BAM = 1u << 15;   // accept broadcast
inline constexpr uint32_t RCTL_SECRC = 1u << 26; // strip the FCS

inline constexpr uint32_t RXCSUM = 0x5000;
inline constexpr uint32_t RXCSUM_IPOFLD = 1u << 8;
inline constexpr uint32_t RXCSUM_TUOFLD = 1u << 9;
inline constexpr uint32_t RXCSUM_PCSD = 1u << 13;   // write the RSS hash back, not a checksum

inline constexpr uint32_t MTA = 0x5200;

// Receive-side scaling (§7.1.2.8, §8.10.12-14).
inline constexpr uint32_t MRQC = 0x5818;
inline constexpr uint32_t MRQC_RSS = 0x2;   // MRQE: RSS, no VMDq
inline constexpr uint32_t MRQC_TCP_IPV4 = 1u << 16;
inline constexpr uint32_t MRQC_IPV4 = 1u << 17;
inline constexpr uint32_t MRQC_IPV6 = 1u << 20;
inline constexpr uint32_t MRQC_TCP_IPV6 = 1u << 21;
inline constexpr uint32_t MRQC_UDP_IPV4 = 1u << 22;
inline constexpr uint32_t MRQC_UDP_IPV6 = 1u << 23;
inline constexpr uint32_t RETA = 0x5c00;    // 32 registers, 4 one-byte entries each
inline constexpr uint32_t RSSRK = 0x5c80;   // 10 registers: the 40-byte key, byte 0 lowest
inline constexpr uint32_t kRetaEntries = 128;
inline constexpr uint32_t kRssKeyBytes = 40;

// IEEE 1588 (§7.9, §8.16): the clock (SYSTIM counts TIMINCA.INCVALUE every INCPERIOD x 16 ns),
// the latched departure and arrival times, and the EtherType filter that picks PTP frames.
inline constexpr uint32_t SYSTIML = 0xb600, SYSTIMH = 0xb604, TIMINCA = 0xb608;
inline constexpr uint32_t TSYNCTXCTL = 0xb614, TXSTMPL = 0xb618, TXSTMPH = 0xb61c;
inline constexpr uint32_t TSYNCRXCTL = 0xb620, RXSTMPL = 0xb624, RXSTMPH = 0xb628, RXSATRL = 0xb62c, RXSATRH = 0xb630;
inline constexpr uint32_t TSYNCRXCFG = 0x5f50;   // bits 15:8: the PTPv2 message to timestamp
inline constexpr uint32_t TSYNC_VALID = 1u << 0, TSYNC_EN = 1u << 4;
inline constexpr uint32_t TSYNCRXCTL_TYPE_L2_V2 = 2u << 1;
inline constexpr uint32_t TIMINCA_1NS = 1u << 24 | 16;   // INCPERIOD 1 (16 ns), INCVALUE 16: SYSTIM in ns
// EtherType queue filter n: the driver's (kPtpEtqf) marks PTP frames for the receive latch.
constexpr uint32_t ETQF(uint32_t n) { return 0x5cb0 + 4 * n; }
inline constexpr uint32_t ETQF_FILTER_ENABLE = 1u << 26, ETQF_1588 = 1u << 30;
inline constexpr uint32_t kEtherTypePtp = 0x88f7;
inline constexpr uint32_t kPtpEtqf = 3;   // the filter the driver uses (Linux's igb uses 3 too)

// Per queue n (§8.10.2-8): the rx queues at 0xc000, the tx queues at 0xe000, 0x40 apart.
// RDBAL: receive queue n's ring base, low 32 bits.
constexpr uint32_t RDBAL(uint32_t n) { return 0xc000 + 0x40 * n; }
// Receive queue n's ring base, high 32 bits.
constexpr uint32_t RDBAH(uint32_t n) { return 0xc004 + 0x40 * n; }
// Receive queue n's ring length in bytes (a multiple of 128).
constexpr uint32_t RDLEN(uint32_t n) { return 0xc008 + 0x40 * n; }
// Receive queue n's buffer size (1 KB units), descriptor type and drop enable.
constexpr uint32_t SRRCTL(uint32_t n) { return 0xc00c + 0x40 * n; }
// Receive queue n's head: the next descriptor the device writes back.
constexpr uint32_t RDH(uint32_t n) { return 0xc010 + 0x40 * n; }
// Receive queue n's tail: one past the last descriptor handed to the device.
constexpr uint32_t RDT(uint32_t n) { return 0xc018 + 0x40 * n; }
// Receive queue n's control: XDCTL_ENABLE starts and stops it.
constexpr uint32_t RXDCTL(uint32_t n) { return 0xc028 + 0x40 * n; }
// Receive queue n's frames dropped for want of a descriptor (SRRCTL_DROP_EN).
constexpr uint32_t RQDPC(uint32_t n) { return 0xc030 + 0x40 * n; }   // drops: no descriptor
// Transmit queue n's ring base, low 32 bits.
constexpr uint32_t TDBAL(uint32_t n) { return 0xe000 + 0x40 * n; }
// Transmit queue n's ring base, high 32 bits.
constexpr uint32_t TDBAH(uint32_t n) { return 0xe004 + 0x40 * n; }
// Transmit queue n's ring length in bytes (a multiple of 128).
constexpr uint32_t TDLEN(uint32_t n) { return 0xe008 + 0x40 * n; }
// Transmit queue n's head: the next descriptor the device reads.
constexpr uint32_t TDH(uint32_t n) { return 0xe010 + 0x40 * n; }
// Transmit queue n's tail: one past the last descriptor handed to the device.
constexpr uint32_t TDT(uint32_t n) { return 0xe018 + 0x40 * n; }
// Transmit queue n's control: XDCTL_ENABLE starts and stops it.
constexpr uint32_t TXDCTL(uint32_t n) { return 0xe028 + 0x40 * n; }
// The same registers as offsets in a queue's block, wherever the device has it (QueueLayout).
inline constexpr uint32_t Q_BAL = 0x00, Q_BAH = 0x04, Q_LEN = 0x08, Q_SRRCTL = 0x0c, Q_HEAD = 0x10, Q_TAIL = 0x18,
                          Q_DCTL = 0x28;
inline constexpr uint32_t XDCTL_ENABLE = 1u << 25;   // RXDCTL / TXDCTL queue enable
inline constexpr uint32_t SRRCTL_BSIZEPKT_SHIFT = 0;  // in 1 KB units
inline constexpr uint32_t SRRCTL_DESCTYPE_ADV_ONEBUF = 1u << 25;
inline constexpr uint32_t SRRCTL_DROP_EN = 1u << 31;  // drop when the queue has no descriptor
inline constexpr uint32_t kRxBufferSize = 2048;
inline constexpr uint32_t kRxBufferSizeJumbo = 8192;   // with RCTL.LPE, for links over 1500 bytes

// ---- transmit (§8.12) ------------------------------------------------------------------------
inline constexpr uint32_t TCTL = 0x0400;
inline constexpr uint32_t TCTL_EN = 1u << 1;
inline constexpr uint32_t TCTL_PSP = 1u << 3;   // pad short packets
inline constexpr uint32_t TCTL_CT = 0xfu << 4;  // collision threshold (recommended 0xf)
inline constexpr uint32_t TCTL_COLD = 0x3fu << 12;

// ---- statistics (§8.19), clear on read -------------------------------------------------------
inline constexpr uint32_t CRCERRS = 0x4000;
inline constexpr uint32_t RXERRC = 0x400c;
inline constexpr uint32_t MPC = 0x4010;
inline constexpr uint32_t GPRC = 0x4074;
inline constexpr uint32_t BPRC = 0x4078;
inline constexpr uint32_t MPRC = 0x407c;
inline constexpr uint32_t GPTC = 0x4080;
inline constexpr uint32_t GORCL = 0x4088;
inline constexpr uint32_t GORCH = 0x408c;
inline constexpr uint32_t GOTCL = 0x4090;
inline constexpr uint32_t GOTCH = 0x4094;

inline constexpr uint32_t kMaxQueues = 16;   // the 82576's queue pairs
inline constexpr uint32_t kRssQueues = 8;    // RETA entries name queues 0-7 without VMDq

}  // namespace vfab::igb::reg
