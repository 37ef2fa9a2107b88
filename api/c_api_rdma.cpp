// The C API of the RDMA transport (vfab/rdma.h) over its C++ API (vfab/rdma/rdma.hpp). The
// structures pass through as they are: their layouts are checked here against the C++ ones.
#include <cstddef>
#include <cstring>

#include "api/c_api_internal.hpp"
#include "vfab/rdma.h"
#include "vfab/rdma/rdma.hpp"

using namespace vfab;
using capi::fail;
using capi::null_arg;

struct vfab_rdma_port {
    vfab_device* dev = nullptr;
    std::unique_ptr<rdma::Port> port;
};

namespace {

#define SAME_FIELD(c, cpp, cf, cppf) static_assert(offsetof(c, cf) == offsetof(cpp, cppf), #c "." #cf)
static_assert(sizeof(vfab_rdma_wc) == sizeof(rdma::Wc));
SAME_FIELD(vfab_rdma_wc, rdma::Wc, status, status);
SAME_FIELD(vfab_rdma_wc, rdma::Wc, imm_data, imm_data);
SAME_FIELD(vfab_rdma_wc, rdma::Wc, wc_flags, wc_flags);
SAME_FIELD(vfab_rdma_wc, rdma::Wc, dlid_path_bits, dlid_path_bits);
static_assert(sizeof(vfab_rdma_send_wr) == sizeof(rdma::RdmaSendWr));
SAME_FIELD(vfab_rdma_send_wr, rdma::RdmaSendWr, opcode, opcode);
SAME_FIELD(vfab_rdma_send_wr, rdma::RdmaSendWr, remote_addr, remote_addr);
SAME_FIELD(vfab_rdma_send_wr, rdma::RdmaSendWr, swap, swap);
SAME_FIELD(vfab_rdma_send_wr, rdma::RdmaSendWr, compare_add_mask, compare_add_mask);
SAME_FIELD(vfab_rdma_send_wr, rdma::RdmaSendWr, swap_mask, swap_mask);
SAME_FIELD(vfab_rdma_send_wr, rdma::RdmaSendWr, ah, ah);
SAME_FIELD(vfab_rdma_send_wr, rdma::RdmaSendWr, remote_qkey, remote_qkey);
SAME_FIELD(vfab_rdma_send_wr, rdma::RdmaSendWr, remote_srqn, remote_srqn);
SAME_FIELD(vfab_rdma_send_wr, rdma::RdmaSendWr, mem_key, mem_key);
SAME_FIELD(vfab_rdma_send_wr, rdma::RdmaSendWr, reg, reg);
SAME_FIELD(vfab_rdma_send_wr, rdma::RdmaSendWr, bind, bind);
static_assert(sizeof(vfab_rdma_reg_mr_info) == sizeof(rdma::RegMrInfo));
SAME_FIELD(vfab_rdma_reg_mr_info, rdma::RegMrInfo, access, access);
SAME_FIELD(vfab_rdma_reg_mr_info, rdma::RegMrInfo, iova, iova);
static_assert(sizeof(vfab_rdma_mw_bind_info) == sizeof(rdma::MwBindInfo));
SAME_FIELD(vfab_rdma_mw_bind_info, rdma::MwBindInfo, length, length);
static_assert(VFAB_RDMA_WR_REG_MR == uint32_t(rdma::WrOpcode::reg_mr) && VFAB_RDMA_WC_REG_MR == uint32_t(rdma::RdmaWcOpcode::reg_mr));
static_assert(sizeof(vfab_rdma_ah_attr) == sizeof(rdma::AhAttr));
SAME_FIELD(vfab_rdma_ah_attr, rdma::AhAttr, flow_label, flow_label);
static_assert(sizeof(vfab_rdma_flow_rule) == sizeof(rdma::FlowRule));
SAME_FIELD(vfab_rdma_flow_rule, rdma::FlowRule, priority, priority);
SAME_FIELD(vfab_rdma_flow_rule, rdma::FlowRule, src_mac_mask, src_mac_mask);
SAME_FIELD(vfab_rdma_flow_rule, rdma::FlowRule, vlan_tag_mask, vlan_tag_mask);
SAME_FIELD(vfab_rdma_flow_rule, rdma::FlowRule, dst_ip_mask, dst_ip_mask);
SAME_FIELD(vfab_rdma_flow_rule, rdma::FlowRule, ip_proto_mask, ip_proto_mask);
SAME_FIELD(vfab_rdma_flow_rule, rdma::FlowRule, dst_port_mask, dst_port_mask);
static_assert(VFAB_RDMA_FLOW_SNIFFER == uint8_t(rdma::FlowRule::Kind::sniffer) &&
              VFAB_RDMA_QPT_RAW_PACKET == uint32_t(rdma::QpType::raw_packet));
SAME_FIELD(vfab_rdma_ah_attr, rdma::AhAttr, sgid_index, sgid_index);
static_assert(sizeof(vfab_rdma_qp_attr) == sizeof(rdma::QpAttr));
SAME_FIELD(vfab_rdma_qp_attr, rdma::QpAttr, ah_attr, ah_attr);
SAME_FIELD(vfab_rdma_qp_attr, rdma::QpAttr, pkey_index, pkey_index);
SAME_FIELD(vfab_rdma_qp_attr, rdma::QpAttr, rnr_retry, rnr_retry);
static_assert(sizeof(vfab_rdma_srq_attr) == sizeof(rdma::SrqAttr));
SAME_FIELD(vfab_rdma_srq_attr, rdma::SrqAttr, srq_limit, srq_limit);
static_assert(uint32_t(VFAB_RDMA_SRQ_MAX_WR) == rdma::srq_attr_max_wr && uint32_t(VFAB_RDMA_SRQ_LIMIT) == rdma::srq_attr_limit);
static_assert(sizeof(vfab_rdma_async_event) == sizeof(rdma::AsyncEvent));
SAME_FIELD(vfab_rdma_async_event, rdma::AsyncEvent, event_type, type);
SAME_FIELD(vfab_rdma_async_event, rdma::AsyncEvent, qp, qp);
SAME_FIELD(vfab_rdma_async_event, rdma::AsyncEvent, srq, srq);
SAME_FIELD(vfab_rdma_async_event, rdma::AsyncEvent, cq, cq);
static_assert(VFAB_RDMA_EVENT_SRQ_LIMIT_REACHED == uint32_t(rdma::AsyncEventType::srq_limit_reached) &&
              VFAB_RDMA_EVENT_QP_LAST_WQE_REACHED == uint32_t(rdma::AsyncEventType::qp_last_wqe_reached) &&
              VFAB_RDMA_EVENT_CQ_ERR == uint32_t(rdma::AsyncEventType::cq_error) &&
              VFAB_RDMA_EVENT_QP_FATAL == uint32_t(rdma::AsyncEventType::qp_fatal) &&
              VFAB_RDMA_EVENT_QP_REQ_ERR == uint32_t(rdma::AsyncEventType::qp_req_err) &&
              VFAB_RDMA_EVENT_QP_ACCESS_ERR == uint32_t(rdma::AsyncEventType::qp_access_err) &&
              VFAB_RDMA_EVENT_COMM_EST == uint32_t(rdma::AsyncEventType::comm_est) &&
              VFAB_RDMA_EVENT_PORT_ACTIVE == uint32_t(rdma::AsyncEventType::port_active) &&
              VFAB_RDMA_EVENT_PORT_ERR == uint32_t(rdma::AsyncEventType::port_error));
static_assert(sizeof(vfab_rdma_device_caps) == sizeof(rdma::DeviceCaps));
SAME_FIELD(vfab_rdma_device_caps, rdma::DeviceCaps, vfab_caps, vfab_caps);
SAME_FIELD(vfab_rdma_device_caps, rdma::DeviceCaps, max_path_mtu, max_path_mtu);
SAME_FIELD(vfab_rdma_device_attr, rdma::VerbsDeviceAttr, device_cap_flags, device_cap_flags);
SAME_FIELD(vfab_rdma_device_attr, rdma::VerbsDeviceAttr, atomic_cap, atomic_cap);
SAME_FIELD(vfab_rdma_device_attr, rdma::VerbsDeviceAttr, max_srq_sge, max_srq_sge);
SAME_FIELD(vfab_rdma_device_attr, rdma::VerbsDeviceAttr, phys_port_cnt, phys_port_cnt);
constexpr bool same_value(auto a, auto b) { return uint64_t(a) == uint64_t(b); }
static_assert(same_value(VFAB_RDMA_CAP_REG_MR_WR, rdma::vfab_cap_reg_mr_wr) &&
              same_value(VFAB_RDMA_CAP_ZERO_BASED, rdma::vfab_cap_zero_based) &&
              same_value(VFAB_RDMA_CAP_REMOTE_INVALIDATE, rdma::vfab_cap_remote_invalidate) &&
              same_value(VFAB_RDMA_CAP_SRQ, rdma::vfab_cap_srq) &&
              same_value(VFAB_RDMA_CAP_ASYNC_EVENTS, rdma::vfab_cap_async_events) &&
              same_value(VFAB_RDMA_CAP_MASKED_ATOMICS, rdma::vfab_cap_masked_atomics) &&
              same_value(VFAB_RDMA_CAP_BLOCK_SELF_MCAST_LB, rdma::vfab_cap_block_self_mcast_lb) &&
              same_value(VFAB_RDMA_CAP_P2P_MEMORY, rdma::vfab_cap_p2p_memory) &&
              same_value(VFAB_RDMA_CAP_DMA_BUF, rdma::vfab_cap_dma_buf) &&
              same_value(VFAB_RDMA_CAP_UC, rdma::vfab_cap_uc) &&
              same_value(VFAB_RDMA_QP_CREATE_BLOCK_SELF_MCAST_LB, rdma::qp_create_block_self_mcast_lb));
static_assert(same_value(VFAB_RDMA_WR_MASKED_ATOMIC_CMP_AND_SWP, rdma::WrOpcode::masked_atomic_cmp_and_swp) &&
              same_value(VFAB_RDMA_WR_MASKED_ATOMIC_FETCH_AND_ADD, rdma::WrOpcode::masked_atomic_fetch_and_add) &&
              same_value(VFAB_RDMA_WC_MASKED_COMP_SWAP, rdma::RdmaWcOpcode::masked_comp_swap) &&
              same_value(VFAB_RDMA_WC_MASKED_FETCH_ADD, rdma::RdmaWcOpcode::masked_fetch_add));
#undef SAME_FIELD

rdma::Cq* cq_of(vfab_rdma_cq* cq) { return reinterpret_cast<rdma::Cq*>(cq); }
rdma::Qp* qp_of(vfab_rdma_qp* qp) { return reinterpret_cast<rdma::Qp*>(qp); }
const rdma::Qp* qp_of(const vfab_rdma_qp* qp) { return reinterpret_cast<const rdma::Qp*>(qp); }
rdma::Srq* srq_of(vfab_rdma_srq* srq) { return reinterpret_cast<rdma::Srq*>(srq); }

template <class T>
T* null_result(int err) {
    errno = err;
    return nullptr;
}

}  // namespace

extern "C" {

vfab_rdma_port* vfab_rdma_port_create(vfab_device* dev, const vfab_rdma_port_config* c) {
    if (!dev || !c) return null_result<vfab_rdma_port>(null_arg("vfab_rdma_port_create", dev ? "config" : "dev"));
    rdma::PortConfig pc;
    pc.ipv4 = c->ipv4;
    if (c->rx_buffers) pc.rx_buffers = c->rx_buffers;
    if (c->tx_buffers) pc.tx_buffers = c->tx_buffers;
    if (c->max_qp) pc.max_qp = c->max_qp;
    if (c->arp_timeout_ms) pc.arp_timeout_ms = c->arp_timeout_ms;
    if (c->arp_attempts) pc.arp_attempts = c->arp_attempts;
    if (c->ttl) pc.ttl = c->ttl;
    auto port = rdma::Port::create(*dev->dev, pc);
    if (!port) return null_result<vfab_rdma_port>(fail(port.error()));
    auto h = std::make_unique<vfab_rdma_port>();
    h->dev = dev;
    h->port = std::move(*port);
    return h.release();
}

int vfab_rdma_port_destroy(vfab_rdma_port* port) {
    if (!port) return null_arg("vfab_rdma_port_destroy", "port");
    delete port;
    return 0;
}

int vfab_rdma_port_gid(const vfab_rdma_port* port, uint8_t gid[16]) {
    if (!port || !gid) return null_arg("vfab_rdma_port_gid", port ? "gid" : "port");
    std::memcpy(gid, port->port->gid().raw, 16);
    return 0;
}

uint32_t vfab_rdma_port_active_mtu(const vfab_rdma_port* port) { return port ? port->port->active_mtu() : 0; }

int vfab_rdma_progress(vfab_rdma_port* port) { return port ? port->port->progress() : -EINVAL; }

int vfab_rdma_start_progress_thread(vfab_rdma_port* port, int cpu) {
    if (!port) return null_arg("vfab_rdma_start_progress_thread", "port");
    if (auto r = port->port->start_progress_thread(cpu); !r) return fail(r.error());
    return 0;
}

void vfab_rdma_stop_progress_thread(vfab_rdma_port* port) {
    if (port) port->port->stop_progress_thread();
}

vfab_rdma_cq* vfab_rdma_create_cq(vfab_rdma_port* port, uint32_t cqe) {
    if (!port) return null_result<vfab_rdma_cq>(null_arg("vfab_rdma_create_cq", "port"));
    auto cq = port->port->create_cq(cqe);
    if (!cq) return null_result<vfab_rdma_cq>(fail(cq.error()));
    return reinterpret_cast<vfab_rdma_cq*>(*cq);
}

int vfab_rdma_destroy_cq(vfab_rdma_cq* cq) {
    if (!cq) return null_arg("vfab_rdma_destroy_cq", "cq");
    if (auto r = cq_of(cq)->destroy(); !r) return fail(r.error());
    return 0;
}

int vfab_rdma_poll_cq(vfab_rdma_cq* cq, int num_entries, vfab_rdma_wc* wc) {
    if (!cq || (!wc && num_entries > 0) || num_entries < 0) [[unlikely]]
        return -EINVAL;
    return cq_of(cq)->poll({reinterpret_cast<rdma::Wc*>(wc), size_t(num_entries)});
}

int vfab_rdma_req_notify_cq(vfab_rdma_cq* cq, int solicited_only) {
    if (!cq) return null_arg("vfab_rdma_req_notify_cq", "cq");
    if (auto r = cq_of(cq)->arm(solicited_only != 0); !r) return fail(r.error());
    return 0;
}

int vfab_rdma_cq_channel_fd(vfab_rdma_cq* cq) { return cq ? cq_of(cq)->channel_fd() : -null_arg("vfab_rdma_cq_channel_fd", "cq"); }

int64_t vfab_rdma_cq_take_events(vfab_rdma_cq* cq) {
    return cq ? int64_t(cq_of(cq)->take_events()) : -null_arg("vfab_rdma_cq_take_events", "cq");
}

uint64_t vfab_rdma_cq_overruns(const vfab_rdma_cq* cq) {
    return cq ? reinterpret_cast<const rdma::Cq*>(cq)->overruns() : 0;
}

vfab_rdma_qp* vfab_rdma_create_qp(vfab_rdma_port* port, const vfab_rdma_qp_init_attr* a) {
    if (!port || !a) return null_result<vfab_rdma_qp>(null_arg("vfab_rdma_create_qp", port ? "attr" : "port"));
    rdma::RdmaQpInitAttr ia;
    ia.qp_type = rdma::QpType(a->qp_type);
    ia.send_cq = cq_of(a->send_cq);
    ia.recv_cq = cq_of(a->recv_cq);
    if (a->max_send_wr) ia.cap.max_send_wr = a->max_send_wr;
    if (a->max_recv_wr) ia.cap.max_recv_wr = a->max_recv_wr;
    if (a->max_send_sge) ia.cap.max_send_sge = a->max_send_sge;
    if (a->max_recv_sge) ia.cap.max_recv_sge = a->max_recv_sge;
    if (a->max_inline_data) ia.cap.max_inline_data = a->max_inline_data;
    ia.sq_sig_all = a->sq_sig_all != 0;
    ia.srq = srq_of(a->srq);
    ia.create_flags = a->create_flags;
    ia.xrcd = reinterpret_cast<rdma::XrcDomain*>(a->xrcd);
    auto qp = port->port->create_qp(ia);
    if (!qp) return null_result<vfab_rdma_qp>(fail(qp.error()));
    return reinterpret_cast<vfab_rdma_qp*>(*qp);
}

int vfab_rdma_destroy_qp(vfab_rdma_qp* qp) {
    if (!qp) return null_arg("vfab_rdma_destroy_qp", "qp");
    if (auto r = qp_of(qp)->destroy(); !r) return fail(r.error());
    return 0;
}

int vfab_rdma_modify_qp(vfab_rdma_qp* qp, const vfab_rdma_qp_attr* attr, uint32_t mask) {
    if (!qp || !attr) return null_arg("vfab_rdma_modify_qp", qp ? "attr" : "qp");
    if (auto r = qp_of(qp)->modify(*reinterpret_cast<const rdma::QpAttr*>(attr), mask); !r) return fail(r.error());
    return 0;
}

int vfab_rdma_query_qp(const vfab_rdma_qp* qp, vfab_rdma_qp_attr* attr) {
    if (!qp || !attr) return null_arg("vfab_rdma_query_qp", qp ? "attr" : "qp");
    *reinterpret_cast<rdma::QpAttr*>(attr) = qp_of(qp)->query();
    return 0;
}

uint32_t vfab_rdma_qp_num(const vfab_rdma_qp* qp) { return qp ? qp_of(qp)->qp_num() : 0; }

int vfab_rdma_post_send(vfab_rdma_qp* qp, const vfab_rdma_send_wr* wrs, uint32_t n, uint32_t* posted) {
    if (!qp || (!wrs && n)) [[unlikely]]
        return EINVAL;
    const PostResult r = qp_of(qp)->post_send({reinterpret_cast<const rdma::RdmaSendWr*>(wrs), n});
    if (posted) *posted = r.posted;
    return r.error;
}

int vfab_rdma_post_recv(vfab_rdma_qp* qp, const vfab_recv_wr* wrs, uint32_t n, uint32_t* posted) {
    if (!qp || (!wrs && n)) [[unlikely]]
        return EINVAL;
    const PostResult r = qp_of(qp)->post_recv({reinterpret_cast<const RecvWr*>(wrs), n});
    if (posted) *posted = r.posted;
    return r.error;
}

int vfab_rdma_alloc_mr_blocks(vfab_rdma_port* port, uint64_t max_len, uint32_t max_blocks, uint32_t* key) {
    if (!port || !key) return null_arg("vfab_rdma_alloc_mr", port ? "key" : "port");
    auto k = port->port->pd().alloc_mr(max_len, max_blocks);
    if (!k) return fail(k.error());
    *key = *k;
    return 0;
}

int vfab_rdma_alloc_mr(vfab_rdma_port* port, uint64_t max_len, uint32_t* key) {
    return vfab_rdma_alloc_mr_blocks(port, max_len, dma::MrTable::kDefaultMaxBlocks, key);
}

int vfab_rdma_alloc_mw(vfab_rdma_port* port, int type, uint32_t* key) {
    if (!port || !key) return null_arg("vfab_rdma_alloc_mw", port ? "key" : "port");
    auto k = port->port->pd().alloc_mw(dma::WindowType(type));
    if (!k) return fail(k.error());
    *key = *k;
    return 0;
}

int vfab_rdma_dealloc(vfab_rdma_port* port, uint32_t key) {
    if (!port) return null_arg("vfab_rdma_dealloc", "port");
    if (auto r = port->port->pd().dealloc(key); !r) return fail(r.error());
    return 0;
}

int vfab_rdma_bind_mw(vfab_rdma_qp* qp, uint32_t mw_key, const vfab_rdma_mw_bind_info* info, uint64_t wr_id,
                      uint32_t send_flags, uint32_t* new_key) {
    if (!qp || !info) return null_arg("vfab_rdma_bind_mw", qp ? "info" : "qp");
    auto k = qp_of(qp)->bind_mw(mw_key, *reinterpret_cast<const rdma::MwBindInfo*>(info), wr_id, send_flags);
    if (!k) return fail(k.error());
    if (new_key) *new_key = *k;
    return 0;
}

int vfab_rdma_query_device(const vfab_rdma_port* port, vfab_rdma_device_caps* caps) {
    if (!port || !caps) return null_arg("vfab_rdma_query_device", port ? "caps" : "port");
    *reinterpret_cast<rdma::DeviceCaps*>(caps) = port->port->query_device();
    return 0;
}

vfab_rdma_srq* vfab_rdma_create_srq(vfab_rdma_port* port, const vfab_rdma_srq_attr* attr) {
    if (!port || !attr) return null_result<vfab_rdma_srq>(null_arg("vfab_rdma_create_srq", port ? "attr" : "port"));
    auto srq = port->port->create_srq(*reinterpret_cast<const rdma::SrqAttr*>(attr));
    if (!srq) return null_result<vfab_rdma_srq>(fail(srq.error()));
    return reinterpret_cast<vfab_rdma_srq*>(*srq);
}

int vfab_rdma_destroy_srq(vfab_rdma_srq* srq) {
    if (!srq) return null_arg("vfab_rdma_destroy_srq", "srq");
    if (auto r = srq_of(srq)->destroy(); !r) return fail(r.error());
    return 0;
}

int vfab_rdma_modify_srq(vfab_rdma_srq* srq, const vfab_rdma_srq_attr* attr, uint32_t mask) {
    if (!srq || !attr) return null_arg("vfab_rdma_modify_srq", srq ? "attr" : "srq");
    if (auto r = srq_of(srq)->modify(*reinterpret_cast<const rdma::SrqAttr*>(attr), mask); !r) return fail(r.error());
    return 0;
}

int vfab_rdma_query_srq(const vfab_rdma_srq* srq, vfab_rdma_srq_attr* attr) {
    if (!srq || !attr) return null_arg("vfab_rdma_query_srq", srq ? "attr" : "srq");
    *reinterpret_cast<rdma::SrqAttr*>(attr) = reinterpret_cast<const rdma::Srq*>(srq)->query();
    return 0;
}

int vfab_rdma_post_srq_recv(vfab_rdma_srq* srq, const vfab_recv_wr* wrs, uint32_t n, uint32_t* posted) {
    if (!srq || (!wrs && n)) [[unlikely]]
        return EINVAL;
    const PostResult r = srq_of(srq)->post_recv({reinterpret_cast<const RecvWr*>(wrs), n});
    if (posted) *posted = r.posted;
    return r.error;
}

vfab_rdma_xrcd* vfab_rdma_create_xrcd(vfab_rdma_port* port) {
    if (!port) return null_result<vfab_rdma_xrcd>(null_arg("vfab_rdma_create_xrcd", "port"));
    auto d = port->port->create_xrcd();
    if (!d) return null_result<vfab_rdma_xrcd>(fail(d.error()));
    return reinterpret_cast<vfab_rdma_xrcd*>(*d);
}

int vfab_rdma_destroy_xrcd(vfab_rdma_xrcd* xrcd) {
    if (!xrcd) return null_arg("vfab_rdma_destroy_xrcd", "xrcd");
    if (auto r = reinterpret_cast<rdma::XrcDomain*>(xrcd)->destroy(); !r) return fail(r.error());
    return 0;
}

vfab_rdma_srq* vfab_rdma_create_xrc_srq(vfab_rdma_port* port, const vfab_rdma_srq_attr* attr, vfab_rdma_xrcd* xrcd,
                                        vfab_rdma_cq* cq) {
    if (!port || !attr) return null_result<vfab_rdma_srq>(null_arg("vfab_rdma_create_xrc_srq", port ? "attr" : "port"));
    auto srq = port->port->create_xrc_srq(*reinterpret_cast<const rdma::SrqAttr*>(attr),
                                          reinterpret_cast<rdma::XrcDomain*>(xrcd), cq_of(cq));
    if (!srq) return null_result<vfab_rdma_srq>(fail(srq.error()));
    return reinterpret_cast<vfab_rdma_srq*>(*srq);
}

uint32_t vfab_rdma_srq_num(const vfab_rdma_srq* srq) {
    return srq ? reinterpret_cast<const rdma::Srq*>(srq)->srq_num() : 0;
}

int vfab_rdma_get_async_event(vfab_rdma_port* port, vfab_rdma_async_event* event) {
    if (!port || !event) return -null_arg("vfab_rdma_get_async_event", port ? "event" : "port");
    return port->port->get_async_event(*reinterpret_cast<rdma::AsyncEvent*>(event)) ? 1 : 0;
}

int vfab_rdma_async_fd(const vfab_rdma_port* port) {
    return port ? port->port->async_fd() : -null_arg("vfab_rdma_async_fd", "port");
}

int vfab_rdma_attach_mcast(vfab_rdma_qp* qp, const uint8_t gid[16], uint16_t lid) {
    if (!qp || !gid) return null_arg("vfab_rdma_attach_mcast", qp ? "gid" : "qp");
    rdma::Gid g;
    std::memcpy(g.raw, gid, 16);
    if (auto r = qp_of(qp)->attach_mcast(g, lid); !r) return fail(r.error());
    return 0;
}

int vfab_rdma_detach_mcast(vfab_rdma_qp* qp, const uint8_t gid[16], uint16_t lid) {
    if (!qp || !gid) return null_arg("vfab_rdma_detach_mcast", qp ? "gid" : "qp");
    rdma::Gid g;
    std::memcpy(g.raw, gid, 16);
    if (auto r = qp_of(qp)->detach_mcast(g, lid); !r) return fail(r.error());
    return 0;
}

vfab_rdma_ah* vfab_rdma_create_ah(vfab_rdma_port* port, const vfab_rdma_ah_attr* attr) {
    if (!port || !attr) return null_result<vfab_rdma_ah>(null_arg("vfab_rdma_create_ah", port ? "attr" : "port"));
    auto ah = port->port->create_ah(*reinterpret_cast<const rdma::AhAttr*>(attr));
    if (!ah) return null_result<vfab_rdma_ah>(fail(ah.error()));
    return reinterpret_cast<vfab_rdma_ah*>(*ah);
}

int vfab_rdma_ah_wait_resolved(vfab_rdma_ah* ah, uint32_t limit_ms) {
    if (!ah) return null_arg("vfab_rdma_ah_wait_resolved", "ah");
    if (auto r = reinterpret_cast<rdma::AddressHandle*>(ah)->wait_resolved(limit_ms); !r) return fail(r.error());
    return 0;
}

int vfab_rdma_destroy_ah(vfab_rdma_ah* ah) {
    if (!ah) return null_arg("vfab_rdma_destroy_ah", "ah");
    if (auto r = reinterpret_cast<rdma::AddressHandle*>(ah)->destroy(); !r) return fail(r.error());
    return 0;
}

vfab_rdma_flow* vfab_rdma_create_flow(vfab_rdma_port* port, vfab_rdma_qp* qp, const vfab_rdma_flow_rule* rule) {
    if (!port || !qp || !rule)
        return null_result<vfab_rdma_flow>(null_arg("vfab_rdma_create_flow", !port ? "port" : !qp ? "qp" : "rule"));
    auto f = port->port->create_flow(qp_of(qp), *reinterpret_cast<const rdma::FlowRule*>(rule));
    if (!f) return null_result<vfab_rdma_flow>(fail(f.error()));
    return reinterpret_cast<vfab_rdma_flow*>(*f);
}

int vfab_rdma_destroy_flow(vfab_rdma_flow* flow) {
    if (!flow) return null_arg("vfab_rdma_destroy_flow", "flow");
    if (auto r = reinterpret_cast<rdma::Flow*>(flow)->destroy(); !r) return fail(r.error());
    return 0;
}

}  // extern "C"
