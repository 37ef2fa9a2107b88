// Event channels and the CM thread. A channel's fd is an eventfd (EFD_SEMAPHORE) counting its
// queued events, so it is pollable and rdma_get_cm_event blocks, or fails with EAGAIN when the
// program made the fd non-blocking, exactly as on the kernel's rdma_cm.
//
// The CM thread (docs/cm.md, "Progress") is this library's one thread: it runs the connection
// managers of the devices — MADs in and out, their timers — and turns what happens into events,
// so that a program blocked in rdma_get_cm_event or poll(2) on a channel gets its connections,
// as from a kernel. It sleeps 1 ms between rounds when nothing happens.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>

#include "cma.hpp"

namespace vfab::rdmacm {

namespace {
constexpr int kIdleSleepMs = 1;

void cm_thread() {
    Cma& c = cma();
    for (;;) {
        int n = 0;
        {
            std::lock_guard g(c.mu);
            for (CmDevice* d : c.devices) {
                d->mgr->progress();
                for (cm::Event e; d->mgr->next_event(e); ++n) on_cm_event(*d, e);
            }
        }
        if (n) continue;
        pollfd p{c.wake, POLLIN, 0};
        if (poll(&p, 1, kIdleSleepMs) > 0) {
            uint64_t v;
            (void)!read(c.wake, &v, sizeof v);
        }
    }
}
}  // namespace

void start_thread() {
    Cma& c = cma();
    if (c.thread_started) return;
    c.thread_started = true;
    std::thread(cm_thread).detach();   // runs for the process, as the devices stay open
}

void kick() {
    const uint64_t one = 1;
    (void)!write(cma().wake, &one, sizeof one);
}

Channel* make_channel() {
    auto* ch = new Channel;
    ch->ch.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
    if (ch->ch.fd < 0) {
        const int e = errno;
        delete ch;
        errno = e;
        return nullptr;
    }
    return ch;
}

EventBox* queue_event(Id& id, rdma_cm_event_type type, int status) {
    auto* b = new EventBox;
    b->ev.id = &id.id;
    b->ev.event = type;
    b->ev.status = status;
    b->owner = &id;
    Channel* ch = Channel::of(id.id.channel);
    ch->queue.push_back(b);
    const uint64_t one = 1;
    (void)!write(ch->ch.fd, &one, sizeof one);
    return b;
}

// The event stays in id->event until the id's next synchronous call or its destruction, as
// librdmacm keeps it (rdma_xclient reads the REP's private data there).
void ack_last_event(Id& id) {
    if (id.id.event) rdma_ack_cm_event(id.id.event);
    id.id.event = nullptr;
}

void free_channel(Channel* ch) {
    for (EventBox* b : ch->queue) delete b;   // never handed out
    close(ch->ch.fd);
    delete ch;
}

int wait_sync(Id& id, rdma_cm_event_type expected) {
    ack_last_event(id);
    rdma_cm_event* e = nullptr;
    if (rdma_get_cm_event(id.id.channel, &e)) return -1;
    id.id.event = e;
    const rdma_cm_event_type got = e->event;
    const int status = e->status;
    if (got == expected) return 0;
    return fail(status < 0 ? -status : got == RDMA_CM_EVENT_REJECTED ? ECONNREFUSED : ECONNRESET);
}

}  // namespace vfab::rdmacm

using namespace vfab::rdmacm;

extern "C" rdma_event_channel* rdma_create_event_channel() {
    {
        std::lock_guard g(cma().mu);
        if (!ensure_devices()) return nullptr;
    }
    Channel* ch = make_channel();
    return ch ? &ch->ch : nullptr;
}

extern "C" void rdma_destroy_event_channel(rdma_event_channel* channel) {
    if (!channel) return;
    std::lock_guard g(cma().mu);
    free_channel(Channel::of(channel));
}

extern "C" int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
    if (!channel || !event) return fail(EINVAL);
    Channel* ch = Channel::of(channel);
    for (;;) {
        uint64_t v;
        if (read(channel->fd, &v, sizeof v) != sizeof v) return -1;   // errno: EAGAIN when non-blocking
        std::lock_guard g(cma().mu);
        if (ch->withdrawn) {   // the count of an event taken back: wait for the next one
            --ch->withdrawn;
            continue;
        }
        if (ch->queue.empty()) return fail(EAGAIN);   // cannot happen: one count per queued event
        ch->reader = std::this_thread::get_id();
        EventBox* b = ch->queue.front();
        ch->queue.pop_front();
        ++b->owner->unacked;
        *event = &b->ev;
        return 0;
    }
}

extern "C" int rdma_ack_cm_event(rdma_cm_event* event) {
    if (!event) return fail(EINVAL);
    auto* b = reinterpret_cast<EventBox*>(event);
    {
        std::lock_guard g(cma().mu);
        --b->owner->unacked;
    }
    cma().acked.notify_all();
    delete b;
    return 0;
}

extern "C" const char* rdma_event_str(rdma_cm_event_type event) {
    switch (event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: return "RDMA_CM_EVENT_ADDR_RESOLVED";
    case RDMA_CM_EVENT_ADDR_ERROR: return "RDMA_CM_EVENT_ADDR_ERROR";
    case RDMA_CM_EVENT_ROUTE_RESOLVED: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
    case RDMA_CM_EVENT_ROUTE_ERROR: return "RDMA_CM_EVENT_ROUTE_ERROR";
    case RDMA_CM_EVENT_CONNECT_REQUEST: return "RDMA_CM_EVENT_CONNECT_REQUEST";
    case RDMA_CM_EVENT_CONNECT_RESPONSE: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
    case RDMA_CM_EVENT_CONNECT_ERROR: return "RDMA_CM_EVENT_CONNECT_ERROR";
    case RDMA_CM_EVENT_UNREACHABLE: return "RDMA_CM_EVENT_UNREACHABLE";
    case RDMA_CM_EVENT_REJECTED: return "RDMA_CM_EVENT_REJECTED";
    case RDMA_CM_EVENT_ESTABLISHED: return "RDMA_CM_EVENT_ESTABLISHED";
    case RDMA_CM_EVENT_DISCONNECTED: return "RDMA_CM_EVENT_DISCONNECTED";
    case RDMA_CM_EVENT_DEVICE_REMOVAL: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
    case RDMA_CM_EVENT_MULTICAST_JOIN: return "RDMA_CM_EVENT_MULTICAST_JOIN";
    case RDMA_CM_EVENT_MULTICAST_ERROR: return "RDMA_CM_EVENT_MULTICAST_ERROR";
    case RDMA_CM_EVENT_ADDR_CHANGE: return "RDMA_CM_EVENT_ADDR_CHANGE";
    case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
    }
    return "UNKNOWN EVENT";
}
