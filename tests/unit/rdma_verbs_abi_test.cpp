// vfab::rdma's vocabulary (include/vfab/rdma/verbs.hpp) against libibverbs' own: the system's
// <infiniband/verbs.h> (Debian's libibverbs-dev). Enum values, flag bits and struct ibv_wc's
// layout are compile-time checks; the status words are compared with ibv_wc_status_str().
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstddef>
#include <string>
#include <type_traits>

#include "vfab/dma/mr_table.hpp"
#include "vfab/rdma/device.hpp"
#include "vfab/rdma/verbs.hpp"

namespace vfab::rdma {
namespace {

template <typename E>
constexpr auto v(E e) {
    return static_cast<std::underlying_type_t<E>>(e);
}
// Flag bits of two unscoped enums, compared as numbers.
template <typename A, typename B>
constexpr bool same_bit(A a, B b) {
    return uint64_t(a) == uint64_t(b);
}

// ---- enum ibv_qp_type, ibv_qp_state, ibv_mtu ---------------------------------------------------

static_assert(v(QpType::rc) == IBV_QPT_RC);
static_assert(v(QpType::uc) == IBV_QPT_UC);
static_assert(v(QpType::ud) == IBV_QPT_UD);
static_assert(v(QpType::xrc_send) == IBV_QPT_XRC_SEND);
static_assert(v(QpType::xrc_recv) == IBV_QPT_XRC_RECV);

static_assert(v(RdmaQpState::reset) == IBV_QPS_RESET);
static_assert(v(RdmaQpState::init) == IBV_QPS_INIT);
static_assert(v(RdmaQpState::rtr) == IBV_QPS_RTR);
static_assert(v(RdmaQpState::rts) == IBV_QPS_RTS);
static_assert(v(RdmaQpState::sqd) == IBV_QPS_SQD);
static_assert(v(RdmaQpState::sqe) == IBV_QPS_SQE);
static_assert(v(RdmaQpState::error) == IBV_QPS_ERR);

static_assert(QpAttr{}.path_mtu == IBV_MTU_1024);   // the default, as ibv_rc_pingpong's

// ---- enum ibv_wr_opcode, ibv_send_flags --------------------------------------------------------

static_assert(v(WrOpcode::rdma_write) == IBV_WR_RDMA_WRITE);
static_assert(v(WrOpcode::rdma_write_with_imm) == IBV_WR_RDMA_WRITE_WITH_IMM);
static_assert(v(WrOpcode::send) == IBV_WR_SEND);
static_assert(v(WrOpcode::send_with_imm) == IBV_WR_SEND_WITH_IMM);
static_assert(v(WrOpcode::rdma_read) == IBV_WR_RDMA_READ);
static_assert(v(WrOpcode::atomic_cmp_and_swp) == IBV_WR_ATOMIC_CMP_AND_SWP);
static_assert(v(WrOpcode::atomic_fetch_and_add) == IBV_WR_ATOMIC_FETCH_AND_ADD);
static_assert(v(WrOpcode::local_inv) == IBV_WR_LOCAL_INV);
static_assert(v(WrOpcode::bind_mw) == IBV_WR_BIND_MW);
static_assert(v(WrOpcode::send_with_inv) == IBV_WR_SEND_WITH_INV);

static_assert(same_bit(wr_fence, IBV_SEND_FENCE));
static_assert(same_bit(wr_signaled, IBV_SEND_SIGNALED));
static_assert(same_bit(wr_solicited, IBV_SEND_SOLICITED));
static_assert(same_bit(wr_inline, IBV_SEND_INLINE));

// ---- enum ibv_wc_status, ibv_wc_opcode, ibv_wc_flags -------------------------------------------

static_assert(v(RdmaWcStatus::success) == IBV_WC_SUCCESS);
static_assert(v(RdmaWcStatus::loc_len_err) == IBV_WC_LOC_LEN_ERR);
static_assert(v(RdmaWcStatus::loc_qp_op_err) == IBV_WC_LOC_QP_OP_ERR);
static_assert(v(RdmaWcStatus::loc_eec_op_err) == IBV_WC_LOC_EEC_OP_ERR);
static_assert(v(RdmaWcStatus::loc_prot_err) == IBV_WC_LOC_PROT_ERR);
static_assert(v(RdmaWcStatus::wr_flush_err) == IBV_WC_WR_FLUSH_ERR);
static_assert(v(RdmaWcStatus::mw_bind_err) == IBV_WC_MW_BIND_ERR);
static_assert(v(RdmaWcStatus::bad_resp_err) == IBV_WC_BAD_RESP_ERR);
static_assert(v(RdmaWcStatus::loc_access_err) == IBV_WC_LOC_ACCESS_ERR);
static_assert(v(RdmaWcStatus::rem_inv_req_err) == IBV_WC_REM_INV_REQ_ERR);
static_assert(v(RdmaWcStatus::rem_access_err) == IBV_WC_REM_ACCESS_ERR);
static_assert(v(RdmaWcStatus::rem_op_err) == IBV_WC_REM_OP_ERR);
static_assert(v(RdmaWcStatus::retry_exc_err) == IBV_WC_RETRY_EXC_ERR);
static_assert(v(RdmaWcStatus::rnr_retry_exc_err) == IBV_WC_RNR_RETRY_EXC_ERR);
static_assert(v(RdmaWcStatus::loc_rdd_viol_err) == IBV_WC_LOC_RDD_VIOL_ERR);
static_assert(v(RdmaWcStatus::rem_inv_rd_req_err) == IBV_WC_REM_INV_RD_REQ_ERR);
static_assert(v(RdmaWcStatus::rem_abort_err) == IBV_WC_REM_ABORT_ERR);
static_assert(v(RdmaWcStatus::inv_eecn_err) == IBV_WC_INV_EECN_ERR);
static_assert(v(RdmaWcStatus::inv_eec_state_err) == IBV_WC_INV_EEC_STATE_ERR);
static_assert(v(RdmaWcStatus::fatal_err) == IBV_WC_FATAL_ERR);
static_assert(v(RdmaWcStatus::resp_timeout_err) == IBV_WC_RESP_TIMEOUT_ERR);
static_assert(v(RdmaWcStatus::general_err) == IBV_WC_GENERAL_ERR);

static_assert(v(RdmaWcOpcode::send) == IBV_WC_SEND);
static_assert(v(RdmaWcOpcode::rdma_write) == IBV_WC_RDMA_WRITE);
static_assert(v(RdmaWcOpcode::rdma_read) == IBV_WC_RDMA_READ);
static_assert(v(RdmaWcOpcode::comp_swap) == IBV_WC_COMP_SWAP);
static_assert(v(RdmaWcOpcode::fetch_add) == IBV_WC_FETCH_ADD);
static_assert(v(RdmaWcOpcode::bind_mw) == IBV_WC_BIND_MW);
static_assert(v(RdmaWcOpcode::local_inv) == IBV_WC_LOCAL_INV);
static_assert(v(RdmaWcOpcode::recv) == IBV_WC_RECV);
static_assert(v(RdmaWcOpcode::recv_rdma_with_imm) == IBV_WC_RECV_RDMA_WITH_IMM);

static_assert(same_bit(wc_grh, IBV_WC_GRH));
static_assert(same_bit(wc_with_imm, IBV_WC_WITH_IMM));
static_assert(same_bit(wc_with_inv, IBV_WC_WITH_INV));

// ---- enum ibv_qp_attr_mask ----------------------------------------------------------------------

static_assert(same_bit(attr_state, IBV_QP_STATE));
static_assert(same_bit(attr_cur_state, IBV_QP_CUR_STATE));
static_assert(same_bit(attr_access_flags, IBV_QP_ACCESS_FLAGS));
static_assert(same_bit(attr_pkey_index, IBV_QP_PKEY_INDEX));
static_assert(same_bit(attr_port, IBV_QP_PORT));
static_assert(same_bit(attr_qkey, IBV_QP_QKEY));
static_assert(same_bit(attr_av, IBV_QP_AV));
static_assert(same_bit(attr_path_mtu, IBV_QP_PATH_MTU));
static_assert(same_bit(attr_timeout, IBV_QP_TIMEOUT));
static_assert(same_bit(attr_retry_cnt, IBV_QP_RETRY_CNT));
static_assert(same_bit(attr_rnr_retry, IBV_QP_RNR_RETRY));
static_assert(same_bit(attr_rq_psn, IBV_QP_RQ_PSN));
static_assert(same_bit(attr_max_qp_rd_atomic, IBV_QP_MAX_QP_RD_ATOMIC));
static_assert(same_bit(attr_min_rnr_timer, IBV_QP_MIN_RNR_TIMER));
static_assert(same_bit(attr_sq_psn, IBV_QP_SQ_PSN));
static_assert(same_bit(attr_max_dest_rd_atomic, IBV_QP_MAX_DEST_RD_ATOMIC));
static_assert(same_bit(attr_dest_qpn, IBV_QP_DEST_QPN));

// ---- shared receive queues and asynchronous events ------------------------------------------------

static_assert(same_bit(srq_attr_max_wr, IBV_SRQ_MAX_WR));
static_assert(same_bit(srq_attr_limit, IBV_SRQ_LIMIT));
static_assert(sizeof(SrqAttr) == sizeof(ibv_srq_attr));
static_assert(offsetof(SrqAttr, max_wr) == offsetof(ibv_srq_attr, max_wr));
static_assert(offsetof(SrqAttr, max_sge) == offsetof(ibv_srq_attr, max_sge));
static_assert(offsetof(SrqAttr, srq_limit) == offsetof(ibv_srq_attr, srq_limit));
static_assert(v(AsyncEventType::srq_limit_reached) == IBV_EVENT_SRQ_LIMIT_REACHED);
static_assert(v(AsyncEventType::qp_last_wqe_reached) == IBV_EVENT_QP_LAST_WQE_REACHED);

// ---- struct ibv_device_attr and its flags (Port::query_device) -------------------------------------

static_assert(sizeof(VerbsDeviceAttr) == sizeof(ibv_device_attr));
static_assert(alignof(VerbsDeviceAttr) == alignof(ibv_device_attr));
#define VFAB_SAME_ATTR(f)                                                                     \
    static_assert(offsetof(VerbsDeviceAttr, f) == offsetof(ibv_device_attr, f), #f);           \
    static_assert(sizeof(VerbsDeviceAttr::f) == sizeof(ibv_device_attr::f), #f " size")
VFAB_SAME_ATTR(fw_ver);
VFAB_SAME_ATTR(node_guid);
VFAB_SAME_ATTR(sys_image_guid);
VFAB_SAME_ATTR(max_mr_size);
VFAB_SAME_ATTR(page_size_cap);
VFAB_SAME_ATTR(vendor_id);
VFAB_SAME_ATTR(vendor_part_id);
VFAB_SAME_ATTR(hw_ver);
VFAB_SAME_ATTR(max_qp);
VFAB_SAME_ATTR(max_qp_wr);
VFAB_SAME_ATTR(device_cap_flags);
VFAB_SAME_ATTR(max_sge);
VFAB_SAME_ATTR(max_sge_rd);
VFAB_SAME_ATTR(max_cq);
VFAB_SAME_ATTR(max_cqe);
VFAB_SAME_ATTR(max_mr);
VFAB_SAME_ATTR(max_pd);
VFAB_SAME_ATTR(max_qp_rd_atom);
VFAB_SAME_ATTR(max_ee_rd_atom);
VFAB_SAME_ATTR(max_res_rd_atom);
VFAB_SAME_ATTR(max_qp_init_rd_atom);
VFAB_SAME_ATTR(max_ee_init_rd_atom);
VFAB_SAME_ATTR(atomic_cap);
VFAB_SAME_ATTR(max_ee);
VFAB_SAME_ATTR(max_rdd);
VFAB_SAME_ATTR(max_mw);
VFAB_SAME_ATTR(max_raw_ipv6_qp);
VFAB_SAME_ATTR(max_raw_ethy_qp);
VFAB_SAME_ATTR(max_mcast_grp);
VFAB_SAME_ATTR(max_mcast_qp_attach);
VFAB_SAME_ATTR(max_total_mcast_qp_attach);
VFAB_SAME_ATTR(max_ah);
VFAB_SAME_ATTR(max_fmr);
VFAB_SAME_ATTR(max_map_per_fmr);
VFAB_SAME_ATTR(max_srq);
VFAB_SAME_ATTR(max_srq_wr);
VFAB_SAME_ATTR(max_srq_sge);
VFAB_SAME_ATTR(max_pkeys);
VFAB_SAME_ATTR(local_ca_ack_delay);
VFAB_SAME_ATTR(phys_port_cnt);
#undef VFAB_SAME_ATTR
static_assert(same_bit(device_resize_max_wr, IBV_DEVICE_RESIZE_MAX_WR));
static_assert(same_bit(device_curr_qp_state_mod, IBV_DEVICE_CURR_QP_STATE_MOD));
static_assert(same_bit(device_rc_rnr_nak_gen, IBV_DEVICE_RC_RNR_NAK_GEN));
static_assert(same_bit(device_srq_resize, IBV_DEVICE_SRQ_RESIZE));
static_assert(same_bit(device_n_notify_cq, IBV_DEVICE_N_NOTIFY_CQ));
static_assert(same_bit(device_mem_window, IBV_DEVICE_MEM_WINDOW));
static_assert(same_bit(device_xrc, IBV_DEVICE_XRC));
static_assert(same_bit(device_mem_mgt_extensions, IBV_DEVICE_MEM_MGT_EXTENSIONS));
static_assert(same_bit(device_mem_window_type_2b, IBV_DEVICE_MEM_WINDOW_TYPE_2B));
static_assert(v(AtomicCap::none) == IBV_ATOMIC_NONE);
static_assert(v(AtomicCap::hca) == IBV_ATOMIC_HCA);
static_assert(v(AtomicCap::glob) == IBV_ATOMIC_GLOB);

// ---- enum ibv_access_flags (dma::Access, which QpAttr::qp_access_flags and MRs use) --------------

static_assert(v(dma::Access::local_write) == IBV_ACCESS_LOCAL_WRITE);
static_assert(v(dma::Access::remote_write) == IBV_ACCESS_REMOTE_WRITE);
static_assert(v(dma::Access::remote_read) == IBV_ACCESS_REMOTE_READ);
static_assert(v(dma::Access::remote_atomic) == IBV_ACCESS_REMOTE_ATOMIC);
static_assert(v(dma::Access::mw_bind) == IBV_ACCESS_MW_BIND);
static_assert(v(dma::Access::zero_based) == IBV_ACCESS_ZERO_BASED);

// ---- struct ibv_wc, field for field ----------------------------------------------------------------

static_assert(sizeof(Wc) == sizeof(ibv_wc));
static_assert(alignof(Wc) == alignof(ibv_wc));
static_assert(std::is_standard_layout_v<Wc>);
static_assert(sizeof(RdmaWcStatus) == sizeof(ibv_wc_status));
static_assert(sizeof(RdmaWcOpcode) == sizeof(ibv_wc_opcode));
#define VFAB_SAME_FIELD(ours, theirs)                                        \
    static_assert(offsetof(Wc, ours) == offsetof(ibv_wc, theirs), #ours);     \
    static_assert(sizeof(Wc::ours) == sizeof(ibv_wc::theirs), #ours " size")
VFAB_SAME_FIELD(wr_id, wr_id);
VFAB_SAME_FIELD(status, status);
VFAB_SAME_FIELD(opcode, opcode);
VFAB_SAME_FIELD(vendor_err, vendor_err);
VFAB_SAME_FIELD(byte_len, byte_len);
VFAB_SAME_FIELD(imm_data, imm_data);
VFAB_SAME_FIELD(imm_data, invalidated_rkey);
VFAB_SAME_FIELD(qp_num, qp_num);
VFAB_SAME_FIELD(src_qp, src_qp);
VFAB_SAME_FIELD(wc_flags, wc_flags);
VFAB_SAME_FIELD(pkey_index, pkey_index);
VFAB_SAME_FIELD(slid, slid);
VFAB_SAME_FIELD(sl, sl);
VFAB_SAME_FIELD(dlid_path_bits, dlid_path_bits);
#undef VFAB_SAME_FIELD

// A GID is union ibv_gid's 16 bytes.
static_assert(sizeof(Gid) == sizeof(ibv_gid));

TEST(RdmaVerbsAbi, WcIsBitForBitAnIbvWc) {
    // What the static_asserts promise, exercised: a Wc read back as an ibv_wc.
    Wc wc;
    wc.wr_id = 0x0102030405060708ull;
    wc.status = RdmaWcStatus::rnr_retry_exc_err;
    wc.opcode = RdmaWcOpcode::recv_rdma_with_imm;
    wc.vendor_err = 0x11;
    wc.byte_len = 4096;
    wc.imm_data = 0xAABBCCDD;
    wc.qp_num = 0x101;
    wc.src_qp = 0x202;
    wc.wc_flags = wc_grh | wc_with_imm;
    wc.pkey_index = 3;
    wc.slid = 4;
    wc.sl = 5;
    wc.dlid_path_bits = 6;
    ibv_wc ib;
    std::memcpy(&ib, &wc, sizeof ib);
    EXPECT_EQ(ib.wr_id, wc.wr_id);
    EXPECT_EQ(ib.status, IBV_WC_RNR_RETRY_EXC_ERR);
    EXPECT_EQ(ib.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_EQ(ib.vendor_err, 0x11u);
    EXPECT_EQ(ib.byte_len, 4096u);
    EXPECT_EQ(ib.imm_data, 0xAABBCCDDu);
    EXPECT_EQ(ib.qp_num, 0x101u);
    EXPECT_EQ(ib.src_qp, 0x202u);
    EXPECT_EQ(ib.wc_flags, unsigned(IBV_WC_GRH | IBV_WC_WITH_IMM));
    EXPECT_EQ(ib.pkey_index, 3);
    EXPECT_EQ(ib.slid, 4);
    EXPECT_EQ(ib.sl, 5);
    EXPECT_EQ(ib.dlid_path_bits, 6);
}

TEST(RdmaVerbsAbi, StatusWordsAreLibibverbs) {
    for (uint32_t s = 0; s <= v(RdmaWcStatus::general_err); ++s)
        EXPECT_EQ(std::string(to_string(RdmaWcStatus(s))), std::string(ibv_wc_status_str(ibv_wc_status(s)))) << s;
}

TEST(RdmaVerbsAbi, GidOfAnIpv4AddressIsTheMappedOne) {
    // ::ffff:10.77.0.1, as rxe's GID table holds an IPv4 address (ibv_query_gid's raw bytes).
    const Gid g = Gid::from_ipv4(0x0a4d0001);
    ibv_gid ib;
    std::memcpy(&ib, &g, sizeof ib);
    EXPECT_EQ(ib.global.subnet_prefix, 0u);
    const uint8_t expect[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 1};
    EXPECT_EQ(std::memcmp(ib.raw, expect, 16), 0);
    EXPECT_TRUE(g.is_ipv4());
    EXPECT_EQ(g.ipv4(), 0x0a4d0001u);
    Gid link_local;
    link_local.raw[0] = 0xfe;
    link_local.raw[1] = 0x80;
    EXPECT_FALSE(link_local.is_ipv4());
}

}  // namespace
}  // namespace vfab::rdma
