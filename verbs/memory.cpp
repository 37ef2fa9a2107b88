// Protection domains, memory regions and memory windows over the port's protection domain
// (dma::ProtectionDomain): an MR at its own address is a registration; an MR at an IOVA of the
// program's choice (ibv_reg_mr_iova) is the registration plus a fast-registered MR that answers
// to that IOVA (the MR table's keys, rights and bounds apply to both).
#include <cstring>

#include "objects.hpp"
#include "symver.hpp"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

using namespace vfab::verbs;
namespace rdma = vfab::rdma;

namespace {

// The ibv_access_flags the transport has (dma::Access has their values); the optional range
// (IBV_ACCESS_RELAXED_ORDERING and others a device may ignore) is dropped.
constexpr unsigned kKnownAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                  IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED;

int check_access(unsigned access) {
    access &= ~unsigned(IBV_ACCESS_OPTIONAL_RANGE);
    access &= ~unsigned(IBV_ACCESS_HUGETLB);   // a hint
    if (access & ~kKnownAccess) return EOPNOTSUPP;   // on-demand paging, device memory, ...
    // IB spec 10.6.3.1 (C10-?): remote write or atomic rights need local write.
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))
        return EINVAL;
    return 0;
}

Context& ctx_of(ibv_pd* pd) { return *Context::of(pd->context); }

// The MR's memory registered and, when it answers to another address, bound to it.
int register_mr(Mr& m, ibv_pd* pd, void* addr, size_t len, uint64_t iova, unsigned access) {
    if (!len) return EINVAL;
    if (int e = check_access(access)) return e;
    const auto rights = vfab::dma::Access(access & kKnownAccess);
    vfab::dma::ProtectionDomain& dom = ctx_of(pd).port->pd();
    const bool moved = iova != reinterpret_cast<uintptr_t>(addr) || (access & IBV_ACCESS_ZERO_BASED);
    auto r = dom.register_memory(addr, len, moved ? vfab::dma::Access::local_write : rights);
    if (!r) return r.error().code ? r.error().code : EINVAL;
    m.region = *r;
    uint32_t lkey = r->lkey, rkey = r->rkey;
    if (moved) {
        auto key = dom.alloc_mr(len, 1);
        if (!key) {
            (void)dom.deregister(m.region);
            return key.error().code;
        }
        const uint32_t new_key = rdma::next_key(*key);
        if (dom.fast_register(*key, new_key, addr, len, iova, rights) != vfab::dma::MrStatus::ok) {
            (void)dom.dealloc(*key);
            (void)dom.deregister(m.region);
            return EINVAL;
        }
        m.fr_key = new_key;
        lkey = rkey = new_key;
    }
    m.mr.context = pd->context;
    m.mr.pd = pd;
    m.mr.addr = addr;
    m.mr.length = len;
    m.mr.handle = lkey;
    m.mr.lkey = lkey;
    m.mr.rkey = rkey;
    return 0;
}

void unregister_mr(Mr& m) {
    vfab::dma::ProtectionDomain& dom = ctx_of(m.mr.pd).port->pd();
    if (m.fr_key) (void)dom.dealloc(m.fr_key);
    (void)dom.deregister(m.region);
    m.fr_key = 0;
    m.region = {};
}

}  // namespace

// ---- protection domains ------------------------------------------------------------------------

extern "C" ibv_pd* vfab_ibv_alloc_pd(ibv_context* ctx) {
    if (!ctx) return fail_null<ibv_pd>(EINVAL);
    auto* p = new Pd{};
    p->pd.context = ctx;
    p->pd.handle = 0;
    return &p->pd;
}
VFAB_VERBS_1_1(ibv_alloc_pd);

extern "C" int vfab_ibv_dealloc_pd(ibv_pd* pd) {
    if (!pd) return fail(EINVAL);
    delete Pd::of(pd);
    return 0;
}
VFAB_VERBS_1_1(ibv_dealloc_pd);

// ---- memory regions -----------------------------------------------------------------------------

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t len, uint64_t iova, unsigned int access) {
    if (!pd) return fail_null<ibv_mr>(EINVAL);
    auto* m = new Mr{};
    if (int e = register_mr(*m, pd, addr, len, iova, access)) {
        delete m;
        return fail_null<ibv_mr>(e);
    }
    return &m->mr;
}

extern "C" ibv_mr* vfab_ibv_reg_mr(ibv_pd* pd, void* addr, size_t len, int access) {
    return ibv_reg_mr_iova2(pd, addr, len, reinterpret_cast<uintptr_t>(addr), unsigned(access));
}
VFAB_VERBS_1_1(ibv_reg_mr);

ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t len, uint64_t iova, int access) {
    return ibv_reg_mr_iova2(pd, addr, len, iova, unsigned(access));
}

ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t len, uint64_t iova, int fd, int access) {
    if (!pd) return fail_null<ibv_mr>(EINVAL);
    if (int e = check_access(unsigned(access))) return fail_null<ibv_mr>(e);
    if (iova != offset) return fail_null<ibv_mr>(EOPNOTSUPP);
    auto r = ctx_of(pd).port->pd().register_dmabuf(fd, offset, len, vfab::dma::Access(unsigned(access) & kKnownAccess));
    if (!r) return fail_null<ibv_mr>(r.error().code ? r.error().code : EOPNOTSUPP);
    auto* m = new Mr{};
    m->region = *r;
    m->mr = {pd->context, pd, r->addr, len, r->lkey, r->lkey, r->rkey};
    return &m->mr;
}

extern "C" int vfab_ibv_dereg_mr(ibv_mr* mr) {
    if (!mr) return fail(EINVAL);
    Mr* m = Mr::of(mr);
    unregister_mr(*m);
    delete m;
    return 0;
}
VFAB_VERBS_1_1(ibv_dereg_mr);

int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t len, int access) {
    if (!mr || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED)) return IBV_REREG_MR_ERR_INPUT;
    Mr* m = Mr::of(mr);
    ibv_pd* new_pd = flags & IBV_REREG_MR_CHANGE_PD ? pd : mr->pd;
    void* new_addr = flags & IBV_REREG_MR_CHANGE_TRANSLATION ? addr : mr->addr;
    size_t new_len = flags & IBV_REREG_MR_CHANGE_TRANSLATION ? len : mr->length;
    unsigned new_access = flags & IBV_REREG_MR_CHANGE_ACCESS ? unsigned(access) : unsigned(m->region.access);
    if (!new_pd || !new_len) return IBV_REREG_MR_ERR_INPUT;
    if (check_access(new_access)) return IBV_REREG_MR_ERR_INPUT;
    if (flags == IBV_REREG_MR_CHANGE_ACCESS && !m->fr_key) {
        // New rights only: the keys a peer holds stay good (as RDMA NICs and rxe keep them).
        auto r = ctx_of(new_pd).port->pd().set_access(m->region, vfab::dma::Access(new_access & kKnownAccess));
        return r ? 0 : IBV_REREG_MR_ERR_INPUT;
    }
    Mr next{};
    if (register_mr(next, new_pd, new_addr, new_len, reinterpret_cast<uintptr_t>(new_addr), new_access))
        return IBV_REREG_MR_ERR_CMD;
    unregister_mr(*m);
    *m = next;
    return 0;
}

// ---- memory windows ------------------------------------------------------------------------------

ibv_mw* vfab::verbs::alloc_mw(ibv_pd* pd, ibv_mw_type type) {
    if (!pd || (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2)) return fail_null<ibv_mw>(EINVAL);
    auto key = ctx_of(pd).port->pd().alloc_mw(type == IBV_MW_TYPE_1 ? vfab::dma::WindowType::type1 : vfab::dma::WindowType::type2);
    if (!key) return fail_null<ibv_mw>(key.error().code);
    auto* w = new Mw{};
    w->mw.context = pd->context;
    w->mw.pd = pd;
    w->mw.rkey = *key;
    w->mw.handle = *key;
    w->mw.type = type;
    return &w->mw;
}

int vfab::verbs::dealloc_mw(ibv_mw* mw) {
    if (!mw) return EINVAL;
    // The window is invalidated and freed: a peer holding its key is refused from now on.
    if (auto r = ctx_of(mw->pd).port->pd().dealloc(mw->rkey); !r) return r.error().code;
    delete Mw::of(mw);
    return 0;
}
