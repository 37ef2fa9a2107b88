// Completion queues and completion channels. ibv_poll_cq is the transport's poll into the
// program's array (rdma::Wc is struct ibv_wc field for field). A channel is an eventfd that
// counts the CQ events not yet taken (EFD_SEMAPHORE): the transport's CQ calls on_notify()
// when an armed CQ fires, which queues the CQ on its channel and counts one; ibv_get_cq_event
// reads one count, which blocks or fails with EAGAIN as the program set the fd, and takes the
// oldest event.
#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <bit>
#include <cstring>

#include "objects.hpp"
#include "symver.hpp"

using namespace vfab::verbs;

namespace {

// From the transport, under the port's lock, on whichever thread ran the progress.
void on_notify(void* arg) {
    Cq* q = static_cast<Cq*>(arg);
    CompChannel* ch = q->channel;
    std::lock_guard g(ch->mu);
    ++q->pending;
    if (!q->queued) {
        q->queued = true;
        q->next_event = nullptr;
        (ch->tail ? ch->tail->next_event : ch->head) = q;
        ch->tail = q;
    }
    const uint64_t one = 1;
    (void)!::write(ch->ch.fd, &one, sizeof one);
}

// The events of `q` not taken: off its channel's list, and their counts off the eventfd.
void drop_events(Cq& q) {
    CompChannel* ch = q.channel;
    if (!ch) return;
    std::lock_guard g(ch->mu);
    if (!q.queued) return;
    Cq** link = &ch->head;
    Cq* prev = nullptr;
    while (*link && *link != &q) prev = *link, link = &(*link)->next_event;
    if (*link) *link = q.next_event;
    if (ch->tail == &q) ch->tail = prev;
    q.queued = false;
    // The counts are taken back without blocking: a program may read the fd in another thread.
    const int flags = fcntl(ch->ch.fd, F_GETFL);
    (void)fcntl(ch->ch.fd, F_SETFL, flags | O_NONBLOCK);
    uint64_t v;
    for (; q.pending; --q.pending) (void)!::read(ch->ch.fd, &v, sizeof v);
    (void)fcntl(ch->ch.fd, F_SETFL, flags);
}

// ---- the extended poll (struct ibv_cq_ex) ------------------------------------------------------

int next_wc(Cq& q) {
    const int n = q.t->poll(std::span<vfab::rdma::Wc>(&q.cur, 1));
    if (n < 0) return -n;
    if (n == 0) return ENOENT;
    q.ex.wr_id = q.cur.wr_id;
    q.ex.status = ibv_wc_status(q.cur.status);
    return 0;
}
int start_poll(ibv_cq_ex* cq, ibv_poll_cq_attr* attr) {
    if (attr && attr->comp_mask) return EINVAL;
    return next_wc(*Cq::of(cq));
}
int next_poll(ibv_cq_ex* cq) { return next_wc(*Cq::of(cq)); }
void end_poll(ibv_cq_ex*) {}
const vfab::rdma::Wc& cur(ibv_cq_ex* cq) { return Cq::of(cq)->cur; }
ibv_wc_opcode read_opcode(ibv_cq_ex* cq) { return ibv_wc_opcode(cur(cq).opcode); }
uint32_t read_vendor_err(ibv_cq_ex* cq) { return cur(cq).vendor_err; }
uint32_t read_byte_len(ibv_cq_ex* cq) { return cur(cq).byte_len; }
__be32 read_imm_data(ibv_cq_ex* cq) { return cur(cq).imm_data; }
uint32_t read_qp_num(ibv_cq_ex* cq) { return cur(cq).qp_num; }
uint32_t read_src_qp(ibv_cq_ex* cq) { return cur(cq).src_qp; }
unsigned int read_wc_flags(ibv_cq_ex* cq) { return cur(cq).wc_flags; }
uint32_t read_slid(ibv_cq_ex* cq) { return cur(cq).slid; }
uint8_t read_sl(ibv_cq_ex* cq) { return cur(cq).sl; }
uint8_t read_dlid_path_bits(ibv_cq_ex* cq) { return cur(cq).dlid_path_bits; }

// What the transport's CQs give: every field of struct ibv_wc, no timestamps, VLANs or tags.
constexpr uint64_t kWcFlags = IBV_WC_STANDARD_FLAGS;

Cq* make_cq(ibv_context* ctx, uint32_t cqe, void* cq_context, ibv_comp_channel* channel, uint64_t wc_flags, int& err) {
    if (!ctx || cqe == 0) return err = EINVAL, nullptr;
    if (wc_flags & ~kWcFlags) return err = EOPNOTSUPP, nullptr;
    Context& c = *Context::of(ctx);
    auto t = c.port->create_cq(cqe);
    if (!t) return err = t.error().code, nullptr;
    auto* q = new Cq{};
    q->t = *t;
    q->ctx = &c;
    q->channel = channel ? CompChannel::of(channel) : nullptr;
    ibv_cq_ex& ex = q->ex;
    ex.context = ctx;
    ex.channel = channel;
    ex.cq_context = cq_context;
    ex.handle = 0;
    ex.cqe = int(std::bit_ceil(cqe));   // the room the transport's CQ has
    pthread_mutex_init(&ex.mutex, nullptr);
    pthread_cond_init(&ex.cond, nullptr);
    ex.start_poll = start_poll;
    ex.next_poll = next_poll;
    ex.end_poll = end_poll;
    ex.read_opcode = read_opcode;
    ex.read_vendor_err = read_vendor_err;
    ex.read_byte_len = read_byte_len;
    ex.read_imm_data = read_imm_data;
    ex.read_qp_num = read_qp_num;
    ex.read_src_qp = read_src_qp;
    ex.read_wc_flags = read_wc_flags;
    ex.read_slid = read_slid;
    ex.read_sl = read_sl;
    ex.read_dlid_path_bits = read_dlid_path_bits;
    if (q->channel) q->t->set_notify_hook(on_notify, q);
    track(c, q->t, q);
    return q;
}

}  // namespace

namespace vfab::verbs {

int poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
    return Cq::of(cq)->t->poll(std::span<rdma::Wc>(reinterpret_cast<rdma::Wc*>(wc), size_t(n > 0 ? n : 0)));
}

int req_notify_cq(ibv_cq* cq, int solicited_only) {
    auto r = Cq::of(cq)->t->arm(solicited_only != 0);
    return r ? 0 : r.error().code;
}

ibv_cq_ex* create_cq_ex(ibv_context* ctx, ibv_cq_init_attr_ex* attr) {
    if (!attr) return fail_null<ibv_cq_ex>(EINVAL);
    if (attr->comp_mask & ~uint32_t(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD))
        return fail_null<ibv_cq_ex>(EINVAL);
    if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
        (attr->flags & ~uint32_t(IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN)))
        return fail_null<ibv_cq_ex>(EOPNOTSUPP);
    if (attr->comp_vector >= uint32_t(ctx->num_comp_vectors)) return fail_null<ibv_cq_ex>(EINVAL);
    int err = 0;
    Cq* q = make_cq(ctx, attr->cqe, attr->cq_context, attr->channel, attr->wc_flags, err);
    if (!q) return fail_null<ibv_cq_ex>(err);
    if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && (attr->flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN))
        q->t->set_ignore_overrun(true);
    return &q->ex;
}

}  // namespace vfab::verbs

extern "C" ibv_cq* vfab_ibv_create_cq(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* channel, int comp_vector) {
    if (!ctx || cqe <= 0 || comp_vector < 0 || comp_vector >= ctx->num_comp_vectors) return fail_null<ibv_cq>(EINVAL);
    int err = 0;
    Cq* q = make_cq(ctx, uint32_t(cqe), cq_context, channel, IBV_WC_STANDARD_FLAGS, err);
    return q ? q->ibv() : fail_null<ibv_cq>(err);
}
VFAB_VERBS_1_1(ibv_create_cq);

extern "C" int vfab_ibv_destroy_cq(ibv_cq* cq) {
    if (!cq) return fail(EINVAL);
    Cq* q = Cq::of(cq);
    if (auto r = q->t->destroy(); !r) return fail(r.error().code);
    q->t->set_notify_hook(nullptr, nullptr);
    untrack(*q->ctx, q->t);
    drop_events(*q);
    pthread_cond_destroy(&q->ex.cond);
    pthread_mutex_destroy(&q->ex.mutex);
    delete q;
    return 0;
}
VFAB_VERBS_1_1(ibv_destroy_cq);

extern "C" int vfab_ibv_resize_cq(ibv_cq* cq, int cqe) {
    if (!cq || cqe <= 0) return fail(EINVAL);
    auto r = Cq::of(cq)->t->resize(uint32_t(cqe));
    if (!r) return fail(r.error().code);
    cq->cqe = int(*r);
    return 0;
}
VFAB_VERBS_1_1(ibv_resize_cq);

// ---- completion channels -------------------------------------------------------------------------

ibv_comp_channel* ibv_create_comp_channel(ibv_context* ctx) {
    if (!ctx) return fail_null<ibv_comp_channel>(EINVAL);
    const int fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
    if (fd < 0) return nullptr;
    auto* ch = new CompChannel{};
    ch->ch.context = ctx;
    ch->ch.fd = fd;
    ch->ch.refcnt = 0;
    return &ch->ch;
}

int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
    if (!channel) return fail(EINVAL);
    CompChannel* ch = CompChannel::of(channel);
    {
        std::lock_guard g(ch->mu);
        if (ch->head) return fail(EBUSY);
    }
    ::close(ch->ch.fd);
    delete ch;
    return 0;
}

extern "C" int vfab_ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
    if (!channel || !cq || !cq_context) return fail(EINVAL);
    CompChannel* ch = CompChannel::of(channel);
    uint64_t v;
    if (::read(ch->ch.fd, &v, sizeof v) != sizeof v) return -1;   // errno: EAGAIN when the program made it non-blocking
    std::lock_guard g(ch->mu);
    Cq* q = ch->head;
    if (!q) return fail(EAGAIN), -1;   // its CQ was destroyed meanwhile
    if (--q->pending == 0) {
        ch->head = q->next_event;
        if (!ch->head) ch->tail = nullptr;
        q->queued = false;
    }
    ++q->events_taken;
    *cq = q->ibv();
    *cq_context = q->ex.cq_context;
    return 0;
}
VFAB_VERBS_1_1(ibv_get_cq_event);

extern "C" void vfab_ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
    if (!cq) return;
    pthread_mutex_lock(&cq->mutex);
    cq->comp_events_completed += nevents;
    pthread_cond_signal(&cq->cond);
    pthread_mutex_unlock(&cq->mutex);
}
VFAB_VERBS_1_1(ibv_ack_cq_events);
