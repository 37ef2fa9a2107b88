/* The RDMA transport's C API (vfab/rdma.h) from C (-std=c11 -Wpedantic): two RC queue pairs
 * of one port talking to each other through the fake provider, whose frames loop back; SEND
 * with immediate data and RDMA WRITE arrive whole, fast registration, a shared receive queue
 * and its limit event; NULL handles are argument errors. Returns
 * 0, or 1 with what failed in `why`. */
#include "c_rdma_check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_check.h"
#include "vfab/rdma.h"

/* RESET -> INIT -> RTR -> RTS towards `peer` on the same port. */
static int connect_rc(vfab_rdma_qp *qp, const vfab_rdma_qp *peer, const uint8_t gid[16]) {
    struct vfab_rdma_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = VFAB_RDMA_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = VFAB_ACCESS_LOCAL_WRITE | VFAB_ACCESS_REMOTE_WRITE | VFAB_ACCESS_REMOTE_READ;
    if (vfab_rdma_modify_qp(qp, &a, VFAB_RDMA_QP_STATE | VFAB_RDMA_QP_PKEY_INDEX | VFAB_RDMA_QP_PORT |
                                        VFAB_RDMA_QP_ACCESS_FLAGS))
        return 1;
    a.qp_state = VFAB_RDMA_QPS_RTR;
    a.path_mtu = 3;
    a.dest_qp_num = vfab_rdma_qp_num(peer);
    a.rq_psn = 7;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 1;
    memcpy(a.ah_attr.dgid, gid, 16);
    a.ah_attr.hop_limit = 64;
    if (vfab_rdma_modify_qp(qp, &a, VFAB_RDMA_QP_STATE | VFAB_RDMA_QP_AV | VFAB_RDMA_QP_PATH_MTU |
                                        VFAB_RDMA_QP_DEST_QPN | VFAB_RDMA_QP_RQ_PSN |
                                        VFAB_RDMA_QP_MAX_DEST_RD_ATOMIC | VFAB_RDMA_QP_MIN_RNR_TIMER))
        return 1;
    a.qp_state = VFAB_RDMA_QPS_RTS;
    a.sq_psn = 7;
    a.timeout = 10;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    return vfab_rdma_modify_qp(qp, &a, VFAB_RDMA_QP_STATE | VFAB_RDMA_QP_SQ_PSN | VFAB_RDMA_QP_TIMEOUT |
                                           VFAB_RDMA_QP_RETRY_CNT | VFAB_RDMA_QP_RNR_RETRY |
                                           VFAB_RDMA_QP_MAX_QP_RD_ATOMIC) != 0;
}

/* Through RESET, then connected to `peer` afresh. */
static int reconnect(vfab_rdma_qp *qp, const vfab_rdma_qp *peer, const uint8_t gid[16]) {
    struct vfab_rdma_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = VFAB_RDMA_QPS_RESET;
    return vfab_rdma_modify_qp(qp, &a, VFAB_RDMA_QP_STATE) != 0 || connect_rc(qp, peer, gid);
}

/* Polls until `n` completions arrived (or a generous number of tries). */
static int wait_wc(vfab_rdma_cq *cq, int n, struct vfab_rdma_wc *wc) {
    int got = 0;
    long tries;
    for (tries = 0; got < n && tries < 10000000; ++tries) got += vfab_rdma_poll_cq(cq, n - got, wc + got);
    return got;
}

int c_rdma_loopback(const char *pci, const char *sysfs_root, const char *provider_dir, char *why, size_t why_len) {
    struct vfab_open_opts opts;
    struct vfab_rdma_port_config pc;
    struct vfab_rdma_qp_init_attr qi;
    struct vfab_rdma_wc wc[4];
    struct vfab_rdma_send_wr swr;
    struct vfab_recv_wr rwr;
    struct vfab_mr_attr m;
    struct vfab_sge sge;
    vfab_device *dev;
    vfab_rdma_port *port;
    vfab_rdma_cq *cq;
    vfab_rdma_qp *a, *b;
    vfab_mr *mr;
    uint8_t gid[16], *buf;
    uint32_t posted = 0;
    int i;

    memset(&pc, 0, sizeof pc);
    memset(wc, 0, sizeof wc);
    CHECK(vfab_rdma_port_create(NULL, &pc) == NULL && errno == EINVAL);
    CHECK(vfab_rdma_create_cq(NULL, 8) == NULL && errno == EINVAL);
    CHECK(vfab_rdma_post_send(NULL, NULL, 0, NULL) == EINVAL);
    CHECK(vfab_rdma_poll_cq(NULL, 1, wc) == -EINVAL);

    memset(&opts, 0, sizeof opts);
    opts.sysfs_root = sysfs_root;
    opts.provider_dir = provider_dir;
    opts.iommu_backend = VFAB_IOMMU_LEGACY;
    dev = vfab_open(pci, &opts);
    CHECK(dev != NULL);
    CHECK(vfab_rdma_port_create(dev, &pc) == NULL && errno == EINVAL);   /* no address */
    pc.ipv4 = 0x0a090001;
    port = vfab_rdma_port_create(dev, &pc);
    CHECK(port != NULL);
    CHECK(vfab_rdma_port_gid(port, gid) == 0 && gid[10] == 0xff && gid[15] == 1);
    CHECK(vfab_rdma_port_active_mtu(port) == 3);
    {
        struct vfab_rdma_device_caps caps;
        CHECK(vfab_rdma_query_device(port, NULL) == EINVAL);
        CHECK(vfab_rdma_query_device(port, &caps) == 0);
        CHECK(caps.attr.phys_port_cnt == 1 && caps.attr.max_srq_wr > 0 && caps.max_path_mtu == 3);
        CHECK((caps.vfab_caps & VFAB_RDMA_CAP_SRQ) && strncmp(caps.attr.fw_ver, "vfab ", 5) == 0);
    }
    cq = vfab_rdma_create_cq(port, 64);
    CHECK(cq != NULL);
    memset(&qi, 0, sizeof qi);
    qi.qp_type = VFAB_RDMA_QPT_RC;
    qi.send_cq = qi.recv_cq = cq;
    a = vfab_rdma_create_qp(port, &qi);
    b = vfab_rdma_create_qp(port, &qi);
    CHECK(a != NULL && b != NULL && vfab_rdma_qp_num(a) != vfab_rdma_qp_num(b));
    CHECK(connect_rc(a, b, gid) == 0);
    CHECK(connect_rc(b, a, gid) == 0);

    buf = aligned_alloc(4096, 65536);
    CHECK(buf != NULL);
    for (i = 0; i < 8192; ++i) buf[i] = (uint8_t)(i * 3);
    memset(buf + 8192, 0, 65536 - 8192);
    mr = vfab_reg_mr(dev, buf, 65536, VFAB_ACCESS_LOCAL_WRITE | VFAB_ACCESS_REMOTE_WRITE);
    CHECK(mr != NULL && vfab_query_mr(mr, &m) == 0);

    /* SEND with immediate data, 3000 bytes (three packets), into a receive of b. */
    sge.addr = (uintptr_t)(buf + 16384);
    sge.length = 8192;
    sge.lkey = m.lkey;
    memset(&rwr, 0, sizeof rwr);
    rwr.wr_id = 77;
    rwr.sg_list = &sge;
    rwr.num_sge = 1;
    CHECK(vfab_rdma_post_recv(b, &rwr, 1, &posted) == 0 && posted == 1);
    {
        struct vfab_sge s = {(uintptr_t)buf, 3000, 0};
        s.lkey = m.lkey;
        memset(&swr, 0, sizeof swr);
        swr.wr_id = 5;
        swr.sg_list = &s;
        swr.num_sge = 1;
        swr.opcode = VFAB_RDMA_WR_SEND_WITH_IMM;
        swr.send_flags = VFAB_RDMA_SEND_SIGNALED;
        swr.imm_data = 0x44332211;
        CHECK(vfab_rdma_post_send(a, &swr, 1, &posted) == 0 && posted == 1);
        CHECK(wait_wc(cq, 2, wc) == 2);
    }
    for (i = 0; i < 2; ++i) {
        CHECK(wc[i].status == VFAB_WC_SUCCESS);
        if (wc[i].opcode == VFAB_RDMA_WC_RECV) {
            CHECK(wc[i].wr_id == 77 && wc[i].byte_len == 3000 && wc[i].imm_data == 0x44332211);
            CHECK((wc[i].wc_flags & VFAB_RDMA_WC_WITH_IMM) && wc[i].qp_num == vfab_rdma_qp_num(b));
        } else {
            CHECK(wc[i].opcode == VFAB_RDMA_WC_SEND && wc[i].wr_id == 5);
        }
    }
    CHECK(memcmp(buf, buf + 16384, 3000) == 0);

    /* RDMA WRITE of 5000 bytes to 40000. */
    {
        struct vfab_sge s = {(uintptr_t)(buf + 100), 5000, 0};
        s.lkey = m.lkey;
        memset(&swr, 0, sizeof swr);
        swr.wr_id = 6;
        swr.sg_list = &s;
        swr.num_sge = 1;
        swr.opcode = VFAB_RDMA_WR_RDMA_WRITE;
        swr.send_flags = VFAB_RDMA_SEND_SIGNALED;
        swr.remote_addr = (uintptr_t)(buf + 40000);
        swr.rkey = m.rkey;
        CHECK(vfab_rdma_post_send(a, &swr, 1, NULL) == 0);
        CHECK(wait_wc(cq, 1, wc) == 1 && wc[0].status == VFAB_WC_SUCCESS && wc[0].opcode == VFAB_RDMA_WC_RDMA_WRITE);
    }
    CHECK(memcmp(buf + 100, buf + 40000, 5000) == 0);

    /* Fast registration: b's QP binds 4 KiB of buf at 49152 to address 0x5000000, a writes
     * 64 bytes there, b invalidates it and frees the key. */
    {
        uint32_t key = 0, rkey = 0;
        uint64_t block = (uintptr_t)(buf + 49152);
        struct vfab_rdma_reg_mr_info ri;
        struct vfab_sge s = {(uintptr_t)buf, 64, 0};
        s.lkey = m.lkey;
        CHECK(vfab_rdma_alloc_mr(port, 4096, &key) == 0);
        memset(&ri, 0, sizeof ri);
        ri.blocks = &block;
        ri.num_blocks = 1;
        ri.block_size = 4096;
        ri.access = VFAB_ACCESS_LOCAL_WRITE | VFAB_ACCESS_REMOTE_WRITE;
        ri.length = 4096;
        ri.iova = 0x5000000;
        memset(&swr, 0, sizeof swr);
        swr.wr_id = 8;
        swr.opcode = VFAB_RDMA_WR_REG_MR;
        swr.send_flags = VFAB_RDMA_SEND_SIGNALED;
        swr.mem_key = key;
        swr.new_key = rkey = vfab_rdma_next_key(key);
        swr.reg = &ri;
        CHECK(rkey != key && (rkey >> 8) == (key >> 8));
        CHECK(vfab_rdma_post_send(b, &swr, 1, NULL) == 0);
        CHECK(wait_wc(cq, 1, wc) == 1 && wc[0].status == VFAB_WC_SUCCESS && wc[0].opcode == VFAB_RDMA_WC_REG_MR);
        memset(&swr, 0, sizeof swr);
        swr.wr_id = 9;
        swr.sg_list = &s;
        swr.num_sge = 1;
        swr.opcode = VFAB_RDMA_WR_RDMA_WRITE;
        swr.send_flags = VFAB_RDMA_SEND_SIGNALED;
        swr.remote_addr = 0x5000000 + 8;
        swr.rkey = rkey;
        CHECK(vfab_rdma_post_send(a, &swr, 1, NULL) == 0);
        CHECK(wait_wc(cq, 1, wc) == 1 && wc[0].status == VFAB_WC_SUCCESS);
        CHECK(memcmp(buf, buf + 49152 + 8, 64) == 0);
        memset(&swr, 0, sizeof swr);
        swr.wr_id = 10;
        swr.opcode = VFAB_RDMA_WR_LOCAL_INV;
        swr.send_flags = VFAB_RDMA_SEND_SIGNALED;
        swr.imm_data = rkey;
        CHECK(vfab_rdma_post_send(b, &swr, 1, NULL) == 0);
        CHECK(wait_wc(cq, 1, wc) == 1 && wc[0].status == VFAB_WC_SUCCESS && wc[0].opcode == VFAB_RDMA_WC_LOCAL_INV);
        CHECK(vfab_rdma_dealloc(port, rkey) == 0 && vfab_rdma_dealloc(port, rkey) == EINVAL);
        CHECK(vfab_rdma_alloc_mw(port, 3, &key) == EINVAL);
        CHECK(vfab_rdma_alloc_mw(port, VFAB_RDMA_MW_TYPE_2, &key) == 0 && vfab_rdma_dealloc(port, key) == 0);
    }

    /* A shared receive queue: a third QP receives through it; the limit event fires when the
     * one WR left is fewer than the limit of 2. */
    {
        struct vfab_rdma_srq_attr sa = {4, 1, 0};
        struct vfab_rdma_async_event ev;
        struct vfab_recv_wr two[2];
        vfab_rdma_srq *srq;
        vfab_rdma_qp *c;
        CHECK(vfab_rdma_create_srq(port, NULL) == NULL && errno == EINVAL);
        srq = vfab_rdma_create_srq(port, &sa);
        CHECK(srq != NULL);
        qi.srq = srq;
        c = vfab_rdma_create_qp(port, &qi);
        qi.srq = NULL;
        CHECK(c != NULL);
        CHECK(vfab_rdma_destroy_srq(srq) == EBUSY);
        CHECK(vfab_rdma_destroy_qp(b) == 0);   /* a's peer is c from now on */
        CHECK(connect_rc(c, a, gid) == 0);
        CHECK(reconnect(a, c, gid) == 0);
        sge.addr = (uintptr_t)(buf + 16384);
        sge.length = 8192;
        two[0] = rwr;
        two[1] = rwr;
        two[0].wr_id = 100;
        two[1].wr_id = 101;
        CHECK(vfab_rdma_post_srq_recv(srq, two, 2, &posted) == 0 && posted == 2);
        CHECK(vfab_rdma_post_recv(c, two, 1, &posted) == EINVAL);
        sa.srq_limit = 2;
        CHECK(vfab_rdma_modify_srq(srq, &sa, VFAB_RDMA_SRQ_LIMIT) == 0);
        memset(&sa, 0, sizeof sa);
        CHECK(vfab_rdma_query_srq(srq, &sa) == 0 && sa.max_wr == 4 && sa.max_sge == 1 && sa.srq_limit == 2);
        CHECK(vfab_rdma_get_async_event(port, &ev) == 0);
        {
            struct vfab_sge s = {(uintptr_t)buf, 100, 0};
            s.lkey = m.lkey;
            memset(&swr, 0, sizeof swr);
            swr.wr_id = 11;
            swr.sg_list = &s;
            swr.num_sge = 1;
            swr.opcode = VFAB_RDMA_WR_SEND;
            swr.send_flags = VFAB_RDMA_SEND_SIGNALED;
            CHECK(vfab_rdma_post_send(a, &swr, 1, NULL) == 0);
            CHECK(wait_wc(cq, 2, wc) == 2);
        }
        for (i = 0; i < 2; ++i)
            CHECK(wc[i].status == VFAB_WC_SUCCESS &&
                  (wc[i].opcode == VFAB_RDMA_WC_SEND || (wc[i].wr_id == 100 && wc[i].qp_num == vfab_rdma_qp_num(c))));
        CHECK(vfab_rdma_async_fd(port) >= 0);
        CHECK(vfab_rdma_get_async_event(port, &ev) == 1);
        CHECK(ev.event_type == VFAB_RDMA_EVENT_SRQ_LIMIT_REACHED && ev.srq == srq && ev.qp == NULL);
        CHECK(vfab_rdma_destroy_qp(c) == 0 && vfab_rdma_destroy_srq(srq) == 0);
        b = NULL;
    }

    /* Multicast: a UD queue pair joins a group only where the device filters multicast; the
     * fake provider has no filter, which the error says. Bad groups and RC are refused first. */
    {
        const uint8_t group[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 224, 1, 2, 3};
        const uint8_t mac[1][6] = {{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}};
        vfab_rdma_qp *u;
        qi.qp_type = VFAB_RDMA_QPT_UD;
        qi.create_flags = VFAB_RDMA_QP_CREATE_BLOCK_SELF_MCAST_LB;
        u = vfab_rdma_create_qp(port, &qi);
        qi.create_flags = 0x100;
        CHECK(u != NULL && vfab_rdma_create_qp(port, &qi) == NULL && errno == EINVAL);
        qi.create_flags = 0;
        qi.qp_type = VFAB_RDMA_QPT_RC;
        CHECK(vfab_rdma_attach_mcast(u, gid, 0) == EINVAL);     /* unicast */
        CHECK(vfab_rdma_attach_mcast(a, group, 0) == EINVAL);   /* RC */
        CHECK(vfab_rdma_attach_mcast(u, group, 0) == ENOTSUP);
        CHECK(vfab_set_multicast(dev, mac, 1) == ENOTSUP);
        CHECK(vfab_rdma_detach_mcast(u, group, 0) == EINVAL);   /* not in it */
        CHECK(vfab_rdma_destroy_qp(u) == 0);
    }
    /* Address handles: ARP starts at create_ah; the port's own address and a group need none. */
    {
        struct vfab_rdma_ah_attr aa;
        vfab_rdma_ah *ah;
        memset(&aa, 0, sizeof aa);
        memcpy(aa.dgid, gid, 16);
        ah = vfab_rdma_create_ah(port, &aa);
        CHECK(ah != NULL && vfab_rdma_ah_wait_resolved(ah, 0) == 0);
        CHECK(vfab_rdma_ah_wait_resolved(NULL, 0) == EINVAL);
        CHECK(vfab_rdma_destroy_ah(ah) == 0);
    }

    /* Device memory: a memory device that is not a PCI address, or none. */
    CHECK(vfab_reg_device_mr(dev, NULL, 2, 0, 4096, VFAB_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL);
    CHECK(vfab_reg_device_mr(dev, "not-a-bdf", 2, 0, 4096, VFAB_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL);
    CHECK(strstr(vfab_last_error(), "not a PCI address") != NULL);

    /* XRC objects: a domain, an XRC SRQ with its number, a receiver in the domain. */
    {
        struct vfab_rdma_srq_attr sa = {8, 1, 0};
        vfab_rdma_xrcd *xrcd = vfab_rdma_create_xrcd(port);
        vfab_rdma_srq *xs;
        vfab_rdma_qp *t;
        CHECK(xrcd != NULL);
        CHECK(vfab_rdma_create_xrc_srq(port, &sa, NULL, cq) == NULL && errno == EINVAL);
        xs = vfab_rdma_create_xrc_srq(port, &sa, xrcd, cq);
        CHECK(xs != NULL && vfab_rdma_srq_num(xs) != 0);
        memset(&qi, 0, sizeof qi);
        qi.qp_type = VFAB_RDMA_QPT_XRC_RECV;
        qi.xrcd = xrcd;
        t = vfab_rdma_create_qp(port, &qi);
        CHECK(t != NULL);
        CHECK(vfab_rdma_destroy_xrcd(xrcd) == EBUSY);
        CHECK(vfab_rdma_destroy_qp(t) == 0 && vfab_rdma_destroy_srq(xs) == 0 && vfab_rdma_destroy_xrcd(xrcd) == 0);
        memset(&qi, 0, sizeof qi);
        qi.qp_type = VFAB_RDMA_QPT_RC;
        qi.send_cq = qi.recv_cq = cq;
    }

    /* A raw-packet queue pair and a flow to it (docs/rdma-raw-packet.md): the queue pair stays
     * while the flow does; a sniffer with fields and a flow to an RC queue pair are refused. */
    {
        struct vfab_rdma_flow_rule rule;
        vfab_rdma_qp *r;
        vfab_rdma_flow *f;
        qi.qp_type = VFAB_RDMA_QPT_RAW_PACKET;
        r = vfab_rdma_create_qp(port, &qi);
        qi.qp_type = VFAB_RDMA_QPT_RC;
        CHECK(r != NULL);
        memset(&rule, 0, sizeof rule);
        rule.ether_type = 0x88b5;
        rule.ether_type_mask = 0xffff;
        CHECK(vfab_rdma_create_flow(port, a, &rule) == NULL && errno == EINVAL);
        rule.kind = VFAB_RDMA_FLOW_SNIFFER;
        CHECK(vfab_rdma_create_flow(port, r, &rule) == NULL && errno == EINVAL);
        rule.kind = VFAB_RDMA_FLOW_NORMAL;
        f = vfab_rdma_create_flow(port, r, &rule);
        CHECK(f != NULL);
        CHECK(vfab_rdma_destroy_qp(r) == EBUSY);
        CHECK(vfab_rdma_destroy_flow(f) == 0 && vfab_rdma_destroy_qp(r) == 0);
    }

    CHECK(vfab_rdma_destroy_cq(cq) == EBUSY);
    CHECK(vfab_rdma_destroy_qp(a) == 0);
    CHECK(vfab_rdma_destroy_qp(a) == ENODEV);
    CHECK(vfab_rdma_destroy_cq(cq) == 0);
    CHECK(vfab_rdma_port_destroy(port) == 0);
    CHECK(vfab_dereg_mr(mr) == 0);
    CHECK(vfab_close(dev) == 0);
    free(buf);
    return 0;
}
