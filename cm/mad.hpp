// The InfiniBand Connection Manager's messages (IB spec Vol. 1 ch. 12; MADs 13.4) and the RDMA
// IP CM Service's service IDs and private-data header (Annex A11), as the Linux kernel's ib_cm
// and rdma_cm put them on the wire: what vfab's user-space connection manager sends to and takes
// from a peer's QP1 over RoCEv2 (docs/cm.md). Each field is defined once, by where it lies in
// the 232 bytes after the MAD header: byte, the bit its most significant bit is in (7 = the
// byte's MSB, as the spec's Byte[Bit] tables count from there) and width.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "vfab/rdma/wire.hpp"

namespace vfab::cm {

// ---- MAD (13.4.2): a 24-byte common header and 232 bytes of data, 256 in all ------------------------

inline constexpr size_t kMadSize = 256;
inline constexpr size_t kMadHeader = 24;
inline constexpr size_t kMadData = kMadSize - kMadHeader;
inline constexpr uint8_t kBaseVersion = 1;
inline constexpr uint8_t kClassCm = 0x07;
inline constexpr uint8_t kCmClassVersion = 2;
inline constexpr uint8_t kMethodSend = 0x03;   // every CM message (12.6)
// CM MADs go to QP1 (wire::kGsiQpn, Q_Key wire::kGsiQkey): the kernel sends them nowhere else.

// CM attribute IDs (12.6, table 104).
enum class Attr : uint16_t {
    class_port_info = 0x0001,
    req = 0x0010,
    mra = 0x0011,
    rej = 0x0012,
    rep = 0x0013,
    rtu = 0x0014,
    dreq = 0x0015,
    drep = 0x0016,
    sidr_req = 0x0017,
    sidr_rep = 0x0018,
    lap = 0x0019,   // ignored over RoCE (the kernel refuses them): never sent
    apr = 0x001A,
};

// Private data each message carries (the kernel's enum ib_cm_data_size).
inline constexpr size_t kReqPrivate = 92, kMraPrivate = 222, kRejPrivate = 148, kRepPrivate = 196,
                        kRtuPrivate = 224, kDreqPrivate = 220, kDrepPrivate = 224, kSidrReqPrivate = 216,
                        kSidrRepPrivate = 136;
inline constexpr size_t kRejAri = 72;   // REJ's additional rejection information
// The service timeout an MRA asks for (4.096 µs × 2^24, ~67 s: what the kernel's ib_cm sends).
inline constexpr uint8_t kMraServiceTimeout = 24;

// A REQ's transport service type (12.6.5): RC 0, UC 1; 3 says "the extended transport type",
// which is 1 for XRC (Annex A14 14.6.3.1).
inline constexpr uint8_t kTransportRc = 0;
inline constexpr uint8_t kTransportXrc = 3;
inline constexpr uint8_t kExtendedTransportXrc = 1;

// REJ reasons (12.6.7.2, table 109), those vfab sends or meets.
enum class RejReason : uint16_t {
    no_qp = 1,
    no_resources = 3,
    timeout = 4,               // ARI: the sender's CA GUID
    unsupported = 5,
    invalid_comm_id = 6,
    invalid_service_id = 8,    // nobody listens on it
    invalid_transport_type = 9,
    stale_connection = 10,
    invalid_gid = 12,
    invalid_mtu = 26,
    consumer = 28,             // rdma_reject, and every rdma_cm-level refusal
};

// SIDR_REP status (12.11.2, table 120).
enum class SidrStatus : uint8_t { success = 0, unsupported_sid = 1, reject = 2, no_qp = 3, redirect = 4, unsupported_version = 5 };

// A field of a CM message's data (the 232 bytes after the MAD header).
struct Field {
    uint16_t byte;   // where its first bit is
    uint8_t msb;     // that bit in the byte, 7 the most significant
    uint8_t width;   // bits, up to 64
};

// The field's value, big-endian as the spec lays it out.
constexpr uint64_t get(const uint8_t* data, Field f) noexcept {
    const uint32_t lead = 7 - f.msb;   // bits of the first byte before the field
    const uint32_t nbytes = (lead + f.width + 7) / 8;
    unsigned __int128 v = 0;
    for (uint32_t i = 0; i < nbytes; ++i) v = v << 8 | data[f.byte + i];
    v >>= nbytes * 8 - lead - f.width;
    const unsigned __int128 mask = (unsigned __int128)(1) << f.width;
    return uint64_t(v & (mask - 1));
}

constexpr void set(uint8_t* data, Field f, uint64_t value) noexcept {
    const uint32_t lead = 7 - f.msb;
    const uint32_t nbytes = (lead + f.width + 7) / 8;
    const uint32_t shift = nbytes * 8 - lead - f.width;
    const unsigned __int128 mask = (((unsigned __int128)(1) << f.width) - 1) << shift;
    unsigned __int128 v = 0;
    for (uint32_t i = 0; i < nbytes; ++i) v = v << 8 | data[f.byte + i];
    v = (v & ~mask) | (((unsigned __int128)(value) << shift) & mask);
    for (uint32_t i = nbytes; i-- > 0;) {
        data[f.byte + i] = uint8_t(v);
        v >>= 8;
    }
}

// ---- the MAD header (13.4.2, table 145) -------------------------------------------------------------

namespace mad {
inline constexpr Field base_version{0, 7, 8}, mgmt_class{1, 7, 8}, class_version{2, 7, 8}, method{3, 7, 8},
    status{4, 7, 16}, class_specific{6, 7, 16}, tid{8, 7, 64}, attr_id{16, 7, 16}, attr_mod{20, 7, 32};
}  // namespace mad

// ---- the messages (12.6; the kernel's include/rdma/ibta_vol1_c12.h) ------------------------------------

namespace req {   // table 106
inline constexpr Field local_comm_id{0, 7, 32}, service_id{8, 7, 64}, local_ca_guid{16, 7, 64},
    local_qkey{28, 7, 32}, local_qpn{32, 7, 24}, responder_resources{35, 7, 8}, local_eecn{36, 7, 24},
    initiator_depth{39, 7, 8}, remote_eecn{40, 7, 24}, remote_cm_response_timeout{43, 7, 5},
    transport_service_type{43, 2, 2}, end_to_end_flow_control{43, 0, 1}, starting_psn{44, 7, 24},
    local_cm_response_timeout{47, 7, 5}, retry_count{47, 2, 3}, pkey{48, 7, 16}, path_mtu{50, 7, 4},
    rdc_exists{50, 3, 1}, rnr_retry_count{50, 2, 3}, max_cm_retries{51, 7, 4}, srq{51, 3, 1},
    extended_transport_type{51, 2, 3}, primary_local_lid{52, 7, 16}, primary_remote_lid{54, 7, 16},
    primary_flow_label{88, 7, 20}, primary_packet_rate{91, 5, 6}, primary_traffic_class{92, 7, 8},
    primary_hop_limit{93, 7, 8}, primary_sl{94, 7, 4}, primary_subnet_local{94, 3, 1},
    primary_local_ack_timeout{95, 7, 5}, alternate_local_lid{96, 7, 16};
inline constexpr size_t primary_local_gid = 56, primary_remote_gid = 72, private_data = 140;
}  // namespace req

namespace rep {   // table 110
inline constexpr Field local_comm_id{0, 7, 32}, remote_comm_id{4, 7, 32}, local_qkey{8, 7, 32},
    local_qpn{12, 7, 24}, local_eecn{16, 7, 24}, starting_psn{20, 7, 24}, responder_resources{24, 7, 8},
    initiator_depth{25, 7, 8}, target_ack_delay{26, 7, 5}, failover_accepted{26, 2, 2},
    end_to_end_flow_control{26, 0, 1}, rnr_retry_count{27, 7, 3}, srq{27, 4, 1}, local_ca_guid{28, 7, 64};
inline constexpr size_t private_data = 36;
}  // namespace rep

namespace rtu {   // table 111
inline constexpr Field local_comm_id{0, 7, 32}, remote_comm_id{4, 7, 32};
inline constexpr size_t private_data = 8;
}  // namespace rtu

namespace rej {   // table 108
inline constexpr Field local_comm_id{0, 7, 32}, remote_comm_id{4, 7, 32}, message_rejected{8, 7, 2},
    ari_length{9, 7, 7}, reason{10, 7, 16};
inline constexpr size_t ari = 12, private_data = 84;
enum : uint8_t { rejected_req = 0, rejected_rep = 1, rejected_other = 2 };
}  // namespace rej

namespace mra {   // table 107
inline constexpr Field local_comm_id{0, 7, 32}, remote_comm_id{4, 7, 32}, message_mraed{8, 7, 2},
    service_timeout{9, 7, 5};
inline constexpr size_t private_data = 10;
}  // namespace mra

namespace dreq {   // table 112
inline constexpr Field local_comm_id{0, 7, 32}, remote_comm_id{4, 7, 32}, remote_qpn{8, 7, 24};
inline constexpr size_t private_data = 12;
}  // namespace dreq

namespace drep {   // table 113
inline constexpr Field local_comm_id{0, 7, 32}, remote_comm_id{4, 7, 32};
inline constexpr size_t private_data = 8;
}  // namespace drep

namespace sidr_req {   // table 119
inline constexpr Field request_id{0, 7, 32}, pkey{4, 7, 16}, service_id{8, 7, 64};
inline constexpr size_t private_data = 16;
}  // namespace sidr_req

namespace sidr_rep {   // table 120
inline constexpr Field request_id{0, 7, 32}, status{4, 7, 8}, info_length{5, 7, 8}, qpn{8, 7, 24},
    service_id{12, 7, 64}, qkey{20, 7, 32};
inline constexpr size_t info = 24, private_data = 96;
}  // namespace sidr_rep

// 4.096 µs × 2^t, a CM timeout's code in nanoseconds (12.7.x, as the transport's ACK timeout).
constexpr uint64_t timeout_ns(uint32_t t) noexcept { return 4096ull << (t > 31 ? 31 : t); }

// ---- the RDMA IP CM Service (Annex A11) -------------------------------------------------------------

// Port spaces of rdma_cm (enum rdma_port_space) and the service ID of a port in one.
inline constexpr uint16_t kPsTcp = 0x0106, kPsUdp = 0x0111, kPsIb = 0x013F, kPsIpoib = 0x0002;
// The Q_Key of rdma_cm's UD queue pairs (RDMA_UDP_QKEY), which a SIDR_REP for RDMA_PS_UDP carries.
inline constexpr uint32_t kRdmaUdpQkey = 0x01234567;
constexpr uint64_t service_id(uint16_t ps, uint16_t port) noexcept { return uint64_t(ps) << 16 | port; }
constexpr uint16_t port_space_of(uint64_t sid) noexcept { return uint16_t(sid >> 16); }
constexpr uint16_t port_of(uint64_t sid) noexcept { return uint16_t(sid); }
// Whether `sid` is one of the IP CM service's (0x0000000001xxxxxx).
constexpr bool is_ip_service(uint64_t sid) noexcept { return (sid & 0xFFFFFFFFFF000000ull) == 0x0000000001000000ull; }

// The header at the start of a REQ's or SIDR_REQ's private data (36 bytes): CM version 0, IP
// version in the high nibble, the active side's source port, both addresses. An IPv4 address
// is the last 4 bytes of its 16 (the rest zero, as the kernel sends it; it reads only those).
inline constexpr size_t kCmaHeader = 36;
inline constexpr uint8_t kCmaVersion = 0;
struct CmaHeader {
    uint8_t ip_version = 4;   // 4 or 6
    uint16_t src_port = 0;
    std::array<uint8_t, 16> src{};   // IPv6, or an IPv4 address in the last 4 bytes
    std::array<uint8_t, 16> dst{};
    static CmaHeader ipv4(uint32_t src_ip, uint16_t src_port, uint32_t dst_ip) noexcept;
    uint32_t src_ipv4() const noexcept;
    uint32_t dst_ipv4() const noexcept;
};
void write_cma_header(uint8_t* p, const CmaHeader& h) noexcept;
// False when the version is not 0 or the IP version not 4 or 6 (the kernel rejects those).
bool read_cma_header(const uint8_t* p, CmaHeader& out) noexcept;

}  // namespace vfab::cm
