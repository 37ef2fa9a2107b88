// The RoCEv2 codec (transport/packet.hpp): every RC and UD opcode written and parsed back field
// for field, the pad, the parser's refusals, ARP, and the ICRC against frames built by an
// independent implementation (fixtures/make_icrc_frames.py: Python's zlib.crc32).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "../../transport/packet.hpp"
#include "fixtures/icrc_reference_frames.hpp"
#include "vfab/rdma/icrc.hpp"
#include "vfab/rdma/wire.hpp"

namespace vfab::rdma {
namespace {

using namespace wire;

constexpr uint8_t kMacA[6] = {0x02, 0, 0, 0, 0, 1};
constexpr uint8_t kMacB[6] = {0x02, 0, 0, 0, 0, 2};
constexpr uint32_t kIpA = 0x0a000001, kIpB = 0x0a000002;
constexpr size_t kIpOff = kEthHeader, kUdpOff = kIpOff + kIpv4Header, kBthOff = kUdpOff + kUdpHeader;

// Every opcode the transport knows (IB spec table 38), and none else.
std::vector<uint8_t> all_opcodes() {
    std::vector<uint8_t> v;
    for (unsigned op = 0; op < 256; ++op)
        if (op_info(uint8_t(op)).valid()) v.push_back(uint8_t(op));
    return v;
}

// RC's, UC's (RC's SENDs and WRITEs under 001xxxxx), UD's, XRC's (RC's under 101xxxxx), and
// vfab's two masked atomics in the manufacturer-specific range.
TEST(RdmaWire, OpcodeTableHasExactlyRcUcUdAndXrc) {
    std::vector<uint8_t> expect = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B,
                                   0x0C, 0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12, 0x13, 0x14, 0x16, 0x17};
    for (uint8_t uc = 0x20; uc <= 0x2B; ++uc) expect.push_back(uc);
    expect.push_back(0x64);
    expect.push_back(0x65);
    for (uint8_t rc = 0; rc < 23; ++rc) expect.push_back(uint8_t(0xA0 | (expect[rc] & 0x1F)));
    expect.push_back(0xC0);
    expect.push_back(0xC1);
    EXPECT_EQ(all_opcodes(), expect);
    // Header sizes of a few opcodes, straight from table 38.
    EXPECT_EQ(ext_header_size(op_info(op::write_only_imm)), kReth + kImmDt);
    EXPECT_EQ(ext_header_size(op_info(op::atomic_acknowledge)), kAeth + kAtomicAckEth);
    EXPECT_EQ(ext_header_size(op_info(op::ud_send_only_imm)), kDeth + kImmDt);
    EXPECT_EQ(ext_header_size(op_info(op::send_last_inv)), kIeth);
    EXPECT_EQ(ext_header_size(op_info(op::cmp_swap)), kAtomicEth);
    EXPECT_EQ(ext_header_size(op_info(op::vfab_masked_cmp_swap)), kMaskedAtomicEth);
    EXPECT_EQ(ext_header_size(op_info(op::kXrcBase | op::write_only_imm)), kXrcEth + kReth + kImmDt);
    EXPECT_EQ(ext_header_size(op_info(op::kXrcBase | op::acknowledge)), kAeth);   // responses carry no XRCETH
    EXPECT_EQ(ext_header_size(op_info(op::kUcBase | op::write_only_imm)), kReth + kImmDt);
    EXPECT_TRUE(op_info(op::kUcBase | op::send_first).has(is_uc | is_request | is_send | is_first));
}

// A header with a distinct value in every field an opcode may carry.
PacketHeader sample_header(uint8_t opcode) {
    PacketHeader h;
    h.dst_mac = kMacB;
    h.src_mac = kMacA;
    h.src_ip = kIpA;
    h.dst_ip = kIpB;
    h.src_port = 0xC123;
    h.ttl = 17;
    h.tos = 0x62;
    h.opcode = opcode;
    h.solicited = true;
    h.ack_req = true;
    h.dest_qp = 0xABCDEF;
    h.psn = 0xFEDCBA;
    h.va = 0x0123456789ABCDEFull;
    h.rkey = 0x89ABCDEF;
    h.dma_len = 0x00654321;
    h.swap_add = 0x1111222233334444ull;
    h.compare = 0x5555666677778888ull;
    h.syndrome = 0x61;
    h.msn = 0x00ABCDEF;
    h.atomic_orig = 0x99990000AAAABBBBull;
    h.imm_be = 0x04030201;
    h.inv_rkey = 0x13572468;
    h.qkey = 0x80010000;
    h.src_qp = 0x00123456;
    h.xrc_srqn = 0x00654321;
    return h;
}

TEST(RdmaWire, EveryOpcodeRoundTrips) {
    for (uint8_t opcode : all_opcodes()) {
        const OpInfo info = op_info(opcode);
        const std::vector<uint32_t> sizes =
            info.has(has_payload) ? std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 255, 1024} : std::vector<uint32_t>{0};
        for (uint32_t len : sizes) {
            SCOPED_TRACE(testing::Message() << "opcode 0x" << std::hex << int(opcode) << std::dec << " payload " << len);
            std::vector<uint8_t> f(2048, 0xA5);   // garbage where the pad goes
            const PacketHeader h = sample_header(opcode);
            uint8_t* data = write_headers(f.data(), h, len);
            ASSERT_EQ(size_t(data - f.data()), kBthOff + kBth + ext_header_size(info));
            for (uint32_t i = 0; i < len; ++i) data[i] = uint8_t(i * 13 + 1);
            const uint32_t n = finish_frame(f.data(), len);
            ASSERT_EQ(n, frame_size(opcode, len));
            const uint32_t pad = (4 - len % 4) % 4;
            ASSERT_EQ(n, kBthOff + kBth + ext_header_size(info) + len + pad + kIcrc);
            for (uint32_t i = 0; i < pad; ++i) EXPECT_EQ(data[len + i], 0) << "pad byte " << i;
            EXPECT_EQ(f[kBthOff + 1], uint8_t(kBthSolicited | pad << 4)) << "SE, pad count, TVer 0";
            EXPECT_EQ(load16(f.data() + kUdpOff + 2), kRoceUdpPort);
            EXPECT_EQ(load16(f.data() + kUdpOff + 6), 0) << "no UDP checksum";
            EXPECT_EQ(ipv4_checksum(f.data() + kIpOff), 0) << "IPv4 header checksum";

            Packet p;
            ASSERT_EQ(parse_frame(f.data(), n, kIpB, p), ParseResult::roce);
            EXPECT_EQ(p.frame, f.data());
            EXPECT_EQ(p.frame_len, n);
            EXPECT_EQ(std::memcmp(p.src_mac, kMacA, 6), 0);
            EXPECT_EQ(p.ipv4, f.data() + kIpOff);
            EXPECT_EQ(p.src_ip, kIpA);
            EXPECT_EQ(p.dst_ip, kIpB);
            EXPECT_EQ(p.src_port, 0xC123);
            const bool xrc = info.has(is_xrc), uc = info.has(is_uc);   // parsed as RC's opcode, marked
            EXPECT_EQ(p.opcode, xrc || uc ? uint8_t(opcode & 0x1F) : opcode);
            EXPECT_EQ(p.xrc, xrc);
            EXPECT_EQ(p.uc, uc);
            EXPECT_EQ(p.xrc_srqn, info.has(has_xrceth) ? 0x654321u : 0u);
            EXPECT_EQ(p.info.flags, info.flags);
            EXPECT_TRUE(p.solicited);
            EXPECT_TRUE(p.ack_req);
            EXPECT_EQ(p.pad, pad);
            EXPECT_EQ(p.pkey, kDefaultPkey);
            EXPECT_EQ(p.dest_qp, 0xABCDEFu);
            EXPECT_EQ(p.psn, 0xFEDCBAu);
            EXPECT_EQ(p.payload_len, len);
            EXPECT_EQ(p.payload, data);
            EXPECT_EQ(f[kIpOff + 1], 0x62) << "TOS";
            EXPECT_EQ(f[kIpOff + 8], 17) << "TTL";
            if (info.has(has_reth) || info.has(has_atomic_eth)) {
                EXPECT_EQ(p.va, h.va);
                EXPECT_EQ(p.rkey, h.rkey);
            }
            if (info.has(has_reth)) { EXPECT_EQ(p.dma_len, h.dma_len); }
            if (info.has(has_atomic_eth)) {
                EXPECT_EQ(p.swap_add, h.swap_add);
                EXPECT_EQ(p.compare, h.compare);
            }
            if (info.has(has_aeth)) {
                EXPECT_EQ(p.syndrome, h.syndrome);
                EXPECT_EQ(p.msn, h.msn);
            }
            if (info.has(has_atomic_ack_eth)) { EXPECT_EQ(p.atomic_orig, h.atomic_orig); }
            if (info.has(has_immdt)) { EXPECT_EQ(p.imm_be, h.imm_be); }
            if (info.has(has_ieth)) { EXPECT_EQ(p.inv_rkey, h.inv_rkey); }
            if (info.has(has_deth)) {
                EXPECT_EQ(p.qkey, h.qkey);
                EXPECT_EQ(p.src_qp, h.src_qp);
            }
            // The ICRC is over exactly what precedes it.
            EXPECT_EQ(load_icrc(f.data() + n - kIcrc), icrc_ipv4(f.data() + kIpOff, n - kIpOff - kIcrc));
        }
    }
}

TEST(RdmaWire, ExtensionHeadersLieInTheirWireOrder) {
    // RDMA WRITE only with immediate: RETH, then ImmDt (table 38).
    std::vector<uint8_t> f(256);
    write_headers(f.data(), sample_header(op::write_only_imm), 0);
    const uint8_t* x = f.data() + kBthOff + kBth;
    EXPECT_EQ(load64(x), 0x0123456789ABCDEFull);
    EXPECT_EQ(load32(x + 8), 0x89ABCDEFu);
    EXPECT_EQ(load32(x + 12), 0x00654321u);
    EXPECT_EQ(std::memcmp(x + 16, "\x01\x02\x03\x04", 4), 0) << "ImmDt as the application gave it (network order)";
    // UD SEND with immediate: DETH (Q_Key, reserved byte, source QP), then ImmDt.
    write_headers(f.data(), sample_header(op::ud_send_only_imm), 0);
    EXPECT_EQ(load32(x), 0x80010000u);
    EXPECT_EQ(x[4], 0);
    EXPECT_EQ(load24(x + 5), 0x123456u);
    EXPECT_EQ(std::memcmp(x + 8, "\x01\x02\x03\x04", 4), 0);
    // Atomic: VA, R_Key, swap/add, compare.
    write_headers(f.data(), sample_header(op::cmp_swap), 0);
    EXPECT_EQ(load64(x + 12), 0x1111222233334444ull);
    EXPECT_EQ(load64(x + 20), 0x5555666677778888ull);
    // Atomic ACK: AETH, then the original value.
    write_headers(f.data(), sample_header(op::atomic_acknowledge), 0);
    EXPECT_EQ(x[0], 0x61);
    EXPECT_EQ(load24(x + 1), 0xABCDEFu);
    EXPECT_EQ(load64(x + 4), 0x99990000AAAABBBBull);
}

// ---- refusals ---------------------------------------------------------------------------------

class RdmaWireRefusal : public ::testing::Test {
protected:
    void SetUp() override { build(op::send_only, 13); }
    void build(uint8_t opcode, uint32_t len) {
        f.assign(2048, 0);
        const PacketHeader h = sample_header(opcode);
        uint8_t* d = write_headers(f.data(), h, len);
        for (uint32_t i = 0; i < len; ++i) d[i] = uint8_t(i);
        n = finish_frame(f.data(), len);
    }
    // After a change to the headers: the IPv4 checksum and the ICRC made right again, so that
    // the change alone is what the parser sees.
    void refresh(bool fix_ip = true) {
        uint8_t* ip = f.data() + kIpOff;
        if (fix_ip) {
            store16(ip + 10, 0);
            store16(ip + 10, ipv4_checksum(ip));
        }
        const uint32_t ip_len = load16(ip + 2);
        if (ip_len >= kIpv4Header + kUdpHeader + kBth + kIcrc && ip_len + kEthHeader <= f.size())
            store_icrc(ip + ip_len - kIcrc, icrc_ipv4(ip, ip_len - kIcrc));
    }
    ParseResult parse() { return parse_frame(f.data(), n, kIpB, p); }
    std::vector<uint8_t> f;
    uint32_t n = 0;
    Packet p;
};

TEST_F(RdmaWireRefusal, ValidFrameIsAccepted) {
    EXPECT_EQ(parse(), ParseResult::roce);
    refresh();
    EXPECT_EQ(parse(), ParseResult::roce) << "refresh() of an unchanged frame changes nothing";
}

TEST_F(RdmaWireRefusal, BadIpChecksum) {
    f[kIpOff + 10] ^= 0x01;
    refresh(false);
    EXPECT_EQ(parse(), ParseResult::malformed);
}

TEST_F(RdmaWireRefusal, TransportVersionNotZero) {
    for (uint8_t tver = 1; tver < 16; ++tver) {
        f[kBthOff + 1] = uint8_t((f[kBthOff + 1] & 0xF0) | tver);
        refresh();
        EXPECT_EQ(parse(), ParseResult::malformed) << int(tver);
    }
}

TEST_F(RdmaWireRefusal, PartitionKey) {
    for (uint16_t pkey : {0x0000, 0x1234, 0x8001, 0xFFFE}) {
        store16(f.data() + kBthOff + 2, pkey);
        refresh();
        EXPECT_EQ(parse(), ParseResult::malformed) << std::hex << pkey;
    }
    // The default partition's limited member (0x7FFF) matches the full 0xFFFF (IB spec 10.9.3:
    // one side full is enough), as rxe's pkey_match has it.
    store16(f.data() + kBthOff + 2, 0x7FFF);
    refresh();
    EXPECT_EQ(parse(), ParseResult::roce);
}

TEST_F(RdmaWireRefusal, Fragments) {
    for (uint16_t flags : {0x2000 /* MF */, 0x0001 /* offset 8 */, 0x6000 /* DF|MF */, 0x1FFF}) {
        SetUp();
        store16(f.data() + kIpOff + 6, flags);
        refresh();
        EXPECT_EQ(parse(), ParseResult::malformed) << std::hex << flags;
    }
}

TEST_F(RdmaWireRefusal, UdpLength) {
    const uint16_t udp_len = load16(f.data() + kUdpOff + 4);
    for (int delta : {-1, -4, +4, -int(udp_len)}) {
        SetUp();
        store16(f.data() + kUdpOff + 4, uint16_t(udp_len + delta));
        refresh();
        EXPECT_EQ(parse(), ParseResult::malformed) << delta;
    }
    // Both the IP and UDP lengths shortened together, below what the opcode's headers need: an
    // ATOMIC request whose AtomicETH does not fit.
    build(op::fetch_add, 0);
    store16(f.data() + kIpOff + 2, uint16_t(load16(f.data() + kIpOff + 2) - 8));
    store16(f.data() + kUdpOff + 4, uint16_t(load16(f.data() + kUdpOff + 4) - 8));
    refresh();
    n -= 8;
    EXPECT_EQ(parse(), ParseResult::malformed);
    // A pad count larger than the payload leaves room for.
    build(op::send_only, 0);
    f[kBthOff + 1] |= 3 << 4;
    refresh();
    EXPECT_EQ(parse(), ParseResult::malformed);
}

TEST_F(RdmaWireRefusal, TruncatedFrame) {
    EXPECT_EQ(parse_frame(f.data(), n - 1, kIpB, p), ParseResult::malformed) << "the IP length runs past the frame";
    EXPECT_EQ(parse_frame(f.data(), kBthOff - 1, kIpB, p), ParseResult::other);
    EXPECT_EQ(parse_frame(f.data(), 13, kIpB, p), ParseResult::other);
    EXPECT_EQ(parse_frame(f.data(), 0, kIpB, p), ParseResult::other);
    // Ethernet padding after the IP packet is allowed.
    EXPECT_EQ(parse_frame(f.data(), n + 10, kIpB, p), ParseResult::roce);
    EXPECT_EQ(p.payload_len, 13u);
}

TEST_F(RdmaWireRefusal, UnknownOpcodes) {
    // 0x2C, 0x31, 0x36: UC has no READ, ACK or SEND with invalidate.
    for (unsigned opcode : {0x15u, 0x18u, 0x1Fu, 0x2Cu, 0x31u, 0x36u, 0x40u, 0x44u, 0x60u, 0x66u, 0x80u, 0xFFu}) {
        f[kBthOff] = uint8_t(opcode);
        refresh();
        EXPECT_EQ(parse(), ParseResult::malformed) << std::hex << opcode;
    }
}

TEST_F(RdmaWireRefusal, PayloadOnAnOpcodeWithoutOne) {
    for (uint8_t opcode : all_opcodes()) {
        if (op_info(opcode).has(has_payload)) continue;
        SCOPED_TRACE(int(opcode));
        // Four bytes of payload after the extension headers.
        build(opcode, 0);
        uint8_t* ip = f.data() + kIpOff;
        store16(ip + 2, uint16_t(load16(ip + 2) + 4));
        store16(f.data() + kUdpOff + 4, uint16_t(load16(f.data() + kUdpOff + 4) + 4));
        n += 4;
        refresh();
        EXPECT_EQ(parse(), ParseResult::malformed);
        // No payload but a pad count.
        build(opcode, 0);
        f[kBthOff + 1] |= 1 << 4;
        refresh();
        EXPECT_EQ(parse(), ParseResult::malformed);
    }
}

TEST_F(RdmaWireRefusal, BadIcrc) {
    f[n - 1] ^= 0x80;
    EXPECT_EQ(parse(), ParseResult::bad_icrc);
    SetUp();
    f[n - kIcrc - 1] ^= 0x01;   // the last payload byte
    EXPECT_EQ(parse(), ParseResult::bad_icrc);
    SetUp();
    f[kBthOff + 11] ^= 0x01;   // the PSN
    EXPECT_EQ(parse(), ParseResult::bad_icrc);
}

TEST_F(RdmaWireRefusal, MaskedFieldsDoNotChangeTheIcrc) {
    // TOS, TTL, the UDP checksum and BTH byte 4 (FECN, BECN) may change on the way.
    f[kIpOff + 1] = 0x03;
    f[kIpOff + 8] = 1;
    store16(f.data() + kUdpOff + 6, 0xBEEF);
    f[kBthOff + 4] = 0xC0;
    refresh(true);   // the IP checksum only: the ICRC stays what it was
    const uint32_t before = load_icrc(f.data() + n - kIcrc);
    EXPECT_EQ(icrc_ipv4(f.data() + kIpOff, n - kIpOff - kIcrc), before);
    EXPECT_EQ(parse(), ParseResult::roce);
}

TEST_F(RdmaWireRefusal, NotForTheTransport) {
    EXPECT_EQ(parse_frame(f.data(), n, kIpA, p), ParseResult::other) << "another destination address";
    store16(f.data() + kUdpOff + 2, 4792);
    refresh();
    EXPECT_EQ(parse(), ParseResult::other) << "another UDP port";
    SetUp();
    f[kIpOff + 9] = 6;   // TCP
    refresh();
    EXPECT_EQ(parse(), ParseResult::other);
    SetUp();
    f[kIpOff] = 0x46;   // IP options
    refresh();
    EXPECT_EQ(parse(), ParseResult::other);
    SetUp();
    store16(f.data() + 12, 0x86DD);   // IPv6
    EXPECT_EQ(parse(), ParseResult::other);
}

// ---- ARP -------------------------------------------------------------------------------------

TEST(RdmaWire, ArpRequestAndReply) {
    uint8_t f[64];
    std::memset(f, 0xCC, sizeof f);
    ASSERT_EQ(write_arp(f, kArpRequest, kMacA, kIpA, nullptr, kIpB), 60u);
    EXPECT_EQ(std::memcmp(f, "\xff\xff\xff\xff\xff\xff", 6), 0) << "a request is broadcast";
    EXPECT_EQ(std::memcmp(f + 6, kMacA, 6), 0);
    EXPECT_EQ(load16(f + 12), kEtherTypeArp);
    EXPECT_EQ(std::memcmp(f + kEthHeader + 18, "\0\0\0\0\0\0", 6), 0) << "target MAC unknown";
    for (size_t i = kEthHeader + kArpPacket; i < 60; ++i) EXPECT_EQ(f[i], 0) << "padding " << i;
    Packet pk;
    EXPECT_EQ(parse_frame(f, 60, kIpB, pk), ParseResult::arp);
    ArpPacket a;
    ASSERT_TRUE(parse_arp(f, 60, a));
    EXPECT_EQ(a.op, kArpRequest);
    EXPECT_EQ(std::memcmp(a.sender_mac, kMacA, 6), 0);
    EXPECT_EQ(a.sender_ip, kIpA);
    EXPECT_EQ(a.target_ip, kIpB);

    ASSERT_EQ(write_arp(f, kArpReply, kMacB, kIpB, kMacA, kIpA), 60u);
    EXPECT_EQ(std::memcmp(f, kMacA, 6), 0) << "a reply goes to the asker";
    EXPECT_EQ(std::memcmp(f + kEthHeader + 18, kMacA, 6), 0);
    ASSERT_TRUE(parse_arp(f, 60, a));
    EXPECT_EQ(a.op, kArpReply);
    EXPECT_EQ(std::memcmp(a.sender_mac, kMacB, 6), 0);
    EXPECT_EQ(a.sender_ip, kIpB);
    EXPECT_EQ(a.target_ip, kIpA);
}

TEST(RdmaWire, ArpRefusals) {
    uint8_t f[64];
    write_arp(f, kArpRequest, kMacA, kIpA, nullptr, kIpB);
    ArpPacket a;
    EXPECT_FALSE(parse_arp(f, kEthHeader + kArpPacket - 1, a)) << "short";
    EXPECT_TRUE(parse_arp(f, kEthHeader + kArpPacket, a)) << "unpadded is fine";
    const std::pair<size_t, uint8_t> breaks[] = {
        {kEthHeader + 1, 6},      // hardware type 6 (IEEE 802)
        {kEthHeader + 2, 0x86},   // protocol type not IPv4
        {kEthHeader + 4, 8},      // hardware address length
        {kEthHeader + 5, 16},     // protocol address length
        {12, 0x08},               // EtherType 0x0808
    };
    for (auto [at, v] : breaks) {
        uint8_t g[64];
        std::memcpy(g, f, sizeof g);
        g[at] = v;
        if (at == 12) g[13] = 0x08;
        EXPECT_FALSE(parse_arp(g, 60, a)) << at;
    }
}

// The pad count makes the payload a multiple of 4 bytes (IB spec 9.2.2): a packet whose payload
// and pad do not (a full-MTU FIRST with a pad, a LAST padded to an odd length) is malformed.
TEST(RdmaWire, APadThatDoesNotAlignThePayloadIsMalformed) {
    PacketHeader h;
    h.dst_mac = kMacB;
    h.src_mac = kMacA;
    h.src_ip = kIpA;
    h.dst_ip = kIpB;
    h.opcode = op::write_middle;
    h.dest_qp = 0x101;
    for (uint32_t pad = 1; pad <= 3; ++pad) {
        SCOPED_TRACE(pad);
        std::vector<uint8_t> f(2048, 0);
        write_headers(f.data(), h, 1024);   // 1024 bytes and no pad: well formed
        uint8_t* ip = f.data() + kIpOff;
        const uint32_t grow = pad;          // the same payload, `pad` more bytes, the pad count saying so
        store16(ip + 2, uint16_t(load16(ip + 2) + grow));
        store16(f.data() + kUdpOff + 4, uint16_t(load16(f.data() + kUdpOff + 4) + grow));
        f[kBthOff + 1] = uint8_t(pad << 4);
        store16(ip + 10, 0);
        store16(ip + 10, ipv4_checksum(ip));
        const uint32_t ip_len = load16(ip + 2);
        store_icrc(ip + ip_len - kIcrc, icrc_ipv4(ip, ip_len - kIcrc));
        std::vector<uint8_t> frame(f.begin(), f.begin() + ptrdiff_t(kEthHeader + ip_len));
        Packet p;
        EXPECT_EQ(parse_frame(frame.data(), uint32_t(frame.size()), kIpB, p), ParseResult::malformed)
            << "payload " << p.payload_len << " pad " << int(p.pad);
    }
}

TEST(RdmaWire, Ipv4ChecksumOfAKnownHeader) {
    // RFC 1071's style of example: a header whose checksum is known (Wikipedia's IPv4 example).
    const uint8_t h[20] = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                           0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
    EXPECT_EQ(ipv4_checksum(h), 0xb861);
}

// ---- the ICRC against an independent implementation ---------------------------------------------

TEST(RdmaIcrc, Crc32CheckValue) {
    Crc32 c;
    c.update(reinterpret_cast<const uint8_t*>("123456789"), 9);
    EXPECT_EQ(c.value(), 0xCBF43926u);   // the CRC-32 check value (zlib, Ethernet)
    // Fed in pieces of every size: the slicing-by-8 path and the byte path agree.
    std::vector<uint8_t> data(1000);
    for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 31 + 7);
    Crc32 whole;
    whole.update(data.data(), data.size());
    for (size_t step : {1u, 3u, 7u, 8u, 9u, 64u}) {
        Crc32 parts;
        for (size_t i = 0; i < data.size(); i += step) parts.update(data.data() + i, std::min(step, data.size() - i));
        EXPECT_EQ(parts.value(), whole.value()) << step;
    }
}

// Every length 0 to 600 and some long ones, at several alignments within 16 bytes, from several
// starting registers, against a CRC computed one bit at a time: the folded (PCLMULQDQ) runs and
// their table-driven tails, and the tables alone, give what the definition gives.
TEST(RdmaIcrc, FoldedRunsMatchTheBitwiseDefinition) {
    auto bitwise = [](uint32_t reg, const uint8_t* p, size_t n) {
        for (size_t i = 0; i < n; ++i) {
            reg ^= p[i];
            for (int k = 0; k < 8; ++k) reg = (reg >> 1) ^ (reg & 1 ? 0xEDB88320u : 0);
        }
        return reg;
    };
    std::vector<uint8_t> data(9000 + 16);
    uint32_t x = 0x12345678;
    for (uint8_t& b : data) b = uint8_t((x = x * 1103515245u + 12345u) >> 24);
    std::vector<size_t> lengths;
    for (size_t n = 0; n <= 600; ++n) lengths.push_back(n);
    for (size_t n : {1023u, 1024u, 1025u, 4095u, 4096u, 4097u, 8999u, 9000u}) lengths.push_back(n);
    const Crc32Method before = crc32_method();
    for (Crc32Method m : {Crc32Method::clmul, Crc32Method::tables, Crc32Method::automatic}) {
        SCOPED_TRACE(int(use_crc32_method(m)));
        for (uint32_t start : {0xFFFFFFFFu, 0u, 0x8badf00du})
            for (size_t align = 0; align < 16; align += 5)
                for (size_t n : lengths) {
                    Crc32 c{start};
                    c.update(data.data() + align, n);
                    ASSERT_EQ(c.reg, bitwise(start, data.data() + align, n)) << "length " << n << " offset " << align;
                }
    }
    (void)use_crc32_method(before);
}

TEST(RdmaIcrc, ReferenceFramesHaveVfabsIcrcAndParse) {
    const Crc32Method before = crc32_method();
    for (const auto& r : fixtures::kIcrcReferenceFrames) {
        SCOPED_TRACE(r.name);
        const uint8_t* ip = r.bytes + kIpOff;
        const uint32_t ip_len = load16(ip + 2);
        ASSERT_EQ(ip_len + kEthHeader, r.len);
        for (Crc32Method m : {Crc32Method::clmul, Crc32Method::tables}) {   // folded in one pass, and by tables
            SCOPED_TRACE(int(use_crc32_method(m)));
            EXPECT_EQ(icrc_ipv4(ip, ip_len - kIcrc), r.icrc);
        }
        (void)use_crc32_method(before);
        EXPECT_EQ(load_icrc(r.bytes + r.len - kIcrc), r.icrc) << "least significant byte first";
        // The incremental form: begin over the headers, then the rest.
        Crc32 c = icrc_begin_ipv4(ip);
        c.update(ip + kIpv4Header + kUdpHeader + kBth, ip_len - kIcrc - kIpv4Header - kUdpHeader - kBth);
        EXPECT_EQ(c.value(), r.icrc);

        Packet p;
        ASSERT_EQ(parse_frame(r.bytes, uint32_t(r.len), fixtures::kIcrcDstIp, p), ParseResult::roce);
        EXPECT_EQ(p.src_ip, fixtures::kIcrcSrcIp);
        EXPECT_EQ(p.opcode, r.opcode);
        EXPECT_EQ(p.dest_qp, r.dest_qp);
        EXPECT_EQ(p.psn, r.psn);
        EXPECT_EQ(p.solicited, r.solicited);
        EXPECT_EQ(p.ack_req, r.ack_req);
        EXPECT_EQ(p.pad, r.pad);
        EXPECT_EQ(p.payload_len, r.payload_len);
        EXPECT_EQ(p.payload, r.bytes + r.payload_offset);
        EXPECT_EQ(p.va, r.va);
        EXPECT_EQ(p.rkey, r.rkey);
        EXPECT_EQ(p.dma_len, r.dma_len);
        EXPECT_EQ(p.syndrome, r.syndrome);
        EXPECT_EQ(p.msn, r.msn);
        EXPECT_EQ(p.qkey, r.qkey);
        EXPECT_EQ(p.src_qp, r.src_qp);
        EXPECT_EQ(load32(reinterpret_cast<const uint8_t*>(&p.imm_be)), r.imm);

        // Any single bit flipped past the Ethernet header and outside the masked fields is caught.
        std::vector<uint8_t> g(r.bytes, r.bytes + r.len);
        g[g.size() - kIcrc - 1] ^= 0x10;
        EXPECT_NE(parse_frame(g.data(), uint32_t(g.size()), fixtures::kIcrcDstIp, p), ParseResult::roce);
    }
}

// vfab's encoder writes the reference frames byte for byte where its choices (UDP checksum 0,
// BTH byte 4 zero, IP identification 0 with DF) are the reference's.
TEST(RdmaIcrc, EncoderReproducesReferenceFrames) {
    int compared = 0;
    for (const auto& r : fixtures::kIcrcReferenceFrames) {
        const uint8_t* ip = r.bytes + kIpOff;
        if (load16(ip + kIpv4Header + 6) != 0 || r.bytes[kBthOff + 4] != 0) continue;
        SCOPED_TRACE(r.name);
        PacketHeader h;
        h.dst_mac = r.bytes;
        h.src_mac = r.bytes + 6;
        h.src_ip = fixtures::kIcrcSrcIp;
        h.dst_ip = fixtures::kIcrcDstIp;
        h.src_port = load16(ip + kIpv4Header);
        h.tos = ip[1];
        h.ttl = ip[8];
        h.opcode = r.opcode;
        h.solicited = r.solicited;
        h.ack_req = r.ack_req;
        h.dest_qp = r.dest_qp;
        h.psn = r.psn;
        h.va = r.va;
        h.rkey = r.rkey;
        h.dma_len = r.dma_len;
        h.syndrome = r.syndrome;
        h.msn = r.msn;
        h.qkey = r.qkey;
        h.src_qp = r.src_qp;
        uint8_t imm[4];
        store32(imm, r.imm);
        std::memcpy(&h.imm_be, imm, 4);
        std::vector<uint8_t> f(r.len + 64, 0xEE);
        uint8_t* d = write_headers(f.data(), h, r.payload_len);
        std::memcpy(d, r.bytes + r.payload_offset, r.payload_len);
        ASSERT_EQ(finish_frame(f.data(), r.payload_len), r.len);
        EXPECT_EQ(std::vector<uint8_t>(f.begin(), f.begin() + r.len), std::vector<uint8_t>(r.bytes, r.bytes + r.len));
        ++compared;
    }
    EXPECT_GE(compared, 3);
}

}  // namespace
}  // namespace vfab::rdma
