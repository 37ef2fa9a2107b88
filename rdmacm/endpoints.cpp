// rdma_getaddrinfo and the endpoint calls on it (rdma_create_ep / rdma_destroy_ep, SRQs), and
// multicast. rdma_getaddrinfo resolves names as getaddrinfo(3) does (IPv4: vfab's ports are) and
// returns its EAI_* codes, as librdmacm's does.
#include <netdb.h>
#include <netinet/in.h>
#include <rdma/rdma_verbs.h>

#include <cstdlib>
#include <cstring>

#include "cma.hpp"

using namespace vfab::rdmacm;

namespace {
sockaddr* copy_addr(const sockaddr* a, socklen_t len) {
    auto* c = static_cast<sockaddr*>(calloc(1, sizeof(sockaddr_storage)));
    if (c) std::memcpy(c, a, len);
    return c;
}
}  // namespace

extern "C" void rdma_freeaddrinfo(rdma_addrinfo* res) {
    while (res) {
        rdma_addrinfo* next = res->ai_next;
        free(res->ai_src_addr);
        free(res->ai_dst_addr);
        free(res->ai_src_canonname);
        free(res->ai_dst_canonname);
        free(res->ai_route);
        free(res->ai_connect);
        free(res);
        res = next;
    }
}

namespace {
// No node and no service: the hints' addresses and kinds as they are (as librdmacm's; libfabric's
// verbs provider asks so for every endpoint it makes with addresses).
int addrinfo_of_hints(const rdma_addrinfo& hints, rdma_addrinfo** res) {
    auto* out = static_cast<rdma_addrinfo*>(calloc(1, sizeof(rdma_addrinfo)));
    if (!out) return EAI_MEMORY;
    out->ai_flags = hints.ai_flags;
    out->ai_family = hints.ai_family;
    out->ai_qp_type = hints.ai_qp_type;
    out->ai_port_space = hints.ai_port_space;
    bool ok = true;
    if (hints.ai_dst_len && hints.ai_dst_addr) {
        out->ai_dst_addr = copy_addr(hints.ai_dst_addr, hints.ai_dst_len);
        out->ai_dst_len = hints.ai_dst_len;
        ok = out->ai_dst_addr != nullptr;
    }
    if (hints.ai_src_len && hints.ai_src_addr) {
        out->ai_src_addr = copy_addr(hints.ai_src_addr, hints.ai_src_len);
        out->ai_src_len = hints.ai_src_len;
        ok = ok && out->ai_src_addr != nullptr;
    }
    if (!ok) {
        rdma_freeaddrinfo(out);
        return EAI_MEMORY;
    }
    *res = out;
    return 0;
}
}  // namespace

extern "C" int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints, rdma_addrinfo** res) {
    if (!res) return EAI_NONAME;
    if (!node && !service) {
        if (!hints) {
            errno = EINVAL;   // as librdmacm: nothing to go on
            return -1;
        }
        return addrinfo_of_hints(*hints, res);
    }
    addrinfo h{};
    h.ai_family = AF_INET;
    h.ai_socktype = SOCK_STREAM;
    const bool passive = hints && (hints->ai_flags & RAI_PASSIVE);
    if (passive) h.ai_flags |= AI_PASSIVE;
    if (hints && (hints->ai_flags & RAI_NUMERICHOST)) h.ai_flags |= AI_NUMERICHOST;
    if (hints && hints->ai_family && hints->ai_family != AF_INET) return EAI_FAMILY;
    addrinfo* ai = nullptr;
    if (const int r = getaddrinfo(node, service, &h, &ai)) return r;
    auto* out = static_cast<rdma_addrinfo*>(calloc(1, sizeof(rdma_addrinfo)));
    if (!out) {
        freeaddrinfo(ai);
        return EAI_MEMORY;
    }
    out->ai_flags = hints ? hints->ai_flags : 0;
    out->ai_family = AF_INET;
    out->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type : IBV_QPT_RC;
    out->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space
                         : out->ai_qp_type == IBV_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP;
    sockaddr*& where = passive ? out->ai_src_addr : out->ai_dst_addr;
    (passive ? out->ai_src_len : out->ai_dst_len) = ai->ai_addrlen;
    where = copy_addr(ai->ai_addr, ai->ai_addrlen);
    if (!passive && hints && hints->ai_src_addr) {
        out->ai_src_addr = copy_addr(hints->ai_src_addr, hints->ai_src_len);
        out->ai_src_len = hints->ai_src_len;
    }
    freeaddrinfo(ai);
    if (!where) {
        rdma_freeaddrinfo(out);
        return EAI_MEMORY;
    }
    *res = out;
    return 0;
}

extern "C" int rdma_create_ep(rdma_cm_id** id, rdma_addrinfo* res, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
    if (!id || !res) return fail(EINVAL);
    rdma_cm_id* cm_id = nullptr;
    if (rdma_create_id(nullptr, &cm_id, nullptr, rdma_port_space(res->ai_port_space))) return -1;
    cm_id->qp_type = ibv_qp_type(res->ai_qp_type);   // as librdmacm's rdma_create_id2: the address's
    int r;
    if (res->ai_flags & RAI_PASSIVE) {
        r = rdma_bind_addr(cm_id, res->ai_src_addr);
    } else {
        r = rdma_resolve_addr(cm_id, res->ai_src_addr, res->ai_dst_addr, 2000);
        if (!r) r = rdma_resolve_route(cm_id, 2000);
    }
    if (!r && qp_init_attr) {
        qp_init_attr->qp_type = ibv_qp_type(res->ai_qp_type);   // as librdmacm: the address's QP type
        if (res->ai_flags & RAI_PASSIVE) {   // each request's id gets a QP of these attributes
            Id& l = *Id::of(cm_id);
            l.ep_qp_attr = *qp_init_attr;
            l.has_ep_qp_attr = true;
            l.id.pd = pd;
        } else {
            cm_id->pd = pd;
            r = rdma_create_qp(cm_id, pd, qp_init_attr);
        }
    }
    if (r) {
        const int e = errno;
        rdma_destroy_id(cm_id);
        return fail(e);
    }
    *id = cm_id;
    return 0;
}

extern "C" void rdma_destroy_ep(rdma_cm_id* id) {
    if (!id) return;
    rdma_destroy_qp(id);
    rdma_destroy_srq(id);
    rdma_destroy_id(id);
}

extern "C" int rdma_create_srq_ex(rdma_cm_id* cm_id, ibv_srq_init_attr_ex* attr) {
    if (!cm_id || !attr || !cm_id->verbs) return fail(EINVAL);
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE)) return fail(EINVAL);
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
        if (!cm_id->pd) return fail(EINVAL);
        attr->pd = cm_id->pd;
        attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
    }
    Id& id = *Id::of(cm_id);
    bool made_cqs = false;
    if (attr->srq_type == IBV_SRQT_XRC) {   // in the device's XRC domain, completing into recv_cq
        std::lock_guard g(cma().mu);
        if (!id.dev) return fail(EINVAL);
        if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !attr->xrcd) attr->xrcd = xrcd_of(*id.dev);
        if (!attr->xrcd) return -1;
        if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->cq) {
            made_cqs = !cm_id->recv_cq;
            if (make_own_cqs(id, 0, attr->attr.max_wr)) return -1;
            attr->cq = cm_id->recv_cq;
        }
        attr->comp_mask |= IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    }
    ibv_srq* srq = ibv_create_srq_ex(cm_id->verbs, attr);
    if (!srq) {
        const int e = errno;
        if (made_cqs) {
            std::lock_guard g(cma().mu);
            release_own_cqs(id);
        }
        return fail(e);
    }
    if (!cm_id->pd) cm_id->pd = attr->pd;
    cm_id->srq = srq;
    return 0;
}

extern "C" int rdma_create_srq(rdma_cm_id* id, ibv_pd* pd, ibv_srq_init_attr* attr) {
    if (!id || !attr) return fail(EINVAL);
    ibv_srq_init_attr_ex ex{};
    ex.srq_context = attr->srq_context;
    ex.attr = attr->attr;
    ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | (pd ? IBV_SRQ_INIT_ATTR_PD : 0);
    ex.pd = pd;
    ex.srq_type = id->qp_type == IBV_QPT_XRC_RECV ? IBV_SRQT_XRC : IBV_SRQT_BASIC;
    if (rdma_create_srq_ex(id, &ex)) return -1;
    attr->attr = ex.attr;
    return 0;
}

extern "C" void rdma_destroy_srq(rdma_cm_id* id) {
    if (!id || !id->srq) return;
    ibv_destroy_srq(id->srq);
    id->srq = nullptr;
    if (id->qp) return;   // its CQs go with the QP
    std::lock_guard g(cma().mu);
    release_own_cqs(*Id::of(id));
}

// ---- multicast (UD) ----------------------------------------------------------------------------
// As the kernel's rdma_cm over RoCE: the group's GID is its IPv4 address mapped (::ffff:a.b.c.d),
// joining is local (the id's QP attached, the port's filter opened), the MULTICAST_JOIN event
// gives the address vector, QP number 0xFFFFFF and rdma_cm's Q_Key, and the join's context as
// its private data.
namespace {
constexpr uint32_t kMulticastQpn = 0xFFFFFF;

int join(rdma_cm_id* cm_id, sockaddr* addr, bool attach, void* context) {
    if (!cm_id || !addr) return fail(EINVAL);
    if (addr->sa_family != AF_INET) return fail(EAFNOSUPPORT);
    const uint32_t group = ipv4_of(addr);
    if ((group >> 28) != 0xE) return fail(EINVAL);   // not an IPv4 multicast address
    std::lock_guard g(cma().mu);
    Id& id = *Id::of(cm_id);
    if (!id.dev || id.id.qp_type != IBV_QPT_UD) return fail(EINVAL);
    for (const Id::Group& j : id.groups)
        if (j.ip == group) return fail(EADDRINUSE);
    ibv_gid mgid{};
    set_gid(mgid, group);
    const bool attached = attach && id.id.qp;
    if (attached && ibv_attach_mcast(id.id.qp, &mgid, 0)) return -1;
    id.groups.push_back({group, attached});
    EventBox* b = queue_event(id, RDMA_CM_EVENT_MULTICAST_JOIN, 0);
    b->ev.param.ud.private_data = context;
    b->ev.param.ud.ah_attr.is_global = 1;
    b->ev.param.ud.ah_attr.port_num = 1;
    b->ev.param.ud.ah_attr.grh.dgid = mgid;
    b->ev.param.ud.ah_attr.grh.hop_limit = 1;
    b->ev.param.ud.qp_num = kMulticastQpn;
    b->ev.param.ud.qkey = vfab::cm::kRdmaUdpQkey;
    return 0;
}
}  // namespace

extern "C" int rdma_join_multicast(rdma_cm_id* id, sockaddr* addr, void* context) { return join(id, addr, true, context); }

extern "C" int rdma_join_multicast_ex(rdma_cm_id* id, rdma_cm_join_mc_attr_ex* attr, void* context) {
    if (!attr) return fail(EINVAL);
    if (!(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) || !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS)) return fail(EINVAL);
    if (attr->join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER && attr->join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
        return fail(EINVAL);
    // A send-only member is not attached: it receives nothing of the group's.
    return join(id, attr->addr, attr->join_flags == RDMA_MC_JOIN_FLAG_FULLMEMBER, context);
}

extern "C" int rdma_leave_multicast(rdma_cm_id* cm_id, sockaddr* addr) {
    if (!cm_id || !addr) return fail(EINVAL);
    std::lock_guard g(cma().mu);
    Id& id = *Id::of(cm_id);
    const uint32_t group = ipv4_of(addr);
    for (auto it = id.groups.begin(); it != id.groups.end(); ++it) {
        if (it->ip != group) continue;
        if (it->attached && id.id.qp) {
            ibv_gid mgid{};
            set_gid(mgid, group);
            (void)ibv_detach_mcast(id.id.qp, &mgid, 0);
        }
        id.groups.erase(it);
        return 0;
    }
    return fail(EADDRNOTAVAIL);
}
