/* The traffic of tests/lab/traffic.hpp through vfab's C API, in C: frames of 60..1514 bytes
 * from one NIC's queue pair to the other's, zero-copy from and into registered user memory,
 * every third frame in two SGEs; content, length and order of each verified. Then the
 * statistics, and destroyed queues answering ENODEV. */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime */

#include "vfab_c_traffic.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vfab/vfab.h"

enum { kBuf = 2048, kSendSlots = 256, kRecvSlots = 511, kBatch = 16, kEthertype = 0x88b5 };

struct nic {
    vfab_device *dev;
    vfab_cq *cq;
    vfab_qp *qp;
    vfab_mr *mr;
    uint8_t *buf;       /* kSendSlots send buffers, then kRecvSlots receive buffers: */
    uint8_t *mem;       /* user memory (freed after vfab_close), */
    uint8_t *dma;       /* or DMA memory from vfab_alloc_dma (freed by vfab_close) */
    uint32_t lkey;
    uint8_t mac[6];
};

/* frames.hpp, in C. */
static uint32_t frame_size(uint32_t seq) { return 60 + (seq * 7919u) % (1514 - 60 + 1); }
static uint8_t pattern(uint32_t seq, uint32_t i) { return (uint8_t)(seq * 31u + i * 7u + (i >> 8)); }

static void build_frame(uint8_t *f, uint32_t len, const uint8_t *dst, const uint8_t *src, uint32_t seq) {
    memcpy(f, dst, 6);
    memcpy(f + 6, src, 6);
    f[12] = kEthertype >> 8;
    f[13] = kEthertype & 0xff;
    memcpy(f + 14, &seq, 4);
    memcpy(f + 18, &len, 4);
    for (uint32_t i = 22; i < len; ++i) f[i] = pattern(seq, i);
}

static int check_frame(const uint8_t *f, uint32_t len, uint32_t seq, char *why, size_t why_len) {
    uint32_t got_seq, got_len;
    memcpy(&got_seq, f + 14, 4);
    memcpy(&got_len, f + 18, 4);
    if (got_seq != seq) return snprintf(why, why_len, "frame %u arrived where %u was due", got_seq, seq), 1;
    if (got_len != len || len != frame_size(seq))
        return snprintf(why, why_len, "frame %u: %u bytes, expected %u", seq, len, frame_size(seq)), 1;
    for (uint32_t i = 22; i < len; ++i)
        if (f[i] != pattern(seq, i)) return snprintf(why, why_len, "frame %u: byte %u differs", seq, i), 1;
    return 0;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define FAIL(...) (snprintf(why, why_len, __VA_ARGS__), 1)

static int nic_open(struct nic *n, const char *pci, int backend, char *why, size_t why_len) {
    struct vfab_open_opts opts = {.iommu_backend = backend};
    struct vfab_device_attr attr;
    struct vfab_qp_init_attr qa = {0};
    struct vfab_mr_attr m;
    const size_t len = (size_t)(kSendSlots + kRecvSlots) * kBuf;

    memset(n, 0, sizeof *n);
    if (!(n->dev = vfab_open(pci, &opts))) return FAIL("vfab_open(%s): %s", pci, vfab_last_error());
    if (vfab_query_device(n->dev, &attr) != 0) return FAIL("vfab_query_device: %s", vfab_last_error());
    if (strcmp(attr.provider, "e1000e") != 0 || attr.vendor_id != 0x8086)
        return FAIL("%s: provider %s, vendor %04x", pci, attr.provider, attr.vendor_id);
    memcpy(n->mac, attr.mac, 6);
    if (!(n->cq = vfab_create_cq(n->dev, 1024))) return FAIL("vfab_create_cq: %s", vfab_last_error());
    qa.send_cq = qa.recv_cq = n->cq;
    qa.caps.max_send_sge = 2;
    qa.caps.max_recv_wr = kRecvSlots;
    if (!(n->qp = vfab_create_qp(n->dev, &qa))) return FAIL("vfab_create_qp: %s", vfab_last_error());
    if (backend == VFAB_IOMMU_NOIOMMU) {
        /* Without an IOMMU the device sees physical addresses: DMA memory from the device's
         * arena (one hugepage) is contiguous, user memory is not. */
        if (!(n->dma = vfab_alloc_dma(n->dev, len, VFAB_ACCESS_LOCAL_WRITE, &n->mr)))
            return FAIL("vfab_alloc_dma: %s", vfab_last_error());
    } else {
        if (!(n->mem = aligned_alloc(4096, (len + 4095) & ~(size_t)4095))) return FAIL("out of memory");
        memset(n->mem, 0, len);
        if (!(n->mr = vfab_reg_mr(n->dev, n->mem, len, VFAB_ACCESS_LOCAL_WRITE)))
            return FAIL("vfab_reg_mr: %s", vfab_last_error());
    }
    n->buf = n->dma ? n->dma : n->mem;
    if (vfab_query_mr(n->mr, &m) != 0) return FAIL("vfab_query_mr: %s", vfab_last_error());
    n->lkey = m.lkey;
    return 0;
}

static void nic_close(struct nic *n) {
    vfab_close(n->dev);
    free(n->mem);
}

static int post_rx(struct nic *rx, uint32_t slot) {
    struct vfab_sge sge = {(uintptr_t)(rx->buf + (size_t)(kSendSlots + slot) * kBuf), kBuf, rx->lkey};
    struct vfab_recv_wr wr = {slot, &sge, 1, 0};
    return vfab_post_recv(rx->qp, &wr, 1, NULL);
}

/* run_traffic() of traffic.hpp. */
static int traffic(struct nic *tx, struct nic *rx, uint32_t count, double *seconds, char *why, size_t why_len) {
    uint32_t free_tx[kSendSlots], nfree = 0, sent = 0, received = 0, send_done = 0;
    struct vfab_completion wc[32];
    int err;

    for (uint32_t s = 0; s < kRecvSlots; ++s)
        if ((err = post_rx(rx, s)) != 0) return FAIL("vfab_post_recv: errno %d", err);
    for (uint32_t s = 0; s < kSendSlots; ++s) free_tx[nfree++] = s;
    const double start = now();
    double last_progress = start;
    while (received < count) {
        struct vfab_send_wr wrs[kBatch];
        struct vfab_sge sges[kBatch][2];
        uint32_t n = 0, posted = 0;
        while (n < kBatch && sent + n < count && nfree > 0 && (sent + n) - received < kRecvSlots) {
            const uint32_t seq = sent + n, len = frame_size(seq), slot = free_tx[--nfree];
            uint8_t *f = tx->buf + (size_t)slot * kBuf;
            const int split = seq % 3 == 0;
            build_frame(f, len, rx->mac, tx->mac, seq);
            sges[n][0] = (struct vfab_sge){(uintptr_t)f, split ? 14u : len, tx->lkey};
            sges[n][1] = (struct vfab_sge){(uintptr_t)(f + 14), len - 14, tx->lkey};
            wrs[n] = (struct vfab_send_wr){(uint64_t)slot << 32 | seq, sges[n], split ? 2u : 1u, VFAB_SEND_SIGNALED};
            ++n;
        }
        if (n) {
            err = vfab_post_send(tx->qp, wrs, n, &posted);
            if (err != 0 && err != ENOMEM) return FAIL("vfab_post_send: errno %d", err);
            for (uint32_t i = posted; i < n; ++i) free_tx[nfree++] = (uint32_t)(wrs[i].wr_id >> 32);
            sent += posted;
        }
        int got = vfab_poll_cq(tx->cq, 32, wc);
        if (got < 0) return FAIL("vfab_poll_cq(send CQ): %d", got);
        for (int i = 0; i < got; ++i) {
            if (wc[i].opcode != VFAB_WC_SEND) continue;
            if (wc[i].status != VFAB_WC_SUCCESS) return FAIL("send completion: %s", vfab_wc_status_str(wc[i].status));
            if ((uint32_t)wc[i].wr_id != send_done) return FAIL("send completions out of order");
            ++send_done;
            free_tx[nfree++] = (uint32_t)(wc[i].wr_id >> 32);
        }
        got = vfab_poll_cq(rx->cq, 32, wc);
        if (got < 0) return FAIL("vfab_poll_cq(receive CQ): %d", got);
        for (int i = 0; i < got; ++i) {
            if (wc[i].opcode != VFAB_WC_RECV) continue;
            if (wc[i].status != VFAB_WC_SUCCESS) return FAIL("receive completion: %s", vfab_wc_status_str(wc[i].status));
            const uint32_t slot = (uint32_t)wc[i].wr_id;
            if (check_frame(rx->buf + (size_t)(kSendSlots + slot) * kBuf, wc[i].byte_len, received, why, why_len)) return 1;
            ++received;
            if ((err = post_rx(rx, slot)) != 0) return FAIL("vfab_post_recv: errno %d", err);
        }
        const double t = now();
        if (got > 0) last_progress = t;
        if (t - last_progress > 10) return FAIL("no frame for 10 s: sent %u, received %u", sent, received);
    }
    *seconds = now() - start;
    return 0;
}

static int check_after(struct nic *tx, struct nic *rx, uint32_t count, char *why, size_t why_len) {
    struct vfab_device_stats ts, rs;
    struct vfab_completion wc[4];
    struct vfab_sge sge = {(uintptr_t)tx->buf, 64, tx->lkey};
    struct vfab_send_wr wr = {1, &sge, 1, VFAB_SEND_SIGNALED};
    uint32_t posted = 9;

    if (vfab_stats(tx->dev, &ts) != 0 || vfab_stats(rx->dev, &rs) != 0) return FAIL("vfab_stats: %s", vfab_last_error());
    if (ts.tx_packets != count || rs.rx_packets != count || rs.rx_missed != 0)
        return FAIL("statistics: tx_packets %llu, rx_packets %llu, rx_missed %llu (%u frames sent)",
                    (unsigned long long)ts.tx_packets, (unsigned long long)rs.rx_packets,
                    (unsigned long long)rs.rx_missed, count);
    if (vfab_destroy_cq(tx->cq) != EBUSY) return FAIL("vfab_destroy_cq of a CQ in use did not answer EBUSY");
    if (vfab_destroy_qp(tx->qp) != 0) return FAIL("vfab_destroy_qp: %s", vfab_last_error());
    if (vfab_post_send(tx->qp, &wr, 1, &posted) != ENODEV || posted != 0) return FAIL("post after destroy: not ENODEV");
    if (vfab_destroy_qp(tx->qp) != ENODEV) return FAIL("second vfab_destroy_qp: not ENODEV");
    if (vfab_destroy_cq(tx->cq) != 0) return FAIL("vfab_destroy_cq: %s", vfab_last_error());
    if (vfab_poll_cq(tx->cq, 4, wc) != -ENODEV) return FAIL("poll after destroy: not -ENODEV");
    if (vfab_dereg_mr(tx->mr) != 0 || vfab_dereg_mr(tx->mr) != ENODEV) return FAIL("vfab_dereg_mr twice");
    return 0;
}

int vfab_c_traffic(const char *tx_pci, const char *rx_pci, int backend, uint32_t count, double *seconds, char *why,
                   size_t why_len) {
    struct nic tx, rx;
    int rc = nic_open(&tx, tx_pci, backend, why, why_len);
    if (rc == 0) rc = nic_open(&rx, rx_pci, backend, why, why_len);
    else memset(&rx, 0, sizeof rx);
    if (rc == 0) rc = traffic(&tx, &rx, count, seconds, why, why_len);
    if (rc == 0) rc = check_after(&tx, &rx, count, why, why_len);
    nic_close(&rx);
    nic_close(&tx);
    return rc;
}
