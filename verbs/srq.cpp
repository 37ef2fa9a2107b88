// Shared receive queues (basic and XRC) and XRC domains over the transport's.
#include <fcntl.h>

#include <cstring>

#include "objects.hpp"
#include "symver.hpp"

using namespace vfab::verbs;
namespace rdma = vfab::rdma;

namespace {

ibv_srq* wrap_srq(rdma::Srq* t, ibv_context* ctx, ibv_pd* pd, void* srq_context, uint32_t max_sge) {
    auto* s = new Srq{};
    s->t = t;
    s->max_sge = max_sge;
    s->srq.context = ctx;
    s->srq.srq_context = srq_context;
    s->srq.pd = pd;
    s->srq.handle = t->srq_num();
    pthread_mutex_init(&s->srq.mutex, nullptr);
    pthread_cond_init(&s->srq.cond, nullptr);
    track(*Context::of(ctx), t, s);
    return &s->srq;
}

}  // namespace

extern "C" ibv_srq* vfab_ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
    if (!pd || !attr) return fail_null<ibv_srq>(EINVAL);
    const rdma::SrqAttr a{attr->attr.max_wr, attr->attr.max_sge, attr->attr.srq_limit};
    auto r = Context::of(pd->context)->port->create_srq(a);
    if (!r) return fail_null<ibv_srq>(r.error().code);
    return wrap_srq(*r, pd->context, pd, attr->srq_context, a.max_sge);
}
VFAB_VERBS_1_1(ibv_create_srq);

ibv_srq* vfab::verbs::create_srq_ex(ibv_context* ctx, ibv_srq_init_attr_ex* attr) {
    if (!ctx || !attr) return fail_null<ibv_srq>(EINVAL);
    constexpr uint32_t known = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    if (attr->comp_mask & ~known) return fail_null<ibv_srq>(EOPNOTSUPP);
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD)) return fail_null<ibv_srq>(EINVAL);
    const ibv_srq_type type = attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE ? attr->srq_type : IBV_SRQT_BASIC;
    const rdma::SrqAttr a{attr->attr.max_wr, attr->attr.max_sge, attr->attr.srq_limit};
    rdma::Port& port = *Context::of(ctx)->port;
    Result<rdma::Srq*> r = Error{EOPNOTSUPP, ""};
    if (type == IBV_SRQT_BASIC) {
        r = port.create_srq(a);
    } else if (type == IBV_SRQT_XRC) {
        if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->xrcd || !attr->cq)
            return fail_null<ibv_srq>(EINVAL);
        r = port.create_xrc_srq(a, Xrcd::of(attr->xrcd)->t, Cq::of(attr->cq)->t);
    } else {
        return fail_null<ibv_srq>(EOPNOTSUPP);   // tag matching
    }
    if (!r) return fail_null<ibv_srq>(r.error().code);
    return wrap_srq(*r, ctx, attr->pd, attr->srq_context, a.max_sge);
}

extern "C" int vfab_ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
    if (!srq || !attr) return fail(EINVAL);
    auto r = Srq::of(srq)->t->modify(rdma::SrqAttr{attr->max_wr, attr->max_sge, attr->srq_limit}, uint32_t(mask));
    return r ? 0 : fail(r.error().code);
}
VFAB_VERBS_1_1(ibv_modify_srq);

extern "C" int vfab_ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
    if (!srq || !attr) return fail(EINVAL);
    const rdma::SrqAttr a = Srq::of(srq)->t->query();
    *attr = {a.max_wr, a.max_sge, a.srq_limit};
    return 0;
}
VFAB_VERBS_1_1(ibv_query_srq);

extern "C" int vfab_ibv_destroy_srq(ibv_srq* srq) {
    if (!srq) return fail(EINVAL);
    Srq* s = Srq::of(srq);
    if (auto r = s->t->destroy(); !r) return fail(r.error().code);
    untrack(*Context::of(srq->context), s->t);
    pthread_cond_destroy(&srq->cond);
    pthread_mutex_destroy(&srq->mutex);
    delete s;
    return 0;
}
VFAB_VERBS_1_1(ibv_destroy_srq);

int vfab::verbs::get_srq_num(ibv_srq* srq, uint32_t* num) {
    if (!srq || !num) return EINVAL;
    *num = Srq::of(srq)->t->srq_num();
    return 0;
}

// ---- XRC domains ------------------------------------------------------------------------------------
// A domain is the process's own (the transport's): a file named by fd cannot share one with
// another process, so O_CREAT is what is asked for; an fd is accepted and not looked at.

ibv_xrcd* vfab::verbs::open_xrcd(ibv_context* ctx, ibv_xrcd_init_attr* attr) {
    if (!ctx || !attr) return fail_null<ibv_xrcd>(EINVAL);
    if (attr->comp_mask & ~uint32_t(IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS | IBV_XRCD_INIT_ATTR_RESERVED))
        return fail_null<ibv_xrcd>(EINVAL);
    auto r = Context::of(ctx)->port->create_xrcd();
    if (!r) return fail_null<ibv_xrcd>(r.error().code);
    auto* x = new Xrcd{};
    x->t = *r;
    x->xrcd.context = ctx;
    return &x->xrcd;
}

int vfab::verbs::close_xrcd(ibv_xrcd* xrcd) {
    if (!xrcd) return EINVAL;
    Xrcd* x = Xrcd::of(xrcd);
    if (auto r = x->t->destroy(); !r) return r.error().code;
    delete x;
    return 0;
}
