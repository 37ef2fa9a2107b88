// The devices: vfab's libibverbs' devices, each opened once for the process (a context of the
// library's own, as rdma_get_devices promises them open while the library is loaded), the port
// behind it (verbs/private_hook.hpp) and the connection manager on the port's QP1.
#include <dlfcn.h>
#include <endian.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "cma.hpp"

namespace vfab::rdmacm {

Cma& cma() {
    static Cma* c = new Cma;   // never destroyed: the CM thread may still look at it at exit
    return *c;
}

namespace {
void say(const std::string& why) {
    if (!std::getenv("VFAB_VERBS_QUIET")) std::fprintf(stderr, "librdmacm (vfab): %s\n", why.c_str());
}

CmDevice* open_device(ibv_device* d, VfabVerbsPortHook hook) {
    ibv_context* ctx = ibv_open_device(d);
    if (!ctx) return nullptr;
    auto dev = std::make_unique<CmDevice>();
    dev->verbs = ctx;
    dev->port = hook(ctx);
    dev->ip = dev->port->gid().ipv4();
    ibv_device_attr da{};
    ibv_port_attr pa{};
    uint64_t guid = 0;
    if (ibv_query_device(ctx, &da) == 0) {
        dev->max_rd_atomic = uint32_t(da.max_qp_rd_atom);
        guid = be64toh(da.node_guid);
    }
    if (ibv_query_port(ctx, 1, &pa) == 0) dev->active_mtu = uint8_t(pa.active_mtu);
    cm::ManagerConfig mc;
    // The CM's CA GUID is this process's port's own: a vfab port is a new CA each time a process
    // opens it (its QP numbers start again at the same values), and a peer that still remembers
    // a connection of an earlier process would take a new one with the same QP number and CA
    // GUID for a stale one (REJ 10, the kernel's check). The node GUID with the low 24 bits
    // changed per opening.
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    const uint64_t instance = (uint64_t(getpid()) * 0x9E3779B1u ^ uint64_t(now.tv_nsec) ^ uint64_t(now.tv_sec) << 20) & 0xFFFFFFu;
    mc.ca_guid = (guid & ~uint64_t(0xFFFFFF)) | (instance ? instance : 1);
    // The port's connection ledger: what an earlier process left connected is disconnected.
    if (const std::string dir = cm::ledger_dir(); !dir.empty()) {
        char name[32];
        std::snprintf(name, sizeof name, "/%016llx", static_cast<unsigned long long>(guid));
        mc.ledger_path = dir + name;
    }
    auto m = cm::Manager::open(*dev->port, mc);
    if (!m) {
        say(std::string(ibv_get_device_name(d)) + ": " + m.error().message);
        ibv_close_device(ctx);
        return nullptr;
    }
    if (!(*m)->ledger_error().empty()) debug("%s: no connection ledger: %s", ibv_get_device_name(d), (*m)->ledger_error().c_str());
    if ((*m)->stale_disconnected())
        debug("%s: disconnecting %zu connection(s) an earlier process left", ibv_get_device_name(d), (*m)->stale_disconnected());
    dev->mgr = std::move(*m);
    return dev.release();
}
}  // namespace

bool ensure_devices() {
    Cma& c = cma();
    if (!c.ready) {
        c.ready = true;
        auto hook = reinterpret_cast<VfabVerbsPortHook>(dlsym(RTLD_DEFAULT, kVfabVerbsPortHook));
        if (!hook) {
            c.error = "this librdmacm runs on vfab's libibverbs only (start the program with vfab-run)";
        } else {
            int n = 0;
            ibv_device** list = ibv_get_device_list(&n);
            for (int i = 0; list && i < n; ++i)
                if (CmDevice* d = open_device(list[i], hook)) c.devices.push_back(d);
            if (list) ibv_free_device_list(list);
            if (c.devices.empty()) c.error = "no vfab device (vfab-run --device PCI-ADDRESS=IPv4)";
        }
        if (!c.devices.empty()) {
            c.wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
            start_thread();
        } else {
            say(c.error);
        }
    }
    if (c.devices.empty()) {
        errno = ENODEV;
        return false;
    }
    return true;
}

CmDevice* device_of_ip(uint32_t ip) {
    for (CmDevice* d : cma().devices)
        if (d->ip == ip) return d;
    return nullptr;
}

CmDevice* device_of(ibv_context* verbs) {
    for (CmDevice* d : cma().devices)
        if (d->verbs == verbs) return d;
    return nullptr;
}

void debug(const char* fmt, ...) {
    static const bool on = [] {
        const char* v = std::getenv("VFAB_RDMACM_DEBUG");
        return v && *v && *v != '0';
    }();
    if (!on) return;
    va_list ap;
    va_start(ap, fmt);
    std::fprintf(stderr, "librdmacm (vfab): ");
    std::vfprintf(stderr, fmt, ap);
    std::fprintf(stderr, "\n");
    va_end(ap);
}

uint32_t ipv4_of(const sockaddr* a) {
    if (!a || a->sa_family != AF_INET) return 0;
    return ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr);
}

uint16_t port_of(const sockaddr* a) {
    if (!a) return 0;
    if (a->sa_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(a)->sin_port);
    if (a->sa_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(a)->sin6_port);
    return 0;
}

}  // namespace vfab::rdmacm

using namespace vfab::rdmacm;

extern "C" ibv_context** rdma_get_devices(int* num_devices) {
    std::lock_guard g(cma().mu);
    if (num_devices) *num_devices = 0;
    if (!ensure_devices()) return nullptr;
    auto** list = static_cast<ibv_context**>(calloc(cma().devices.size() + 1, sizeof(ibv_context*)));
    if (!list) {
        errno = ENOMEM;
        return nullptr;
    }
    for (size_t i = 0; i < cma().devices.size(); ++i) list[i] = cma().devices[i]->verbs;
    if (num_devices) *num_devices = int(cma().devices.size());
    return list;
}

extern "C" void rdma_free_devices(ibv_context** list) { free(list); }
