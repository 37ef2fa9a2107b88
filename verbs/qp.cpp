// Queue pairs: create (ibv_create_qp, ibv_create_qp_ex), modify, query, destroy, and the classic
// post calls, which turn each ibv_send_wr / ibv_recv_wr into the transport's work request on the
// stack (the SGE lists are the program's own: vfab::Sge is struct ibv_sge) and post them in
// batches.
#include <cstring>
#include <new>

#include "objects.hpp"
#include "symver.hpp"

using namespace vfab::verbs;
namespace rdma = vfab::rdma;

namespace {

constexpr uint64_t kSendOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
                              IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                              IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW |
                              IBV_QP_EX_WITH_SEND_WITH_INV;
constexpr uint32_t kInitMask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
                               IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
constexpr int kBatch = 16;   // WRs converted on the stack per call into the transport
// ibv_create_ah's bound on ARP; the port gives up before it (PortConfig::arp_attempts requests).
constexpr uint32_t kAhResolveLimitMs = 10000;

// Room for a batch of WRs, constructed one by one as they are converted (not all kBatch of them
// on every call: a default-constructed RdmaSendWr is some 25 stores).
template <class Wr>
union Slots {
    Wr w[kBatch];
    Slots() {}
};

rdma::Cq* t_of(ibv_cq* cq) { return cq ? Cq::of(cq)->t : nullptr; }

rdma::RdmaSendWr to_wr(const Qp& q, const ibv_send_wr& w) {
    rdma::RdmaSendWr out;
    out.wr_id = w.wr_id;
    out.sg_list = reinterpret_cast<const vfab::Sge*>(w.sg_list);
    out.num_sge = uint32_t(w.num_sge);
    out.opcode = rdma::WrOpcode(w.opcode);
    out.send_flags = w.send_flags;
    out.imm_data = w.imm_data;   // or invalidate_rkey: the same word
    switch (w.opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ:
        out.remote_addr = w.wr.rdma.remote_addr;
        out.rkey = w.wr.rdma.rkey;
        break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
        out.remote_addr = w.wr.atomic.remote_addr;
        out.rkey = w.wr.atomic.rkey;
        out.compare_add = w.wr.atomic.compare_add;
        out.swap = w.wr.atomic.swap;
        break;
    case IBV_WR_BIND_MW:
        out.mem_key = w.bind_mw.mw ? w.bind_mw.mw->rkey : 0;
        out.new_key = w.bind_mw.rkey;
        out.bind.mr_key = w.bind_mw.bind_info.mr ? w.bind_mw.bind_info.mr->lkey : 0;
        out.bind.access = w.bind_mw.bind_info.mw_access_flags;
        out.bind.addr = w.bind_mw.bind_info.addr;
        out.bind.length = w.bind_mw.bind_info.length;
        break;
    default: break;
    }
    if (q.ex.qp_base.qp_type == IBV_QPT_UD) {
        out.ah = w.wr.ud.ah ? Ah::of(w.wr.ud.ah)->t : nullptr;
        out.remote_qpn = w.wr.ud.remote_qpn;
        out.remote_qkey = w.wr.ud.remote_qkey;
    } else if (q.ex.qp_base.qp_type == IBV_QPT_XRC_SEND) {
        out.remote_srqn = w.qp_type.xrc.remote_srqn;
    }
    return out;
}

template <class Post>
int post_recv_list(Post&& post, ibv_recv_wr* wr, ibv_recv_wr** bad) {
    Slots<vfab::RecvWr> batch;
    ibv_recv_wr* src[kBatch];
    while (wr) {
        uint32_t n = 0;
        for (; wr && n < uint32_t(kBatch); wr = wr->next, ++n) {
            new (&batch.w[n]) vfab::RecvWr{wr->wr_id, reinterpret_cast<const vfab::Sge*>(wr->sg_list), uint32_t(wr->num_sge), 0};
            src[n] = wr;
        }
        const vfab::PostResult r = post(std::span<const vfab::RecvWr>(batch.w, n));
        if (r.posted < n) {
            if (bad) *bad = src[r.posted];
            return r.error ? r.error : EINVAL;
        }
    }
    return 0;
}

rdma::AhAttr to_ah(const ibv_ah_attr& a) {
    rdma::AhAttr t;
    std::memcpy(t.dgid.raw, a.grh.dgid.raw, sizeof t.dgid.raw);
    t.hop_limit = a.grh.hop_limit;
    t.traffic_class = a.grh.traffic_class;
    t.flow_label = a.grh.flow_label;
    t.sgid_index = a.grh.sgid_index;
    return t;
}

void from_ah(const rdma::AhAttr& t, ibv_ah_attr& a) {
    a = ibv_ah_attr{};
    a.is_global = 1;
    std::memcpy(a.grh.dgid.raw, t.dgid.raw, sizeof a.grh.dgid.raw);
    a.grh.hop_limit = t.hop_limit;
    a.grh.traffic_class = t.traffic_class;
    a.grh.flow_label = t.flow_label;
    a.grh.sgid_index = t.sgid_index;
    a.port_num = 1;
}

}  // namespace

namespace vfab::verbs {

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
    Qp& q = *Qp::of(qp);
    Slots<rdma::RdmaSendWr> batch;
    ibv_send_wr* src[kBatch];
    while (wr) {
        uint32_t n = 0;
        for (; wr && n < uint32_t(kBatch); wr = wr->next, ++n) {
            new (&batch.w[n]) rdma::RdmaSendWr(to_wr(q, *wr));
            src[n] = wr;
        }
        const vfab::PostResult r = q.t->post_send(std::span<const rdma::RdmaSendWr>(batch.w, n));
        // A type 2 window bound by a WR answers to its new key from now on (it takes effect
        // when posted): the ibv_mw says so, as an RDMA NIC's library updates it.
        for (uint32_t i = 0; i < r.posted; ++i)
            if (src[i]->opcode == IBV_WR_BIND_MW && src[i]->bind_mw.mw) src[i]->bind_mw.mw->rkey = src[i]->bind_mw.rkey;
        if (r.posted < n) {
            if (bad) *bad = src[r.posted];
            return r.error ? r.error : EINVAL;
        }
    }
    return 0;
}

int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
    rdma::Qp* t = Qp::of(qp)->t;
    return post_recv_list([t](std::span<const vfab::RecvWr> w) { return t->post_recv(w); }, wr, bad);
}

int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
    rdma::Srq* t = Srq::of(srq)->t;
    return post_recv_list([t](std::span<const vfab::RecvWr> w) { return t->post_recv(w); }, wr, bad);
}

constexpr uint32_t kMinInlineData = 64;   // inline bytes every QP with a send queue takes

ibv_qp* create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* a) {
    if (!ctx || !a) return fail_null<ibv_qp>(EINVAL);
    if (a->comp_mask & ~kInitMask) return fail_null<ibv_qp>(EOPNOTSUPP);
    if ((a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && (a->send_ops_flags & ~kSendOps))
        return fail_null<ibv_qp>(EOPNOTSUPP);
    const bool tgt = a->qp_type == IBV_QPT_XRC_RECV;
    if (!tgt && !(a->comp_mask & IBV_QP_INIT_ATTR_PD)) return fail_null<ibv_qp>(EINVAL);
    if (tgt && !(a->comp_mask & IBV_QP_INIT_ATTR_XRCD)) return fail_null<ibv_qp>(EINVAL);
    switch (a->qp_type) {
    case IBV_QPT_RC:
    case IBV_QPT_UC:
    case IBV_QPT_UD:
    case IBV_QPT_XRC_SEND:
    case IBV_QPT_XRC_RECV:
    case IBV_QPT_RAW_PACKET: break;
    default: return fail_null<ibv_qp>(EOPNOTSUPP);
    }
    Context& c = *Context::of(ctx);
    rdma::RdmaQpInitAttr t;
    t.qp_type = rdma::QpType(a->qp_type);
    t.send_cq = t_of(a->send_cq);
    t.recv_cq = t_of(a->recv_cq);
    t.srq = a->srq ? Srq::of(a->srq)->t : nullptr;
    t.xrcd = tgt ? Xrcd::of(a->xrcd)->t : nullptr;
    t.cap = {a->cap.max_send_wr, a->cap.max_recv_wr, a->cap.max_send_sge, a->cap.max_recv_sge, a->cap.max_inline_data};
    if (tgt) {   // an XRC receiver has no queues of its own: sizes that pass the transport's checks
        t.send_cq = t.recv_cq = nullptr;
        t.cap = {1, 0, 1, 0, 0};
    }
    // An XRC sender or a QP of an SRQ has no receive queue: its sizes are not looked at.
    if (t.srq || a->qp_type == IBV_QPT_XRC_SEND) t.cap.max_recv_wr = t.cap.max_recv_sge = 0;
    if (t.cap.max_send_sge == 0) t.cap.max_send_sge = 1;
    // Inline sends of a few bytes work whatever the program asked, as on the kernel's providers
    // (rxe rounds up to a WQE's SGE space, mlx5 further): rdma_xclient sends 16 bytes inline with
    // max_inline_data 0. The QP reports what it takes.
    if (!tgt) t.cap.max_inline_data = std::max(t.cap.max_inline_data, kMinInlineData);
    if (!tgt && a->qp_type != IBV_QPT_XRC_SEND && !t.srq && t.cap.max_recv_sge == 0) t.cap.max_recv_sge = 1;
    t.sq_sig_all = a->sq_sig_all != 0;
    t.create_flags = a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS ? a->create_flags : 0;
    auto r = c.port->create_qp(t);
    if (!r) return fail_null<ibv_qp>(r.error().code);
    auto* q = new Qp{};
    q->t = *r;
    q->ctx = &c;
    q->max_send_wr = t.cap.max_send_wr;
    q->max_recv_wr = t.cap.max_recv_wr;
    q->max_send_sge = t.cap.max_send_sge;
    q->max_recv_sge = t.cap.max_recv_sge;
    q->max_inline = t.cap.max_inline_data;
    ibv_qp& b = q->ex.qp_base;
    b.context = ctx;
    b.qp_context = a->qp_context;
    b.pd = a->comp_mask & IBV_QP_INIT_ATTR_PD ? a->pd : nullptr;
    b.send_cq = a->send_cq;
    b.recv_cq = a->recv_cq;
    b.srq = a->srq;
    b.handle = q->t->qp_num();
    b.qp_num = q->t->qp_num();
    b.state = IBV_QPS_RESET;
    b.qp_type = a->qp_type;
    pthread_mutex_init(&b.mutex, nullptr);
    pthread_cond_init(&b.cond, nullptr);
    if (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
        q->has_ex = true;
        fill_qp_ex_ops(*q);
    }
    if (tgt) {
        q->handles = std::make_shared<std::vector<Qp*>>(1, q);
        q->xrcd = a->xrcd;
    }
    // What the QP got, as a provider reports it back.
    a->cap = {t.cap.max_send_wr, t.cap.max_recv_wr, t.cap.max_send_sge, t.cap.max_recv_sge, t.cap.max_inline_data};
    track(c, q->t, q);
    return &b;
}

}  // namespace vfab::verbs

extern "C" ibv_qp* vfab_ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
    if (!pd || !attr) return fail_null<ibv_qp>(EINVAL);
    ibv_qp_init_attr_ex ex{};
    std::memcpy(&ex, attr, sizeof *attr);
    ex.comp_mask = IBV_QP_INIT_ATTR_PD;
    ex.pd = pd;
    ibv_qp* qp = create_qp_ex(pd->context, &ex);
    if (qp) attr->cap = ex.cap;
    return qp;
}
VFAB_VERBS_1_1(ibv_create_qp);

ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
    Qp* q = Qp::of(qp);
    return q->has_ex ? &q->ex : nullptr;
}

extern "C" int vfab_ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* a, int mask) {
    if (!qp || !a) return fail(EINVAL);
    Qp& q = *Qp::of(qp);
    rdma::QpAttr t = q.t->query();
    // cur_qp_state is checked here: the transport takes the state to move to only.
    if ((mask & IBV_QP_CUR_STATE) && rdma::RdmaQpState(a->cur_qp_state) != q.t->state()) return fail(EINVAL);
    const uint32_t m = uint32_t(mask) & ~uint32_t(IBV_QP_CUR_STATE);
    if (m & IBV_QP_STATE) t.qp_state = rdma::RdmaQpState(a->qp_state);
    if (m & IBV_QP_PATH_MTU) t.path_mtu = a->path_mtu;
    if (m & IBV_QP_QKEY) t.qkey = a->qkey;
    if (m & IBV_QP_RQ_PSN) t.rq_psn = a->rq_psn;
    if (m & IBV_QP_SQ_PSN) t.sq_psn = a->sq_psn;
    if (m & IBV_QP_DEST_QPN) t.dest_qp_num = a->dest_qp_num;
    if (m & IBV_QP_ACCESS_FLAGS) t.qp_access_flags = a->qp_access_flags;
    if (m & IBV_QP_AV) {
        if (!a->ah_attr.is_global) return fail(EINVAL);   // RoCE routes by GID: a GRH is required
        t.ah_attr = to_ah(a->ah_attr);
    }
    if (m & IBV_QP_PKEY_INDEX) t.pkey_index = a->pkey_index;
    if (m & IBV_QP_PORT) {
        if (a->port_num != 1) return fail(EINVAL);
        t.port_num = a->port_num;
    }
    if (m & IBV_QP_MAX_QP_RD_ATOMIC) t.max_rd_atomic = a->max_rd_atomic;
    if (m & IBV_QP_MAX_DEST_RD_ATOMIC) t.max_dest_rd_atomic = a->max_dest_rd_atomic;
    if (m & IBV_QP_MIN_RNR_TIMER) t.min_rnr_timer = a->min_rnr_timer;
    if (m & IBV_QP_TIMEOUT) t.timeout = a->timeout;
    if (m & IBV_QP_RETRY_CNT) t.retry_cnt = a->retry_cnt;
    if (m & IBV_QP_RNR_RETRY) t.rnr_retry = a->rnr_retry;
    if (auto r = q.t->modify(t, m); !r) return fail(r.error().code);
    if (m & IBV_QP_STATE) qp->state = a->qp_state;
    return 0;
}
VFAB_VERBS_1_1(ibv_modify_qp);

extern "C" int vfab_ibv_query_qp(ibv_qp* qp, ibv_qp_attr* a, int mask, ibv_qp_init_attr* init) {
    if (!qp || !a || !init) return fail(EINVAL);
    (void)mask;   // every attribute is reported
    Qp& q = *Qp::of(qp);
    const rdma::QpAttr t = q.t->query();
    *a = ibv_qp_attr{};
    a->qp_state = ibv_qp_state(t.qp_state);   // the state of the same snapshot
    a->cur_qp_state = a->qp_state;
    a->path_mtu = ibv_mtu(t.path_mtu);
    a->path_mig_state = IBV_MIG_MIGRATED;
    a->qkey = t.qkey;
    a->rq_psn = t.rq_psn;
    a->sq_psn = t.sq_psn;
    a->dest_qp_num = t.dest_qp_num;
    a->qp_access_flags = t.qp_access_flags;
    from_ah(t.ah_attr, a->ah_attr);
    a->pkey_index = t.pkey_index;
    a->port_num = t.port_num;
    a->max_rd_atomic = t.max_rd_atomic;
    a->max_dest_rd_atomic = t.max_dest_rd_atomic;
    a->min_rnr_timer = t.min_rnr_timer;
    a->timeout = t.timeout;
    a->retry_cnt = t.retry_cnt;
    a->rnr_retry = t.rnr_retry;
    a->cap = {q.max_send_wr, q.max_recv_wr, q.max_send_sge, q.max_recv_sge, q.max_inline};
    *init = ibv_qp_init_attr{};
    init->qp_context = qp->qp_context;
    init->send_cq = qp->send_cq;
    init->recv_cq = qp->recv_cq;
    init->srq = qp->srq;
    init->cap = a->cap;
    init->qp_type = qp->qp_type;
    return 0;
}
VFAB_VERBS_1_1(ibv_query_qp);

// ibv_open_qp: another handle on an XRC receive QP of this process, found by its number and
// domain (a domain is the process's own: docs/verbs.md).
ibv_qp* vfab::verbs::open_qp(ibv_context* ctx, ibv_qp_open_attr* a) {
    constexpr uint32_t need = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
    if (!ctx || !a || (a->comp_mask & need) != need || a->comp_mask & ~uint32_t(need | IBV_QP_OPEN_ATTR_CONTEXT))
        return fail_null<ibv_qp>(EINVAL);
    if (a->qp_type != IBV_QPT_XRC_RECV || !a->xrcd) return fail_null<ibv_qp>(EINVAL);
    Context& c = *Context::of(ctx);
    Qp* found = nullptr;
    {
        OpenDevice& d = c.device->open;
        std::lock_guard g(d.objects_mu);
        for (auto& [t, v] : d.verbs_of) {
            Qp* q = static_cast<Qp*>(v);
            if (q->handles && q->t->qp_num() == a->qp_num && Xrcd::of(q->xrcd)->t == Xrcd::of(a->xrcd)->t) found = q;
        }
    }
    if (!found) return fail_null<ibv_qp>(ENOENT);
    auto* q = new Qp{};
    q->t = found->t;
    q->ctx = &c;
    q->handles = found->handles;
    q->handles->push_back(q);
    q->xrcd = a->xrcd;
    q->ex.qp_base = found->ex.qp_base;
    q->ex.qp_base.context = ctx;
    q->ex.qp_base.qp_context = a->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT ? a->qp_context : nullptr;
    pthread_mutex_init(&q->ex.qp_base.mutex, nullptr);
    pthread_cond_init(&q->ex.qp_base.cond, nullptr);
    return q->ibv();
}

extern "C" int vfab_ibv_destroy_qp(ibv_qp* qp) {
    if (!qp) return fail(EINVAL);
    Qp* q = Qp::of(qp);
    if (q->handles && q->handles->size() > 1) {   // another handle keeps the XRC receive QP
        std::erase(*q->handles, q);
        track(*q->handles->front()->ctx, q->t, q->handles->front());   // its events go to a live handle
        pthread_cond_destroy(&qp->cond);
        pthread_mutex_destroy(&qp->mutex);
        delete q;
        return 0;
    }
    if (auto r = q->t->destroy(); !r) return fail(r.error().code);
    untrack(*q->ctx, q->t);
    pthread_cond_destroy(&qp->cond);
    pthread_mutex_destroy(&qp->mutex);
    delete q;
    return 0;
}
VFAB_VERBS_1_1(ibv_destroy_qp);

int ibv_query_qp_data_in_order(ibv_qp*, ibv_wr_opcode, uint32_t) {
    return 0;   // data may be seen before the completion says so: no ordering guarantees beyond the spec's
}

// ---- address handles -----------------------------------------------------------------------------

extern "C" ibv_ah* vfab_ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
    if (!pd || !attr) return fail_null<ibv_ah>(EINVAL);
    if (!attr->is_global) return fail_null<ibv_ah>(EINVAL);   // RoCE: the destination is a GID
    auto r = Context::of(pd->context)->port->create_ah(to_ah(*attr));
    if (!r) return fail_null<ibv_ah>(r.error().code);
    // As a RoCE device's create_ah, which the kernel returns from once the neighbour is known:
    // programs reuse a UD send's buffer early (UCX's connection set-up does), so no send may
    // wait for ARP with the buffer unread (AddressHandle::wait_resolved).
    if (auto w = (*r)->wait_resolved(kAhResolveLimitMs); !w) {
        (void)(*r)->destroy();
        return fail_null<ibv_ah>(w.error().code);
    }
    auto* a = new Ah{};
    a->t = *r;
    a->ah.context = pd->context;
    a->ah.pd = pd;
    return &a->ah;
}
VFAB_VERBS_1_1(ibv_create_ah);

extern "C" int vfab_ibv_destroy_ah(ibv_ah* ah) {
    if (!ah) return fail(EINVAL);
    Ah* a = Ah::of(ah);
    (void)a->t->destroy();
    delete a;
    return 0;
}
VFAB_VERBS_1_1(ibv_destroy_ah);

// The way back to a UD sender (IB spec 11.2.2 / rdma-core's ibv_init_ah_from_wc): for RoCEv2
// over IPv4 the 40 bytes before the payload are 20 zero bytes and the sender's IPv4 header.
int ibv_init_ah_from_wc(ibv_context* ctx, uint8_t port, ibv_wc* wc, ibv_grh* grh, ibv_ah_attr* ah) {
    if (!ctx || !wc || !ah || port != 1) return fail(EINVAL);
    *ah = ibv_ah_attr{};
    ah->dlid = wc->slid;
    ah->sl = wc->sl;
    ah->port_num = port;
    if (!(wc->wc_flags & IBV_WC_GRH) || !grh) return fail(EINVAL);   // RoCE needs the sender's GID
    const uint8_t* ip = reinterpret_cast<const uint8_t*>(grh) + 20;
    ah->is_global = 1;
    if ((ip[0] >> 4) == 4) {
        const uint32_t src = uint32_t(ip[12]) << 24 | uint32_t(ip[13]) << 16 | uint32_t(ip[14]) << 8 | ip[15];
        const rdma::Gid g = rdma::Gid::from_ipv4(src);
        std::memcpy(ah->grh.dgid.raw, g.raw, 16);
        ah->grh.traffic_class = ip[1];
    } else {
        std::memcpy(ah->grh.dgid.raw, grh->sgid.raw, 16);
        ah->grh.traffic_class = uint8_t(be32toh(grh->version_tclass_flow) >> 20);
        ah->grh.flow_label = be32toh(grh->version_tclass_flow) & 0xFFFFF;
    }
    ah->grh.hop_limit = 0xFF;
    ah->grh.sgid_index = 0;
    return 0;
}

ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port) {
    ibv_ah_attr a;
    if (!pd || ibv_init_ah_from_wc(pd->context, port, wc, grh, &a)) return nullptr;
    return vfab_ibv_create_ah(pd, &a);
}

// ---- multicast --------------------------------------------------------------------------------------

namespace {
int mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid, bool attach) {
    if (!qp || !gid) return fail(EINVAL);
    rdma::Gid g;
    std::memcpy(g.raw, gid->raw, 16);
    rdma::Qp& t = *Qp::of(qp)->t;
    auto r = attach ? t.attach_mcast(g, lid) : t.detach_mcast(g, lid);
    return r ? 0 : fail(r.error().code);
}
}  // namespace

extern "C" int vfab_ibv_attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) { return mcast(qp, gid, lid, true); }
VFAB_VERBS_1_1(ibv_attach_mcast);

extern "C" int vfab_ibv_detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) { return mcast(qp, gid, lid, false); }
VFAB_VERBS_1_1(ibv_detach_mcast);

// ---- type 1 memory windows, bound through a queue pair ----------------------------------------------

int vfab::verbs::bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* b) {
    if (!qp || !mw || !b) return EINVAL;
    if (mw->type != IBV_MW_TYPE_1) return EINVAL;
    rdma::MwBindInfo info;
    info.mr_key = b->bind_info.mr ? b->bind_info.mr->lkey : 0;
    info.access = b->bind_info.mw_access_flags;
    info.addr = b->bind_info.addr;
    info.length = b->bind_info.length;
    auto r = Qp::of(qp)->t->bind_mw(mw->rkey, info, b->wr_id, b->send_flags);
    if (!r) return r.error().code;
    mw->rkey = *r;
    return 0;
}
