// struct ibv_qp_ex's work-request interface (ibv_wr_start ... ibv_wr_complete; perftest's
// default path): each ibv_wr_<op> call starts a transport RdmaSendWr in the QP's builder, the
// ibv_wr_set_* calls fill it, ibv_wr_complete posts them all at once. The builder's storage is
// sized when the QP is made (a send queue's worth), so building allocates nothing.
#include <cstring>

#include "objects.hpp"

using namespace vfab::verbs;
namespace rdma = vfab::rdma;

namespace {

Qp& qp_of(ibv_qp_ex* q) { return *Qp::of(q); }

// A new WR from the QP's wr_id and wr_flags.
rdma::RdmaSendWr* begin(ibv_qp_ex* qx, rdma::WrOpcode op) {
    Qp& q = qp_of(qx);
    WrBuilder& b = q.build;
    if (b.wrs.size() == b.wrs.capacity()) {   // more than the send queue holds
        b.error = ENOMEM;
        return nullptr;
    }
    b.wrs.emplace_back();
    b.inline_at.push_back(~0u);
    b.binds.push_back(nullptr);
    rdma::RdmaSendWr& w = b.wrs.back();
    w.wr_id = qx->wr_id;
    w.send_flags = qx->wr_flags;
    w.opcode = op;
    return &w;
}
rdma::RdmaSendWr* current(ibv_qp_ex* qx) {
    WrBuilder& b = qp_of(qx).build;
    if (b.wrs.empty()) {
        b.error = EINVAL;
        return nullptr;
    }
    return &b.wrs.back();
}

void wr_rdma(ibv_qp_ex* qx, rdma::WrOpcode op, uint32_t rkey, uint64_t addr, uint32_t imm) {
    if (rdma::RdmaSendWr* w = begin(qx, op)) w->rkey = rkey, w->remote_addr = addr, w->imm_data = imm;
}
void wr_rdma_write(ibv_qp_ex* qx, uint32_t rkey, uint64_t addr) { wr_rdma(qx, rdma::WrOpcode::rdma_write, rkey, addr, 0); }
void wr_rdma_write_imm(ibv_qp_ex* qx, uint32_t rkey, uint64_t addr, __be32 imm) {
    wr_rdma(qx, rdma::WrOpcode::rdma_write_with_imm, rkey, addr, imm);
}
void wr_rdma_read(ibv_qp_ex* qx, uint32_t rkey, uint64_t addr) { wr_rdma(qx, rdma::WrOpcode::rdma_read, rkey, addr, 0); }
void wr_atomic_cmp_swp(ibv_qp_ex* qx, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap) {
    if (rdma::RdmaSendWr* w = begin(qx, rdma::WrOpcode::atomic_cmp_and_swp))
        w->rkey = rkey, w->remote_addr = addr, w->compare_add = compare, w->swap = swap;
}
void wr_atomic_fetch_add(ibv_qp_ex* qx, uint32_t rkey, uint64_t addr, uint64_t add) {
    if (rdma::RdmaSendWr* w = begin(qx, rdma::WrOpcode::atomic_fetch_and_add)) w->rkey = rkey, w->remote_addr = addr, w->compare_add = add;
}
void wr_send(ibv_qp_ex* qx) { (void)begin(qx, rdma::WrOpcode::send); }
void wr_send_imm(ibv_qp_ex* qx, __be32 imm) {
    if (rdma::RdmaSendWr* w = begin(qx, rdma::WrOpcode::send_with_imm)) w->imm_data = imm;
}
void wr_send_inv(ibv_qp_ex* qx, uint32_t rkey) {
    if (rdma::RdmaSendWr* w = begin(qx, rdma::WrOpcode::send_with_inv)) w->imm_data = rkey;
}
void wr_local_inv(ibv_qp_ex* qx, uint32_t rkey) {
    if (rdma::RdmaSendWr* w = begin(qx, rdma::WrOpcode::local_inv)) w->imm_data = rkey;
}
void wr_bind_mw(ibv_qp_ex* qx, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
    rdma::RdmaSendWr* w = begin(qx, rdma::WrOpcode::bind_mw);
    if (!w) return;
    w->mem_key = mw ? mw->rkey : 0;
    w->new_key = rkey;
    qp_of(qx).build.binds.back() = mw;
    if (info) w->bind = {info->mr ? info->mr->lkey : 0, info->mw_access_flags, info->addr, info->length};
}
void wr_send_tso(ibv_qp_ex* qx, void*, uint16_t, uint16_t) { qp_of(qx).build.error = EOPNOTSUPP; }
void wr_atomic_write(ibv_qp_ex* qx, uint32_t, uint64_t, const void*) { qp_of(qx).build.error = EOPNOTSUPP; }

void wr_set_ud_addr(ibv_qp_ex* qx, ibv_ah* ah, uint32_t qpn, uint32_t qkey) {
    if (rdma::RdmaSendWr* w = current(qx)) w->ah = ah ? Ah::of(ah)->t : nullptr, w->remote_qpn = qpn, w->remote_qkey = qkey;
}
void wr_set_xrc_srqn(ibv_qp_ex* qx, uint32_t srqn) {
    if (rdma::RdmaSendWr* w = current(qx)) w->remote_srqn = srqn;
}

// The SGEs of the current WR, in its slot of the builder's array.
void set_sges(ibv_qp_ex* qx, size_t n, const ibv_sge* list) {
    Qp& q = qp_of(qx);
    rdma::RdmaSendWr* w = current(qx);
    if (!w) return;
    if (n > q.max_send_sge) {
        q.build.error = EINVAL;
        return;
    }
    vfab::Sge* slot = q.build.sges.data() + (q.build.wrs.size() - 1) * q.max_send_sge;
    std::memcpy(static_cast<void*>(slot), list, n * sizeof(ibv_sge));
    w->sg_list = slot;
    w->num_sge = uint32_t(n);
}
void wr_set_sge(ibv_qp_ex* qx, uint32_t lkey, uint64_t addr, uint32_t length) {
    const ibv_sge s{addr, length, lkey};
    set_sges(qx, 1, &s);
}
void wr_set_sge_list(ibv_qp_ex* qx, size_t n, const ibv_sge* list) { set_sges(qx, n, list); }

// Inline data is copied now (the program may reuse its buffer at once); one SGE over the copy,
// pointed at when the WRs are posted (the copy's storage may move as more is added).
void wr_set_inline_data_list(ibv_qp_ex* qx, size_t n, const ibv_data_buf* bufs) {
    Qp& q = qp_of(qx);
    rdma::RdmaSendWr* w = current(qx);
    if (!w) return;
    WrBuilder& b = q.build;
    const size_t at = b.inline_.size();
    size_t total = 0;
    for (size_t i = 0; i < n; ++i) total += bufs[i].length;
    if (total > q.max_inline) {
        b.error = EINVAL;
        return;
    }
    b.inline_.resize(at + total);
    for (size_t i = 0, off = at; i < n; off += bufs[i].length, ++i) std::memcpy(b.inline_.data() + off, bufs[i].addr, bufs[i].length);
    b.inline_at.back() = uint32_t(at);
    w->send_flags |= IBV_SEND_INLINE;
    vfab::Sge* slot = b.sges.data() + (b.wrs.size() - 1) * q.max_send_sge;
    *slot = {0, uint32_t(total), 0};
    w->sg_list = slot;
    w->num_sge = 1;
}
void wr_set_inline_data(ibv_qp_ex* qx, void* addr, size_t length) {
    const ibv_data_buf buf{addr, length};
    wr_set_inline_data_list(qx, 1, &buf);
}

void wr_start(ibv_qp_ex* qx) {
    WrBuilder& b = qp_of(qx).build;
    b.wrs.clear();
    b.inline_at.clear();
    b.binds.clear();
    b.inline_.clear();
    b.error = 0;
}

int wr_complete(ibv_qp_ex* qx) {
    Qp& q = qp_of(qx);
    WrBuilder& b = q.build;
    int err = b.error;
    if (!err && !b.wrs.empty()) {
        for (size_t i = 0; i < b.wrs.size(); ++i)
            if (b.inline_at[i] != ~0u) b.sges[i * q.max_send_sge].addr = reinterpret_cast<uint64_t>(b.inline_.data() + b.inline_at[i]);
        const vfab::PostResult r = q.t->post_send(b.wrs);
        err = r.error;
        for (uint32_t i = 0; i < r.posted; ++i)
            if (b.binds[i]) b.binds[i]->rkey = b.wrs[i].new_key;   // as ibv_post_send does (qp.cpp)
    }
    wr_start(qx);
    return err;
}

void wr_abort(ibv_qp_ex* qx) { wr_start(qx); }

}  // namespace

void vfab::verbs::fill_qp_ex_ops(Qp& q) {
    ibv_qp_ex& x = q.ex;
    x.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
    x.wr_atomic_fetch_add = wr_atomic_fetch_add;
    x.wr_bind_mw = wr_bind_mw;
    x.wr_local_inv = wr_local_inv;
    x.wr_rdma_read = wr_rdma_read;
    x.wr_rdma_write = wr_rdma_write;
    x.wr_rdma_write_imm = wr_rdma_write_imm;
    x.wr_send = wr_send;
    x.wr_send_imm = wr_send_imm;
    x.wr_send_inv = wr_send_inv;
    x.wr_send_tso = wr_send_tso;
    x.wr_set_ud_addr = wr_set_ud_addr;
    x.wr_set_xrc_srqn = wr_set_xrc_srqn;
    x.wr_set_inline_data = wr_set_inline_data;
    x.wr_set_inline_data_list = wr_set_inline_data_list;
    x.wr_set_sge = wr_set_sge;
    x.wr_set_sge_list = wr_set_sge_list;
    x.wr_start = wr_start;
    x.wr_complete = wr_complete;
    x.wr_abort = wr_abort;
    x.wr_atomic_write = wr_atomic_write;
    // A send queue's worth of WRs, each with room for the QP's SGEs.
    const uint32_t depth = q.max_send_wr;
    q.build.wrs.reserve(depth);
    q.build.inline_at.reserve(depth);
    q.build.binds.reserve(depth);
    q.build.sges.resize(size_t(depth) * q.max_send_sge);
    q.build.inline_.reserve(size_t(q.max_inline) * 64);
}
