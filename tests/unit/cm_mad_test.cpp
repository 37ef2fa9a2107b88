// The connection manager's messages against the layout the Linux kernel's ib_cm and rdma_cm put
// on the wire (IB spec Vol. 1 ch. 12 tables 106-120, as include/rdma/ibta_vol1_c12.h packs them),
// and the RDMA IP CM service's service IDs and private-data header (Annex A11, cma.c).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "cm/mad.hpp"
#include "cm/messages.hpp"

namespace vfab::cm {
namespace {

// Every field of a message: set to a value of its width, read back, and no other bit of the
// data changes — the fields neither overlap nor spill.
void expect_fields_disjoint(const std::vector<Field>& fields, const char* name) {
    std::mt19937_64 rng(42);
    for (size_t round = 0; round < 50; ++round) {
        std::array<uint8_t, kMadData> d{};
        std::vector<uint64_t> values;
        for (const Field& f : fields) {
            const uint64_t v = f.width == 64 ? rng() : rng() & ((uint64_t(1) << f.width) - 1);
            values.push_back(v);
            set(d.data(), f, v);
        }
        for (size_t i = 0; i < fields.size(); ++i)
            ASSERT_EQ(get(d.data(), fields[i]), values[i]) << name << " field " << i << " overlaps another";
        // Each field cleared in turn leaves the others as they were.
        for (size_t i = 0; i < fields.size(); ++i) {
            auto copy = d;
            set(copy.data(), fields[i], 0);
            for (size_t j = 0; j < fields.size(); ++j) {
                if (j != i) {
                    ASSERT_EQ(get(copy.data(), fields[j]), values[j]) << name << " " << i << " spills into " << j;
                }
            }
        }
    }
}

TEST(CmMad, EveryMessagesFieldsAreDisjoint) {
    expect_fields_disjoint({req::local_comm_id, req::service_id, req::local_ca_guid, req::local_qkey, req::local_qpn,
                            req::responder_resources, req::local_eecn, req::initiator_depth, req::remote_eecn,
                            req::remote_cm_response_timeout, req::transport_service_type, req::end_to_end_flow_control,
                            req::starting_psn, req::local_cm_response_timeout, req::retry_count, req::pkey,
                            req::path_mtu, req::rdc_exists, req::rnr_retry_count, req::max_cm_retries, req::srq,
                            req::extended_transport_type, req::primary_local_lid, req::primary_remote_lid,
                            req::primary_flow_label, req::primary_packet_rate, req::primary_traffic_class,
                            req::primary_hop_limit, req::primary_sl, req::primary_subnet_local,
                            req::primary_local_ack_timeout, req::alternate_local_lid},
                           "REQ");
    expect_fields_disjoint({rep::local_comm_id, rep::remote_comm_id, rep::local_qkey, rep::local_qpn, rep::local_eecn,
                            rep::starting_psn, rep::responder_resources, rep::initiator_depth, rep::target_ack_delay,
                            rep::failover_accepted, rep::end_to_end_flow_control, rep::rnr_retry_count, rep::srq,
                            rep::local_ca_guid},
                           "REP");
    expect_fields_disjoint({rej::local_comm_id, rej::remote_comm_id, rej::message_rejected, rej::ari_length, rej::reason},
                           "REJ");
    expect_fields_disjoint({mra::local_comm_id, mra::remote_comm_id, mra::message_mraed, mra::service_timeout}, "MRA");
    expect_fields_disjoint({dreq::local_comm_id, dreq::remote_comm_id, dreq::remote_qpn}, "DREQ");
    expect_fields_disjoint({sidr_req::request_id, sidr_req::pkey, sidr_req::service_id}, "SIDR_REQ");
    expect_fields_disjoint({sidr_rep::request_id, sidr_rep::status, sidr_rep::info_length, sidr_rep::qpn,
                            sidr_rep::service_id, sidr_rep::qkey},
                           "SIDR_REP");
    expect_fields_disjoint({mad::base_version, mad::mgmt_class, mad::class_version, mad::method, mad::status,
                            mad::class_specific, mad::tid, mad::attr_id, mad::attr_mod},
                           "MAD header");
}

// Each message's private data runs to the end of the MAD's 232 bytes of data.
TEST(CmMad, PrivateDataEndsTheMad) {
    EXPECT_EQ(req::private_data + kReqPrivate, kMadData);
    EXPECT_EQ(rep::private_data + kRepPrivate, kMadData);
    EXPECT_EQ(rtu::private_data + kRtuPrivate, kMadData);
    EXPECT_EQ(rej::private_data + kRejPrivate, kMadData);
    EXPECT_EQ(rej::ari + kRejAri, rej::private_data);
    EXPECT_EQ(mra::private_data + kMraPrivate, kMadData);
    EXPECT_EQ(dreq::private_data + kDreqPrivate, kMadData);
    EXPECT_EQ(drep::private_data + kDrepPrivate, kMadData);
    EXPECT_EQ(sidr_req::private_data + kSidrReqPrivate, kMadData);
    EXPECT_EQ(sidr_rep::private_data + kSidrRepPrivate, kMadData);
}

// A REQ as the kernel's rdma_cm sends one on rxe, byte by byte where the bit fields share bytes.
TEST(CmMad, AReqLaysOutAsTheKernelsDoes) {
    std::array<uint8_t, kMadSize> m{};
    uint8_t* h = m.data();
    set(h, mad::base_version, kBaseVersion);
    set(h, mad::mgmt_class, kClassCm);
    set(h, mad::class_version, kCmClassVersion);
    set(h, mad::method, kMethodSend);
    set(h, mad::tid, 0x0000000100ABCDEFull);
    set(h, mad::attr_id, uint16_t(Attr::req));
    EXPECT_EQ(m[0], 1);
    EXPECT_EQ(m[1], 0x07);
    EXPECT_EQ(m[2], 2);
    EXPECT_EQ(m[3], 0x03);
    EXPECT_EQ(m[11], 0x01);
    EXPECT_EQ(m[15], 0xEF);
    EXPECT_EQ(m[16], 0x00);
    EXPECT_EQ(m[17], 0x10);

    uint8_t* d = m.data() + kMadHeader;
    set(d, req::service_id, service_id(kPsTcp, 7174));
    set(d, req::local_qpn, 0x000111);
    set(d, req::responder_resources, 16);
    set(d, req::remote_cm_response_timeout, 20);
    set(d, req::transport_service_type, 0);   // RC
    set(d, req::end_to_end_flow_control, 1);
    set(d, req::starting_psn, 0xABCDEF);
    set(d, req::local_cm_response_timeout, 20);
    set(d, req::retry_count, 7);
    set(d, req::pkey, 0xFFFF);
    set(d, req::path_mtu, 3);   // 1024
    set(d, req::rnr_retry_count, 7);
    set(d, req::max_cm_retries, 15);
    set(d, req::primary_local_lid, 0xFFFF);
    set(d, req::primary_flow_label, 0xABCDE);
    set(d, req::primary_hop_limit, 64);
    set(d, req::primary_local_ack_timeout, 19);
    const uint8_t sid[8] = {0, 0, 0, 0, 0x01, 0x06, 0x1C, 0x06};
    EXPECT_EQ(std::memcmp(d + 8, sid, 8), 0);
    EXPECT_EQ(d[32], 0x00);
    EXPECT_EQ(d[34], 0x11);
    EXPECT_EQ(d[35], 16);
    EXPECT_EQ(d[43], 20 << 3 | 0 << 1 | 1) << "remote CM response timeout, transport RC, flow control";
    EXPECT_EQ(d[44], 0xAB);
    EXPECT_EQ(d[46], 0xEF);
    EXPECT_EQ(d[47], 20 << 3 | 7) << "local CM response timeout, retry count";
    EXPECT_EQ(d[48], 0xFF);
    EXPECT_EQ(d[50], 3 << 4 | 7) << "MTU, no RDC, RNR retry count";
    EXPECT_EQ(d[51], 15 << 4) << "max CM retries, no SRQ, extended transport 0";
    EXPECT_EQ(d[52], 0xFF);
    EXPECT_EQ(d[53], 0xFF);
    EXPECT_EQ(d[88], 0xAB);
    EXPECT_EQ(d[89], 0xCD);
    EXPECT_EQ(d[90] & 0xF0, 0xE0) << "the flow label's last 4 bits, then the reserved ones";
    EXPECT_EQ(d[93], 64);
    EXPECT_EQ(d[95], 19 << 3);
    EXPECT_EQ(get(d, req::alternate_local_lid), 0u) << "no alternate path: the kernel looks at this LID";
}

TEST(CmMad, ServiceIdsOfTheIpCmService) {
    EXPECT_EQ(service_id(kPsTcp, 0x1C06), 0x0000000001061C06ull);
    EXPECT_EQ(service_id(kPsUdp, 1), 0x0000000001110001ull);
    EXPECT_EQ(service_id(kPsIb, 0xFFFF), 0x00000000013FFFFFull);
    EXPECT_TRUE(is_ip_service(service_id(kPsTcp, 80)));
    EXPECT_FALSE(is_ip_service(0x1000000000000001ull));
    EXPECT_EQ(port_space_of(0x0000000001061C06ull), kPsTcp);
    EXPECT_EQ(port_of(0x0000000001061C06ull), 0x1C06);
}

// The header rdma_cm puts before a REQ's private data: IPv4 addresses as the last 4 of 16 bytes
// after 12 zero ones (not ::ffff:-mapped), the source port big-endian.
TEST(CmMad, TheCmaHeaderAsTheKernelWritesIt) {
    uint8_t p[kCmaHeader];
    std::memset(p, 0xA5, sizeof p);
    write_cma_header(p, CmaHeader::ipv4(0x0A4D0001, 0xC123, 0x0A4D0002));
    EXPECT_EQ(p[0], 0x00);
    EXPECT_EQ(p[1], 0x40);
    EXPECT_EQ(p[2], 0xC1);
    EXPECT_EQ(p[3], 0x23);
    for (int i = 4; i < 16; ++i) EXPECT_EQ(p[i], 0) << i;
    const uint8_t src[4] = {10, 77, 0, 1}, dst[4] = {10, 77, 0, 2};
    EXPECT_EQ(std::memcmp(p + 16, src, 4), 0);
    for (int i = 20; i < 32; ++i) EXPECT_EQ(p[i], 0) << i;
    EXPECT_EQ(std::memcmp(p + 32, dst, 4), 0);
    CmaHeader h;
    ASSERT_TRUE(read_cma_header(p, h));
    EXPECT_EQ(h.ip_version, 4);
    EXPECT_EQ(h.src_port, 0xC123);
    EXPECT_EQ(h.src_ipv4(), 0x0A4D0001u);
    EXPECT_EQ(h.dst_ipv4(), 0x0A4D0002u);
    p[0] = 1;
    EXPECT_FALSE(read_cma_header(p, h)) << "a CM version other than 0";
    p[0] = 0;
    p[1] = 0x50;
    EXPECT_FALSE(read_cma_header(p, h)) << "an IP version other than 4 or 6";
}

TEST(CmMad, TimeoutCodes) {
    EXPECT_EQ(timeout_ns(0), 4096u);
    EXPECT_EQ(timeout_ns(20), 4096ull << 20);   // ~4.3 s: rdma_cm's CM response timeout
    EXPECT_EQ(timeout_ns(40), 4096ull << 31);
}

// Every message through a MAD and back: what was put in comes out, with its transaction ID.
TEST(CmMessages, EveryMessageRoundTrips) {
    std::mt19937 rng(9);
    auto fill = [&](auto& a) {
        for (auto& b : a) b = uint8_t(rng());
    };
    Req q;
    q.local_comm_id = 0x12345678;
    q.service_id = service_id(kPsTcp, 7471);
    q.local_ca_guid = 0x0250569fffe0a1b2ull;
    q.local_qpn = 0x000123;
    q.responder_resources = 16;
    q.initiator_depth = 8;
    q.flow_control = true;
    q.starting_psn = 0x654321;
    q.path_mtu = 5;
    q.srq = true;
    q.local_gid[10] = q.local_gid[11] = 0xFF;
    q.local_gid[15] = 1;
    q.remote_gid[15] = 2;
    q.flow_label = 0xABCDE;
    q.traffic_class = 0x20;
    q.sl = 3;
    fill(q.private_data);
    Rep p;
    p.local_comm_id = 1;
    p.remote_comm_id = 0x12345678;
    p.local_qpn = 0x000456;
    p.starting_psn = 0x111111;
    p.rnr_retry_count = 5;
    p.local_ca_guid = 0x0250569fffe0c3d4ull;
    fill(p.private_data);
    Rtu t{1, 2, {}};
    fill(t.private_data);
    Rej j;
    j.remote_comm_id = 9;
    j.reason = uint16_t(RejReason::invalid_service_id);
    j.ari_length = 8;
    fill(j.ari);
    fill(j.private_data);
    Mra m{3, 4, 1, 24, {}};
    Dreq dq{5, 6, 0x000789, {}};
    fill(dq.private_data);
    Drep dp{6, 5, {}};
    SidrReq sq{77, 0xFFFF, service_id(kPsUdp, 4791), {}};
    fill(sq.private_data);
    SidrRep sp{77, uint8_t(SidrStatus::success), 0x000321, service_id(kPsUdp, 4791), 0x01234567, {}};
    const Message all[] = {q, p, t, j, m, dq, dp, sq, sp};
    uint64_t tid = 0x0000000100000000ull;
    for (const Message& in : all) {
        SCOPED_TRACE(in.index());
        std::array<uint8_t, kMadSize> mad;
        encode(in, ++tid, mad.data());
        Message out;
        uint64_t got_tid = 0;
        ASSERT_EQ(decode(mad.data(), mad.size(), out, got_tid), DecodeResult::ok);
        EXPECT_EQ(got_tid, tid);
        ASSERT_EQ(out.index(), in.index());
        std::array<uint8_t, kMadSize> again;
        encode(out, tid, again.data());
        EXPECT_EQ(mad, again) << "decoded and encoded again, the same bytes";
    }
    // What the fields hold, for one of each kind of field.
    std::array<uint8_t, kMadSize> mad;
    encode(q, 1, mad.data());
    Message out;
    ASSERT_EQ(decode(mad.data(), mad.size(), out, tid), DecodeResult::ok);
    const Req& r = std::get<Req>(out);
    EXPECT_EQ(r.service_id, q.service_id);
    EXPECT_EQ(r.local_ca_guid, q.local_ca_guid);
    EXPECT_EQ(r.starting_psn, 0x654321u);
    EXPECT_EQ(r.path_mtu, 5);
    EXPECT_TRUE(r.flow_control);
    EXPECT_TRUE(r.srq);
    EXPECT_EQ(r.flow_label, 0xABCDEu);
    EXPECT_EQ(r.sl, 3);
    EXPECT_EQ(r.local_gid, q.local_gid);
    EXPECT_EQ(r.private_data, q.private_data);
    EXPECT_EQ(get(mad.data() + kMadHeader, req::primary_local_lid), 0xFFFFu) << "RoCE: permissive LIDs";
    EXPECT_EQ(get(mad.data() + kMadHeader, req::alternate_local_lid), 0u) << "no alternate path";
    EXPECT_EQ(get(mad.data(), mad::attr_id), uint16_t(Attr::req));
    EXPECT_EQ(get(mad.data(), mad::method), kMethodSend);
}

TEST(CmMessages, WhatIsNotTheCmsIsRefused) {
    std::array<uint8_t, kMadSize> mad;
    encode(Rtu{}, 1, mad.data());
    Message out;
    uint64_t tid;
    EXPECT_EQ(decode(mad.data(), kMadSize - 1, out, tid), DecodeResult::short_mad);
    auto with = [&](Field f, uint64_t v) {
        auto m = mad;
        set(m.data(), f, v);
        return decode(m.data(), m.size(), out, tid);
    };
    EXPECT_EQ(with(mad::base_version, 2), DecodeResult::not_cm);
    EXPECT_EQ(with(mad::mgmt_class, 0x01), DecodeResult::not_cm) << "a subnet-management MAD";
    EXPECT_EQ(with(mad::class_version, 1), DecodeResult::not_cm);
    EXPECT_EQ(with(mad::method, 0x01), DecodeResult::bad_method) << "a Get";
    EXPECT_EQ(with(mad::attr_id, uint16_t(Attr::lap)), DecodeResult::unknown_attribute) << "LAP: refused over RoCE";
    EXPECT_EQ(with(mad::attr_id, uint16_t(Attr::class_port_info)), DecodeResult::unknown_attribute);
    EXPECT_EQ(with(mad::attr_id, 0x7777), DecodeResult::unknown_attribute);
}

}  // namespace
}  // namespace vfab::cm
