/* vfab's C API (libvfab.so), over the multiplexed C++ API (vfab/vfab.hpp).
 *
 *   vfab_device *dev = vfab_open("0000:03:00.0", NULL);
 *   if (!dev) { fprintf(stderr, "%s\n", vfab_last_error()); return 1; }
 *   vfab_cq *cq = vfab_create_cq(dev, 512);
 *   struct vfab_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq};
 *   vfab_qp *qp = vfab_create_qp(dev, &qa);
 *   vfab_mr *mr = vfab_reg_mr(dev, buf, len, VFAB_ACCESS_LOCAL_WRITE);
 *   struct vfab_mr_attr m; vfab_query_mr(mr, &m);
 *   struct vfab_sge sge = {(uintptr_t)buf, 2048, m.lkey};
 *   struct vfab_recv_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1};
 *   vfab_post_recv(qp, &wr, 1, NULL);
 *   struct vfab_completion wc[32];
 *   int n = vfab_poll_cq(cq, 32, wc);
 *
 * Conventions:
 *   - Functions returning int return 0 on success or a positive errno value (EINVAL, ENODEV,
 *     ...); those returning a count or a file descriptor return it, or a negative errno value;
 *     those returning a pointer return NULL and set errno. vfab_last_error() then says what
 *     went wrong and what to do, for the calling thread.
 *   - The fast path (vfab_post_send, vfab_post_recv, vfab_poll_cq) reports through its return
 *     value only: it never allocates and leaves vfab_last_error() alone.
 *   - Work requests, SGEs and completions have the layout of the C++ API's structs and pass
 *     through without copying.
 *   - The device keeps its CQs, QPs and MRs until vfab_close(): posting to a destroyed QP,
 *     polling or arming a destroyed CQ, destroying either twice, or using a deregistered MR
 *     returns ENODEV instead of touching freed memory; after vfab_close() every handle of the
 *     device is gone and must not be used.
 *   - Thread model: one thread at a time per QP/CQ; the other calls are thread-safe.
 */
#ifndef VFAB_VFAB_H
#define VFAB_VFAB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vfab_device vfab_device;
typedef struct vfab_cq vfab_cq;
typedef struct vfab_qp vfab_qp;
typedef struct vfab_mr vfab_mr;

/* ---- work requests and completions (layouts of vfab::Sge, SendWr, RecvWr, Completion) ---- */

struct vfab_sge {
    uint64_t addr;     /* virtual address inside the MR of lkey */
    uint32_t length;
    uint32_t lkey;
};

enum vfab_send_flags {
    VFAB_SEND_SIGNALED = 2,   /* report a completion for this WR */
    VFAB_SEND_IP_CSUM = 16,   /* the device fills the IPv4 and TCP/UDP checksums */
    VFAB_SEND_TIMESTAMP = 256, /* the device latches its clock when the frame leaves (IEEE 1588) */
};

struct vfab_send_wr {          /* a frame: the concatenation of its SGEs, no FCS */
    uint64_t wr_id;
    const struct vfab_sge *sg_list;
    uint32_t num_sge;
    uint32_t flags;            /* enum vfab_send_flags */
};

struct vfab_recv_wr {          /* a buffer for one frame */
    uint64_t wr_id;
    const struct vfab_sge *sg_list;
    uint32_t num_sge;
    uint32_t reserved;
};

enum vfab_wc_status {          /* values of enum ibv_wc_status */
    VFAB_WC_SUCCESS = 0,
    VFAB_WC_LOC_LEN_ERR = 1,
    VFAB_WC_LOC_QP_OP_ERR = 2,
    VFAB_WC_LOC_PROT_ERR = 4,
    VFAB_WC_WR_FLUSH_ERR = 5,
    VFAB_WC_GENERAL_ERR = 21,
};

enum vfab_wc_opcode { VFAB_WC_SEND = 0, VFAB_WC_RECV = 128 };

enum vfab_wc_flags { VFAB_WC_IP_CSUM_OK = 4, VFAB_WC_TIMESTAMPED = 256 };

struct vfab_completion {
    uint64_t wr_id;
    uint8_t status;            /* enum vfab_wc_status */
    uint8_t opcode;            /* enum vfab_wc_opcode */
    uint16_t flags;            /* enum vfab_wc_flags */
    uint32_t byte_len;         /* receive: the frame's length */
    uint32_t qp_num;
    uint32_t reserved;
};

/* ---- devices ---- */

enum vfab_iommu_backend { VFAB_IOMMU_AUTO = 0, VFAB_IOMMU_LEGACY = 1, VFAB_IOMMU_IOMMUFD = 2, VFAB_IOMMU_NOIOMMU = 3 };

struct vfab_open_opts {
    int iommu_backend;         /* enum vfab_iommu_backend; AUTO (0) by default */
    int promiscuous;           /* accept every unicast and multicast frame */
    const char *provider_dir;  /* NULL: VFAB_PROVIDER_DIR, else vfab/providers beside libvfab.so.1 */
    const char *provider;      /* NULL: the provider for the device's PCI ID */
    const char *sysfs_root;    /* NULL: /sys (tests point it at a fake tree) */
};

enum vfab_offloads {
    VFAB_OFFLOAD_TX_IP_CSUM = 1,
    VFAB_OFFLOAD_RX_IP_CSUM = 2,
    VFAB_OFFLOAD_TX_TIMESTAMP = 4,
    VFAB_OFFLOAD_RX_TIMESTAMP = 8,
};

struct vfab_device_attr {
    char provider[32];         /* "e1000e" */
    char name[64];             /* "Intel 82574L" */
    char pci_address[16];      /* "0000:03:00.0" */
    uint16_t vendor_id;
    uint16_t device_id;
    uint8_t mac[6];
    uint32_t mtu;              /* the largest frame is mtu + 14 bytes */
    uint32_t max_qp;
    uint32_t max_cq;
    uint32_t max_qp_wr;
    uint32_t max_send_sge;
    uint32_t max_recv_sge;
    uint32_t recv_buffer_size; /* every receive buffer must hold this many bytes */
    uint32_t offloads;         /* enum vfab_offloads */
    uint32_t interrupt_vectors;
    uint32_t rss_key_size;     /* receive-side scaling; all 0 when the device has none */
    uint32_t rss_table_size;
    uint32_t rss_hash_types;   /* enum vfab_rss_hash */
};

struct vfab_link_state {
    int up;
    uint32_t speed_mbps;
    int full_duplex;
};

struct vfab_device_stats {     /* counters since the device was opened */
    uint64_t rx_packets;
    uint64_t rx_bytes;
    uint64_t tx_packets;
    uint64_t tx_bytes;
    uint64_t rx_missed;        /* dropped: no receive buffer posted */
    uint64_t rx_crc_errors;
    uint64_t rx_errors;
    uint64_t rx_broadcast;
    uint64_t rx_multicast;
};

enum vfab_event_type {
    VFAB_EVENT_NONE = 0,
    VFAB_EVENT_LINK_UP = 1,
    VFAB_EVENT_LINK_DOWN = 2,
    VFAB_EVENT_DEVICE_FATAL = 3,    /* every QP is in the error state: close the device */
    VFAB_EVENT_DEVICE_REMOVAL = 4,  /* the kernel wants the device back: close it */
    VFAB_EVENT_DEVICE_RESET = 5,    /* its owner (a VF's PF) reset it: vfab_reset() once it
                                       is back, then create the QPs again */
};

struct vfab_event {
    int type;                  /* enum vfab_event_type */
};

/* Opens the PCI function (bound to vfio-pci) with the provider for its PCI ID; opts may be
 * NULL. NULL on failure: see vfab_last_error(). */
vfab_device *vfab_open(const char *pci_address, const struct vfab_open_opts *opts);
/* Quiesces the device and frees it with every CQ, QP and MR it has. NULL is allowed. */
int vfab_close(vfab_device *dev);
int vfab_query_device(vfab_device *dev, struct vfab_device_attr *attr);
int vfab_link(vfab_device *dev, struct vfab_link_state *link);
int vfab_stats(vfab_device *dev, struct vfab_device_stats *stats);
/* Asynchronous events: the fd becomes readable when one may be waiting. */
int vfab_event_fd(vfab_device *dev);
int vfab_next_event(vfab_device *dev, struct vfab_event *event);
/* Resets the device: QPs go to the error state; destroy and create them again. */
int vfab_reset(vfab_device *dev);

/* Receive-side scaling: a frame's Toeplitz hash picks table[hash % table_len], a queue index
 * (vfab_qp_attr.queue). table_len: a power of 2 up to rss_table_size; key: rss_key_size bytes
 * or NULL for the usual default; hash_types 0 turns RSS off. ENOTSUP without RSS. */
enum vfab_rss_hash {
    VFAB_RSS_IPV4 = 1, VFAB_RSS_TCP_IPV4 = 2, VFAB_RSS_UDP_IPV4 = 4,
    VFAB_RSS_IPV6 = 8, VFAB_RSS_TCP_IPV6 = 16, VFAB_RSS_UDP_IPV6 = 32
};
struct vfab_rss_config {
    const uint8_t *key;
    uint32_t key_len;
    const uint16_t *table;
    uint32_t table_len;
    uint32_t hash_types;       /* enum vfab_rss_hash */
};
int vfab_configure_rss(vfab_device *dev, const struct vfab_rss_config *cfg);

/* The multicast groups (6-byte Ethernet addresses) the device receives besides broadcast; a
 * hash filter may let other groups through. EOPNOTSUPP where the provider has no filter. */
int vfab_set_multicast(vfab_device *dev, const uint8_t (*groups)[6], uint32_t n);

/* IEEE 1588 hardware timestamps, where vfab_device_attr.offloads has VFAB_OFFLOAD_TX_TIMESTAMP /
 * VFAB_OFFLOAD_RX_TIMESTAMP (ENOTSUP elsewhere): the device's clock in nanoseconds, and the
 * times frames left (WRs with VFAB_SEND_TIMESTAMP) and arrived (completions with
 * VFAB_WC_TIMESTAMPED). Each latch holds one time: take it before the next. */
struct vfab_timestamp_config {
    int tx;                    /* latch the departure time of VFAB_SEND_TIMESTAMP WRs */
    int rx;                    /* latch the arrival time of PTPv2 frames (EtherType 0x88F7) */
    uint8_t rx_message;        /* which: transportSpecific << 4 | messageType (0: Sync) */
};
struct vfab_rx_timestamp {
    uint64_t ns;
    uint64_t source;           /* the 6 bytes before the sequence id */
    uint16_t sequence_id;      /* as the device reads it */
};
int vfab_enable_timestamps(vfab_device *dev, const struct vfab_timestamp_config *cfg);
int vfab_clock_ns(vfab_device *dev, uint64_t *ns);
/* The clock reads ns from now on (latched times too); until then its epoch is the device's. */
int vfab_set_clock_ns(vfab_device *dev, uint64_t ns);
/* 0 and the time, or EAGAIN when none is waiting. */
int vfab_take_tx_timestamp(vfab_device *dev, uint64_t *ns);
int vfab_take_rx_timestamp(vfab_device *dev, struct vfab_rx_timestamp *out);

/* ---- memory ---- */

enum vfab_access {             /* values of enum ibv_access_flags */
    VFAB_ACCESS_LOCAL_WRITE = 1,
    VFAB_ACCESS_REMOTE_WRITE = 2,
    VFAB_ACCESS_REMOTE_READ = 4,
    VFAB_ACCESS_REMOTE_ATOMIC = 8,
    VFAB_ACCESS_MW_BIND = 16,
    VFAB_ACCESS_ZERO_BASED = 32,
};

struct vfab_mr_attr {
    void *addr;
    uint64_t length;
    uint32_t lkey;             /* for the SGEs of local work requests */
    uint32_t rkey;
};

/* Registers user memory (any, e.g. malloc'ed: it is pinned and mapped through the IOMMU). */
vfab_mr *vfab_reg_mr(vfab_device *dev, void *addr, size_t length, uint32_t access);
int vfab_query_mr(const vfab_mr *mr, struct vfab_mr_attr *attr);
/* Another device's memory for peer-to-peer DMA (docs/rdma-p2p.md): `length` bytes from `offset`
 * of BAR `bar` of the PCI device `memory_device` ("0000:00:0b.0", bound to vfio-pci), which
 * vfab opens through VFIO and keeps open until the MR goes; vfab_query_mr's addr is where the
 * CPU reaches it. ENOTSUP (and vfab_last_error) where the device's IOMMU backend cannot map
 * device memory (iommufd without dma-bufs, no-IOMMU). */
vfab_mr *vfab_reg_device_mr(vfab_device *dev, const char *memory_device, uint32_t bar, uint64_t offset,
                            uint64_t length, uint32_t access);
int vfab_dereg_mr(vfab_mr *mr);
/* `length` bytes of DMA memory (hugepages when there are some, near the device), zeroed and
 * registered with `access`: the MR goes to *mr. The memory lives until vfab_close(). */
void *vfab_alloc_dma(vfab_device *dev, size_t length, uint32_t access, vfab_mr **mr);

/* ---- completion queues ---- */

/* `cqe` is a capacity hint. */
vfab_cq *vfab_create_cq(vfab_device *dev, uint32_t cqe);
/* EBUSY while a QP uses it. */
int vfab_destroy_cq(vfab_cq *cq);
/* Up to num_entries completions into wc: how many, or a negative errno (-ENODEV: destroyed). */
int vfab_poll_cq(vfab_cq *cq, int num_entries, struct vfab_completion *wc);
/* One notification on the channel fd for the next completion (ibv_req_notify_cq). */
int vfab_req_notify_cq(vfab_cq *cq);
/* An eventfd, readable after vfab_req_notify_cq() once a completion arrives. */
int vfab_cq_channel_fd(vfab_cq *cq);
/* Reads and clears the channel: the number of notifications, or a negative errno. */
int64_t vfab_cq_take_events(vfab_cq *cq);

/* ---- queue pairs ---- */

struct vfab_qp_caps {          /* 0 in a field: the default (256 WRs, 1 SGE) */
    uint32_t max_send_wr;
    uint32_t max_recv_wr;
    uint32_t max_send_sge;
    uint32_t max_recv_sge;
};

struct vfab_qp_init_attr {
    vfab_cq *send_cq;          /* required; may be the same as recv_cq */
    vfab_cq *recv_cq;
    struct vfab_qp_caps caps;
    int sq_sig_all;            /* every send completes, not only VFAB_SEND_SIGNALED ones */
};

/* vfab_create_qp_ex's attributes: vfab_qp_init_attr's, then the fields comp_mask names. A bit
 * this libvfab does not know is refused (EINVAL), so that a program built against a newer
 * header fails clearly on an older library instead of losing what it asked for. */
enum vfab_qp_init_attr_mask {
    VFAB_QP_INIT_ATTR_CREATE_FLAGS = 1,
};
enum vfab_qp_create_flags {
    /* The application keeps vfab_frame_headroom() bytes free before every WR's first SGE, in
     * the same MR (with VFAB_ACCESS_LOCAL_WRITE for receives): a provider with a header of
     * its own in front of each frame puts it there, one descriptor per one-SGE frame instead
     * of two (virtio-net; its queues then hold twice the WRs). A WR whose headroom lies
     * outside its MR completes with VFAB_WC_LOC_PROT_ERR. Ignored where the headroom is 0. */
    VFAB_QP_CREATE_HDR_IN_HEADROOM = 1,
};
struct vfab_qp_init_attr_ex {
    vfab_cq *send_cq;          /* as in vfab_qp_init_attr */
    vfab_cq *recv_cq;
    struct vfab_qp_caps caps;
    int sq_sig_all;
    uint32_t comp_mask;        /* enum vfab_qp_init_attr_mask: the fields below that are set */
    uint32_t create_flags;     /* enum vfab_qp_create_flags (VFAB_QP_INIT_ATTR_CREATE_FLAGS) */
};

enum vfab_qp_state { VFAB_QPS_READY = 0, VFAB_QPS_ERROR = 1, VFAB_QPS_DESTROYED = 2 };

struct vfab_qp_attr {
    int state;                 /* enum vfab_qp_state */
    uint32_t qp_num;
    struct vfab_qp_caps caps;  /* what the device gave (ring sizes rounded up) */
    uint32_t queue;            /* its index among the device's queue pairs (RSS tables name it) */
};

struct vfab_qp_stats {         /* what this queue pair sent and received */
    uint64_t tx_packets;
    uint64_t tx_bytes;
    uint64_t rx_packets;
    uint64_t rx_bytes;
};

vfab_qp *vfab_create_qp(vfab_device *dev, const struct vfab_qp_init_attr *attr);
/* vfab_create_qp with the attributes comp_mask names (EINVAL for a bit or flag it does not know). */
vfab_qp *vfab_create_qp_ex(vfab_device *dev, const struct vfab_qp_init_attr_ex *attr);
/* The bytes a queue pair created with VFAB_QP_CREATE_HDR_IN_HEADROOM needs free before each
 * WR's first SGE (virtio-net: 12); 0 where the provider puts no header there. Or a negative errno. */
int vfab_frame_headroom(vfab_device *dev);
int vfab_destroy_qp(vfab_qp *qp);
int vfab_query_qp(vfab_qp *qp, struct vfab_qp_attr *attr);
int vfab_query_qp_stats(vfab_qp *qp, struct vfab_qp_stats *stats);
/* Queue `num` WRs: 0, or the errno for the WR at index *posted (the first *posted were queued,
 * none after it was looked at): EINVAL malformed, ENOMEM queue full, EIO the QP is in the
 * error state, ENODEV it was destroyed. `posted` may be NULL. */
int vfab_post_send(vfab_qp *qp, const struct vfab_send_wr *wrs, uint32_t num, uint32_t *posted);
int vfab_post_recv(vfab_qp *qp, const struct vfab_recv_wr *wrs, uint32_t num, uint32_t *posted);

/* ---- errors ---- */

/* What the calling thread's last failed call (other than the fast path) went wrong with, and
 * what to do about it; "" when none failed. Valid until the thread's next vfab call. */
const char *vfab_last_error(void);
const char *vfab_wc_status_str(int status);
const char *vfab_event_type_str(int type);
/* "0.1.0" */
const char *vfab_version(void);

/* ---- diagnostics (vfab/log.hpp) ---- */

/* The libraries never write to stderr: what they have to say outside a returned error (a
 * slower fallback, no-IOMMU mode, a failed unmap during teardown) goes to the handler installed
 * here, and by default nowhere. */
enum vfab_log_level {          /* lower is more severe; values of vfab::LogLevel */
    VFAB_LOG_ERROR = 0,
    VFAB_LOG_WARNING = 1,
    VFAB_LOG_INFO = 2,
    VFAB_LOG_DEBUG = 3,
};
/* `level` is an enum vfab_log_level; `message` is one line without a newline, valid during the
 * call. Called on the thread of the vfab call that produced the message, before it returns;
 * it must not call into vfab except vfab_set_log_handler(). */
typedef void (*vfab_log_fn)(int level, const char *message, void *user);
/* Installs `fn` (NULL: none, the default) for messages at `max_level` or more severe, for the
 * whole process; thread-safe. */
void vfab_set_log_handler(vfab_log_fn fn, void *user, int max_level);
/* A handler writing "vfab: <level>: <message>" to stderr:
 * vfab_set_log_handler(vfab_log_to_stderr, NULL, VFAB_LOG_WARNING). */
void vfab_log_to_stderr(int level, const char *message, void *user);

#ifdef __cplusplus
}
#endif

#endif /* VFAB_VFAB_H */
