// Memory-management work requests (IB spec 10.6.3.6 fast registration, 10.6.7 memory windows,
// 10.6.6 / 11.4.1 invalidation): REG_MR, BIND_MW and LOCAL_INV act on the protection domain's
// MR table and send nothing. They take effect when posted — so that the WRs posted after them
// can use the keys they make — except a fenced LOCAL_INV, which waits until the queue pair's
// earlier READs and atomics have completed (their responses may still be landing in the memory
// it revokes). Each completes in its place in the send queue; a failure ends it with an error
// status (the table's reason in vendor_err) and moves the queue pair to ERR, as any local error.
#include "engine.hpp"

namespace vfab::rdma::detail {

PostResult Requester::post_memory_wr(const RdmaSendWr& wr, bool type1_bind) noexcept {
    if (c_.type != QpType::rc) return {EINVAL, 0};
    if (sq.full()) return {ENOMEM, 0};
    SendWqe& w = sq.prepare(wr, c_.sq_sig_all || (wr.send_flags & wr_signaled));   // REG_MR's list is read now, not kept
    ++sq.tail;
    if (c_.state == RdmaQpState::error) {
        qp_.flush();
        return {0, 1};
    }
    const bool deferred = wr.opcode == WrOpcode::local_inv && (wr.send_flags & wr_fence);
    if (!deferred) {
        execute_memory_wr(w, wr, type1_bind);
        if (w.status != RdmaWcStatus::success) {
            qp_.to_error();
            return {0, 1};
        }
    }
    qp_.ready();   // the send queue moves past it in order (pump)
    return {0, 1};
}

void Requester::execute_memory_wr(SendWqe& w, const RdmaSendWr& wr, bool type1_bind) noexcept {
    w.started = true;   // in place: retransmissions walk past it
    w.done = true;
    dma::ProtectionDomain& pd = c_.port.pd();
    dma::MrStatus st = dma::MrStatus::ok;
    switch (wr.opcode) {
    case WrOpcode::local_inv:
        st = pd.invalidate(wr.imm_data, c_.qpn);
        if (st != dma::MrStatus::ok) w.status = RdmaWcStatus::loc_qp_op_err;
        break;
    case WrOpcode::bind_mw:
        // Type 1 windows through Qp::bind_mw, type 2B through a BIND_MW WR (tied to this QP).
        if ((pd.table().window_type(wr.mem_key) == dma::WindowType::type1) != type1_bind)
            st = dma::MrStatus::invalid_state;
        else
            st = pd.bind_window(wr.bind.mr_key, wr.mem_key, wr.new_key, wr.bind.addr, wr.bind.length,
                                dma::Access(wr.bind.access), type1_bind ? 0 : c_.qpn);
        if (st != dma::MrStatus::ok) w.status = RdmaWcStatus::mw_bind_err;
        break;
    case WrOpcode::reg_mr: fast_register(w, wr); return;
    default: w.status = RdmaWcStatus::loc_qp_op_err; return;
    }
    if (st != dma::MrStatus::ok) w.vendor_err = kVendorErrMemory | uint32_t(st);
}

// Blocks that follow each other make one run of memory, whatever their number; scattered ones
// are kept in the MR's block map, at most the max_blocks it was allocated with
// (kVendorErrTooManyBlocks). Every byte the MR covers must lie in memory the domain maps.
void Requester::fast_register(SendWqe& w, const RdmaSendWr& wr) noexcept {
    const RegMrInfo* r = wr.reg;
    auto fail = [&](uint32_t why) {
        w.status = RdmaWcStatus::loc_qp_op_err;
        w.vendor_err = why;
    };
    if (!r || !r->blocks || r->num_blocks == 0 || r->block_size == 0 || r->first_offset >= r->block_size ||
        r->length == 0 || r->length > uint64_t(r->num_blocks) * r->block_size - r->first_offset)
        return fail(kVendorErrBadBlockList);
    const uint32_t used = uint32_t((r->first_offset + r->length + r->block_size - 1) / r->block_size);
    uint32_t i = 1;
    while (i < used && r->blocks[i] == r->blocks[0] + uint64_t(i) * r->block_size) ++i;
    dma::ProtectionDomain& pd = c_.port.pd();
    const auto access = dma::Access(r->access);
    dma::MrStatus st;
    if (i == used) {   // one run
        const auto* host = reinterpret_cast<const void*>(r->blocks[0] + r->first_offset);
        st = pd.fast_register(wr.mem_key, wr.new_key, host, r->length, r->iova, access);
    } else {
        const uint32_t max = pd.table().max_blocks(wr.mem_key);
        if (max && used > max) return fail(kVendorErrTooManyBlocks);
        st = pd.fast_register_blocks(wr.mem_key, wr.new_key, r->blocks, used, r->block_size, r->first_offset,
                                     r->length, r->iova, access);
    }
    if (st != dma::MrStatus::ok) fail(kVendorErrMemory | uint32_t(st));
}

Result<uint32_t> QpImpl::bind_mw(uint32_t mw_key, const MwBindInfo& info, uint64_t wr_id, uint32_t send_flags) {
    auto g = c_.port.guard();
    if (destroyed) return Error{ENODEV, "bind_mw: the queue pair was destroyed"};
    if (c_.state != RdmaQpState::rts && c_.state != RdmaQpState::error)
        return Error{EINVAL, str_cat("bind_mw: the queue pair is in ", to_string(c_.state), "; bind windows in RTS")};
    if (c_.port.pd().table().window_type(mw_key) != dma::WindowType::type1)
        return Error{EINVAL, "bind_mw binds a current type 1 window key; bind a type 2 window with a BIND_MW work request"};
    RdmaSendWr w;
    w.wr_id = wr_id;
    w.opcode = WrOpcode::bind_mw;
    w.send_flags = send_flags;
    w.mem_key = mw_key;
    w.new_key = next_key(mw_key);
    w.bind = info;
    const PostResult r = req_.post_memory_wr(w, true);
    pump();
    c_.port.tx_flush();
    if (!r) return Error{r.error, r.error == ENOMEM ? "bind_mw: the send queue is full" : "bind_mw: not on this queue pair"};
    return w.new_key;
}

}  // namespace vfab::rdma::detail
