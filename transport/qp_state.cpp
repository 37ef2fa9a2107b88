// Queue pairs: creation, the state machine of ibv_modify_qp (IB spec 10.3.1, 11.2.5.2 table 91),
// the receive queue, the error state with its flush, and the dispatch of received packets.
#include <bit>
#include <cstring>

#include "engine.hpp"

namespace vfab::rdma::detail {

using namespace wire;

QpImpl::QpImpl(PortImpl& port, uint32_t qpn, const QpInitAttr& a)
    : port_(port), type_(a.qp_type), qpn_(qpn), scq_(static_cast<CqImpl*>(a.send_cq)),
      rcq_(static_cast<CqImpl*>(a.recv_cq)), cap_(a.cap), sq_sig_all_(a.sq_sig_all), create_flags_(a.create_flags),
      srq_(static_cast<SrqImpl*>(a.srq)), xrcd_(static_cast<XrcdImpl*>(a.xrcd)) {}

Result<void> QpImpl::init() {
    const uint32_t sq = std::bit_ceil(cap_.max_send_wr), rq = cap_.max_recv_wr;
    sq_.resize(sq);
    sq_segs_.resize(size_t(sq) * (cap_.max_send_sge + 1));
    inline_.resize(size_t(sq) * cap_.max_inline_data);
    sq_mask_ = sq - 1;
    if (srq_) {
        rq_ = &srq_->rq;
        ++srq_->users;
    } else if (is_xrc()) {   // no receive queue: an XRC receiver takes each message's SRQ
        own_rq_.init(1, 1);
        rq_ = &own_rq_;
    } else {
        own_rq_.init(rq, cap_.max_recv_sge);
        rq_ = &own_rq_;
    }
    res_.resize(kMaxRdAtomic);
    src_port_ = uint16_t(kRoceSourcePortBase | (qpn_ & 0x3FFF));
    if (scq_) ++scq_->users;
    if (rcq_) ++rcq_->users;
    if (xrcd_) ++xrcd_->users;
    return {};
}

Result<void> QpImpl::destroy() {
    PortImpl::Guard g(port_);
    if (destroyed) return Error{ENODEV, "queue pair already destroyed"};
    destroyed = true;
    state_ = QpState::reset;
    port_.leave_all(this);
    return_recv();
    if (scq_) --scq_->users;
    if (rcq_) --rcq_->users;
    if (srq_ && type_ != QpType::xrc_recv) --srq_->users;
    if (xrcd_) --xrcd_->users;
    return {};
}

QpAttr QpImpl::query() const {
    PortImpl::Guard g(port_);
    QpAttr a = attr_;
    a.qp_state = state_;
    return a;
}

// ---- modify ----------------------------------------------------------------------------------------

Result<void> QpImpl::check_modify(const QpAttr& a, uint32_t mask) const {
    if (destroyed) return Error{ENODEV, "modify_qp: the queue pair was destroyed"};
    const QpState to = mask & attr_state ? a.qp_state : state_;
    if ((mask & attr_cur_state) && a.qp_state != state_ && !(mask & attr_state))
        return Error{EINVAL, str_cat("modify_qp: the queue pair is in ", to_string(state_), ", not as cur_qp_state says")};
    auto need = [&](uint32_t bits, const char* names) -> Result<void> {
        if ((mask & bits) != bits)
            return Error{EINVAL, str_cat("modify_qp ", to_string(state_), " -> ", to_string(to), ": ", names,
                                         " must be given (IB spec table 91)")};
        return {};
    };
    const bool rc = connected();
    if (mask & attr_path_mtu) {
        if (mtu_bytes(a.path_mtu) == 0) return Error{EINVAL, "modify_qp: path_mtu must be 1 (256) to 5 (4096)"};
        if (a.path_mtu > port_.active_mtu())
            return Error{EINVAL, str_cat("modify_qp: path MTU ", mtu_bytes(a.path_mtu), " is more than the link carries (",
                                         mtu_bytes(port_.active_mtu()), "): use the port's active_mtu()")};
    }
    if ((mask & attr_av) && !a.ah_attr.dgid.is_ipv4())
        return Error{EINVAL, "modify_qp: the destination GID must be IPv4-mapped (::ffff:a.b.c.d); IPv6 is not carried yet"};
    if ((mask & attr_timeout) && a.timeout > 31) return Error{EINVAL, "modify_qp: timeout is 0 to 31"};
    if ((mask & attr_retry_cnt) && a.retry_cnt > 7) return Error{EINVAL, "modify_qp: retry_cnt is 0 to 7"};
    if ((mask & attr_rnr_retry) && a.rnr_retry > 7) return Error{EINVAL, "modify_qp: rnr_retry is 0 to 7"};
    if ((mask & attr_min_rnr_timer) && a.min_rnr_timer > 31) return Error{EINVAL, "modify_qp: min_rnr_timer is 0 to 31"};
    if ((mask & attr_max_dest_rd_atomic) && a.max_dest_rd_atomic > res_.size())
        return Error{EINVAL, str_cat("modify_qp: max_dest_rd_atomic is at most ", res_.size())};
    if ((mask & attr_max_qp_rd_atomic) && a.max_rd_atomic > kMaxRdAtomic)
        return Error{EINVAL, str_cat("modify_qp: max_rd_atomic is at most ", kMaxRdAtomic)};
    if (!(mask & attr_state)) return {};
    if (to == QpState::reset || to == QpState::error) return {};
    switch (state_) {
    case QpState::reset:
        if (to != QpState::init) break;
        return rc ? need(attr_pkey_index | attr_port | attr_access_flags, "pkey_index, port and qp_access_flags")
                  : need(attr_pkey_index | attr_port | attr_qkey, "pkey_index, port and qkey");
    // An XRC sender has no responder (no max_dest_rd_atomic or min_rnr_timer to give) and an XRC
    // receiver no requester (no retry counts or max_rd_atomic); UC neither answers READs nor
    // acknowledges nor retries: the kernel's table has them need only the rest.
    case QpState::init:
        if (to == QpState::init) return {};
        if (to != QpState::rtr) break;
        if (type_ == QpType::xrc_send || type_ == QpType::uc)
            return need(attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn, "ah_attr, path_mtu, dest_qp_num and rq_psn");
        return rc ? need(attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn | attr_max_dest_rd_atomic |
                             attr_min_rnr_timer,
                         "ah_attr, path_mtu, dest_qp_num, rq_psn, max_dest_rd_atomic and min_rnr_timer")
                  : Result<void>{};
    case QpState::rtr:
        if (to != QpState::rts) break;
        if (type_ == QpType::xrc_recv) return need(attr_sq_psn | attr_timeout, "sq_psn and timeout");
        return reliable() ? need(attr_sq_psn | attr_timeout | attr_retry_cnt | attr_rnr_retry | attr_max_qp_rd_atomic,
                                 "sq_psn, timeout, retry_cnt, rnr_retry and max_rd_atomic")
                          : need(attr_sq_psn, "sq_psn");
    case QpState::rts:
    case QpState::sqd:
    case QpState::sqe:
        if (to == QpState::rts || to == QpState::sqd) return {};
        break;
    case QpState::error: break;
    }
    return Error{EINVAL, str_cat("modify_qp: ", to_string(state_), " -> ", to_string(to),
                                 " is not a transition of the QP state machine (IB spec 10.3.1)")};
}

Result<void> QpImpl::modify(const QpAttr& a, uint32_t mask) {
    PortImpl::Guard g(port_);
    if (auto r = check_modify(a, mask); !r) return r;
    if (mask & attr_access_flags) attr_.qp_access_flags = a.qp_access_flags;
    if (mask & attr_pkey_index) attr_.pkey_index = a.pkey_index;
    if (mask & attr_port) attr_.port_num = a.port_num;
    if (mask & attr_qkey) attr_.qkey = a.qkey;
    if (mask & attr_av) attr_.ah_attr = a.ah_attr;
    if (mask & attr_path_mtu) attr_.path_mtu = a.path_mtu;
    if (mask & attr_timeout) attr_.timeout = a.timeout;
    if (mask & attr_retry_cnt) attr_.retry_cnt = a.retry_cnt;
    if (mask & attr_rnr_retry) attr_.rnr_retry = a.rnr_retry;
    if (mask & attr_rq_psn) attr_.rq_psn = a.rq_psn & kPsnMask;
    if (mask & attr_sq_psn) attr_.sq_psn = a.sq_psn & kPsnMask;
    if (mask & attr_max_qp_rd_atomic) attr_.max_rd_atomic = a.max_rd_atomic;
    if (mask & attr_max_dest_rd_atomic) attr_.max_dest_rd_atomic = a.max_dest_rd_atomic;
    if (mask & attr_min_rnr_timer) attr_.min_rnr_timer = a.min_rnr_timer;
    if (mask & attr_dest_qpn) attr_.dest_qp_num = a.dest_qp_num & kQpnMask;
    if (!(mask & attr_state)) return {};

    const QpState to = a.qp_state;
    if (to == QpState::error) {
        to_error();
        return {};
    }
    if (to == QpState::reset) {
        sq_head_ = sq_next_ = sq_tail_ = 0;
        return_recv();
        if (!srq_) own_rq_.reset();
        last_wqe_raised_ = comm_est_raised_ = false;
        rd_atomic_ = pkts_unacked_ = 0;
        retry_deadline_ = rnr_deadline_ = 0;
        in_send_ = in_write_ = nak_seq_sent_ = uc_discard_ = ack_pending_ = peer_known_ = waiting_arp_ = retry_started_ = false;
        for (auto& r : res_) r = Resource{};
        res_sending_ = 0;
        state_ = QpState::reset;
        return {};
    }
    if (to == QpState::rtr && state_ == QpState::init) {
        mtu_ = mtu_bytes(connected() ? attr_.path_mtu : port_.active_mtu());
        epsn_ = attr_.rq_psn;
        msn_ = 0;
        if (connected()) {
            peer_ip_ = attr_.ah_attr.dgid.ipv4();
            bool failed = false;
            peer_known_ = port_.resolve(peer_ip_, peer_mac_, failed);   // ARP now, before the first send
        }
    }
    if (to == QpState::rts && state_ == QpState::rtr) {
        next_psn_ = una_ = attr_.sq_psn;
        retries_left_ = attr_.retry_cnt;
        rnr_left_ = attr_.rnr_retry;
    }
    state_ = to;
    if (state_ == QpState::rts) ready();
    return {};
}

// ---- the error state ------------------------------------------------------------------------------

void QpImpl::to_error() noexcept {
    state_ = QpState::error;
    retry_deadline_ = rnr_deadline_ = 0;
    in_send_ = in_write_ = false;
    flush();
}

// Every WR still queued completes with WR_FLUSH_ERR (the first failed one already has its status).
void QpImpl::flush() noexcept {
    for (; sq_head_ != sq_tail_; ++sq_head_) {
        SendWqe& w = sq_[sq_head_ & sq_mask_];
        if (!w.done) w.status = WcStatus::wr_flush_err;
        complete_send(w);
    }
    sq_next_ = sq_tail_;
    rd_atomic_ = 0;
    // The WR a message was filling; with its own receive queue every posted one. An SRQ's stay
    // for its other queue pairs (10.2.9.5): this one says it takes no more.
    auto flush_recv = [&] {
        const uint64_t wr_id = rq_->wqe(cur_recv_).wr_id;
        rq_->release(cur_recv_);
        cur_recv_ = RecvQueue::kNone;
        recv_error(wr_id, WcStatus::wr_flush_err);
    };
    if (cur_recv_ != RecvQueue::kNone) flush_recv();
    if (type_ == QpType::xrc_recv) return;   // its SRQs' other WRs stay for the domain's other QPs
    if (srq_) {
        if (!last_wqe_raised_) {
            last_wqe_raised_ = true;
            raise_event(AsyncEventType::qp_last_wqe_reached);
        }
        return;
    }
    while ((cur_recv_ = rq_->take()) != RecvQueue::kNone) flush_recv();
}

void QpImpl::raise_event(AsyncEventType type) noexcept {
    if (type == AsyncEventType::comm_est) comm_est_raised_ = true;
    AsyncEvent e;
    e.type = type;
    e.qp = this;
    port_.raise(e);
}

// A CQ of this queue pair lost a completion (it overran): no completion can say so, hence the
// affiliated asynchronous error (IB spec 11.6.3.1, "local work queue catastrophic error"), and
// the queue pair stops (as rxe's responder does on a full CQ).
void QpImpl::cq_overran() noexcept {
    if (state_ == QpState::error || state_ == QpState::reset) return;
    raise_event(AsyncEventType::qp_fatal);
    to_error();
}

void QpImpl::recv_error(uint64_t wr_id, WcStatus st) noexcept {
    Wc wc;
    wc.wr_id = wr_id;
    wc.status = st;
    wc.opcode = WcOpcode::recv;
    wc.qp_num = qpn_;
    recv_cq()->push(wc, false);
}

bool QpImpl::take_recv() noexcept {
    if (cur_recv_ != RecvQueue::kNone) return true;
    cur_recv_ = rq_->take();
    if (cur_recv_ == RecvQueue::kNone) return false;
    if (srq_) srq_->taken();
    return true;
}

void QpImpl::return_recv() noexcept {
    if (cur_recv_ == RecvQueue::kNone) return;
    if (srq_) rq_->put_back(cur_recv_);
    else rq_->release(cur_recv_);
    cur_recv_ = RecvQueue::kNone;
}

// ---- the receive queue -------------------------------------------------------------------------------

PostResult QpImpl::post_recv(std::span<const RecvWr> wrs) noexcept {
    PortImpl::Guard g(port_);
    if (destroyed) return {ENODEV, 0};
    if (state_ == QpState::reset || srq_ || is_xrc()) return {EINVAL, 0};   // with an SRQ: Srq::post_recv
    uint32_t i = 0;
    for (; i < wrs.size(); ++i) {
        const RecvWr& wr = wrs[i];
        const RecvQueue::Post r = rq_->post(wr, port_.mrs());
        if (r == RecvQueue::Post::too_many_sge) return {EINVAL, i};
        if (r == RecvQueue::Post::full) return {ENOMEM, i};
        if (state_ == QpState::error) {
            if (r == RecvQueue::Post::ok) flush();
            else recv_error(wr.wr_id, WcStatus::wr_flush_err);
        } else if (r == RecvQueue::Post::bad_key) {
            // A bad key fails the WR and, as verbs has it, the queue pair (10.8.3.1).
            recv_error(wr.wr_id, WcStatus::loc_prot_err);
            to_error();
        }
    }
    return {0, i};
}

// ---- received packets and timers -------------------------------------------------------------------------

void QpImpl::on_packet(const Packet& p) noexcept {
    if (state_ == QpState::reset || state_ == QpState::init || state_ == QpState::error) return;
    if (type_ == QpType::ud) {
        if (p.info.has(has_deth)) on_ud_send(p);
        return;
    }
    if (p.info.has(has_deth)) return;   // a UD opcode to a connected queue pair
    // RC, UC and XRC opcodes do not mix: each queue pair takes its own transport's (as rxe).
    if (p.xrc != is_xrc() || p.uc != (type_ == QpType::uc)) return;
    if (type_ == QpType::xrc_send && p.info.has(is_request)) return;   // a sender only sends
    if (type_ == QpType::xrc_recv && !p.info.has(is_request)) return;  // a receiver only receives
    if (p.src_ip != peer_ip_) return;   // RC: only the connected peer (as rxe checks the GIDs)
    if (!peer_known_) {   // its ARP answer may still be on its way: answer where the request came from
        std::memcpy(peer_mac_, p.src_mac, 6);
        peer_known_ = true;
    }
    if (p.info.has(is_request)) {
        if (state_ == QpState::rtr && !comm_est_raised_) raise_event(AsyncEventType::comm_est);
        on_request(p);
    } else {
        on_response(p);
    }
}

uint64_t QpImpl::deadline() const noexcept {
    if (state_ == QpState::error || state_ == QpState::reset) return 0;
    if (rnr_deadline_ && (!retry_deadline_ || rnr_deadline_ < retry_deadline_)) return rnr_deadline_;
    return retry_deadline_;
}

void QpImpl::on_arp_change() noexcept {
    if (!waiting_arp_) return;
    waiting_arp_ = false;
    ready();
}

void QpImpl::ready() noexcept { port_.mark_ready(this); }

}  // namespace vfab::rdma::detail
