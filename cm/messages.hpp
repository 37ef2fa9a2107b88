// The connection manager's messages as values (IB spec 12.6): what the CM state machine reads
// and writes, put into and taken out of 256-byte MADs through the fields of mad.hpp. A REQ's
// primary path carries the LIDs RoCE uses (0xFFFF, permissive) and no alternate path, as the
// kernel's rdma_cm sends over rxe (docs/cm.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <variant>

#include "mad.hpp"

namespace vfab::cm {

using Gid = std::array<uint8_t, 16>;

struct Req {
    uint32_t local_comm_id = 0;
    uint64_t service_id = 0;
    uint64_t local_ca_guid = 0;
    uint32_t local_qkey = 0;
    uint32_t local_qpn = 0;
    uint8_t responder_resources = 0;
    uint8_t initiator_depth = 0;
    uint8_t remote_cm_response_timeout = 20;
    uint8_t transport_type = 0;       // 0 RC, 1 UC, 3 XRC (with extended_transport_type 1)
    bool flow_control = false;
    uint32_t starting_psn = 0;
    uint8_t local_cm_response_timeout = 20;
    uint8_t retry_count = 7;
    uint16_t pkey = 0xFFFF;
    uint8_t path_mtu = 3;             // IB MTU code: 3 is 1024
    uint8_t rnr_retry_count = 7;
    uint8_t max_cm_retries = 15;
    bool srq = false;
    uint8_t extended_transport_type = 0;
    Gid local_gid{};                  // the sender's (::ffff:a.b.c.d)
    Gid remote_gid{};                 // the receiver's
    uint32_t flow_label = 0;
    uint8_t packet_rate = 0;
    uint8_t traffic_class = 0;
    uint8_t hop_limit = 64;
    uint8_t sl = 0;
    uint8_t local_ack_timeout = 19;
    std::array<uint8_t, kReqPrivate> private_data{};
};

struct Rep {
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    uint32_t local_qkey = 0;
    uint32_t local_qpn = 0;
    uint32_t starting_psn = 0;
    uint8_t responder_resources = 0;
    uint8_t initiator_depth = 0;
    uint8_t target_ack_delay = 15;
    uint8_t failover_accepted = 0;
    bool flow_control = false;
    uint8_t rnr_retry_count = 7;
    bool srq = false;
    uint64_t local_ca_guid = 0;
    std::array<uint8_t, kRepPrivate> private_data{};
};

struct Rtu {
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    std::array<uint8_t, kRtuPrivate> private_data{};
};

struct Rej {
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    uint8_t message_rejected = rej::rejected_req;
    uint8_t ari_length = 0;
    uint16_t reason = 0;              // RejReason
    std::array<uint8_t, kRejAri> ari{};
    std::array<uint8_t, kRejPrivate> private_data{};
};

struct Mra {
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    uint8_t message_mraed = 0;        // 0 REQ, 1 REP, 2 other
    uint8_t service_timeout = 0;
    std::array<uint8_t, kMraPrivate> private_data{};
};

struct Dreq {
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    uint32_t remote_qpn = 0;
    std::array<uint8_t, kDreqPrivate> private_data{};
};

struct Drep {
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    std::array<uint8_t, kDrepPrivate> private_data{};
};

struct SidrReq {
    uint32_t request_id = 0;
    uint16_t pkey = 0xFFFF;
    uint64_t service_id = 0;
    std::array<uint8_t, kSidrReqPrivate> private_data{};
};

struct SidrRep {
    uint32_t request_id = 0;
    uint8_t status = 0;               // SidrStatus
    uint32_t qpn = 0;
    uint64_t service_id = 0;
    uint32_t qkey = 0;
    std::array<uint8_t, kSidrRepPrivate> private_data{};
};

using Message = std::variant<Req, Rep, Rtu, Rej, Mra, Dreq, Drep, SidrReq, SidrRep>;

// `m` as a CM MAD (256 bytes at `mad`) of transaction `tid`, method Send.
void encode(const Message& m, uint64_t tid, uint8_t* mad) noexcept;

// What decode() says of a datagram.
enum class DecodeResult : uint8_t {
    ok,
    short_mad,          // fewer than 256 bytes
    not_cm,             // another base version, class or class version: not the CM's
    bad_method,         // a CM MAD whose method is not Send (ClassPortInfo is never needed)
    unknown_attribute,  // an attribute this CM does not take (LAP, APR over RoCE, reserved)
};
// The message in the `len` bytes at `mad` (its transaction ID in `tid`).
DecodeResult decode(const uint8_t* mad, size_t len, Message& out, uint64_t& tid) noexcept;

}  // namespace vfab::cm
