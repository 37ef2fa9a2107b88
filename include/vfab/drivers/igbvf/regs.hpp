// Registers of the 82576 virtual function (datasheet §8.27 "Virtual function device register
// map") and the PF/VF mailbox protocol messages (§7.8.2.9; the Linux igb/igbvf message set,
// which is what the PF driver on the other side speaks). The VF's queue registers are those of
// the PF's queue 0 (igb/regs.hpp RDBAL(0)...TXDCTL(0), IVAR0): the igb queue code drives them.
#pragma once

#include <cstdint>

namespace vfab::igbvf::reg {

inline constexpr uint32_t VTCTRL = 0x0000;
inline constexpr uint32_t VTCTRL_RST = 1u << 26;   // VF software reset
inline constexpr uint32_t VTSTATUS = 0x0008;        // mirrors the PF's STATUS (LU = the port's link)
inline constexpr uint32_t VTSTATUS_LU = 1u << 1;

// Interrupts (§8.27.2): bit k = MSI-X vector k of the VF's three.
inline constexpr uint32_t VTEICS = 0x1520, VTEIMS = 0x1524, VTEIMC = 0x1528, VTEIAC = 0x152c, VTEIAM = 0x1530;
inline constexpr uint32_t VTEITR0 = 0x1680;   // + 4 * vector
inline constexpr uint32_t VTIVAR = 0x1700;    // byte 0: RX queue 0's vector, byte 1: TX queue 0's
inline constexpr uint32_t VTIVAR_MISC = 0x1740;   // bits 1:0 the mailbox's vector, bit 7 valid
inline constexpr uint32_t IVAR_VALID = 0x80;
inline constexpr uint32_t kVectors = 3;

// Statistics (§8.27.4): free-running 32-bit counters, not cleared by reading.
inline constexpr uint32_t VFGPRC = 0x0f10, VFGPTC = 0x0f14, VFGORC = 0x0f18, VFGOTC = 0x0f34, VFMPRC = 0x0f3c;

// The mailbox (§7.8.2.9.2): one control register and a 16-dword buffer shared with the PF.
inline constexpr uint32_t VMAILBOX = 0x0c40;
inline constexpr uint32_t VMBMEM = 0x0800;
inline constexpr uint32_t kMailboxWords = 16;
inline constexpr uint32_t MBX_REQ = 1u << 0;     // VF -> PF: a message is in the buffer
inline constexpr uint32_t MBX_ACK = 1u << 1;     // VF -> PF: the PF's message was read
inline constexpr uint32_t MBX_VFU = 1u << 2;     // the VF holds the buffer
inline constexpr uint32_t MBX_PFU = 1u << 3;     // the PF holds the buffer
inline constexpr uint32_t MBX_PFSTS = 1u << 4;   // PF -> VF: a message is in the buffer (cleared by reading)
inline constexpr uint32_t MBX_PFACK = 1u << 5;   // PF -> VF: the VF's message was read (cleared by reading)
inline constexpr uint32_t MBX_RSTI = 1u << 6;    // the PF is resetting: the VF must not run
inline constexpr uint32_t MBX_RSTD = 1u << 7;    // the PF finished resetting (cleared by reading)
inline constexpr uint32_t kMbxReadClear = MBX_PFSTS | MBX_PFACK | MBX_RSTD;

}  // namespace vfab::igbvf::reg

// Mailbox messages: word 0 is the type in bits 15:0, MSGINFO in bits 23:16 and the reply flags.
namespace vfab::igbvf::msg {

inline constexpr uint32_t VF_RESET = 0x01;        // reply: type|ACK, MAC bytes 0-3, MAC bytes 4-5
inline constexpr uint32_t SET_MAC_ADDR = 0x02;    // words 1-2: the MAC
inline constexpr uint32_t SET_MULTICAST = 0x03;   // MSGINFO: count; words 1..: 12-bit MTA hashes, two per word
inline constexpr uint32_t SET_LPE = 0x05;         // word 1: the largest frame, FCS included
inline constexpr uint32_t SET_PROMISC = 0x06;     // MSGINFO: the modes below
inline constexpr uint32_t PF_CONTROL = 0x0100;    // from the PF: link / reset news (CTS says whether the VF may run)
inline constexpr uint32_t TYPE_MASK = 0xffff;
inline constexpr uint32_t INFO_SHIFT = 16;
inline constexpr uint32_t PROMISC_UNICAST = 0x01u << INFO_SHIFT;
inline constexpr uint32_t PROMISC_MULTICAST = 0x02u << INFO_SHIFT;
inline constexpr uint32_t CTS = 1u << 29;    // the PF has completed this VF's reset: it may send and receive
inline constexpr uint32_t NACK = 1u << 30;   // the PF refused the request
inline constexpr uint32_t ACK = 1u << 31;    // the PF carried it out
inline constexpr uint32_t kMaxMulticast = 30;

}  // namespace vfab::igbvf::msg
