// RoCEv2 packets: parsing a received Ethernet frame into its fields, and writing the headers of
// one to send (IB spec Vol. 1 9.2-9.3; Annex A17.4 for the IPv4/UDP encapsulation).
#pragma once

#include <cstddef>
#include <cstdint>

#include "vfab/rdma/wire.hpp"

namespace vfab::rdma {

// A received RoCEv2 packet, its fields in host order.
struct Packet {   // fields ordered by size: parse_frame's callers clear it for every frame
    const uint8_t* frame = nullptr;
    const uint8_t* src_mac = nullptr;
    const uint8_t* ipv4 = nullptr;   // the IPv4 header (a UD receive's GRH holds it)
    const uint8_t* payload = nullptr;
    uint64_t va = 0;            // RETH or AtomicETH
    uint64_t swap_add = 0;      // AtomicETH
    uint64_t compare = 0;
    uint64_t swap_mask = 0;     // vfab's masked AtomicETH
    uint64_t compare_mask = 0;
    uint64_t atomic_orig = 0;   // AtomicAckETH
    wire::OpInfo info;
    uint32_t frame_len = 0;
    uint32_t payload_len = 0;
    uint32_t src_ip = 0;
    uint32_t dst_ip = 0;
    uint32_t dest_qp = 0;
    uint32_t psn = 0;
    uint32_t rkey = 0;
    uint32_t dma_len = 0;       // RETH
    uint32_t msn = 0;           // AETH
    uint32_t imm_be = 0;        // ImmDt, as on the wire (network order)
    uint32_t inv_rkey = 0;      // IETH
    uint32_t qkey = 0;          // DETH
    uint32_t src_qp = 0;
    uint32_t xrc_srqn = 0;      // XRCETH
    uint16_t src_port = 0;
    uint16_t pkey = 0;
    uint8_t opcode = 0;
    uint8_t syndrome = 0;       // AETH
    uint8_t pad = 0;
    bool solicited = false;
    bool ack_req = false;
    bool xrc = false;           // an XRC opcode (`opcode` holds RC's equivalent: its low 5 bits)
    bool uc = false;            // a UC opcode (the same)
};

enum class ParseResult : uint8_t {
    roce,          // a RoCEv2 packet for `local_ip`, ICRC checked
    arp,           // an ARP packet (any)
    other,         // not for the transport (another protocol, port or address)
    malformed,     // RoCEv2 but lengths, version, opcode or P_Key wrong: dropped (as rxe does)
    bad_icrc,
};

// Parses `frame` (an Ethernet frame without FCS). IPv4 with IHL 5, no fragments, UDP to 4791,
// BTH TVer 0, the default P_Key, a known opcode, a correct ICRC.
ParseResult parse_frame(const uint8_t* frame, uint32_t len, uint32_t local_ip, Packet& out) noexcept;

// What a packet to send says, besides its payload.
struct PacketHeader {
    const uint8_t* dst_mac = nullptr;
    const uint8_t* src_mac = nullptr;
    uint32_t src_ip = 0;
    uint32_t dst_ip = 0;
    uint16_t src_port = 0;
    uint8_t ttl = wire::kDefaultTtl;
    uint8_t tos = 0;

    uint8_t opcode = 0;
    bool solicited = false;
    bool ack_req = false;
    uint32_t dest_qp = 0;
    uint32_t psn = 0;

    uint64_t va = 0;
    uint32_t rkey = 0;
    uint32_t dma_len = 0;
    uint64_t swap_add = 0;
    uint64_t compare = 0;
    uint64_t swap_mask = 0;
    uint64_t compare_mask = 0;
    uint8_t syndrome = 0;
    uint32_t msn = 0;
    uint64_t atomic_orig = 0;
    uint32_t imm_be = 0;
    uint32_t inv_rkey = 0;
    uint32_t qkey = 0;
    uint32_t src_qp = 0;
    bool xrc = false;        // send `opcode` (RC's) as its XRC opcode; requests carry XRCETH
    bool uc = false;         // send `opcode` (RC's SEND or WRITE) as its UC opcode
    uint32_t xrc_srqn = 0;
};

// Writes Ethernet, IPv4, UDP, BTH and the opcode's extension headers at `frame` for a payload
// of `payload_len` bytes; returns where the payload goes. finish_frame() then pads, writes the
// ICRC and returns the frame's length.
uint8_t* write_headers(uint8_t* frame, const PacketHeader& h, uint32_t payload_len) noexcept;

// The Ethernet, IPv4, UDP and BTH bytes every packet of a connected queue pair shares (its
// peer's and its own addresses, ports, TTL, TOS, P_Key, destination QP), made once: a packet's
// headers are then a copy of them with its own lengths, IPv4 checksum, opcode, flags and PSN.
struct HeaderTemplate {
    uint8_t bytes[wire::kEthHeader + wire::kIpv4Header + wire::kUdpHeader + wire::kBth] = {};
    uint32_t ip_sum = 0;   // the IPv4 header's 16-bit sum without its total length and checksum
    bool xrc = false, uc = false;
};
// The template of packets with h's addresses, ports, TTL, TOS, destination QP and transport.
void make_template(const PacketHeader& h, HeaderTemplate& t) noexcept;
// write_headers() from a template: h gives the rest (opcode, solicited, ack_req, psn, and the
// extension headers' fields); its addresses, ports, TTL, TOS, dest_qp, xrc and uc are the
// template's.
uint8_t* write_headers(uint8_t* frame, const HeaderTemplate& t, const PacketHeader& h, uint32_t payload_len) noexcept;
uint32_t finish_frame(uint8_t* frame, uint32_t payload_len) noexcept;

// The bytes a packet of this opcode and payload takes on the wire (no FCS).
uint32_t frame_size(uint8_t opcode, uint32_t payload_len) noexcept;

// ARP (RFC 826) over Ethernet for IPv4.
struct ArpPacket {
    uint16_t op = 0;
    const uint8_t* sender_mac = nullptr;
    uint32_t sender_ip = 0;
    uint32_t target_ip = 0;
};
bool parse_arp(const uint8_t* frame, uint32_t len, ArpPacket& out) noexcept;
// A request (target_mac null: broadcast) or a reply; returns the frame's length (60, padded).
uint32_t write_arp(uint8_t* frame, uint16_t op, const uint8_t* src_mac, uint32_t src_ip, const uint8_t* dst_mac,
                   uint32_t dst_ip) noexcept;

// The IPv4 header checksum (RFC 791) of the 20 bytes at `h` (its own field included as is).
uint16_t ipv4_checksum(const uint8_t* h) noexcept;

}  // namespace vfab::rdma
