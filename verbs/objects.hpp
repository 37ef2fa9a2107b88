// The drop-in libibverbs' objects: each verbs object the application sees (struct ibv_*, the
// layouts of the system's <infiniband/verbs.h>) is the first member of one of these, which
// holds the transport's object it maps onto (docs/verbs.md). Private to verbs/.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "vfab/dma/protection_domain.hpp"
#include "vfab/rdma/rdma.hpp"
#include "vfab/vfab.hpp"
#include "vfab/vfio/unique_fd.hpp"

namespace vfab::verbs {

struct Context;

// What the library was told about one device (config.cpp): its PCI function, its name as
// ibv_get_device_name gives it and the IPv4 address its port answers to (0: none given).
struct DeviceConfig {
    std::string bdf;
    std::string name;
    uint32_t ipv4 = 0;
    std::string vfio_node;   // the VFIO file this user drives it through, under /dev/vfio
};

// How unmodified programs get progress (docs/verbs.md, "Progress").
struct ProgressConfig {
    bool thread = true;          // a progress thread per open device (VFAB_VERBS_PROGRESS=thread|app)
    int cpu = -1;                // pinned to this CPU (VFAB_VERBS_PROGRESS_CPU); -1: not pinned
    uint32_t sleep_after_us = 1000;   // idle this long, it sleeps (VFAB_VERBS_PROGRESS_SLEEP_US; 0: never)
};

// The device as it is open in this process: one vfab device and one RDMA port, shared by every
// ibv_context opened on it (ibv_open_device twice shares them).
struct OpenDevice {
    std::unique_ptr<vfab::Device> dev;
    std::unique_ptr<rdma::Port> port;
    int contexts = 0;
    // The verbs object of each transport QP, SRQ and CQ, and the contexts open on the device,
    // for the port's asynchronous events (port events go to every context, as on a kernel device).
    std::mutex objects_mu;
    std::unordered_map<const void*, void*> verbs_of;
    std::vector<Context*> open_contexts;
};

// struct verbs_device's beginning (rdma-core's driver.h): ibv_device, then the pointer to the
// provider's ops, which libmlx5's and libefa's device checks read (mlx5dv_is_supported()).
struct DeviceHead {
    ibv_device ibdev;
    const void* provider_ops;   // never a provider's: those checks say "not mine"
};
static_assert(offsetof(DeviceHead, provider_ops) == 664, "verbs_device.ops must follow struct ibv_device");

struct Device {
    DeviceHead head;   // first: an ibv_device* is a Device*
    DeviceConfig cfg;
    std::mutex mu;     // open/close
    OpenDevice open;
    static Device* of(ibv_device* d) { return reinterpret_cast<Device*>(d); }
};

// A completion channel: an eventfd counting the CQ events not yet taken (EFD_SEMAPHORE, so one
// read(2) is one event and the fd is readable exactly while one waits), and the CQs they are
// for, oldest first.
struct Cq;
struct CompChannel {
    ibv_comp_channel ch;
    std::mutex mu;
    Cq* head = nullptr;   // CQs with events not taken (Cq::pending), in the order they came
    Cq* tail = nullptr;
    static CompChannel* of(ibv_comp_channel* c) { return reinterpret_cast<CompChannel*>(c); }
};

struct Context {
    verbs_context vctx;   // first; its last member is the ibv_context the program holds
    Device* device = nullptr;
    rdma::Port* port = nullptr;
    vfio::UniqueFd cmd_fd, async_fd;
    std::mutex async_mu;   // async events: the port's and this library's own, one queue
    std::vector<ibv_async_event> async_events;
    static Context* of(ibv_context* c) {
        return reinterpret_cast<Context*>(reinterpret_cast<uint8_t*>(c) - offsetof(verbs_context, context));
    }
    ibv_context* ibv() { return &vctx.context; }
};

struct Pd {
    ibv_pd pd;
    static Pd* of(ibv_pd* p) { return reinterpret_cast<Pd*>(p); }
};

struct Mr {
    ibv_mr mr;
    dma::MemoryRegion region{};   // the registration of the memory
    uint32_t fr_key = 0;          // a registration at an IOVA of the program's choice (alloc_mr)
    static Mr* of(ibv_mr* m) { return reinterpret_cast<Mr*>(m); }
};

struct Mw {
    ibv_mw mw;
    static Mw* of(ibv_mw* m) { return reinterpret_cast<Mw*>(m); }
};

struct Cq {
    ibv_cq_ex ex;   // first; its beginning is the ibv_cq of ibv_create_cq
    rdma::Cq* t = nullptr;
    Context* ctx = nullptr;
    CompChannel* channel = nullptr;
    // Events on the channel not yet taken by ibv_get_cq_event, and the link of its list.
    uint32_t pending = 0;
    Cq* next_event = nullptr;
    bool queued = false;
    uint32_t events_taken = 0;     // by ibv_get_cq_event; ibv_ack_cq_events counts them back
    // The extended poll's current completion (ibv_start_poll / ibv_next_poll).
    rdma::Wc cur{};
    static Cq* of(ibv_cq* c) { return reinterpret_cast<Cq*>(c); }
    static Cq* of(ibv_cq_ex* c) { return reinterpret_cast<Cq*>(c); }
    ibv_cq* ibv() { return reinterpret_cast<ibv_cq*>(&ex); }
};

struct Srq {
    ibv_srq srq;
    rdma::Srq* t = nullptr;
    uint32_t max_sge = 0;
    static Srq* of(ibv_srq* s) { return reinterpret_cast<Srq*>(s); }
};

struct Xrcd {
    ibv_xrcd xrcd;
    rdma::XrcDomain* t = nullptr;
    static Xrcd* of(ibv_xrcd* x) { return reinterpret_cast<Xrcd*>(x); }
};

struct Flow {
    ibv_flow flow;
    rdma::Flow* t = nullptr;
    static Flow* of(ibv_flow* f) { return reinterpret_cast<Flow*>(f); }
};

struct Ah {
    ibv_ah ah;
    rdma::AddressHandle* t = nullptr;
    static Ah* of(ibv_ah* a) { return reinterpret_cast<Ah*>(a); }
};

// ibv_qp_ex's work-request builder (qp_ex.cpp): the WRs between wr_start and wr_complete.
struct WrBuilder {
    static constexpr uint32_t kMaxSge = 32;
    std::vector<rdma::RdmaSendWr> wrs;
    std::vector<Sge> sges;           // kMaxSge per WR, at wrs' index
    std::vector<uint8_t> inline_;    // inline data gathered for wr_set_inline_data(_list)
    std::vector<uint32_t> inline_at; // per WR: its inline data's offset in inline_, or ~0u
    std::vector<ibv_mw*> binds;      // per WR: the window a BIND_MW binds (its rkey set once posted)
    int error = 0;
};

struct Qp {
    ibv_qp_ex ex;   // first; its beginning (qp_base) is the ibv_qp of ibv_create_qp
    rdma::Qp* t = nullptr;
    Context* ctx = nullptr;
    bool has_ex = false;   // made by ibv_create_qp_ex with send_ops_flags: ibv_qp_to_qp_ex works
    // An XRC receive QP has one handle per ibv_create_qp_ex / ibv_open_qp: the transport's QP
    // goes with the last of them (handles lists them, shared by all).
    std::shared_ptr<std::vector<Qp*>> handles;
    ibv_xrcd* xrcd = nullptr;
    uint32_t max_send_wr = 0, max_recv_wr = 0, max_send_sge = 0, max_recv_sge = 0, max_inline = 0;
    WrBuilder build;
    static Qp* of(ibv_qp* q) { return reinterpret_cast<Qp*>(q); }
    static Qp* of(ibv_qp_ex* q) { return reinterpret_cast<Qp*>(q); }
    ibv_qp* ibv() { return &ex.qp_base; }
};

// The library's settings and device list (config.cpp): made on first use, kept for the process.
struct Library {
    std::mutex mu;
    std::vector<Device*> devices;   // never freed: ibv_device pointers stay valid
    ProgressConfig progress;
    bool quiet = false;             // VFAB_VERBS_QUIET: no one-line reasons on stderr
    std::string config_path;
};
Library& library();
// The devices the configuration gives this process, in list order; discover_others says
// whether other NICs this user may drive are listed after them (docs/verbs.md, "Configuration").
std::vector<DeviceConfig> configured_devices(Library& lib, bool& discover_others);
// Reads the configuration and looks for devices again (ibv_get_device_list).
std::vector<Device*> discover(Library& lib);   // the devices present now, in list order
// A one-line reason on stderr, for what the program itself cannot say (a device another
// process holds); nothing when quiet.
void tell(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Errors of the verbs calls: the errno in `errno` and as the return value (rdma-core's style
// for ints), or a null pointer with errno set.
inline int fail(int e) {
    errno = e;
    return e;
}
template <class T>
T* fail_null(int e) {
    errno = e;
    return nullptr;
}

// The context's ops tables (context.cpp fills them; cq.cpp, qp.cpp hold the functions).
void fill_context_ops(Context& c);
int poll_cq(ibv_cq* cq, int n, ibv_wc* wc);
int req_notify_cq(ibv_cq* cq, int solicited_only);
int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad);
int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad);
int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad);
ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type);
int dealloc_mw(ibv_mw* mw);
int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind);
int query_port(ibv_context* ctx, uint8_t port, ibv_port_attr* attr, size_t len);
int query_device_ex(ibv_context* ctx, const ibv_query_device_ex_input* in, ibv_device_attr_ex* attr, size_t len);
ibv_cq_ex* create_cq_ex(ibv_context* ctx, ibv_cq_init_attr_ex* attr);
ibv_qp* create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* attr);
ibv_srq* create_srq_ex(ibv_context* ctx, ibv_srq_init_attr_ex* attr);
int get_srq_num(ibv_srq* srq, uint32_t* num);
ibv_xrcd* open_xrcd(ibv_context* ctx, ibv_xrcd_init_attr* attr);
int close_xrcd(ibv_xrcd* xrcd);
ibv_qp* open_qp(ibv_context* ctx, ibv_qp_open_attr* attr);
ibv_flow* create_flow(ibv_qp* qp, ibv_flow_attr* attr);   // flow.cpp
int destroy_flow(ibv_flow* flow);
void fill_qp_ex_ops(Qp& q);   // qp_ex.cpp
// An async event for the program (ibv_get_async_event), from the port or from this library.
void queue_async_event(Context& c, const ibv_async_event& e);
// The port's events to the contexts that own their objects (context.cpp; the port's hook).
void route_async_event(void* device, const rdma::AsyncEvent& e);
// A QP or SRQ made or destroyed: known to route_async_event.
void track(Context& c, const void* transport_object, void* verbs_object);
void untrack(Context& c, const void* transport_object);

}  // namespace vfab::verbs
