/* A program that reaches libibverbs only through dlopen("libibverbs.so.1") and dlsym, as UCX
 * and libfabric do, run on vfab's drop-in library by tests/lab/verbs_dropin_test.cpp:
 *   - two contexts of one device in one process (ibv_open_device twice shares the device);
 *   - two RC queue pairs of that one port connected to each other (loopback: nothing leaves
 *     the host), a SEND and an RDMA WRITE between them, data checked;
 *   - bad input gets the errno rdma-core gives: CQ of 0 entries, a QP too deep, RESET -> RTS,
 *     remote write without local write;
 *   - an XRC receive QP opened again by its number (ibv_open_qp) outlives its creator's handle;
 *   - asynchronous events on the context that owns the object: a WRITE with a bad rkey raises
 *     IBV_EVENT_QP_ACCESS_ERR for the responder's QP, a CQ of one entry given two completions
 *     IBV_EVENT_CQ_ERR for it and IBV_EVENT_QP_FATAL for its QP;
 *   - with PEER_DEVICE (another device of the process, on the same link), address handles:
 *     ibv_create_ah returns once ARP answered, as on a kernel RoCE device (the peer's port
 *     answers: the drop-in's progress thread runs it), and fails with EHOSTUNREACH, after ARP's
 *     attempts, for an address no one has.
 * Prints "loopback ok", "errors ok", "open_qp ok", "events ok" (and "ah ok"); exit 0 when all held.
 *   verbs_dlopen_probe DEVICE [PEER_DEVICE] */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <time.h>

#define SYM(name) static __typeof__(&name) p_##name;
SYM(ibv_get_device_list)
SYM(ibv_free_device_list)
SYM(ibv_get_device_name)
SYM(ibv_open_device)
SYM(ibv_close_device)
SYM(ibv_alloc_pd)
SYM(ibv_dealloc_pd)
SYM(ibv_reg_mr)
SYM(ibv_dereg_mr)
SYM(ibv_create_cq)
SYM(ibv_destroy_cq)
SYM(ibv_create_qp)
SYM(ibv_destroy_qp)
SYM(ibv_modify_qp)
SYM(ibv_query_gid)
SYM(ibv_get_async_event)
SYM(ibv_ack_async_event)
SYM(ibv_create_ah)
SYM(ibv_destroy_ah)

static int failures;
#define CHECK(cond, ...)                                  \
    do {                                                  \
        if (!(cond)) {                                    \
            fprintf(stderr, "FAILED %s: ", #cond);        \
            fprintf(stderr, __VA_ARGS__);                 \
            fputc('\n', stderr);                          \
            ++failures;                                   \
        }                                                 \
    } while (0)

static int load(void) {
    void *lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return -1;
    }
#define LOAD(name) if (!(p_##name = (__typeof__(p_##name))dlsym(lib, #name))) { fprintf(stderr, "dlsym %s\n", #name); return -1; }
    LOAD(ibv_get_device_list) LOAD(ibv_free_device_list) LOAD(ibv_get_device_name) LOAD(ibv_open_device)
    LOAD(ibv_close_device) LOAD(ibv_alloc_pd) LOAD(ibv_dealloc_pd) LOAD(ibv_reg_mr) LOAD(ibv_dereg_mr)
    LOAD(ibv_create_cq) LOAD(ibv_destroy_cq) LOAD(ibv_create_qp) LOAD(ibv_destroy_qp) LOAD(ibv_modify_qp)
    LOAD(ibv_query_gid) LOAD(ibv_get_async_event) LOAD(ibv_ack_async_event) LOAD(ibv_create_ah) LOAD(ibv_destroy_ah)
    return 0;
}

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq, uint32_t depth) {
    struct ibv_qp_init_attr a = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                 .cap = {.max_send_wr = depth, .max_recv_wr = depth, .max_send_sge = 1, .max_recv_sge = 1}};
    return p_ibv_create_qp(pd, &a);
}

static int connect_qp(struct ibv_qp *qp, uint32_t dest, union ibv_gid gid) {
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                            .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE};
    if (p_ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return -1;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = dest;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = gid;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = 1;
    if (p_ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        return -1;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    return p_ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                       IBV_QP_MAX_QP_RD_ATOMIC);
}

/* Polls `cq` until `n` completions or 10 s; how many came, all checked for success. */
static int wait_cq(struct ibv_cq *cq, int n) {
    struct ibv_wc wc;
    int got = 0;
    time_t end = time(NULL) + 10;
    while (got < n && time(NULL) < end) {
        int k = ibv_poll_cq(cq, 1, &wc);   /* inline: through the context's ops */
        if (k < 0) return -1;
        if (k == 1) {
            CHECK(wc.status == IBV_WC_SUCCESS, "wr %llu: status %d", (unsigned long long)wc.wr_id, wc.status);
            ++got;
        }
    }
    return got;
}

/* The next completion of `cq` within 10 s, whatever its status; -1 when none came. */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc) {
    for (time_t end = time(NULL) + 10; time(NULL) < end;)
        if (ibv_poll_cq(cq, 1, wc) == 1) return 0;
    return -1;
}

/* The context's next asynchronous event within `ms` (its async_fd polled first, as UCX does);
 * -1 when none came. */
static int next_event(struct ibv_context *c, struct ibv_async_event *e, int ms) {
    struct pollfd p = {.fd = c->async_fd, .events = POLLIN};
    if (poll(&p, 1, ms) != 1 || p_ibv_get_async_event(c, e)) return -1;
    p_ibv_ack_async_event(e);
    return 0;
}

/* A WRITE with a bad rkey from q1 (context c1) to q2 (context c2); then a CQ of one entry on
 * c2 given two receive completions. Each event reaches the context that owns its object. */
static void check_events(struct ibv_context *c1, struct ibv_context *c2, struct ibv_pd *pd1, struct ibv_pd *pd2,
                         struct ibv_cq *cq1, struct ibv_qp *q1, struct ibv_qp *q2, struct ibv_mr *mr1, union ibv_gid gid) {
    struct ibv_async_event e;
    struct ibv_wc wc;
    static char m[256];
    struct ibv_sge ss = {(uintptr_t)mr1->addr, 64, mr1->lkey};
    struct ibv_send_wr swr = {.wr_id = 7, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                              .send_flags = IBV_SEND_SIGNALED}, *bad_s;
    swr.wr.rdma.remote_addr = (uintptr_t)m;
    swr.wr.rdma.rkey = 0xdead00;
    CHECK(ibv_post_send(q1, &swr, &bad_s) == 0, "post_send bad rkey");
    CHECK(poll_one(cq1, &wc) == 0 && wc.status == IBV_WC_REM_ACCESS_ERR, "bad rkey: status %d", wc.status);
    CHECK(next_event(c2, &e, 5000) == 0 && e.event_type == IBV_EVENT_QP_ACCESS_ERR && e.element.qp == q2,
          "QP_ACCESS_ERR for the responder's QP: event %d", e.event_type);
    CHECK(next_event(c1, &e, 200) != 0, "the requester's context hears nothing: event %d", e.event_type);

    struct ibv_cq *small = p_ibv_create_cq(c2, 1, NULL, NULL, 0);
    struct ibv_qp *tx = make_qp(pd1, cq1, 4), *rx = small ? make_qp(pd2, small, 4) : NULL;
    CHECK(tx && rx, "QPs for the overrun: %s", strerror(errno));
    if (!tx || !rx) return;
    CHECK(connect_qp(tx, rx->qp_num, gid) == 0 && connect_qp(rx, tx->qp_num, gid) == 0, "connect: %s", strerror(errno));
    struct ibv_mr *mr2 = p_ibv_reg_mr(pd2, m, sizeof m, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_sge rs = {(uintptr_t)m, sizeof m, mr2 ? mr2->lkey : 0};
    struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *bad_r;
    swr.opcode = IBV_WR_SEND;
    for (int i = 0; i < 2; ++i) {
        CHECK(ibv_post_recv(rx, &rwr, &bad_r) == 0, "post_recv");
        CHECK(ibv_post_send(tx, &swr, &bad_s) == 0, "post_send");
    }
    CHECK(next_event(c2, &e, 5000) == 0 && e.event_type == IBV_EVENT_CQ_ERR && e.element.cq == small,
          "CQ_ERR for the small CQ: event %d", e.event_type);
    CHECK(next_event(c2, &e, 5000) == 0 && e.event_type == IBV_EVENT_QP_FATAL && e.element.qp == rx,
          "QP_FATAL for its QP: event %d", e.event_type);
    p_ibv_destroy_qp(tx);
    p_ibv_destroy_qp(rx);
    if (mr2) p_ibv_dereg_mr(mr2);
    p_ibv_destroy_cq(small);
}

/* Address handles to the peer device's address (its port, open in this process, answers ARP)
 * and to one no one has (the peer's with 99 as its last byte). */
static void check_ah(struct ibv_pd *pd, struct ibv_context *peer) {
    union ibv_gid g;
    CHECK(p_ibv_query_gid(peer, 1, 0, &g) == 0, "peer's query_gid");
    struct ibv_ah_attr a = {.is_global = 1, .port_num = 1};
    a.grh.dgid = g;
    a.grh.hop_limit = 64;
    struct ibv_ah *ah = p_ibv_create_ah(pd, &a);
    CHECK(ah != NULL, "create_ah to the peer: %s", strerror(errno));
    if (ah) CHECK(p_ibv_destroy_ah(ah) == 0, "destroy_ah");
    a.grh.dgid.raw[15] = 99;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    errno = 0;
    ah = p_ibv_create_ah(pd, &a);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    CHECK(!ah && errno == EHOSTUNREACH, "create_ah to no one: %p, errno %d", (void *)ah, errno);
    CHECK(waited > 1.0 && waited < 6.0, "it waited for ARP's attempts (4 x 500 ms): %.2f s", waited);
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: %s DEVICE [PEER_DEVICE]\n", argv[0]);
        return 2;
    }
    if (load()) return 1;
    int n = 0;
    struct ibv_device **list = p_ibv_get_device_list(&n), *dev = NULL, *peer_dev = NULL;
    for (int i = 0; list && i < n; ++i) {
        if (!strcmp(p_ibv_get_device_name(list[i]), argv[1])) dev = list[i];
        if (argc == 3 && !strcmp(p_ibv_get_device_name(list[i]), argv[2])) peer_dev = list[i];
    }
    if (argc == 3 && !peer_dev) {
        fprintf(stderr, "no device %s\n", argv[2]);
        return 1;
    }
    if (!dev) {
        fprintf(stderr, "no device %s\n", argv[1]);
        return 1;
    }
    struct ibv_context *c1 = p_ibv_open_device(dev), *c2 = p_ibv_open_device(dev);
    if (!c1 || !c2) {
        perror("ibv_open_device");
        return 1;
    }
    struct ibv_pd *pd1 = p_ibv_alloc_pd(c1), *pd2 = p_ibv_alloc_pd(c2);
    struct ibv_cq *cq1 = p_ibv_create_cq(c1, 64, NULL, NULL, 0), *cq2 = p_ibv_create_cq(c2, 64, NULL, NULL, 0);
    static char m1[8192], m2[8192];
    struct ibv_mr *mr1 = p_ibv_reg_mr(pd1, m1, sizeof m1, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    struct ibv_mr *mr2 = p_ibv_reg_mr(pd2, m2, sizeof m2, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    struct ibv_qp *q1 = make_qp(pd1, cq1, 16), *q2 = make_qp(pd2, cq2, 16);
    if (!pd1 || !pd2 || !cq1 || !cq2 || !mr1 || !mr2 || !q1 || !q2) {
        perror("setting up");
        return 1;
    }
    union ibv_gid gid;
    CHECK(p_ibv_query_gid(c1, 1, 0, &gid) == 0, "query_gid");
    CHECK(connect_qp(q1, q2->qp_num, gid) == 0 && connect_qp(q2, q1->qp_num, gid) == 0, "connect: %s", strerror(errno));

    for (int i = 0; i < 4096; ++i) m1[i] = (char)(i * 7 + 3);
    struct ibv_sge rs = {(uintptr_t)m2, 4096, mr2->lkey}, ss = {(uintptr_t)m1, 4096, mr1->lkey};
    struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *bad_r;
    struct ibv_send_wr swr = {.wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *bad_s;
    CHECK(ibv_post_recv(q2, &rwr, &bad_r) == 0, "post_recv");
    CHECK(ibv_post_send(q1, &swr, &bad_s) == 0, "post_send");
    CHECK(wait_cq(cq2, 1) == 1 && wait_cq(cq1, 1) == 1, "SEND completions");
    CHECK(!memcmp(m1, m2, 4096), "SEND data");
    swr.opcode = IBV_WR_RDMA_WRITE;
    swr.wr.rdma.remote_addr = (uintptr_t)(m2 + 4096);
    swr.wr.rdma.rkey = mr2->rkey;
    CHECK(ibv_post_send(q1, &swr, &bad_s) == 0, "post_send WRITE");
    CHECK(wait_cq(cq1, 1) == 1, "WRITE completion");
    CHECK(!memcmp(m1, m2 + 4096, 4096), "WRITE data");
    if (!failures) printf("loopback ok\n");

    /* Bad input: rdma-core's errnos. */
    int before = failures;
    errno = 0;
    CHECK(!p_ibv_create_cq(c1, 0, NULL, NULL, 0) && errno == EINVAL, "cqe 0: errno %d", errno);
    errno = 0;
    CHECK(!make_qp(pd1, cq1, 1u << 30) && errno == EINVAL, "max_send_wr 2^30: errno %d", errno);
    struct ibv_qp *q3 = make_qp(pd1, cq1, 4);
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS};
    CHECK(q3 && p_ibv_modify_qp(q3, &a, IBV_QP_STATE) == EINVAL, "RESET -> RTS");
    errno = 0;
    CHECK(!p_ibv_reg_mr(pd1, m1, 64, IBV_ACCESS_REMOTE_WRITE) && errno == EINVAL, "remote write alone: errno %d", errno);
    if (failures == before) printf("errors ok\n");

    /* ibv_open_xrcd, ibv_create_qp_ex and ibv_open_qp are inline: through the context. */
    before = failures;
    struct ibv_xrcd_init_attr xa = {.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = -1, .oflags = O_CREAT};
    struct ibv_xrcd *xrcd = ibv_open_xrcd(c1, &xa);
    CHECK(xrcd != NULL, "open_xrcd: %s", strerror(errno));
    if (xrcd) {
        struct ibv_qp_init_attr_ex ta = {.qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = xrcd};
        struct ibv_qp *tgt = ibv_create_qp_ex(c1, &ta);
        CHECK(tgt != NULL, "XRC receive QP: %s", strerror(errno));
        struct ibv_qp_open_attr oa = {.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE,
                                      .qp_num = tgt ? tgt->qp_num : 0, .xrcd = xrcd, .qp_type = IBV_QPT_XRC_RECV};
        struct ibv_qp *opened = tgt ? ibv_open_qp(c2, &oa) : NULL;
        CHECK(opened && opened->qp_num == tgt->qp_num, "open_qp: %s", strerror(errno));
        oa.qp_num = 0xabcdef;
        CHECK(!ibv_open_qp(c2, &oa), "open_qp of a number nobody has");
        if (tgt) CHECK(p_ibv_destroy_qp(tgt) == 0, "destroy the creator's handle");
        if (opened) {
            struct ibv_qp_attr ia = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
            CHECK(p_ibv_modify_qp(opened, &ia, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
                  "the opened handle still works: %s", strerror(errno));
            CHECK(p_ibv_destroy_qp(opened) == 0, "destroy the opened handle");
        }
        CHECK(ibv_close_xrcd(xrcd) == 0, "close_xrcd");
    }
    if (failures == before) printf("open_qp ok\n");

    before = failures;
    check_events(c1, c2, pd1, pd2, cq1, q1, q2, mr1, gid);
    if (failures == before) printf("events ok\n");

    if (peer_dev) {
        before = failures;
        struct ibv_context *pc = p_ibv_open_device(peer_dev);
        CHECK(pc != NULL, "open %s: %s", argv[2], strerror(errno));
        if (pc) {
            check_ah(pd1, pc);
            p_ibv_close_device(pc);
        }
        if (failures == before) printf("ah ok\n");
    }

    if (q3) p_ibv_destroy_qp(q3);
    p_ibv_destroy_qp(q1);
    p_ibv_destroy_qp(q2);
    p_ibv_dereg_mr(mr1);
    p_ibv_dereg_mr(mr2);
    p_ibv_destroy_cq(cq1);
    p_ibv_destroy_cq(cq2);
    p_ibv_dealloc_pd(pd1);
    p_ibv_dealloc_pd(pd2);
    p_ibv_close_device(c2);
    p_ibv_close_device(c1);
    p_ibv_free_device_list(list);
    return failures ? 1 : 0;
}
