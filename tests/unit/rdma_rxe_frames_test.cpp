// Frames the Linux kernel's soft-RoCE (rxe, 6.1) sent in the lab (fixtures/rxe_frames.hpp):
// vfab's parser takes them with their fields and vfab's ICRC is theirs; vfab's encoder writes the
// same bytes for the same fields.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "../../transport/packet.hpp"
#include "fixtures/rxe_frames.hpp"
#include "vfab/rdma/icrc.hpp"
#include "vfab/rdma/wire.hpp"

namespace vfab::rdma {
namespace {

using namespace wire;

constexpr size_t kIpOff = kEthHeader, kBthOff = kRoceHeadroom;

struct RxeFrame {
    const char* name;
    const uint8_t* bytes;
    size_t len;
    uint8_t opcode;
    uint32_t psn;
    bool ack_req;
    uint8_t pad;
    uint32_t payload_len;
    uint16_t src_port;
};

#define VFAB_RXE(n) #n, fixtures::k_##n, sizeof fixtures::k_##n
constexpr RxeFrame kRxeFrames[] = {
    {VFAB_RXE(rxe_rc_send_only), op::send_only, 0x9b8c66, true, 0, 64, 0xd7df},
    {VFAB_RXE(rxe_rc_send_only_retransmitted), op::send_only, 0x9b8c66, true, 0, 64, 0xd7df},
    {VFAB_RXE(rxe_rc_send_first), op::send_first, 0x5aee4f, false, 0, 1024, 0xd902},
    {VFAB_RXE(rxe_rc_send_last), op::send_last, 0x5aee50, true, 3, 477, 0xd902},
    {VFAB_RXE(rxe_ud_send_only), op::ud_send_only, 0x47934d, false, 3, 61, 0xf241},
    {VFAB_RXE(rxe_rc_rdma_write_only), op::write_only, 0x0aefb2, true, 0, 64, 0xdb48},
    {VFAB_RXE(rxe_rc_rdma_read_request), op::read_request, 0x034fcd, true, 0, 0, 0xdc6b},
};
#undef VFAB_RXE

TEST(RdmaRxeFrames, ParseWithTheirIcrc) {
    for (const RxeFrame& r : kRxeFrames) {
        SCOPED_TRACE(r.name);
        const uint8_t* ip = r.bytes + kIpOff;
        const uint32_t ip_len = load16(ip + 2);
        ASSERT_EQ(kEthHeader + ip_len, r.len);
        EXPECT_EQ(icrc_ipv4(ip, ip_len - kIcrc), load_icrc(r.bytes + r.len - kIcrc)) << "vfab's ICRC is rxe's";
        Packet p;
        ASSERT_EQ(parse_frame(r.bytes, uint32_t(r.len), fixtures::kRxePeerIp, p), ParseResult::roce);
        EXPECT_EQ(p.src_ip, fixtures::kRxeIp);
        EXPECT_EQ(p.dst_ip, fixtures::kRxePeerIp);
        EXPECT_EQ(p.src_port, r.src_port);
        EXPECT_EQ(p.opcode, r.opcode);
        EXPECT_EQ(p.dest_qp, fixtures::kRxePeerQpn);
        EXPECT_EQ(p.psn, r.psn);
        EXPECT_EQ(p.ack_req, r.ack_req);
        EXPECT_FALSE(p.solicited);
        EXPECT_EQ(p.pkey, 0xFFFF);
        EXPECT_EQ(p.pad, r.pad);
        EXPECT_EQ(p.payload_len, r.payload_len);
        if (p.info.has(has_reth)) {
            EXPECT_EQ(p.va, 0x00007f0000001000u);
            EXPECT_EQ(p.rkey, 0x1234u);
            EXPECT_EQ(p.dma_len, 64u);
        }
        if (p.info.has(has_deth)) {
            EXPECT_EQ(p.qkey, 0x11111111u);
            EXPECT_EQ(p.src_qp, 0x000017u);
        }
        if (r.opcode != op::write_only) {   // perftest's buffer is not a pattern
            for (uint32_t i = 0; i < p.payload_len; ++i) ASSERT_EQ(p.payload[i], 0x7b) << i;
        }
        // A corrupted copy is refused for its ICRC, as rxe would refuse vfab's.
        std::vector<uint8_t> g(r.bytes, r.bytes + r.len);
        g[kBthOff + 11] ^= 1;
        EXPECT_EQ(parse_frame(g.data(), uint32_t(g.size()), fixtures::kRxePeerIp, p), ParseResult::bad_icrc);
    }
    // The retransmission differs in its IPv4 ID only: another header checksum, another ICRC.
    EXPECT_NE(load_icrc(fixtures::k_rxe_rc_send_only + sizeof fixtures::k_rxe_rc_send_only - kIcrc),
              load_icrc(fixtures::k_rxe_rc_send_only_retransmitted + sizeof fixtures::k_rxe_rc_send_only_retransmitted - kIcrc));
}

// vfab writes what rxe wrote from the BTH on (headers, payload, pad) for the same fields; the
// IPv4 ID (vfab: 0, rxe: a counter) and with it the checksum and the ICRC are the only
// differences before it.
TEST(RdmaRxeFrames, EncoderWritesTheSameTransportHeaders) {
    for (const RxeFrame& r : kRxeFrames) {
        SCOPED_TRACE(r.name);
        Packet p;
        ASSERT_EQ(parse_frame(r.bytes, uint32_t(r.len), fixtures::kRxePeerIp, p), ParseResult::roce);
        PacketHeader h;
        h.dst_mac = r.bytes;
        h.src_mac = r.bytes + 6;
        h.src_ip = p.src_ip;
        h.dst_ip = p.dst_ip;
        h.src_port = p.src_port;
        h.ttl = r.bytes[kIpOff + 8];
        h.tos = r.bytes[kIpOff + 1];
        h.opcode = p.opcode;
        h.solicited = p.solicited;
        h.ack_req = p.ack_req;
        h.dest_qp = p.dest_qp;
        h.psn = p.psn;
        h.va = p.va;
        h.rkey = p.rkey;
        h.dma_len = p.dma_len;
        h.qkey = p.qkey;
        h.src_qp = p.src_qp;
        std::vector<uint8_t> f(r.len + 16, 0xEE);
        uint8_t* d = write_headers(f.data(), h, p.payload_len);
        std::memcpy(d, p.payload, p.payload_len);
        ASSERT_EQ(finish_frame(f.data(), p.payload_len), r.len);
        EXPECT_EQ(std::memcmp(f.data(), r.bytes, kIpOff + 4), 0) << "Ethernet, IPv4 version to length";
        EXPECT_EQ(std::memcmp(f.data() + kIpOff + 6, r.bytes + kIpOff + 6, 4), 0) << "DF, TTL, protocol";
        EXPECT_EQ(std::memcmp(f.data() + kIpOff + 12, r.bytes + kIpOff + 12, r.len - kIpOff - 12 - kIcrc), 0)
            << "addresses, UDP, BTH, extension headers, payload, pad";
        // With rxe's IPv4 ID put in, vfab's checksum and ICRC are rxe's too.
        std::memcpy(f.data() + kIpOff + 4, r.bytes + kIpOff + 4, 2);
        store16(f.data() + kIpOff + 10, 0);
        store16(f.data() + kIpOff + 10, ipv4_checksum(f.data() + kIpOff));
        finish_frame(f.data(), p.payload_len);
        EXPECT_EQ(std::vector<uint8_t>(f.begin(), f.begin() + r.len), std::vector<uint8_t>(r.bytes, r.bytes + r.len));
    }
}

}  // namespace
}  // namespace vfab::rdma
