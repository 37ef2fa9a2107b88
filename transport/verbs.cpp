// Names of the verbs vocabulary's values, and GIDs of IPv4 addresses.
#include "vfab/rdma/verbs.hpp"

#include <cstring>

namespace vfab::rdma {

const char* to_string(RdmaQpState s) noexcept {
    switch (s) {
    case RdmaQpState::reset: return "RESET";
    case RdmaQpState::init: return "INIT";
    case RdmaQpState::rtr: return "RTR";
    case RdmaQpState::rts: return "RTS";
    case RdmaQpState::sqd: return "SQD";
    case RdmaQpState::sqe: return "SQE";
    case RdmaQpState::error: return "ERR";
    }
    return "?";
}

const char* to_string(RdmaWcStatus s) noexcept {
    switch (s) {
    case RdmaWcStatus::success: return "success";
    case RdmaWcStatus::loc_len_err: return "local length error";
    case RdmaWcStatus::loc_qp_op_err: return "local QP operation error";
    case RdmaWcStatus::loc_eec_op_err: return "local EE context operation error";
    case RdmaWcStatus::loc_prot_err: return "local protection error";
    case RdmaWcStatus::wr_flush_err: return "Work Request Flushed Error";
    case RdmaWcStatus::mw_bind_err: return "memory management operation error";
    case RdmaWcStatus::bad_resp_err: return "bad response error";
    case RdmaWcStatus::loc_access_err: return "local access error";
    case RdmaWcStatus::rem_inv_req_err: return "remote invalid request error";
    case RdmaWcStatus::rem_access_err: return "remote access error";
    case RdmaWcStatus::rem_op_err: return "remote operation error";
    case RdmaWcStatus::retry_exc_err: return "transport retry counter exceeded";
    case RdmaWcStatus::rnr_retry_exc_err: return "RNR retry counter exceeded";
    case RdmaWcStatus::loc_rdd_viol_err: return "local RDD violation error";
    case RdmaWcStatus::rem_inv_rd_req_err: return "remote invalid RD request";
    case RdmaWcStatus::rem_abort_err: return "aborted error";
    case RdmaWcStatus::inv_eecn_err: return "invalid EE context number";
    case RdmaWcStatus::inv_eec_state_err: return "invalid EE context state";
    case RdmaWcStatus::fatal_err: return "fatal error";
    case RdmaWcStatus::resp_timeout_err: return "response timeout error";
    case RdmaWcStatus::general_err: return "general error";
    }
    return "unknown";
}

Gid Gid::from_ipv4(uint32_t ip) noexcept {
    Gid g;
    g.raw[10] = g.raw[11] = 0xFF;
    g.raw[12] = uint8_t(ip >> 24);
    g.raw[13] = uint8_t(ip >> 16);
    g.raw[14] = uint8_t(ip >> 8);
    g.raw[15] = uint8_t(ip);
    return g;
}

bool Gid::is_ipv4() const noexcept {
    static constexpr uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
    return std::memcmp(raw, prefix, 12) == 0;
}

uint32_t Gid::ipv4() const noexcept {
    return uint32_t(raw[12]) << 24 | uint32_t(raw[13]) << 16 | uint32_t(raw[14]) << 8 | raw[15];
}

}  // namespace vfab::rdma
