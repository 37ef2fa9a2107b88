// Communication identifiers: made and destroyed, bound to an address and a device, their
// addresses and routes resolved (vfab's port reaches any IPv4 peer on its link; it finds the MAC
// by ARP on the first message), listening, their QPs.
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "cma.hpp"

namespace vfab::rdmacm {

namespace {
// How long rdma_destroy_id lets another thread take the id's queued events.
constexpr auto kQueuedEventsGrace = std::chrono::seconds(1);

// How long rdma_destroy_id waits for its connection's last MAD to leave.
constexpr auto kLastMadGrace = std::chrono::milliseconds(200);

// Programs exit soon after rdma_destroy_id: the DREQ (or REJ) it made must leave first, or the
// peer keeps the connection (and its QP) until its own timers give up. The CM thread sends it.
void wait_mads_sent(CmDevice& d) {
    const auto end = std::chrono::steady_clock::now() + kLastMadGrace;
    for (;;) {
        {
            std::lock_guard g(cma().mu);
            if (!d.mgr->mads().sending()) return;
        }
        if (std::chrono::steady_clock::now() >= end) return;
        kick();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

// An ephemeral port no id of this process has (as the kernel picks from 32768-60999).
uint16_t ephemeral_port() {
    static std::minstd_rand rng(uint32_t(getpid()) * 2654435761u ^ uint32_t(time(nullptr)));
    for (;;) {
        const uint16_t p = uint16_t(32768 + rng() % (61000 - 32768));
        bool used = false;
        for (Id* i : cma().ids) used |= port_of(&i->id.route.addr.src_addr) == p;
        if (!used) return p;
    }
}

}  // namespace

void set_sin(sockaddr_storage& s, uint32_t ip, uint16_t port) {
    std::memset(&s, 0, sizeof s);
    auto* sin = reinterpret_cast<sockaddr_in*>(&s);
    sin->sin_family = AF_INET;
    sin->sin_addr.s_addr = htonl(ip);
    sin->sin_port = htons(port);
}

void set_gid(ibv_gid& g, uint32_t ip) {
    const rdma::Gid r = rdma::Gid::from_ipv4(ip);
    std::memcpy(g.raw, r.raw, 16);
}

// The id bound to `dev`: its context and port, the source address's IP, its GID.
void bind_device(Id& id, CmDevice* dev) {
    id.dev = dev;
    id.id.verbs = dev->verbs;
    id.id.port_num = 1;
    auto* sin = reinterpret_cast<sockaddr_in*>(&id.id.route.addr.src_storage);
    sin->sin_family = AF_INET;
    sin->sin_addr.s_addr = htonl(dev->ip);
    set_gid(id.id.route.addr.addr.ibaddr.sgid, dev->ip);
    id.id.route.addr.addr.ibaddr.pkey = htobe16(0xffff);
}

void make_path(Id& id) {
    // The one path RoCE has (as the kernel makes it for an Ethernet port): the GIDs, the default
    // partition, the port's MTU.
    ibv_sa_path_rec& p = id.path;
    p = {};
    p.sgid = id.id.route.addr.addr.ibaddr.sgid;
    p.dgid = id.id.route.addr.addr.ibaddr.dgid;
    p.pkey = htobe16(0xffff);
    p.hop_limit = 64;
    p.reversible = 1;
    p.numb_path = 1;
    p.mtu_selector = 2;
    p.mtu = id.dev->active_mtu;
    p.rate_selector = 2;
    p.packet_life_time_selector = 2;
    p.packet_life_time = 16;
    p.dlid = p.slid = htobe16(0xffff);
    id.id.route.path_rec = &id.path;
    id.id.route.num_paths = 1;
}

uint16_t ps_code(rdma_port_space ps) {
    return ps == RDMA_PS_TCP ? cm::kPsTcp : ps == RDMA_PS_UDP ? cm::kPsUdp : cm::kPsIb;
}

Id* new_id(rdma_event_channel* ch, void* context, rdma_port_space ps, ibv_qp_type type) {
    auto* id = new Id;
    id->id.channel = ch;
    id->id.context = context;
    id->id.ps = ps;
    id->id.qp_type = type;
    cma().ids.push_back(id);
    return id;
}

}  // namespace vfab::rdmacm

using namespace vfab::rdmacm;

namespace {
ibv_qp_type qp_type_of(rdma_port_space ps) { return ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC; }
}  // namespace

extern "C" int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context, rdma_port_space ps) {
    if (!id) return fail(EINVAL);
    if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IB) return fail(EPROTONOSUPPORT);
    Channel* own = nullptr;
    if (!channel) {   // a synchronous id: a channel of its own, waited on by its calls
        channel = rdma_create_event_channel();
        if (!channel) return -1;
        own = Channel::of(channel);
    }
    std::lock_guard g(cma().mu);
    if (!ensure_devices()) return -1;
    Id* i = new_id(channel, context, ps, qp_type_of(ps));
    i->sync = own != nullptr;
    i->own_channel = own;
    *id = &i->id;
    return 0;
}

namespace {
// A connect request's id the program never took (its event still queued, or a synchronous
// listener's request not yet given by rdma_get_request): refused, and gone.
void drop_request(Id& listener, Id* child) {
    if (child->has_conn) child->dev->mgr->release(child->conn);
    std::erase(cma().ids, child);
    std::erase(listener.requests, child);
    if (child->own_channel) free_channel(child->own_channel);
    delete child;
}
}  // namespace

extern "C" int rdma_destroy_id(rdma_cm_id* cm_id) {
    if (!cm_id) return fail(EINVAL);
    Id& id = *Id::of(cm_id);
    ack_last_event(id);
    Channel* own = nullptr;
    CmDevice* sends_mads = nullptr;
    {
        std::unique_lock g(cma().mu);
        id.destroying = true;
        if (id.has_conn) sends_mads = id.dev;   // its DREQ or REJ
        if (id.has_conn) id.dev->mgr->release(id.conn);
        for (const Id::Group& gr : id.groups) {   // it leaves its multicast groups
            if (!gr.attached || !id.id.qp) continue;
            ibv_gid mgid{};
            set_gid(mgid, gr.ip);
            (void)ibv_detach_mcast(id.id.qp, &mgid, 0);
        }
        if (id.state == IdState::listening)
            for (CmDevice* d : cma().devices)
                if (!id.dev || d == id.dev) d->mgr->unlisten(id.service_id);
        Channel* ch = Channel::of(id.id.channel);
        auto its_own = [&](const EventBox* b) { return b->owner == &id || b->ev.listen_id == &id.id; };
        // When another thread reads the channel, it may have been woken for the id's queued
        // events already (rping's event thread polls the fd, then takes the event): it gets them,
        // for a while, rather than block for ever on counts taken back.
        if (ch->reader != std::thread::id{} && ch->reader != std::this_thread::get_id())
            cma().acked.wait_for(g, kQueuedEventsGrace, [&] { return id.unacked == 0 && std::ranges::none_of(ch->queue, its_own); });
        // Events handed out for it are acked first (as the kernel's rdma_cm waits for them).
        cma().acked.wait(g, [&] { return id.unacked == 0; });
        // Events queued and not taken are dropped, for it and for the connect requests it heard.
        std::erase_if(ch->queue, [&](EventBox* b) {
            if (!its_own(b)) return false;
            if (b->owner != &id) drop_request(id, b->owner);
            ++ch->withdrawn;
            delete b;
            return true;
        });
        while (!id.requests.empty()) drop_request(id, id.requests.front());
        std::erase(cma().ids, &id);
        own = id.own_channel;
    }
    kick();
    delete &id;
    if (own) rdma_destroy_event_channel(&own->ch);
    if (sends_mads) wait_mads_sent(*sends_mads);
    return 0;
}

extern "C" int rdma_bind_addr(rdma_cm_id* cm_id, sockaddr* addr) {
    if (!cm_id || !addr) return fail(EINVAL);
    if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6) return fail(EAFNOSUPPORT);
    std::lock_guard g(cma().mu);
    Id& id = *Id::of(cm_id);
    if (id.state != IdState::idle) return fail(EINVAL);
    const uint32_t ip = ipv4_of(addr);
    // The wildcard, or a loopback address (libfabric binds 127.0.0.1 to learn it has no device):
    // bound to no device.
    const auto* in6 = &reinterpret_cast<sockaddr_in6*>(addr)->sin6_addr;
    const bool any = addr->sa_family == AF_INET6 ? IN6_IS_ADDR_UNSPECIFIED(in6) || IN6_IS_ADDR_LOOPBACK(in6)
                                                 : ip == 0 || (ip >> 24) == 127;
    if (!any) {
        CmDevice* d = addr->sa_family == AF_INET ? device_of_ip(ip) : nullptr;
        if (!d) return fail(EADDRNOTAVAIL);   // an address no vfab port has
        bind_device(id, d);
    }
    uint16_t port = port_of(addr);
    if (port) {
        for (Id* o : cma().ids)
            if (o != &id && o->state != IdState::idle && port_of(&o->id.route.addr.src_addr) == port &&
                o->id.ps == id.id.ps && (o->dev == id.dev || !o->dev || !id.dev) &&
                (o->state == IdState::listening || o->state == IdState::bound))
                return fail(EADDRINUSE);
    } else {
        port = ephemeral_port();
    }
    auto* sin = reinterpret_cast<sockaddr_in*>(&id.id.route.addr.src_storage);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(port);
    id.state = IdState::bound;
    return 0;
}

extern "C" int rdma_resolve_addr(rdma_cm_id* cm_id, sockaddr* src_addr, sockaddr* dst_addr, int /*timeout_ms*/) {
    if (!cm_id || !dst_addr) return fail(EINVAL);
    if (dst_addr->sa_family != AF_INET) return fail(EAFNOSUPPORT);   // vfab's ports are IPv4
    Id& id = *Id::of(cm_id);
    if (src_addr && Id::of(cm_id)->state == IdState::idle && rdma_bind_addr(cm_id, src_addr)) return -1;
    {
        std::lock_guard g(cma().mu);
        if (id.state == IdState::idle) {   // not bound: an ephemeral port on the first device
            auto* sin = reinterpret_cast<sockaddr_in*>(&id.id.route.addr.src_storage);
            sin->sin_family = AF_INET;
            sin->sin_port = htons(ephemeral_port());
            id.state = IdState::bound;
        }
        if (id.state != IdState::bound) return fail(EINVAL);
        if (!id.dev) bind_device(id, cma().devices.front());
        const uint32_t dst = ipv4_of(dst_addr);
        set_sin(id.id.route.addr.dst_storage, dst, port_of(dst_addr));
        set_gid(id.id.route.addr.addr.ibaddr.dgid, dst);
        id.state = IdState::addr_resolved;
        queue_event(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
    }
    return id.sync ? wait_sync(id, RDMA_CM_EVENT_ADDR_RESOLVED) : 0;
}

extern "C" int rdma_resolve_route(rdma_cm_id* cm_id, int /*timeout_ms*/) {
    if (!cm_id) return fail(EINVAL);
    Id& id = *Id::of(cm_id);
    {
        std::lock_guard g(cma().mu);
        if (id.state != IdState::addr_resolved) return fail(EINVAL);
        make_path(id);
        id.state = IdState::route_resolved;
        queue_event(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
    }
    return id.sync ? wait_sync(id, RDMA_CM_EVENT_ROUTE_RESOLVED) : 0;
}

extern "C" int rdma_listen(rdma_cm_id* cm_id, int /*backlog*/) {
    if (!cm_id) return fail(EINVAL);
    std::lock_guard g(cma().mu);
    Id& id = *Id::of(cm_id);
    if (id.state != IdState::bound) return fail(EINVAL);
    id.service_id = vfab::cm::service_id(ps_code(id.id.ps), port_of(&id.id.route.addr.src_addr));
    for (CmDevice* d : cma().devices) {
        if (id.dev && d != id.dev) continue;
        if (auto r = d->mgr->listen(id.service_id); !r) {
            for (CmDevice* e : cma().devices) {
                if (e == d) break;
                if (!id.dev || e == id.dev) e->mgr->unlisten(id.service_id);
            }
            return fail(EADDRINUSE);
        }
    }
    id.state = IdState::listening;
    return 0;
}

extern "C" int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** id) {
    if (!listen || !id) return fail(EINVAL);
    Id& l = *Id::of(listen);
    if (!l.sync) return fail(EINVAL);
    for (;;) {
        {
            std::lock_guard g(cma().mu);
            if (l.state != IdState::listening) return fail(EINVAL);
            if (!l.requests.empty()) {
                *id = &l.requests.front()->id;
                l.requests.pop_front();
                break;
            }
        }
        rdma_cm_event* e = nullptr;   // the connect request's event: its child queued, then acked
        if (rdma_get_cm_event(listen->channel, &e)) return -1;
        rdma_ack_cm_event(e);
    }
    if (l.has_ep_qp_attr) {   // rdma_create_ep's listener: the request's id gets its QP
        ibv_qp_init_attr a = l.ep_qp_attr;
        if (rdma_create_qp(*id, l.id.pd, &a)) {
            const int e = errno;
            rdma_reject(*id, nullptr, 0);
            rdma_destroy_id(*id);
            *id = nullptr;
            return fail(e);
        }
    }
    return 0;
}

extern "C" int rdma_migrate_id(rdma_cm_id* cm_id, rdma_event_channel* channel) {
    if (!cm_id) return fail(EINVAL);
    Id& id = *Id::of(cm_id);
    ack_last_event(id);
    Channel* own = nullptr;
    if (!channel) {
        channel = rdma_create_event_channel();
        if (!channel) return -1;
        own = Channel::of(channel);
    }
    Channel* old_own = nullptr;
    {
        std::unique_lock g(cma().mu);
        cma().acked.wait(g, [&] { return id.unacked == 0; });
        Channel* from = Channel::of(id.id.channel);
        Channel* to = Channel::of(channel);
        std::erase_if(from->queue, [&](EventBox* b) {
            if (b->owner != &id) return false;
            ++from->withdrawn;
            to->queue.push_back(b);
            const uint64_t one = 1;
            (void)!write(to->ch.fd, &one, sizeof one);
            return true;
        });
        id.id.channel = channel;
        old_own = id.own_channel;
        id.own_channel = own;
        id.sync = own != nullptr;
    }
    if (old_own) rdma_destroy_event_channel(&old_own->ch);
    return 0;
}

extern "C" int rdma_set_option(rdma_cm_id* cm_id, int level, int optname, void* optval, size_t optlen) {
    if (!cm_id || (optlen && !optval)) return fail(EINVAL);
    // Type of service, reuse of an address, the ACK timeout, AFONLY: accepted; vfab's port has
    // one traffic class and its own ACK timeout (docs/cm.md).
    if (level == RDMA_OPTION_ID || level == RDMA_OPTION_IB) return 0;
    (void)optname;
    return fail(ENOSYS);
}

extern "C" __be16 rdma_get_src_port(rdma_cm_id* cm_id) { return htons(port_of(&cm_id->route.addr.src_addr)); }
extern "C" __be16 rdma_get_dst_port(rdma_cm_id* cm_id) { return htons(port_of(&cm_id->route.addr.dst_addr)); }
