/* The C API from C (built with -std=c11 -Wall -Wextra -Werror -Wpedantic): argument errors
 * on NULL handles, and loopback traffic and use-after-destroy through the fake provider.
 * Each check returns 0, or 1 with what failed in `why`. */
#include "c_api_check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_check.h"
#include "vfab/vfab.h"

/* The last error names the function and the NULL argument. */
static int says(const char *function, const char *arg) {
    char want[128];
    snprintf(want, sizeof want, "%s: %s is NULL", function, arg);
    return strcmp(vfab_last_error(), want) == 0;
}

int c_api_null_handles(char *why, size_t why_len) {
    struct vfab_device_attr attr;
    struct vfab_link_state link;
    struct vfab_device_stats stats;
    struct vfab_event ev;
    struct vfab_mr_attr mattr;
    struct vfab_qp_attr qattr;
    struct vfab_completion wc[2];
    struct vfab_send_wr swr;
    struct vfab_recv_wr rwr;
    struct vfab_qp_init_attr qinit;
    struct vfab_qp_init_attr_ex qinit_ex;
    vfab_mr *mr = NULL;
    uint32_t posted = 99;

    memset(&swr, 0, sizeof swr);
    memset(&rwr, 0, sizeof rwr);
    memset(&qinit, 0, sizeof qinit);
    memset(&qinit_ex, 0, sizeof qinit_ex);
    errno = 0;
    CHECK(vfab_open(NULL, NULL) == NULL && errno == EINVAL && says("vfab_open", "pci_address"));
    CHECK(vfab_close(NULL) == 0);
    CHECK(vfab_query_device(NULL, &attr) == EINVAL && says("vfab_query_device", "dev"));
    CHECK(vfab_link(NULL, &link) == EINVAL && says("vfab_link", "dev"));
    CHECK(vfab_stats(NULL, &stats) == EINVAL && says("vfab_stats", "dev"));
    CHECK(vfab_event_fd(NULL) == -EINVAL && says("vfab_event_fd", "dev"));
    CHECK(vfab_next_event(NULL, &ev) == EINVAL && says("vfab_next_event", "dev"));
    CHECK(vfab_reset(NULL) == EINVAL && says("vfab_reset", "dev"));
    errno = 0;
    CHECK(vfab_reg_mr(NULL, &attr, sizeof attr, VFAB_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL);
    CHECK(says("vfab_reg_mr", "dev"));
    CHECK(vfab_query_mr(NULL, &mattr) == EINVAL && says("vfab_query_mr", "mr"));
    CHECK(vfab_dereg_mr(NULL) == EINVAL && says("vfab_dereg_mr", "mr"));
    CHECK(vfab_alloc_dma(NULL, 4096, VFAB_ACCESS_LOCAL_WRITE, &mr) == NULL && says("vfab_alloc_dma", "dev"));
    CHECK(vfab_create_cq(NULL, 16) == NULL && says("vfab_create_cq", "dev"));
    CHECK(vfab_destroy_cq(NULL) == EINVAL && says("vfab_destroy_cq", "cq"));
    CHECK(vfab_poll_cq(NULL, 2, wc) == -EINVAL);
    CHECK(vfab_req_notify_cq(NULL) == EINVAL && says("vfab_req_notify_cq", "cq"));
    CHECK(vfab_cq_channel_fd(NULL) == -EINVAL && says("vfab_cq_channel_fd", "cq"));
    CHECK(vfab_cq_take_events(NULL) == -EINVAL && says("vfab_cq_take_events", "cq"));
    CHECK(vfab_create_qp(NULL, &qinit) == NULL && says("vfab_create_qp", "dev"));
    CHECK(vfab_create_qp_ex(NULL, &qinit_ex) == NULL && errno == EINVAL && says("vfab_create_qp_ex", "dev"));
    CHECK(vfab_frame_headroom(NULL) == -EINVAL && says("vfab_frame_headroom", "dev"));
    CHECK(vfab_destroy_qp(NULL) == EINVAL && says("vfab_destroy_qp", "qp"));
    CHECK(vfab_query_qp(NULL, &qattr) == EINVAL && says("vfab_query_qp", "qp"));
    CHECK(vfab_post_send(NULL, &swr, 1, &posted) == EINVAL && posted == 0);
    CHECK(vfab_post_recv(NULL, &rwr, 1, &posted) == EINVAL && posted == 0);
    CHECK(strcmp(vfab_wc_status_str(VFAB_WC_LOC_PROT_ERR), "local protection error") == 0);
    CHECK(strcmp(vfab_event_type_str(VFAB_EVENT_LINK_DOWN), "link down") == 0);
    CHECK(strcmp(vfab_wc_status_str(99), "unknown status") == 0);
    CHECK(vfab_version()[0] != '\0');
    return 0;
}

int c_api_loopback(const char *pci, const char *sysfs_root, const char *provider_dir, char *why, size_t why_len) {
    struct vfab_open_opts opts;
    struct vfab_device_attr attr;
    struct vfab_mr_attr m;
    struct vfab_qp_attr qa;
    struct vfab_qp_init_attr init;
    struct vfab_completion wc[8];
    struct vfab_sge sge[2];
    struct vfab_send_wr swr;
    struct vfab_recv_wr rwr;
    vfab_device *dev;
    vfab_cq *cq, *other;
    vfab_qp *qp;
    vfab_mr *mr, *dma_mr;
    uint8_t *buf, *dmabuf;
    uint32_t posted = 0;
    int n, i;

    memset(&opts, 0, sizeof opts);
    opts.sysfs_root = sysfs_root;
    opts.provider_dir = provider_dir;
    opts.iommu_backend = 7;
    CHECK(vfab_open(pci, &opts) == NULL && errno == EINVAL && strstr(vfab_last_error(), "iommu_backend 7"));
    opts.iommu_backend = VFAB_IOMMU_LEGACY;
    dev = vfab_open(pci, &opts);
    CHECK(dev != NULL);
    CHECK(vfab_query_device(dev, &attr) == 0);
    CHECK(strcmp(attr.provider, "fake") == 0 && attr.vendor_id == 0x1234 && strcmp(attr.pci_address, pci) == 0);

    cq = vfab_create_cq(dev, 32);
    CHECK(cq != NULL);
    CHECK(vfab_create_cq(dev, 0) == NULL && strstr(vfab_last_error(), "create_cq(0)"));
    memset(&init, 0, sizeof init);
    init.send_cq = cq;
    init.recv_cq = cq;
    init.caps.max_send_sge = 2;   /* the rest: defaults */
    qp = vfab_create_qp(dev, &init);
    CHECK(qp != NULL);
    CHECK(vfab_query_qp(qp, &qa) == 0 && qa.state == VFAB_QPS_READY && qa.caps.max_recv_wr == 256 &&
          qa.caps.max_send_sge == 2);
    /* vfab_create_qp_ex: what this libvfab does not know is refused by name; the headroom flag
     * is taken, and ignored by a provider with no header of its own (frame headroom 0). */
    {
        struct vfab_qp_init_attr_ex ex;
        vfab_qp *hq;
        memset(&ex, 0, sizeof ex);
        ex.send_cq = ex.recv_cq = cq;
        ex.comp_mask = VFAB_QP_INIT_ATTR_CREATE_FLAGS | 2;
        CHECK(vfab_create_qp_ex(dev, &ex) == NULL && errno == EINVAL && strstr(vfab_last_error(), "comp_mask 0x2 "));
        ex.comp_mask = VFAB_QP_INIT_ATTR_CREATE_FLAGS;
        ex.create_flags = VFAB_QP_CREATE_HDR_IN_HEADROOM | 4;
        CHECK(vfab_create_qp_ex(dev, &ex) == NULL && errno == EINVAL && strstr(vfab_last_error(), "create_flags 0x4 "));
        ex.create_flags = VFAB_QP_CREATE_HDR_IN_HEADROOM;
        CHECK(vfab_frame_headroom(dev) == 0);
        hq = vfab_create_qp_ex(dev, &ex);
        CHECK(hq != NULL);
        CHECK(vfab_query_qp(hq, &qa) == 0 && qa.state == VFAB_QPS_READY && qa.caps.max_send_wr == 256);
        CHECK(vfab_destroy_qp(hq) == 0);
    }

    buf = aligned_alloc(4096, 8192);
    CHECK(buf != NULL);
    mr = vfab_reg_mr(dev, buf, 8192, VFAB_ACCESS_LOCAL_WRITE);
    CHECK(mr != NULL);
    CHECK(vfab_query_mr(mr, &m) == 0 && m.addr == buf && m.length == 8192);
    dmabuf = vfab_alloc_dma(dev, 4096, VFAB_ACCESS_LOCAL_WRITE, &dma_mr);
    CHECK(dmabuf != NULL && dma_mr != NULL);

    /* A frame from user memory (two SGEs) into arena memory. */
    for (i = 0; i < 200; ++i) buf[i] = (uint8_t)(i * 3);
    CHECK(vfab_query_mr(dma_mr, &m) == 0);
    sge[0].addr = (uintptr_t)dmabuf;
    sge[0].length = 2048;
    sge[0].lkey = m.lkey;
    rwr.wr_id = 5;
    rwr.sg_list = sge;
    rwr.num_sge = 1;
    rwr.reserved = 0;
    CHECK(vfab_post_recv(qp, &rwr, 1, &posted) == 0 && posted == 1);
    CHECK(vfab_query_mr(mr, &m) == 0);
    sge[0].addr = (uintptr_t)buf;
    sge[0].length = 14;
    sge[1].addr = (uintptr_t)(buf + 14);
    sge[1].length = 186;
    sge[0].lkey = sge[1].lkey = m.lkey;
    swr.wr_id = 6;
    swr.sg_list = sge;
    swr.num_sge = 2;
    swr.flags = VFAB_SEND_SIGNALED;
    CHECK(vfab_req_notify_cq(cq) == 0);
    CHECK(vfab_post_send(qp, &swr, 1, NULL) == 0);
    CHECK(vfab_cq_take_events(cq) == 1);
    n = vfab_poll_cq(cq, 8, wc);
    CHECK(n == 2);
    CHECK(wc[0].wr_id == 5 && wc[0].opcode == VFAB_WC_RECV && wc[0].status == VFAB_WC_SUCCESS && wc[0].byte_len == 200);
    CHECK(wc[1].wr_id == 6 && wc[1].opcode == VFAB_WC_SEND && wc[1].qp_num == 7);
    CHECK(memcmp(buf, dmabuf, 200) == 0);

    /* A CQ in use cannot go; a destroyed QP and CQ answer ENODEV, and nothing crashes. */
    CHECK(vfab_destroy_cq(cq) == EBUSY && strstr(vfab_last_error(), "still used"));
    CHECK(vfab_destroy_qp(qp) == 0);
    CHECK(vfab_post_send(qp, &swr, 1, &posted) == ENODEV && posted == 0);
    CHECK(vfab_post_recv(qp, &rwr, 1, &posted) == ENODEV);
    CHECK(vfab_destroy_qp(qp) == ENODEV && strstr(vfab_last_error(), "already destroyed"));
    CHECK(vfab_query_qp(qp, &qa) == 0 && qa.state == VFAB_QPS_DESTROYED);
    CHECK(vfab_destroy_cq(cq) == 0);
    CHECK(vfab_poll_cq(cq, 8, wc) == -ENODEV);
    CHECK(vfab_req_notify_cq(cq) == ENODEV);
    CHECK(vfab_destroy_cq(cq) == ENODEV);
    CHECK(vfab_dereg_mr(mr) == 0);
    CHECK(vfab_dereg_mr(mr) == ENODEV && strstr(vfab_last_error(), "already deregistered"));
    CHECK(vfab_query_mr(mr, &m) == ENODEV);
    other = vfab_create_cq(dev, 8);
    CHECK(other != NULL);
    init.send_cq = cq;   /* destroyed */
    init.recv_cq = other;
    CHECK(vfab_create_qp(dev, &init) == NULL && errno == ENODEV);
    CHECK(vfab_close(dev) == 0);
    free(buf);
    return 0;
}
