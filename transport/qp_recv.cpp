// The receive queue of a queue pair (IB spec 10.2.9, 10.8): its own, an SRQ it shares, or the
// XRC SRQ each message names (xrc.cpp). It hands the responder one WR per message and makes
// its completion; in the error state it flushes.
#include "engine.hpp"

namespace vfab::rdma::detail {

void QpRecvQueue::init() {
    if (srq_) {
        rq_ = &srq_->rq;
        ++srq_->users;
    } else if (c_.is_xrc()) {   // no receive queue: an XRC receiver takes each message's SRQ
        own_.init(1, 1);
        rq_ = &own_;
    } else {
        own_.init(c_.cap.max_recv_wr, c_.cap.max_recv_sge);
        rq_ = &own_;
    }
    if (xrcd_) ++xrcd_->users;
}

void QpRecvQueue::reset() noexcept {
    if (cur_ != RecvQueue::kNone) {
        if (srq_) rq_->put_back(cur_);   // unused: the next queue pair of the SRQ takes it
        else rq_->release(cur_);
        cur_ = RecvQueue::kNone;
    }
    if (!srq_) own_.reset();
    last_wqe_raised_ = false;
}

void QpRecvQueue::detach() noexcept {
    reset();
    if (srq_ && c_.type != QpType::xrc_recv) --srq_->users;
    if (xrcd_) --xrcd_->users;
}

CqImpl* QpRecvQueue::cq() const noexcept { return c_.type == QpType::xrc_recv ? (srq_ ? srq_->cq : nullptr) : c_.rcq; }

bool QpRecvQueue::take() noexcept {
    if (cur_ != RecvQueue::kNone) return true;
    cur_ = rq_->take();
    if (cur_ == RecvQueue::kNone) return false;
    if (srq_) srq_->taken();
    return true;
}

void QpRecvQueue::complete(RdmaWcStatus st, RdmaWcOpcode op, uint32_t byte_len, uint32_t flags, uint32_t imm, uint32_t src_qp,
                           bool se) noexcept {
    Wc wc;
    wc.wr_id = rq_->wqe(cur_).wr_id;
    wc.status = st;
    wc.opcode = op;
    wc.byte_len = byte_len;
    wc.imm_data = imm;
    wc.qp_num = c_.qpn;
    wc.src_qp = src_qp;
    wc.wc_flags = flags;
    if (flags & wc_grh) wc.sl = kWcSlIpv4;   // a datagram: over IPv4
    rq_->release(cur_);
    cur_ = RecvQueue::kNone;
    cq()->push(wc, se);
}

void QpRecvQueue::error(uint64_t wr_id, RdmaWcStatus st) noexcept {
    Wc wc;
    wc.wr_id = wr_id;
    wc.status = st;
    wc.opcode = RdmaWcOpcode::recv;
    wc.qp_num = c_.qpn;
    cq()->push(wc, false);
}

// The WR a message was filling; with its own receive queue every posted one. An SRQ's stay for
// its other queue pairs (10.2.9.5): this one says it takes no more (last WQE reached).
void QpRecvQueue::flush() noexcept {
    auto flush_one = [&] {
        const uint64_t wr_id = rq_->wqe(cur_).wr_id;
        rq_->release(cur_);
        cur_ = RecvQueue::kNone;
        error(wr_id, RdmaWcStatus::wr_flush_err);
    };
    if (cur_ != RecvQueue::kNone) flush_one();
    if (c_.type == QpType::xrc_recv) return;   // its SRQs' other WRs stay for the domain's other QPs
    if (srq_) {
        if (!last_wqe_raised_) {
            last_wqe_raised_ = true;
            qp_.raise_event(AsyncEventType::qp_last_wqe_reached);
        }
        return;
    }
    while ((cur_ = rq_->take()) != RecvQueue::kNone) flush_one();
}

}  // namespace vfab::rdma::detail
