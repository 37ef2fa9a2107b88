// A context's function tables (the inline calls of <infiniband/verbs.h> go through them) and its
// asynchronous events: async_fd is an eventfd counting the events not yet taken (EFD_SEMAPHORE),
// so ibv_get_async_event blocks, or fails with EAGAIN when the program made the fd non-blocking,
// exactly as on a kernel device.
#include <unistd.h>

#include <cstring>

#include "objects.hpp"
#include "symver.hpp"

using namespace vfab::verbs;

void vfab::verbs::fill_context_ops(Context& c) {
    ibv_context_ops& o = c.vctx.context.ops;
    o.alloc_mw = alloc_mw;
    o.bind_mw = bind_mw;
    o.dealloc_mw = dealloc_mw;
    o.poll_cq = poll_cq;
    o.req_notify_cq = req_notify_cq;
    o.post_srq_recv = post_srq_recv;
    o.post_send = post_send;
    o.post_recv = post_recv;
    verbs_context& v = c.vctx;
    v.query_port = query_port;
    v.query_device_ex = query_device_ex;
    v.create_cq_ex = create_cq_ex;
    v.create_qp_ex = create_qp_ex;
    v.create_srq_ex = create_srq_ex;
    v.get_srq_num = get_srq_num;
    v.open_xrcd = open_xrcd;
    v.close_xrcd = close_xrcd;
    v.open_qp = open_qp;
    v.ibv_create_flow = create_flow;
    v.ibv_destroy_flow = destroy_flow;
}

void vfab::verbs::queue_async_event(Context& c, const ibv_async_event& e) {
    {
        std::lock_guard g(c.async_mu);
        c.async_events.push_back(e);
    }
    const uint64_t one = 1;
    (void)!::write(c.async_fd.get(), &one, sizeof one);
}

void vfab::verbs::track(Context& c, const void* t, void* v) {
    OpenDevice& d = c.device->open;
    std::lock_guard g(d.objects_mu);
    d.verbs_of[t] = v;
}

void vfab::verbs::untrack(Context& c, const void* t) {
    OpenDevice& d = c.device->open;
    std::lock_guard g(d.objects_mu);
    d.verbs_of.erase(t);
}

// The transport's event types are ibv_event_type's values (vfab/rdma/verbs.hpp).
void vfab::verbs::route_async_event(void* device, const rdma::AsyncEvent& e) {
    OpenDevice& d = static_cast<Device*>(device)->open;
    std::lock_guard g(d.objects_mu);
    ibv_async_event ev{};
    ev.event_type = ibv_event_type(e.type);
    const void* object = e.srq ? static_cast<const void*>(e.srq) : e.cq ? static_cast<const void*>(e.cq) : e.qp;
    if (!object) {   // the port's: every context open on the device hears it
        ev.element.port_num = 1;
        for (Context* c : d.open_contexts) queue_async_event(*c, ev);
        return;
    }
    auto it = d.verbs_of.find(object);
    if (it == d.verbs_of.end()) return;   // being destroyed
    Context* owner = nullptr;
    if (e.srq) {
        Srq* s = static_cast<Srq*>(it->second);
        ev.element.srq = &s->srq;
        owner = Context::of(s->srq.context);
    } else if (e.cq) {
        Cq* q = static_cast<Cq*>(it->second);
        ev.element.cq = q->ibv();
        owner = q->ctx;
    } else {
        Qp* q = static_cast<Qp*>(it->second);
        ev.element.qp = q->ibv();
        owner = q->ctx;
    }
    queue_async_event(*owner, ev);
}

extern "C" int vfab_ibv_get_async_event(ibv_context* ctx, ibv_async_event* event) {
    if (!ctx || !event) return fail(EINVAL);
    Context& c = *Context::of(ctx);
    uint64_t v;
    if (::read(c.async_fd.get(), &v, sizeof v) != sizeof v) return -1;
    std::lock_guard g(c.async_mu);
    if (c.async_events.empty()) return fail(EAGAIN), -1;
    *event = c.async_events.front();
    c.async_events.erase(c.async_events.begin());
    return 0;
}
VFAB_VERBS_1_1(ibv_get_async_event);

extern "C" void vfab_ibv_ack_async_event(ibv_async_event*) {}
VFAB_VERBS_1_1(ibv_ack_async_event);
