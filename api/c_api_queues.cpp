// The C API (vfab.h), completion queues and queue pairs. The fast path (post, poll) is one
// call into the multiplexed API with the caller's arrays as they are: no copy, no allocation.
#include "api/c_api_internal.hpp"

using namespace vfab;
using capi::fail;
using capi::null_arg;

extern "C" {

vfab_cq* vfab_create_cq(vfab_device* dev, uint32_t cqe) {
    if (!dev) {
        errno = null_arg("vfab_create_cq", "dev");
        return nullptr;
    }
    auto cq = dev->dev->create_cq(cqe);
    if (!cq) {
        errno = fail(cq.error());
        return nullptr;
    }
    return capi::handle_of(*cq);
}

int vfab_destroy_cq(vfab_cq* cq) {
    if (!cq) return null_arg("vfab_destroy_cq", "cq");
    if (auto r = capi::cq_of(cq)->destroy(); !r) return fail(r.error());
    return 0;
}

int vfab_poll_cq(vfab_cq* cq, int num_entries, vfab_completion* wc) {
    if (!cq || (!wc && num_entries > 0) || num_entries < 0) [[unlikely]]
        return -EINVAL;
    return capi::cq_of(cq)->poll({reinterpret_cast<Completion*>(wc), size_t(num_entries)});
}

int vfab_req_notify_cq(vfab_cq* cq) {
    if (!cq) return null_arg("vfab_req_notify_cq", "cq");
    if (auto r = capi::cq_of(cq)->arm(); !r) return fail(r.error());
    return 0;
}

int vfab_cq_channel_fd(vfab_cq* cq) {
    if (!cq) return -null_arg("vfab_cq_channel_fd", "cq");
    return capi::cq_of(cq)->channel_fd();
}

int64_t vfab_cq_take_events(vfab_cq* cq) {
    if (!cq) return -null_arg("vfab_cq_take_events", "cq");
    return int64_t(capi::cq_of(cq)->take_events());
}

namespace {

// vfab_create_qp's and vfab_create_qp_ex's common attributes, defaults filled in.
void common_attr(const vfab_qp_init_attr& attr, QpInitAttr& a) {
    a.send_cq = capi::cq_of(attr.send_cq);
    a.recv_cq = capi::cq_of(attr.recv_cq);
    const QpCaps defaults;
    a.caps.max_send_wr = attr.caps.max_send_wr ? attr.caps.max_send_wr : defaults.max_send_wr;
    a.caps.max_recv_wr = attr.caps.max_recv_wr ? attr.caps.max_recv_wr : defaults.max_recv_wr;
    a.caps.max_send_sge = attr.caps.max_send_sge ? attr.caps.max_send_sge : defaults.max_send_sge;
    a.caps.max_recv_sge = attr.caps.max_recv_sge ? attr.caps.max_recv_sge : defaults.max_recv_sge;
    a.sq_sig_all = attr.sq_sig_all != 0;
}

vfab_qp* created(Result<QueuePair*> qp) {
    if (!qp) {
        errno = fail(qp.error());
        return nullptr;
    }
    return capi::handle_of(*qp);
}

}  // namespace

vfab_qp* vfab_create_qp(vfab_device* dev, const vfab_qp_init_attr* attr) {
    if (!dev || !attr) {
        errno = null_arg("vfab_create_qp", dev ? "attr" : "dev");
        return nullptr;
    }
    QpInitAttr a;
    common_attr(*attr, a);
    return created(dev->dev->create_qp(a));
}

vfab_qp* vfab_create_qp_ex(vfab_device* dev, const vfab_qp_init_attr_ex* attr) {
    if (!dev || !attr) {
        errno = null_arg("vfab_create_qp_ex", dev ? "attr" : "dev");
        return nullptr;
    }
    QpInitAttr b;
    common_attr({attr->send_cq, attr->recv_cq, attr->caps, attr->sq_sig_all}, b);
    const QpInitAttrEx a{b.send_cq, b.recv_cq, b.caps, b.sq_sig_all, attr->comp_mask, attr->create_flags};
    return created(dev->dev->create_qp_ex(a));
}

int vfab_frame_headroom(vfab_device* dev) {
    if (!dev) return -null_arg("vfab_frame_headroom", "dev");
    return int(dev->dev->attr().frame_headroom);
}

int vfab_destroy_qp(vfab_qp* qp) {
    if (!qp) return null_arg("vfab_destroy_qp", "qp");
    if (auto r = capi::qp_of(qp)->destroy(); !r) return fail(r.error());
    return 0;
}

int vfab_query_qp(vfab_qp* qp, vfab_qp_attr* out) {
    if (!qp) return null_arg("vfab_query_qp", "qp");
    if (!out) return null_arg("vfab_query_qp", "attr");
    const QueuePair* q = capi::qp_of(qp);
    const QpCaps& c = q->caps();
    *out = {int(q->state()), q->qp_num(), {c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge}, q->queue()};
    return 0;
}

int vfab_query_qp_stats(vfab_qp* qp, struct vfab_qp_stats* out) {
    if (!qp) return null_arg("vfab_query_qp_stats", "qp");
    if (!out) return null_arg("vfab_query_qp_stats", "stats");
    const QpStats s = capi::qp_of(qp)->stats();
    *out = {s.tx_packets, s.tx_bytes, s.rx_packets, s.rx_bytes};
    return 0;
}

int vfab_post_send(vfab_qp* qp, const vfab_send_wr* wrs, uint32_t num, uint32_t* posted) {
    if (posted) *posted = 0;
    if (!qp || (!wrs && num)) [[unlikely]]
        return EINVAL;
    const PostResult r = capi::qp_of(qp)->post_send({reinterpret_cast<const SendWr*>(wrs), num});
    if (posted) *posted = r.posted;
    return r.error;
}

int vfab_post_recv(vfab_qp* qp, const vfab_recv_wr* wrs, uint32_t num, uint32_t* posted) {
    if (posted) *posted = 0;
    if (!qp || (!wrs && num)) [[unlikely]]
        return EINVAL;
    const PostResult r = capi::qp_of(qp)->post_recv({reinterpret_cast<const RecvWr*>(wrs), num});
    if (posted) *posted = r.posted;
    return r.error;
}

}  // extern "C"
