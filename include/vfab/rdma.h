/* vfab's RDMA transport from C (libvfab.so): RC and UD queue pairs speaking RoCEv2 over any
 * device vfab drives, over the C++ API of vfab/rdma/rdma.hpp (docs/rdma.md).
 *
 *   vfab_device *dev = vfab_open("0000:03:00.0", NULL);
 *   struct vfab_rdma_port_config pc = {.ipv4 = 0x0a4d0001};        // 10.77.0.1, vfab's own
 *   vfab_rdma_port *port = vfab_rdma_port_create(dev, &pc);
 *   vfab_rdma_cq *cq = vfab_rdma_create_cq(port, 256);
 *   struct vfab_rdma_qp_init_attr qa = {.qp_type = VFAB_RDMA_QPT_RC, .send_cq = cq, .recv_cq = cq};
 *   vfab_rdma_qp *qp = vfab_rdma_create_qp(port, &qa);
 *   vfab_mr *mr = vfab_reg_mr(dev, buf, len, VFAB_ACCESS_LOCAL_WRITE | VFAB_ACCESS_REMOTE_WRITE);
 *   vfab_rdma_modify_qp(qp, &attr, VFAB_RDMA_QP_STATE | ...);     // INIT, RTR, RTS as ibv_modify_qp
 *   vfab_rdma_post_send(qp, wrs, n, NULL);
 *   int got = vfab_rdma_poll_cq(cq, 16, wc);
 *
 * The conventions of vfab.h hold: int results are 0 or a positive errno value (counts and
 * descriptors: negative errno values), pointers NULL with errno set, vfab_last_error() says
 * why. Memory is registered with vfab_reg_mr on the port's device. Structures have the
 * layout of the C++ API's (and, for vfab_rdma_wc, of struct ibv_wc); values are libibverbs'.
 * The port owns its CQs, QPs and AHs; vfab_rdma_port_destroy() before vfab_close().
 */
#ifndef VFAB_RDMA_H
#define VFAB_RDMA_H

#include <stdint.h>

#include "vfab/vfab.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vfab_rdma_port vfab_rdma_port;
typedef struct vfab_rdma_cq vfab_rdma_cq;
typedef struct vfab_rdma_qp vfab_rdma_qp;
typedef struct vfab_rdma_ah vfab_rdma_ah;
typedef struct vfab_rdma_srq vfab_rdma_srq;
typedef struct vfab_rdma_xrcd vfab_rdma_xrcd;
typedef struct vfab_rdma_flow vfab_rdma_flow;

struct vfab_rdma_port_config {
    uint32_t ipv4;            /* vfab's own IPv4 address, host order */
    uint32_t rx_buffers;      /* 0: 256 */
    uint32_t tx_buffers;      /* 0: 256 */
    uint32_t max_qp;          /* 0: 256 */
    uint32_t arp_timeout_ms;  /* 0: 500 */
    uint32_t arp_attempts;    /* 0: 4 */
    uint8_t ttl;              /* 0: 64 */
};

enum vfab_rdma_qp_type {
    VFAB_RDMA_QPT_RC = 2, VFAB_RDMA_QPT_UC = 3, VFAB_RDMA_QPT_UD = 4, VFAB_RDMA_QPT_RAW_PACKET = 8, VFAB_RDMA_QPT_XRC_SEND = 9,
    VFAB_RDMA_QPT_XRC_RECV = 10
};
enum vfab_rdma_qp_state {
    VFAB_RDMA_QPS_RESET, VFAB_RDMA_QPS_INIT, VFAB_RDMA_QPS_RTR, VFAB_RDMA_QPS_RTS,
    VFAB_RDMA_QPS_SQD, VFAB_RDMA_QPS_SQE, VFAB_RDMA_QPS_ERR
};
enum vfab_rdma_wr_opcode {
    VFAB_RDMA_WR_RDMA_WRITE, VFAB_RDMA_WR_RDMA_WRITE_WITH_IMM, VFAB_RDMA_WR_SEND, VFAB_RDMA_WR_SEND_WITH_IMM,
    VFAB_RDMA_WR_RDMA_READ, VFAB_RDMA_WR_ATOMIC_CMP_AND_SWP, VFAB_RDMA_WR_ATOMIC_FETCH_AND_ADD,
    VFAB_RDMA_WR_LOCAL_INV, VFAB_RDMA_WR_BIND_MW, VFAB_RDMA_WR_SEND_WITH_INV,
    /* vfab extensions between vfab peers (docs/rdma-atomics.md) */
    VFAB_RDMA_WR_MASKED_ATOMIC_CMP_AND_SWP = 12, VFAB_RDMA_WR_MASKED_ATOMIC_FETCH_AND_ADD = 13,
    VFAB_RDMA_WR_REG_MR = 0x20   /* a vfab extension: fast registration (struct vfab_rdma_reg_mr_info) */
};
enum vfab_rdma_send_flags {
    VFAB_RDMA_SEND_FENCE = 1, VFAB_RDMA_SEND_SIGNALED = 2, VFAB_RDMA_SEND_SOLICITED = 4, VFAB_RDMA_SEND_INLINE = 8
};
enum vfab_rdma_wc_opcode {
    VFAB_RDMA_WC_SEND, VFAB_RDMA_WC_RDMA_WRITE, VFAB_RDMA_WC_RDMA_READ, VFAB_RDMA_WC_COMP_SWAP,
    VFAB_RDMA_WC_FETCH_ADD, VFAB_RDMA_WC_BIND_MW, VFAB_RDMA_WC_LOCAL_INV,
    VFAB_RDMA_WC_REG_MR = 0x20, VFAB_RDMA_WC_MASKED_COMP_SWAP, VFAB_RDMA_WC_MASKED_FETCH_ADD,
    VFAB_RDMA_WC_RECV = 128, VFAB_RDMA_WC_RECV_RDMA_WITH_IMM
};
enum vfab_rdma_mw_type { VFAB_RDMA_MW_TYPE_1 = 1, VFAB_RDMA_MW_TYPE_2 = 2 };
enum vfab_rdma_wc_flags { VFAB_RDMA_WC_GRH = 1, VFAB_RDMA_WC_WITH_IMM = 2, VFAB_RDMA_WC_WITH_INV = 8 };
enum vfab_rdma_qp_attr_mask {
    VFAB_RDMA_QP_STATE = 1 << 0, VFAB_RDMA_QP_CUR_STATE = 1 << 1, VFAB_RDMA_QP_ACCESS_FLAGS = 1 << 3,
    VFAB_RDMA_QP_PKEY_INDEX = 1 << 4, VFAB_RDMA_QP_PORT = 1 << 5, VFAB_RDMA_QP_QKEY = 1 << 6,
    VFAB_RDMA_QP_AV = 1 << 7, VFAB_RDMA_QP_PATH_MTU = 1 << 8, VFAB_RDMA_QP_TIMEOUT = 1 << 9,
    VFAB_RDMA_QP_RETRY_CNT = 1 << 10, VFAB_RDMA_QP_RNR_RETRY = 1 << 11, VFAB_RDMA_QP_RQ_PSN = 1 << 12,
    VFAB_RDMA_QP_MAX_QP_RD_ATOMIC = 1 << 13, VFAB_RDMA_QP_MIN_RNR_TIMER = 1 << 15, VFAB_RDMA_QP_SQ_PSN = 1 << 16,
    VFAB_RDMA_QP_MAX_DEST_RD_ATOMIC = 1 << 17, VFAB_RDMA_QP_DEST_QPN = 1 << 20
};

/* struct ibv_wc, field for field; status: enum vfab_wc_status's values (ibv_wc_status). */
struct vfab_rdma_wc {
    uint64_t wr_id;
    uint32_t status;
    uint32_t opcode;          /* enum vfab_rdma_wc_opcode */
    uint32_t vendor_err;
    uint32_t byte_len;
    uint32_t imm_data;        /* network byte order; the invalidated rkey with VFAB_RDMA_WC_WITH_INV */
    uint32_t qp_num;
    uint32_t src_qp;
    uint32_t wc_flags;        /* enum vfab_rdma_wc_flags */
    uint16_t pkey_index;
    uint16_t slid;
    uint8_t sl;
    uint8_t dlid_path_bits;
};

struct vfab_rdma_ah_attr {
    uint8_t dgid[16];         /* ::ffff:a.b.c.d */
    uint8_t hop_limit;
    uint8_t traffic_class;
    uint32_t flow_label;
    uint8_t sgid_index;
};

/* REG_MR: the blocks (CPU addresses, in order, each block_size bytes) the MR covers from
 * first_offset in the first, its length, rights (VFAB_ACCESS_*) and the address it answers to. */
struct vfab_rdma_reg_mr_info {
    const uint64_t *blocks;
    uint32_t num_blocks;
    uint32_t block_size;
    uint32_t first_offset;
    uint32_t access;
    uint64_t length;
    uint64_t iova;
};

/* BIND_MW: the window covers [addr, addr + length) of the MR `mr_key`, with `access`. */
struct vfab_rdma_mw_bind_info {
    uint32_t mr_key;
    uint32_t access;
    uint64_t addr;
    uint64_t length;
};

struct vfab_rdma_send_wr {
    uint64_t wr_id;
    const struct vfab_sge *sg_list;
    uint32_t num_sge;
    uint32_t opcode;          /* enum vfab_rdma_wr_opcode */
    uint32_t send_flags;      /* enum vfab_rdma_send_flags */
    uint32_t imm_data;        /* network byte order; the rkey to invalidate for SEND_WITH_INV */
    uint64_t remote_addr;
    uint32_t rkey;
    uint64_t compare_add;
    uint64_t swap;
    uint64_t compare_add_mask; /* masked atomics: compared bits, or the add's field boundaries */
    uint64_t swap_mask;        /* masked compare and swap: the bits swapped */
    vfab_rdma_ah *ah;         /* UD */
    uint32_t remote_qpn;
    uint32_t remote_qkey;
    uint32_t remote_srqn;     /* XRC: the target's XRC SRQ */
    /* REG_MR, BIND_MW: the MR or window's current key and its new key (vfab_rdma_next_key);
     * LOCAL_INV invalidates the key in imm_data. */
    uint32_t mem_key;
    uint32_t new_key;
    const struct vfab_rdma_reg_mr_info *reg;
    struct vfab_rdma_mw_bind_info bind;
};

/* ibv_inc_rkey: the key of the next binding of `key`. */
static inline uint32_t vfab_rdma_next_key(uint32_t key) { return (key & 0xFFFFFF00u) | ((key + 1) & 0xFFu); }

struct vfab_rdma_qp_attr {
    uint32_t qp_state;        /* enum vfab_rdma_qp_state */
    uint32_t path_mtu;        /* 1 (256) ... 5 (4096) */
    uint32_t qkey;
    uint32_t rq_psn;
    uint32_t sq_psn;
    uint32_t dest_qp_num;
    uint32_t qp_access_flags; /* VFAB_ACCESS_REMOTE_* */
    struct vfab_rdma_ah_attr ah_attr;
    uint16_t pkey_index;
    uint8_t port_num;
    uint8_t max_rd_atomic;
    uint8_t max_dest_rd_atomic;
    uint8_t min_rnr_timer;
    uint8_t timeout;
    uint8_t retry_cnt;
    uint8_t rnr_retry;
};

struct vfab_rdma_qp_init_attr {
    uint32_t qp_type;         /* enum vfab_rdma_qp_type */
    vfab_rdma_cq *send_cq;
    vfab_rdma_cq *recv_cq;
    uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data;   /* 0: defaults */
    int sq_sig_all;
    vfab_rdma_srq *srq;       /* receive from this shared receive queue (NULL: the QP's own) */
    uint32_t create_flags;    /* enum vfab_rdma_qp_create_flags */
    vfab_rdma_xrcd *xrcd;     /* VFAB_RDMA_QPT_XRC_RECV: its domain (no CQs or SRQ then) */
};
enum vfab_rdma_qp_create_flags { VFAB_RDMA_QP_CREATE_BLOCK_SELF_MCAST_LB = 1 << 1 };

/* struct ibv_srq_attr and enum ibv_srq_attr_mask. */
struct vfab_rdma_srq_attr {
    uint32_t max_wr;
    uint32_t max_sge;
    uint32_t srq_limit;
};
enum vfab_rdma_srq_attr_mask { VFAB_RDMA_SRQ_MAX_WR = 1, VFAB_RDMA_SRQ_LIMIT = 2 };

/* enum ibv_event_type's values, for the events the transport raises. */
enum vfab_rdma_event_type {
    VFAB_RDMA_EVENT_CQ_ERR = 0, VFAB_RDMA_EVENT_QP_FATAL = 1, VFAB_RDMA_EVENT_QP_REQ_ERR = 2,
    VFAB_RDMA_EVENT_QP_ACCESS_ERR = 3, VFAB_RDMA_EVENT_COMM_EST = 4, VFAB_RDMA_EVENT_PORT_ACTIVE = 9,
    VFAB_RDMA_EVENT_PORT_ERR = 10, VFAB_RDMA_EVENT_SRQ_LIMIT_REACHED = 15, VFAB_RDMA_EVENT_QP_LAST_WQE_REACHED = 16
};
struct vfab_rdma_async_event {
    uint32_t event_type;      /* enum vfab_rdma_event_type */
    vfab_rdma_qp *qp;         /* the QP_* events and COMM_EST */
    vfab_rdma_srq *srq;       /* SRQ_LIMIT_REACHED */
    vfab_rdma_cq *cq;         /* CQ_ERR; PORT_ACTIVE and PORT_ERR name no object */
};

vfab_rdma_port *vfab_rdma_port_create(vfab_device *dev, const struct vfab_rdma_port_config *config);
int vfab_rdma_port_destroy(vfab_rdma_port *port);
int vfab_rdma_port_gid(const vfab_rdma_port *port, uint8_t gid[16]);
uint32_t vfab_rdma_port_active_mtu(const vfab_rdma_port *port);   /* 1 (256) ... 5 (4096) */
int vfab_rdma_progress(vfab_rdma_port *port);                      /* work done */
int vfab_rdma_start_progress_thread(vfab_rdma_port *port, int cpu);
void vfab_rdma_stop_progress_thread(vfab_rdma_port *port);

vfab_rdma_cq *vfab_rdma_create_cq(vfab_rdma_port *port, uint32_t cqe);
int vfab_rdma_destroy_cq(vfab_rdma_cq *cq);
int vfab_rdma_poll_cq(vfab_rdma_cq *cq, int num_entries, struct vfab_rdma_wc *wc);
int vfab_rdma_req_notify_cq(vfab_rdma_cq *cq, int solicited_only);
int vfab_rdma_cq_channel_fd(vfab_rdma_cq *cq);
int64_t vfab_rdma_cq_take_events(vfab_rdma_cq *cq);
/* Completions lost because the CQ was full (size it for every WR that can complete on it). */
uint64_t vfab_rdma_cq_overruns(const vfab_rdma_cq *cq);

vfab_rdma_qp *vfab_rdma_create_qp(vfab_rdma_port *port, const struct vfab_rdma_qp_init_attr *attr);
int vfab_rdma_destroy_qp(vfab_rdma_qp *qp);
int vfab_rdma_modify_qp(vfab_rdma_qp *qp, const struct vfab_rdma_qp_attr *attr, uint32_t mask);
int vfab_rdma_query_qp(const vfab_rdma_qp *qp, struct vfab_rdma_qp_attr *attr);
uint32_t vfab_rdma_qp_num(const vfab_rdma_qp *qp);
/* `posted` (may be NULL): how many WRs from the front were queued. */
int vfab_rdma_post_send(vfab_rdma_qp *qp, const struct vfab_rdma_send_wr *wrs, uint32_t n, uint32_t *posted);
int vfab_rdma_post_recv(vfab_rdma_qp *qp, const struct vfab_recv_wr *wrs, uint32_t n, uint32_t *posted);

/* Memory management (docs/rdma-memory.md): an MR key with no memory, bound by a REG_MR work
 * request; a memory window (enum vfab_rdma_mw_type); freeing either. The key goes to *key.
 * vfab_rdma_alloc_mr allows 256 scattered blocks; _blocks sets the number (ibv_alloc_mr's
 * max_num_sg; blocks that follow each other count as one). */
int vfab_rdma_alloc_mr(vfab_rdma_port *port, uint64_t max_len, uint32_t *key);
int vfab_rdma_alloc_mr_blocks(vfab_rdma_port *port, uint64_t max_len, uint32_t max_blocks, uint32_t *key);
int vfab_rdma_alloc_mw(vfab_rdma_port *port, int type, uint32_t *key);
int vfab_rdma_dealloc(vfab_rdma_port *port, uint32_t key);
/* ibv_bind_mw for type 1 windows; the window's new key goes to *new_key. */
int vfab_rdma_bind_mw(vfab_rdma_qp *qp, uint32_t mw_key, const struct vfab_rdma_mw_bind_info *info, uint64_t wr_id,
                      uint32_t send_flags, uint32_t *new_key);

/* struct ibv_device_attr, field for field, and vfab's capability bits (vfab/rdma/device.hpp). */
struct vfab_rdma_device_attr {
    char fw_ver[64];
    uint64_t node_guid, sys_image_guid, max_mr_size, page_size_cap;
    uint32_t vendor_id, vendor_part_id, hw_ver;
    int max_qp, max_qp_wr;
    uint32_t device_cap_flags;     /* enum ibv_device_cap_flags' bits */
    int max_sge, max_sge_rd, max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom,
        max_qp_init_rd_atom, max_ee_init_rd_atom;
    uint32_t atomic_cap;           /* enum ibv_atomic_cap */
    int max_ee, max_rdd, max_mw, max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach,
        max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr, max_srq_sge;
    uint16_t max_pkeys;
    uint8_t local_ca_ack_delay, phys_port_cnt;
};
enum vfab_rdma_vfab_cap {
    VFAB_RDMA_CAP_REG_MR_WR = 1 << 0, VFAB_RDMA_CAP_ZERO_BASED = 1 << 1, VFAB_RDMA_CAP_REMOTE_INVALIDATE = 1 << 2,
    VFAB_RDMA_CAP_SRQ = 1 << 3, VFAB_RDMA_CAP_ASYNC_EVENTS = 1 << 4, VFAB_RDMA_CAP_MASKED_ATOMICS = 1 << 5,
    VFAB_RDMA_CAP_BLOCK_SELF_MCAST_LB = 1 << 6, VFAB_RDMA_CAP_P2P_MEMORY = 1 << 7, VFAB_RDMA_CAP_DMA_BUF = 1 << 8,
    VFAB_RDMA_CAP_UC = 1 << 9
};
struct vfab_rdma_device_caps {
    struct vfab_rdma_device_attr attr;
    uint64_t vfab_caps;            /* enum vfab_rdma_vfab_cap */
    uint32_t max_path_mtu;         /* 1 (256) ... 5 (4096) */
};
int vfab_rdma_query_device(const vfab_rdma_port *port, struct vfab_rdma_device_caps *caps);

/* Shared receive queues (docs/rdma-srq.md): WRs any QP created with it takes, oldest first.
 * modify: VFAB_RDMA_SRQ_MAX_WR grows it, VFAB_RDMA_SRQ_LIMIT arms the limit event. */
vfab_rdma_srq *vfab_rdma_create_srq(vfab_rdma_port *port, const struct vfab_rdma_srq_attr *attr);
int vfab_rdma_destroy_srq(vfab_rdma_srq *srq);
int vfab_rdma_modify_srq(vfab_rdma_srq *srq, const struct vfab_rdma_srq_attr *attr, uint32_t mask);
int vfab_rdma_query_srq(const vfab_rdma_srq *srq, struct vfab_rdma_srq_attr *attr);
int vfab_rdma_post_srq_recv(vfab_rdma_srq *srq, const struct vfab_recv_wr *wrs, uint32_t n, uint32_t *posted);

/* XRC (docs/rdma-xrc.md): a domain, an XRC SRQ in it completing on `cq`, the number senders
 * name (vfab_rdma_send_wr.remote_srqn). */
vfab_rdma_xrcd *vfab_rdma_create_xrcd(vfab_rdma_port *port);
int vfab_rdma_destroy_xrcd(vfab_rdma_xrcd *xrcd);
vfab_rdma_srq *vfab_rdma_create_xrc_srq(vfab_rdma_port *port, const struct vfab_rdma_srq_attr *attr,
                                        vfab_rdma_xrcd *xrcd, vfab_rdma_cq *cq);
uint32_t vfab_rdma_srq_num(const vfab_rdma_srq *srq);

/* Asynchronous events, raised by the progress of the application's calls: 1 and *event filled,
 * 0 when none waits. The descriptor is readable while one waits. */
int vfab_rdma_get_async_event(vfab_rdma_port *port, struct vfab_rdma_async_event *event);
int vfab_rdma_async_fd(const vfab_rdma_port *port);

/* UD multicast (docs/rdma-multicast.md): the group is an IPv4-mapped multicast GID. */
int vfab_rdma_attach_mcast(vfab_rdma_qp *qp, const uint8_t gid[16], uint16_t lid);
int vfab_rdma_detach_mcast(vfab_rdma_qp *qp, const uint8_t gid[16], uint16_t lid);

/* create_ah starts ARP for the destination; wait_resolved waits until its MAC is known
 * (AddressHandle::wait_resolved: EHOSTUNREACH when ARP gave up, ETIMEDOUT at limit_ms). A
 * destroyed handle is freed at a later create_ah: do not use it (nor destroy it) again. */
vfab_rdma_ah *vfab_rdma_create_ah(vfab_rdma_port *port, const struct vfab_rdma_ah_attr *attr);
int vfab_rdma_ah_wait_resolved(vfab_rdma_ah *ah, uint32_t limit_ms);
int vfab_rdma_destroy_ah(vfab_rdma_ah *ah);

/* Flows steering received frames to a raw-packet queue pair (docs/rdma-raw-packet.md): a field
 * takes part where its mask has bits; multi-byte values in host order. */
enum vfab_rdma_flow_kind {
    VFAB_RDMA_FLOW_NORMAL = 0, VFAB_RDMA_FLOW_ALL_DEFAULT = 1, VFAB_RDMA_FLOW_MC_DEFAULT = 2, VFAB_RDMA_FLOW_SNIFFER = 3
};
struct vfab_rdma_flow_rule {
    uint8_t kind;             /* enum vfab_rdma_flow_kind */
    uint16_t priority;        /* normal rules: the lowest number that matches wins */
    uint8_t dst_mac[6], dst_mac_mask[6], src_mac[6], src_mac_mask[6];
    uint16_t ether_type, ether_type_mask, vlan_tag, vlan_tag_mask;
    uint32_t src_ip, src_ip_mask, dst_ip, dst_ip_mask;
    uint8_t ip_proto, ip_proto_mask;
    uint16_t src_port, src_port_mask, dst_port, dst_port_mask;
};
vfab_rdma_flow *vfab_rdma_create_flow(vfab_rdma_port *port, vfab_rdma_qp *qp, const struct vfab_rdma_flow_rule *rule);
int vfab_rdma_destroy_flow(vfab_rdma_flow *flow);

#ifdef __cplusplus
}
#endif

#endif
