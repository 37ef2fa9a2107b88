// The RDMA transport's vocabulary: work requests, work completions, QP attributes and address
// handles, with the values and (where the structure is the same) the layouts of libibverbs'
// (enum ibv_wr_opcode, ibv_wc_status, ibv_qp_attr_mask, struct ibv_wc ...), so that a verbs
// library over vfab maps onto it without translating. tests/unit/rdma_verbs_abi_test.cpp holds
// them against the system's <infiniband/verbs.h>. A name the raw API (vfab/types.hpp) has too
// carries Rdma here (RdmaSendWr, RdmaQpState, RdmaWcStatus, RdmaWcOpcode, RdmaQpInitAttr,
// RdmaQpCreateFlags, RdmaQpCaps): code that drives both never reads one for the other.
#pragma once

#include <cstdint>

#include "vfab/types.hpp"

namespace vfab::rdma {

using vfab::RecvWr;
using vfab::Sge;

// enum ibv_qp_type: RC, UC (SENDs and WRITEs, neither acknowledged nor retransmitted: a lost
// packet loses its message), UD, and XRC's two ends (docs/rdma-xrc.md): the sender (INI),
// connected to a receiver (TGT) whose messages land in the XRC SRQ each one names.
// raw_packet: Ethernet frames as they are, steered to it by flows (Port::create_flow, raw_packet.md).
enum class QpType : uint32_t { rc = 2, uc = 3, ud = 4, raw_packet = 8, xrc_send = 9, xrc_recv = 10 };

// enum ibv_qp_state.
enum class RdmaQpState : uint32_t { reset = 0, init = 1, rtr = 2, rts = 3, sqd = 4, sqe = 5, error = 6 };
// The state's short name: "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" ("?" for a
// value outside the enum). A static string: never freed, never null.
const char* to_string(RdmaQpState s) noexcept;

// enum ibv_wr_opcode.
enum class WrOpcode : uint32_t {
    rdma_write = 0,
    rdma_write_with_imm = 1,
    send = 2,
    send_with_imm = 3,
    rdma_read = 4,
    atomic_cmp_and_swp = 5,
    atomic_fetch_and_add = 6,
    local_inv = 7,
    bind_mw = 8,
    send_with_inv = 9,
    // vfab extensions between vfab peers (the kernel's IB_WR_MASKED_ATOMIC_* values; the wire
    // encoding is in docs/rdma-atomics.md): compare and swap only the bits of the masks, and an
    // add whose carries stop at the field boundaries compare_add_mask marks.
    masked_atomic_cmp_and_swp = 12,
    masked_atomic_fetch_and_add = 13,
    // A vfab extension (libibverbs has no user-space fast registration; the kernel's
    // IB_WR_REG_MR has this value): binds an MR from alloc_mr() to memory (RdmaSendWr::reg).
    reg_mr = 0x20,
};

// enum ibv_send_flags.
enum WrFlags : uint32_t {
    wr_fence = 1u << 0,      // wait for earlier READs and atomics of this QP to complete
    wr_signaled = 1u << 1,   // report a completion (always with sq_sig_all)
    wr_solicited = 1u << 2,  // the receiver's CQ notification fires for it
    wr_inline = 1u << 3,     // the data is copied at post time; lkeys are not looked at
};

// enum ibv_wc_status.
enum class RdmaWcStatus : uint32_t {
    success = 0,
    loc_len_err = 1,
    loc_qp_op_err = 2,
    loc_eec_op_err = 3,
    loc_prot_err = 4,
    wr_flush_err = 5,
    mw_bind_err = 6,
    bad_resp_err = 7,
    loc_access_err = 8,
    rem_inv_req_err = 9,
    rem_access_err = 10,
    rem_op_err = 11,
    retry_exc_err = 12,
    rnr_retry_exc_err = 13,
    loc_rdd_viol_err = 14,
    rem_inv_rd_req_err = 15,
    rem_abort_err = 16,
    inv_eecn_err = 17,
    inv_eec_state_err = 18,
    fatal_err = 19,
    resp_timeout_err = 20,
    general_err = 21,
};
const char* to_string(RdmaWcStatus s) noexcept;   // the words of ibv_wc_status_str

// enum ibv_wc_opcode.
enum class RdmaWcOpcode : uint32_t {
    send = 0,
    rdma_write = 1,
    rdma_read = 2,
    comp_swap = 3,
    fetch_add = 4,
    bind_mw = 5,
    local_inv = 6,
    reg_mr = 0x20,   // a vfab extension, as WrOpcode::reg_mr
    masked_comp_swap = 0x21,   // vfab extensions, as WrOpcode's masked atomics
    masked_fetch_add = 0x22,
    recv = 128,
    recv_rdma_with_imm = 129,
};

// enum ibv_wc_flags.
enum WcFlags : uint32_t {
    wc_grh = 1u << 0,        // a UD receive: the buffer starts with the 40-byte GRH
    wc_with_imm = 1u << 1,   // imm_data is valid
    wc_with_inv = 1u << 3,   // invalidated_rkey (in imm_data's place) is valid
};

// struct ibv_wc, field for field.
struct Wc {
    uint64_t wr_id = 0;
    RdmaWcStatus status = RdmaWcStatus::success;
    RdmaWcOpcode opcode = RdmaWcOpcode::send;
    uint32_t vendor_err = 0;    // the AETH syndrome of a NAK that ended the WR
    uint32_t byte_len = 0;
    uint32_t imm_data = 0;      // network byte order, as on the wire; or the invalidated rkey
    uint32_t qp_num = 0;
    uint32_t src_qp = 0;        // UD: the sender's QP number
    uint32_t wc_flags = 0;      // WcFlags
    uint16_t pkey_index = 0;
    uint16_t slid = 0;
    uint8_t sl = 0;             // a UD receive: kWcSlIpv4 (RoCE has no SL; see below)
    uint8_t dlid_path_bits = 0;
};
// RoCE carries no service level: a UD receive's `sl` says the datagram's network header type,
// as RoCE NICs report it (mlx5's CQE) and UCX reads it to find the IPv4 header in the GRH area.
inline constexpr uint8_t kWcSlIpv4 = 2;

// A global identifier: for RoCEv2 over IPv4, ::ffff:a.b.c.d (the IPv4-mapped IPv6 address).
struct Gid {
    uint8_t raw[16] = {};
    // ::ffff:a.b.c.d for the IPv4 address `ip_host_order` (10.77.0.1 is 0x0a4d0001).
    static Gid from_ipv4(uint32_t ip_host_order) noexcept;
    // Whether it is IPv4-mapped: ten zero bytes, then 0xff 0xff.
    bool is_ipv4() const noexcept;
    uint32_t ipv4() const noexcept;   // host order; meaningful when is_ipv4()
    bool operator==(const Gid&) const = default;   // all 16 bytes equal
};

// Where a UD datagram goes, or an RC QP's peer (struct ibv_ah_attr's global route).
struct AhAttr {
    Gid dgid;
    uint8_t hop_limit = 64;
    uint8_t traffic_class = 0;
    uint32_t flow_label = 0;
    uint8_t sgid_index = 0;
};

class AddressHandle;

// REG_MR: the memory a fast registration binds (IB spec 10.6.3.6: a list of blocks — pages of
// any size — and an offset into the first), the rights and the address it answers to.
struct RegMrInfo {
    const uint64_t* blocks = nullptr;   // the CPU addresses of the blocks, in order
    uint32_t num_blocks = 0;
    uint32_t block_size = 0;            // bytes; any size
    uint32_t first_offset = 0;          // where the MR starts in blocks[0] (< block_size)
    uint32_t access = 0;                // dma::Access bits (the values of ibv_access_flags)
    uint64_t length = 0;
    uint64_t iova = 0;                  // the address of its first byte (ignored when zero-based)
};

// BIND_MW (struct ibv_mw_bind_info, the MR named by its key): the window covers
// [addr, addr + length) of the MR (offsets when it is zero-based) with `access` (remote rights,
// ZERO_BASED). Length 0 unbinds a type 1 window.
struct MwBindInfo {
    uint32_t mr_key = 0;
    uint32_t access = 0;
    uint64_t addr = 0;
    uint64_t length = 0;
};

struct RdmaSendWr {
    uint64_t wr_id = 0;
    const Sge* sg_list = nullptr;
    uint32_t num_sge = 0;
    WrOpcode opcode = WrOpcode::send;
    uint32_t send_flags = 0;     // WrFlags
    uint32_t imm_data = 0;       // network byte order; the rkey to invalidate for send_with_inv
    // RDMA and atomics: the peer's memory.
    uint64_t remote_addr = 0;
    uint32_t rkey = 0;
    uint64_t compare_add = 0;    // CMP_AND_SWP: compare; FETCH_AND_ADD: the addend
    uint64_t swap = 0;
    // Masked atomics (struct ib_atomic_wr's masks): CMP_AND_SWP compares the bits of
    // compare_add_mask and swaps the bits of swap_mask; FETCH_AND_ADD's compare_add_mask has a
    // bit set at the most significant bit of each field, where carries stop.
    uint64_t compare_add_mask = 0;
    uint64_t swap_mask = 0;
    // UD: the destination.
    AddressHandle* ah = nullptr;
    uint32_t remote_qpn = 0;
    uint32_t remote_qkey = 0;
    uint32_t remote_srqn = 0;   // XRC (xrc_send): the XRC SRQ at the target the message goes to
    // Memory management. REG_MR and BIND_MW: the MR or window (its current key) and its new key
    // (the same index and the consumer key the application picks, as ibv_inc_rkey); they take
    // effect when posted, so that the WRs after them can use the new key. LOCAL_INV: the key
    // to invalidate is imm_data (ibv_send_wr's invalidate_rkey); fenced, it waits for the
    // QP's earlier READs and atomics to complete, unfenced it takes effect when posted.
    uint32_t mem_key = 0;
    uint32_t new_key = 0;
    const RegMrInfo* reg = nullptr;   // REG_MR; read during post_send only
    MwBindInfo bind = {};             // BIND_MW
};

// Wc::vendor_err of a memory-management WR that failed: kVendorErrMemory | the dma::MrStatus
// the MR table gave (the key's state, bounds, rights), or one of the block-list errors.
inline constexpr uint32_t kVendorErrMemory = 0x20000;
inline constexpr uint32_t kVendorErrBadBlockList = 0x20100;         // none, offset past a block, too short
inline constexpr uint32_t kVendorErrTooManyBlocks = 0x20101;  // more scattered blocks than alloc_mr's max_blocks

// ibv_inc_rkey: the key of the next binding of the MR or window `key`.
constexpr uint32_t next_key(uint32_t key) noexcept { return (key & 0xFFFFFF00u) | ((key + 1) & 0xFFu); }

// enum ibv_qp_attr_mask.
enum QpAttrMask : uint32_t {
    attr_state = 1u << 0,
    attr_cur_state = 1u << 1,
    attr_access_flags = 1u << 3,
    attr_pkey_index = 1u << 4,
    attr_port = 1u << 5,
    attr_qkey = 1u << 6,
    attr_av = 1u << 7,
    attr_path_mtu = 1u << 8,
    attr_timeout = 1u << 9,
    attr_retry_cnt = 1u << 10,
    attr_rnr_retry = 1u << 11,
    attr_rq_psn = 1u << 12,
    attr_max_qp_rd_atomic = 1u << 13,
    attr_min_rnr_timer = 1u << 15,
    attr_sq_psn = 1u << 16,
    attr_max_dest_rd_atomic = 1u << 17,
    attr_dest_qpn = 1u << 20,
};

// The subset of struct ibv_qp_attr the transport uses.
struct QpAttr {
    RdmaQpState qp_state = RdmaQpState::reset;
    uint32_t path_mtu = 3;           // enum ibv_mtu: 1 = 256 ... 5 = 4096 (3 = 1024)
    uint32_t qkey = 0;
    uint32_t rq_psn = 0;
    uint32_t sq_psn = 0;
    uint32_t dest_qp_num = 0;
    uint32_t qp_access_flags = 0;    // dma::Access remote rights the responder grants
    AhAttr ah_attr;
    uint16_t pkey_index = 0;
    uint8_t port_num = 1;
    uint8_t max_rd_atomic = 1;       // READs/atomics this QP has outstanding as requester
    uint8_t max_dest_rd_atomic = 1;  // ... and accepts as responder
    uint8_t min_rnr_timer = 12;      // code of table 45 sent in RNR NAKs (12 = 0.64 ms)
    uint8_t timeout = 14;            // 4.096 us * 2^timeout (14 = 67 ms); 0 = no timer
    uint8_t retry_cnt = 7;           // retries without progress (7 is seven: IB spec 9.7.6.1.3; rxe's is for ever)
    uint8_t rnr_retry = 7;           // 7 = retry for ever (IB spec)
};

// struct ibv_srq_attr: a shared receive queue's depth, SGEs per WR and limit (0: not armed).
struct SrqAttr {
    uint32_t max_wr = 256;
    uint32_t max_sge = 4;
    uint32_t srq_limit = 0;
};

// enum ibv_srq_attr_mask.
enum SrqAttrMask : uint32_t {
    srq_attr_max_wr = 1u << 0,
    srq_attr_limit = 1u << 1,
};

// enum ibv_event_type: the asynchronous events the transport raises.
// The values are enum ibv_event_type's; IB spec 11.6.3 says when each is raised.
enum class AsyncEventType : uint32_t {
    cq_error = 0,               // a CQ overran: completions were lost (AsyncEvent::cq); its QPs go to error
    qp_fatal = 1,               // a QP went to error for a reason no completion reports (its CQ overran)
    qp_req_err = 2,             // RC responder: an invalid request (NAKed); the QP went to error
    qp_access_err = 3,          // RC responder: a remote access violation (NAKed); the QP went to error
    comm_est = 4,               // the first request arrived at a QP still in RTR
    port_active = 9,            // the link came up
    port_error = 10,            // the link went down
    srq_limit_reached = 15,     // fewer WRs than the armed limit on an SRQ; the limit is disarmed
    qp_last_wqe_reached = 16,   // a QP of an SRQ went to the error state: it takes no more WRs
};

// enum ibv_qp_create_flags: the ones the transport has.
enum RdmaQpCreateFlags : uint32_t {
    qp_create_block_self_mcast_lb = 1u << 1,   // a UD QP does not receive its own multicast sends
};

struct RdmaQpCaps {
    uint32_t max_send_wr = 256;
    uint32_t max_recv_wr = 256;
    uint32_t max_send_sge = 4;
    uint32_t max_recv_sge = 4;
    uint32_t max_inline_data = 256;
};

}  // namespace vfab::rdma
