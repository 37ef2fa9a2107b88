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
}

void vfab::verbs::queue_async_event(Context& c, const ibv_async_event& e) {
    {
        std::lock_guard g(c.async_mu);
        c.async_events.push_back(e);
    }
    const uint64_t one = 1;
    (void)!::write(c.async_fd.get(), &one, sizeof one);
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
