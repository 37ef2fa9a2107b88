// The drop-in librdmacm's objects (docs/cm.md): each rdma_cm object the program sees (the layouts
// of the system's <rdma/rdma_cma.h>) is the first member of one of these. One lock guards them
// all (Cma::mu): the application's calls and the library's CM thread take it. Private to rdmacm/.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cm/manager.hpp"
#include "cm/qp_attrs.hpp"
#include "verbs/private_hook.hpp"

namespace vfab::rdmacm {

struct Id;

// A device of vfab's libibverbs as librdmacm uses it: a context of its own, open while the
// library is loaded (as rdma_get_devices promises), the port behind it and the port's CM.
struct CmDevice {
    ibv_context* verbs = nullptr;
    rdma::Port* port = nullptr;
    uint32_t ip = 0;                     // host order; the port's IPv4 address
    uint32_t max_rd_atomic = 0;          // the device's READ/atomic depth: the most a REQ or REP offers
    uint8_t active_mtu = IBV_MTU_1024;   // the path MTU a REQ asks for
    std::unique_ptr<cm::Manager> mgr;
    ibv_pd* default_pd = nullptr;        // rdma_create_qp with no PD (made on first use)
    ibv_xrcd* xrcd = nullptr;            // XRC receive QPs' and SRQs' domain (made on first use)
};

// An event as rdma_get_cm_event hands it out, with room for the private data it points to.
struct EventBox {
    rdma_cm_event ev{};
    Id* owner = nullptr;   // the id it counts against until acked (ev.id)
    uint8_t data[256] = {};
};

struct Channel {
    rdma_event_channel ch{};   // first: its fd is an eventfd counting the events queued
    std::deque<EventBox*> queue;
    // Counts in the eventfd whose events were taken back off the queue (rdma_destroy_id,
    // rdma_migrate_id). They cannot be read back: another thread may have read them already and
    // be waiting for the lock, so rdma_get_cm_event skips this many counts instead.
    uint64_t withdrawn = 0;
    std::thread::id reader;    // the thread that last took an event from it
    static Channel* of(rdma_event_channel* c) { return reinterpret_cast<Channel*>(c); }
};

enum class IdState : uint8_t {
    idle, bound, addr_resolved, route_resolved, listening,
    connecting,        // active: REQ sent
    request,           // passive: a connect request not yet answered
    accepted,          // passive: REP sent
    established,
    disconnected,      // ended by either side, or refused, or never answered
};

struct Id {
    rdma_cm_id id{};   // first: an rdma_cm_id* is an Id*
    IdState state = IdState::idle;
    CmDevice* dev = nullptr;        // bound to; a listener on every device has none
    bool sync = false;              // made without a channel: its calls wait for their events
    Channel* own_channel = nullptr; // sync: the channel made for it
    uint32_t unacked = 0;           // events handed out, not acked yet: rdma_destroy_id waits
    bool destroying = false;
    // The connection: its CM ID on dev's manager, the REQ and REP exchanged, this side's role.
    bool has_conn = false;
    cm::ConnId conn = 0;
    cm::Side side = cm::Side::active;
    cm::Req req;
    cm::Rep rep;
    uint8_t initiator_depth = 0, responder_resources = 0;   // as rdma_connect / rdma_accept gave them
    ibv_sa_path_rec path{};         // route.path_rec points here
    // A listener: the service it listens on and, when synchronous, the requests not yet taken.
    uint64_t service_id = 0;
    std::deque<Id*> requests;
    struct Group {
        uint32_t ip;     // host order
        bool attached;   // the id's QP is attached (a full member with a QP)
    };
    std::vector<Group> groups;      // multicast groups joined (rdma_join_multicast)
    bool has_ep_qp_attr = false;    // a passive rdma_create_ep's: each request's id gets such a QP
    ibv_qp_init_attr ep_qp_attr{};
    bool owns_cqs = false;          // the library made send_cq and recv_cq (none given): it frees them
    static Id* of(rdma_cm_id* i) { return reinterpret_cast<Id*>(i); }
};

struct Cma {
    std::mutex mu;
    std::condition_variable acked;   // an event acked, or a synchronous id's event queued
    bool ready = false;              // the devices looked for
    std::string error;               // why there are none
    std::vector<CmDevice*> devices;  // never freed: rdma_get_devices' contexts stay valid
    std::vector<Id*> ids;
    bool thread_started = false;     // the CM thread (events.cpp), started with the devices
    int wake = -1;                   // eventfd waking the CM thread early; kept for the process
};
Cma& cma();

// ---- devices.cpp ----
// Looks for vfab's devices on first use (cma().mu held). False: none (errno ENODEV, reason said).
bool ensure_devices();
CmDevice* device_of_ip(uint32_t ip);      // the device whose port has `ip` (host order)
CmDevice* device_of(ibv_context* verbs);

// ---- events.cpp ----
Channel* make_channel();   // nullptr with errno
// Queues an event of `type` for `id` on its channel (cma().mu held); the box to fill in more.
EventBox* queue_event(Id& id, rdma_cm_event_type type, int status);
void start_thread();   // the CM thread, once (cma().mu held)
void kick();           // wakes the CM thread: a message to send now
// Synchronous ids: waits for the event `id`'s last call causes; 0, or -1 with errno.
int wait_sync(Id& id, rdma_cm_event_type expected);
// A synchronous id's last event (kept in id->event until its next call), acknowledged.
void ack_last_event(Id& id);
// Frees a channel: its events never handed out, its eventfd, itself (cma().mu held).
void free_channel(Channel* ch);

// ---- cm_events.cpp ----
// What the CM thread does with one of a manager's events (cma().mu held).
void on_cm_event(CmDevice& dev, const cm::Event& e);

// ---- ids.cpp ----
Id* new_id(rdma_event_channel* ch, void* context, rdma_port_space ps, ibv_qp_type type);
void bind_device(Id& id, CmDevice* dev);   // its context, source IP and GID
void make_path(Id& id);                    // route.path_rec: the one path RoCE has
void set_sin(sockaddr_storage& s, uint32_t ip, uint16_t port);
void set_gid(ibv_gid& g, uint32_t ip);
// rdma_cm's port space as the IP CM service's (Annex A11): the high bits of a service ID.
uint16_t ps_code(rdma_port_space ps);

// ---- qp.cpp ----
// The connection's QP through INIT, RTR and RTS (active, after the REP; passive, before it).
int ready_qp(Id& id);
// The id's send and recv CQs, each with a channel of its own, as librdmacm makes them when a
// program gives none (cma().mu held); 0, or -1 with errno. Made once; freed by release_own_cqs
// (with the QP or, for an XRC receiver, with the SRQ that uses recv_cq).
int make_own_cqs(Id& id, uint32_t send_wr, uint32_t recv_wr);
void release_own_cqs(Id& id);
ibv_xrcd* xrcd_of(CmDevice& dev);   // the device's XRC domain, opened on first use

// VFAB_RDMACM_DEBUG=1: the CM's events and each QP transition on stderr.
void debug(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Errors as librdmacm returns them: -1 with errno.
inline int fail(int e) {
    errno = e;
    return -1;
}

uint32_t ipv4_of(const sockaddr* a);   // host order; 0 for INADDR_ANY or not IPv4
uint16_t port_of(const sockaddr* a);   // host order
inline uint32_t peer_ip_of(const Id& id) { return ipv4_of(&id.id.route.addr.dst_addr); }

}  // namespace vfab::rdmacm
