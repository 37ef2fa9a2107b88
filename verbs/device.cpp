// Devices and contexts: ibv_get_device_list, ibv_open_device / ibv_close_device (one vfab
// device and RDMA port per PCI function, shared by every context of the process), and the
// queries: device, port, GID table, P_Key table.
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>

#include "objects.hpp"
#include "private_hook.hpp"
#include "symver.hpp"

#undef ibv_get_device_list
#undef ibv_query_port

using namespace vfab::verbs;
namespace rdma = vfab::rdma;
namespace vfio = vfab::vfio;

namespace vfab::verbs {
namespace {

// The first open of a device makes its vfab device and port and starts the progress thread.
int open_port(Device& d) {
    if (d.open.port) return 0;
    if (!d.cfg.ipv4) {
        tell("%s (%s): no IPv4 address for its port: set VFAB_VERBS_DEVICES=%s=<address> or add 'device %s <address>' to %s",
             d.cfg.name.c_str(), d.cfg.bdf.c_str(), d.cfg.bdf.c_str(), d.cfg.bdf.c_str(), library().config_path.c_str());
        return EADDRNOTAVAIL;
    }
    auto dev = vfab::Device::open(d.cfg.bdf);
    if (!dev) {
        tell("%s: %s", d.cfg.name.c_str(), dev.error().message.c_str());
        return dev.error().code ? dev.error().code : ENODEV;
    }
    rdma::PortConfig pc;
    pc.ipv4 = d.cfg.ipv4;
    auto port = rdma::Port::create(**dev, pc);
    if (!port) {
        tell("%s: %s", d.cfg.name.c_str(), port.error().message.c_str());
        return port.error().code ? port.error().code : EIO;
    }
    // Verbs calls are thread-safe (a program posts from one thread and polls from another, UCX
    // runs its own thread beside the program's): every call takes the port's lock, with or
    // without the progress thread.
    (*port)->share_between_threads();
    const ProgressConfig& p = library().progress;
    if (p.thread) {
        if (auto r = (*port)->start_progress_thread(rdma::ProgressThreadOptions{p.cpu, p.sleep_after_us}); !r) {
            tell("%s: %s", d.cfg.name.c_str(), r.error().message.c_str());
            return r.error().code;
        }
    }
    (*port)->set_async_hook(route_async_event, &d);
    d.open.dev = std::move(*dev);
    d.open.port = std::move(*port);
    return 0;
}

void close_port(Device& d) {
    if (--d.open.contexts > 0) return;
    d.open.port.reset();   // stops the progress thread; the device lets go of its buffers
    d.open.dev.reset();
}

// The MTU enum of a link MTU in bytes (the largest IB MTU a RoCE packet of it carries).
ibv_mtu port_mtu(uint32_t code) { return code ? ibv_mtu(code) : IBV_MTU_1024; }

}  // namespace

int query_port(ibv_context* ctx, uint8_t port_num, ibv_port_attr* attr, size_t len) {
    if (port_num != 1) return fail(EINVAL);
    Context& c = *Context::of(ctx);
    ibv_port_attr a{};
    const rdma::DeviceCaps caps = c.port->query_device();
    const vfab::LinkState link = c.device->open.dev->link();
    a.state = link.up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
    a.max_mtu = port_mtu(caps.max_path_mtu);
    a.active_mtu = port_mtu(c.port->active_mtu());
    a.gid_tbl_len = 1;   // index 0: the port's RoCEv2 GID, ::ffff:<its IPv4 address>
    a.port_cap_flags = 0;
    a.max_msg_sz = 1u << 31;
    a.pkey_tbl_len = 1;
    a.active_width = 1;   // 1X
    // IB speeds a link of this rate would be: SDR 2.5, DDR 5, QDR 10 (as 1X lanes).
    a.active_speed = link.speed_mbps >= 10000 ? 4 : link.speed_mbps >= 5000 ? 2 : 1;
    a.phys_state = link.up ? 5 : 3;   // LinkUp : Disabled
    a.link_layer = IBV_LINK_LAYER_ETHERNET;
    std::memcpy(attr, &a, std::min(len, sizeof a));
    return 0;
}

}  // namespace vfab::verbs

// ---- the device list -------------------------------------------------------------------------

extern "C" ibv_device** vfab_ibv_get_device_list(int* num) {
    std::vector<Device*> devs = discover(library());
    auto** list = static_cast<ibv_device**>(calloc(devs.size() + 1, sizeof(ibv_device*)));
    if (!list) return fail_null<ibv_device*>(ENOMEM);
    for (size_t i = 0; i < devs.size(); ++i) list[i] = &devs[i]->head.ibdev;
    if (num) *num = int(devs.size());
    return list;
}
VFAB_VERBS_1_1(ibv_get_device_list);

extern "C" void vfab_ibv_free_device_list(ibv_device** list) { free(list); }

extern "C" const char* vfab_ibv_get_device_name(ibv_device* d) { return d ? d->name : nullptr; }

int ibv_get_device_index(ibv_device* d) {
    Library& lib = library();
    std::lock_guard g(lib.mu);
    for (size_t i = 0; i < lib.devices.size(); ++i)
        if (&lib.devices[i]->head.ibdev == d) return int(i);
    return -1;
}
VFAB_VERBS_1_1(ibv_get_device_name);
VFAB_VERBS_1_1(ibv_free_device_list);

extern "C" __be64 vfab_ibv_get_device_guid(ibv_device* d) {
    // The node GUID of the port (EUI-64 of the MAC) when open; the device's index otherwise.
    Device& dev = *Device::of(d);
    std::lock_guard g(dev.mu);
    if (dev.open.port) return dev.open.port->query_device().attr.node_guid;
    return htobe64(uint64_t(0x02'00'00'ff'fe'00'00'00ull) | uint64_t(ibv_get_device_index(d) & 0xffffff));
}
VFAB_VERBS_1_1(ibv_get_device_guid);

// ---- contexts ----------------------------------------------------------------------------------

extern "C" ibv_context* vfab_ibv_open_device(ibv_device* ibdev) {
    if (!ibdev) return fail_null<ibv_context>(EINVAL);
    Device& d = *Device::of(ibdev);
    std::lock_guard g(d.mu);
    if (int e = open_port(d)) return fail_null<ibv_context>(e);
    auto c = std::make_unique<Context>();
    c->device = &d;
    c->port = d.open.port.get();
    c->cmd_fd = vfio::UniqueFd(eventfd(0, EFD_CLOEXEC), vfio::Sys::real());
    c->async_fd = vfio::UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE), vfio::Sys::real());
    if (!c->cmd_fd || !c->async_fd) {
        const int e = errno;
        if (d.open.contexts == 0) close_port(d);
        return fail_null<ibv_context>(e);
    }
    ++d.open.contexts;
    {
        std::lock_guard og(d.open.objects_mu);
        d.open.open_contexts.push_back(c.get());
    }
    ibv_context& ic = c->vctx.context;
    ic.device = ibdev;
    ic.cmd_fd = c->cmd_fd.get();
    ic.async_fd = c->async_fd.get();
    ic.num_comp_vectors = 1;
    pthread_mutex_init(&ic.mutex, nullptr);
    ic.abi_compat = __VERBS_ABI_IS_EXTENDED;
    c->vctx.sz = sizeof(verbs_context);
    fill_context_ops(*c);
    return c.release()->ibv();
}
VFAB_VERBS_1_1(ibv_open_device);

extern "C" int vfab_ibv_close_device(ibv_context* ctx) {
    if (!ctx) return fail(EINVAL);
    Context* c = Context::of(ctx);
    Device& d = *c->device;
    {
        std::lock_guard og(d.open.objects_mu);
        std::erase(d.open.open_contexts, c);
    }
    pthread_mutex_destroy(&ctx->mutex);
    delete c;
    std::lock_guard g(d.mu);
    close_port(d);
    return 0;
}
VFAB_VERBS_1_1(ibv_close_device);

// ---- queries -----------------------------------------------------------------------------------

extern "C" int vfab_ibv_query_device(ibv_context* ctx, ibv_device_attr* attr) {
    if (!ctx || !attr) return fail(EINVAL);
    const rdma::DeviceCaps caps = Context::of(ctx)->port->query_device();
    static_assert(sizeof caps.attr == sizeof *attr);
    std::memcpy(attr, &caps.attr, sizeof *attr);
    attr->max_pd = 1 << 16;   // PDs are this library's handles over the device's one key table
    // vfab's atomics are atomic with the CPU's accesses too (IBV_ATOMIC_GLOB, docs/rdma-atomics.md),
    // but programs are told the weaker HCA, as rxe and mlx5 say: UCX's verbs transport uses the
    // device's atomics only when it reads exactly that (ib_md.c), and falls back to messages.
    attr->atomic_cap = IBV_ATOMIC_HCA;
    return 0;
}
VFAB_VERBS_1_1(ibv_query_device);

int vfab::verbs::query_device_ex(ibv_context* ctx, const ibv_query_device_ex_input* in, ibv_device_attr_ex* attr,
                                 size_t len) {
    if (in && in->comp_mask) return fail(EINVAL);
    ibv_device_attr_ex a{};
    if (int e = vfab_ibv_query_device(ctx, &a.orig_attr)) return e;
    a.max_dm_size = 0;
    a.odp_caps = {};
    a.completion_timestamp_mask = 0;
    a.hca_core_clock = 0;
    a.device_cap_flags_ex = a.orig_attr.device_cap_flags;
    a.xrc_odp_caps = 0;
    a.raw_packet_caps = 0;
    a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt;
    std::memcpy(attr, &a, std::min(len, sizeof a));
    return 0;
}

// The old entry point (IBVERBS_1.1): programs reach it when verbs_context has no query_port,
// which ours always has; kept for binaries built before it existed.
extern "C" int vfab_ibv_query_port(ibv_context* ctx, uint8_t port, _compat_ibv_port_attr* attr) {
    // The compat layout is ibv_port_attr up to link_layer (rdma-core's verbs.c).
    return query_port(ctx, port, reinterpret_cast<ibv_port_attr*>(attr), offsetof(ibv_port_attr, flags));
}
VFAB_VERBS_1_1(ibv_query_port);

extern "C" int vfab_ibv_query_gid(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid) {
    if (!ctx || port != 1 || index != 0 || !gid) return fail(EINVAL);
    const rdma::Gid g = Context::of(ctx)->port->gid();
    std::memcpy(gid->raw, g.raw, sizeof gid->raw);
    return 0;
}
VFAB_VERBS_1_1(ibv_query_gid);

int _ibv_query_gid_ex(ibv_context* ctx, uint32_t port, uint32_t index, ibv_gid_entry* entry, uint32_t flags,
                      size_t entry_size) {
    if (!ctx || flags || !entry || entry_size < sizeof(ibv_gid_entry)) return EINVAL;
    if (port != 1) return EINVAL;
    if (index != 0) return ENODATA;   // rdma-core's answer for an empty entry
    ibv_gid_entry e{};
    vfab_ibv_query_gid(ctx, 1, 0, &e.gid);
    e.gid_index = 0;
    e.port_num = 1;
    e.gid_type = IBV_GID_TYPE_ROCE_V2;
    e.ndev_ifindex = 0;   // no kernel interface: the port is vfab's own
    std::memcpy(entry, &e, sizeof e);
    return 0;
}

ssize_t _ibv_query_gid_table(ibv_context* ctx, ibv_gid_entry* entries, size_t max, uint32_t flags, size_t entry_size) {
    if (!ctx || flags || (max && !entries) || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
    if (max < 1) return -EINVAL;
    const int r = _ibv_query_gid_ex(ctx, 1, 0, entries, 0, entry_size);
    return r ? -r : 1;
}

extern "C" int vfab_ibv_query_pkey(ibv_context* ctx, uint8_t port, int index, __be16* pkey) {
    if (!ctx || port != 1 || index != 0 || !pkey) return fail(EINVAL);
    *pkey = htobe16(0xffff);   // the default partition, the only one RoCE uses
    return 0;
}
VFAB_VERBS_1_1(ibv_query_pkey);

int ibv_get_pkey_index(ibv_context* ctx, uint8_t port, __be16 pkey) {
    if (!ctx || port != 1) return -EINVAL;
    return be16toh(pkey) == 0xffff ? 0 : -ENOENT;
}

// rdma-core's private entry ibv_devinfo and pyverbs call: every GID here is RoCEv2.
enum vfab_gid_type_sysfs { VFAB_GID_TYPE_SYSFS_IB_ROCE_V1, VFAB_GID_TYPE_SYSFS_ROCE_V2 };
extern "C" int ibv_query_gid_type(ibv_context* ctx, uint8_t port, unsigned int index, vfab_gid_type_sysfs* type) {
    if (!ctx || port != 1 || index != 0 || !type) return fail(EINVAL);
    *type = VFAB_GID_TYPE_SYSFS_ROCE_V2;
    return 0;
}

// verbs/private_hook.hpp: the port behind a context, for vfab's librdmacm.
extern "C" __attribute__((visibility("default"))) vfab::rdma::Port* vfab_verbs_port(ibv_context* ctx) {
    return ctx ? Context::of(ctx)->port : nullptr;
}
