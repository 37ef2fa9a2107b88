// The QP of an id (docs/cm.md, "QPs"): made on the id's device and taken to INIT, then through
// RTR and RTS with its connection's attributes (cm/qp_attrs.hpp) as the kernel's librdmacm
// takes it: the passive side before the REP, the active side when the REP comes (before the
// event). A UD QP goes on to RTS at once, with rdma_cm's Q_Key.
#include <fcntl.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "cma.hpp"

namespace vfab::rdmacm {

namespace {
ibv_qp_attr to_ibv(const cm::QpTransition& t, int& mask) {
    const rdma::QpAttr& a = t.attr;
    ibv_qp_attr q{};
    q.qp_state = ibv_qp_state(a.qp_state);   // rdma::RdmaQpState has ibv_qp_state's values
    q.path_mtu = ibv_mtu(a.path_mtu);
    q.qkey = a.qkey;
    q.rq_psn = a.rq_psn;
    q.sq_psn = a.sq_psn;
    q.dest_qp_num = a.dest_qp_num;
    q.qp_access_flags = a.qp_access_flags;
    q.pkey_index = a.pkey_index;
    q.port_num = a.port_num;
    q.max_rd_atomic = a.max_rd_atomic;
    q.max_dest_rd_atomic = a.max_dest_rd_atomic;
    q.min_rnr_timer = a.min_rnr_timer;
    q.timeout = a.timeout;
    q.retry_cnt = a.retry_cnt;
    q.rnr_retry = a.rnr_retry;
    q.ah_attr.is_global = 1;
    q.ah_attr.port_num = 1;
    std::memcpy(q.ah_attr.grh.dgid.raw, a.ah_attr.dgid.raw, 16);
    q.ah_attr.grh.hop_limit = a.ah_attr.hop_limit;
    q.ah_attr.grh.traffic_class = a.ah_attr.traffic_class;
    q.ah_attr.grh.flow_label = a.ah_attr.flow_label;
    q.ah_attr.grh.sgid_index = a.ah_attr.sgid_index;
    mask = int(t.mask);   // rdma::QpAttrMask has ibv_qp_attr_mask's values
    return q;
}

// A QP's first INIT, before any connection: the partition, the port, and a UD QP's Q_Key (a
// connected QP gets its rights with the connection: INIT again).
void first_init(const Id& id, ibv_qp_attr& out, int& mask) {
    out = {};
    out.qp_state = IBV_QPS_INIT;
    out.pkey_index = 0;
    out.port_num = 1;
    mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    if (id.id.qp_type == IBV_QPT_UD) {
        out.qkey = cm::kRdmaUdpQkey;
        mask |= IBV_QP_QKEY;
    } else {
        out.qp_access_flags = 0;
        mask |= IBV_QP_ACCESS_FLAGS;
    }
}

// The attributes for `state` of the id's QP, as rdma_init_qp_attr gives them: a UD QP's need
// no peer; a connected QP's come from the REQ and REP.
int qp_attr_for(const Id& id, ibv_qp_state state, ibv_qp_attr& out, int& mask) {
    if (id.id.qp_type == IBV_QPT_UD) {
        switch (state) {
        case IBV_QPS_INIT: first_init(id, out, mask); return 0;
        case IBV_QPS_RTR:
            out = {};
            out.qp_state = IBV_QPS_RTR;
            mask = IBV_QP_STATE;
            return 0;
        case IBV_QPS_RTS:
            out = {};
            out.qp_state = IBV_QPS_RTS;
            out.sq_psn = 0;
            mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
            return 0;
        default: return fail(EINVAL);
        }
    }
    const bool connected = id.has_conn || id.state == IdState::established;
    if (!connected) {
        if (state != IBV_QPS_INIT) return fail(EINVAL);
        first_init(id, out, mask);
        return 0;
    }
    if (id.side == cm::Side::active && id.state == IdState::connecting) {   // no REP yet
        if (state != IBV_QPS_INIT) return fail(EINVAL);
        first_init(id, out, mask);
        return 0;
    }
    switch (state) {
    case IBV_QPS_INIT: out = to_ibv(cm::to_init(id.req, id.rep, id.side), mask); return 0;
    case IBV_QPS_RTR: out = to_ibv(cm::to_rtr(id.req, id.rep, id.side, peer_ip_of(id)), mask); return 0;
    case IBV_QPS_RTS: out = to_ibv(cm::to_rts(id.req, id.rep, id.side), mask); return 0;
    default: return fail(EINVAL);
    }
}

int modify(Id& id, ibv_qp_state state) {
    ibv_qp_attr a{};
    int mask = 0;
    if (qp_attr_for(id, state, a, mask)) return -1;
    const int r = ibv_modify_qp(id.id.qp, &a, mask);
    debug("QP %u to %d (mask 0x%x): dest QP %u, rq_psn %u, sq_psn %u, mtu %d, access 0x%x, rd_atomic %u/%u, timeout %u, "
          "retry %u/%u, dgid ::ffff:%08x hop %u: %s",
          id.id.qp->qp_num, int(state), mask, a.dest_qp_num, a.rq_psn, a.sq_psn, int(a.path_mtu), a.qp_access_flags,
          a.max_rd_atomic, a.max_dest_rd_atomic, a.timeout, a.retry_cnt, a.rnr_retry,
          be32toh(*reinterpret_cast<const uint32_t*>(a.ah_attr.grh.dgid.raw + 12)), a.ah_attr.grh.hop_limit,
          r ? strerror(r) : "ok");
    return r ? fail(r) : 0;
}
}  // namespace

int ready_qp(Id& id) {
    if (modify(id, IBV_QPS_INIT) || modify(id, IBV_QPS_RTR) || modify(id, IBV_QPS_RTS)) return -1;
    return 0;
}

int make_own_cqs(Id& id, uint32_t send_wr, uint32_t recv_wr) {
    if (id.id.recv_cq) return 0;
    ibv_context* v = id.dev->verbs;
    id.owns_cqs = true;
    id.id.recv_cq_channel = ibv_create_comp_channel(v);
    id.id.send_cq_channel = ibv_create_comp_channel(v);
    if (id.id.recv_cq_channel && id.id.send_cq_channel) {
        id.id.recv_cq = ibv_create_cq(v, int(std::max(recv_wr, 1u)), &id.id, id.id.recv_cq_channel, 0);
        id.id.send_cq = ibv_create_cq(v, int(std::max(send_wr, 1u)), &id.id, id.id.send_cq_channel, 0);
    }
    if (id.id.recv_cq && id.id.send_cq) return 0;
    const int e = errno ? errno : ENOMEM;
    release_own_cqs(id);
    return fail(e);
}

void release_own_cqs(Id& id) {
    if (!id.owns_cqs) return;
    if (id.id.send_cq) ibv_destroy_cq(id.id.send_cq);
    if (id.id.recv_cq) ibv_destroy_cq(id.id.recv_cq);
    if (id.id.send_cq_channel) ibv_destroy_comp_channel(id.id.send_cq_channel);
    if (id.id.recv_cq_channel) ibv_destroy_comp_channel(id.id.recv_cq_channel);
    id.id.send_cq = id.id.recv_cq = nullptr;
    id.id.send_cq_channel = id.id.recv_cq_channel = nullptr;
    id.owns_cqs = false;
}

ibv_xrcd* xrcd_of(CmDevice& dev) {
    if (!dev.xrcd) {
        ibv_xrcd_init_attr a{};
        a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
        a.fd = -1;   // a domain of this process's own
        a.oflags = O_CREAT;
        dev.xrcd = ibv_open_xrcd(dev.verbs, &a);
    }
    return dev.xrcd;
}

}  // namespace vfab::rdmacm

using namespace vfab::rdmacm;

extern "C" int rdma_create_qp_ex(rdma_cm_id* cm_id, ibv_qp_init_attr_ex* attr) {
    if (!cm_id || !attr) return fail(EINVAL);
    Id& id = *Id::of(cm_id);
    std::lock_guard g(cma().mu);
    if (!id.dev) return fail(EINVAL);   // not bound to a device yet
    if (id.id.qp) return fail(EINVAL);
    if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
        if (!id.id.pd && !id.dev->default_pd) id.dev->default_pd = ibv_alloc_pd(id.dev->verbs);
        attr->pd = id.id.pd ? id.id.pd : id.dev->default_pd;
        if (!attr->pd) return -1;
        attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
    }
    if (attr->pd->context != id.dev->verbs) return fail(EINVAL);
    if (id.id.qp_type == IBV_QPT_XRC_RECV && (!(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !attr->xrcd)) {
        attr->xrcd = xrcd_of(*id.dev);
        if (!attr->xrcd) return -1;
        attr->comp_mask |= IBV_QP_INIT_ATTR_XRCD;
    }
    const bool made_cqs = !id.id.recv_cq && (!attr->send_cq || !attr->recv_cq);
    if (!attr->send_cq || !attr->recv_cq) {   // as rdma_create_ep's ids: CQs with channels of their own
        if (make_own_cqs(id, attr->cap.max_send_wr, attr->cap.max_recv_wr)) return -1;
        if (!attr->send_cq) attr->send_cq = id.id.send_cq;
        if (!attr->recv_cq) attr->recv_cq = id.id.recv_cq;
    }
    if (!attr->srq && id.id.srq && id.id.qp_type != IBV_QPT_XRC_RECV) attr->srq = id.id.srq;
    ibv_qp* qp = ibv_create_qp_ex(id.dev->verbs, attr);
    if (!qp) {
        const int e = errno ? errno : ENOMEM;
        if (made_cqs) release_own_cqs(id);
        return fail(e);
    }
    id.id.qp = qp;
    // As librdmacm: rdma_reg_msgs and the other helpers of <rdma/rdma_verbs.h> use it (an XRC
    // receiver has no PD of its own: the one it was given).
    id.id.pd = qp->pd ? qp->pd : attr->pd;
    // INIT now, ready for receives (a passive side's QP with its connection's rights); a UD QP
    // on to RTS, ready to send (it has no connection).
    ibv_qp_attr a{};
    int mask = 0;
    int r = 0;
    if (id.has_conn && id.side == vfab::cm::Side::passive && id.id.qp_type != IBV_QPT_UD) {
        r = qp_attr_for(id, IBV_QPS_INIT, a, mask) ? errno : ibv_modify_qp(qp, &a, mask);
    } else {
        first_init(id, a, mask);
        r = ibv_modify_qp(qp, &a, mask);
    }
    for (ibv_qp_state next : {IBV_QPS_RTR, IBV_QPS_RTS}) {
        if (r || id.id.qp_type != IBV_QPT_UD) break;
        r = qp_attr_for(id, next, a, mask) ? errno : ibv_modify_qp(qp, &a, mask);
    }
    if (r) {
        ibv_destroy_qp(qp);
        id.id.qp = nullptr;
        return fail(r);
    }
    return 0;
}

extern "C" int rdma_create_qp(rdma_cm_id* cm_id, ibv_pd* pd, ibv_qp_init_attr* attr) {
    if (!cm_id || !attr) return fail(EINVAL);
    ibv_qp_init_attr_ex ex{};
    std::memcpy(&ex, attr, sizeof *attr);
    ex.comp_mask = pd ? IBV_QP_INIT_ATTR_PD : 0;
    ex.pd = pd;
    if (rdma_create_qp_ex(cm_id, &ex)) return -1;
    attr->cap = ex.cap;
    attr->send_cq = ex.send_cq;
    attr->recv_cq = ex.recv_cq;
    return 0;
}

extern "C" void rdma_destroy_qp(rdma_cm_id* cm_id) {
    if (!cm_id || !cm_id->qp) return;
    ibv_destroy_qp(cm_id->qp);
    cm_id->qp = nullptr;
    // An XRC receiver's SRQ completes into recv_cq: the CQs go with the SRQ (rdma_destroy_srq).
    if (cm_id->qp_type == IBV_QPT_XRC_RECV && cm_id->srq) return;
    std::lock_guard g(cma().mu);
    release_own_cqs(*Id::of(cm_id));
}

extern "C" int rdma_init_qp_attr(rdma_cm_id* cm_id, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
    if (!cm_id || !qp_attr || !qp_attr_mask) return fail(EINVAL);
    std::lock_guard g(cma().mu);
    return qp_attr_for(*Id::of(cm_id), qp_attr->qp_state, *qp_attr, *qp_attr_mask);
}
