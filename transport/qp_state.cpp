// Queue pairs: creation, the state machine of ibv_modify_qp (IB spec 10.3.1, 11.2.5.2 table 91),
// the error state with its flush, and the work the port asks of a queue pair.
#include <cstring>

#include "engine.hpp"

namespace vfab::rdma::detail {

using namespace wire;

QpContext::QpContext(PortImpl& port, uint32_t qpn, const RdmaQpInitAttr& a)
    : port(port), type(a.qp_type), qpn(qpn), scq(static_cast<CqImpl*>(a.send_cq)), rcq(static_cast<CqImpl*>(a.recv_cq)),
      cap(a.cap), sq_sig_all(a.sq_sig_all), create_flags(a.create_flags),
      src_port(uint16_t(kRoceSourcePortBase | (qpn & 0x3FFF))) {}

void QpContext::fill_common(PacketHeader& h) const noexcept {
    h.dst_mac = peer.mac;
    h.src_mac = port.mac();
    h.src_ip = port.ipv4();
    h.dst_ip = peer.ip;
    h.src_port = src_port;
    h.ttl = attr.ah_attr.hop_limit ? attr.ah_attr.hop_limit : port.ttl();
    h.tos = attr.ah_attr.traffic_class;
    h.dest_qp = attr.dest_qp_num;
    h.xrc = is_xrc();
    h.uc = type == QpType::uc;
}

QpImpl::QpImpl(PortImpl& port, uint32_t qpn, const RdmaQpInitAttr& a)
    : c_(port, qpn, a), rq_(*this, c_, static_cast<SrqImpl*>(a.srq), static_cast<XrcdImpl*>(a.xrcd)), req_(*this, c_),
      comp_(*this, c_, req_.sq), resp_(*this, c_, rq_) {}

Result<void> QpImpl::init() {
    req_.init();
    rq_.init();
    resp_.init();
    if (c_.scq) ++c_.scq->users;
    if (c_.rcq) ++c_.rcq->users;
    return {};
}

Result<void> QpImpl::destroy() {
    auto g = c_.port.guard();
    if (destroyed) return Error{ENODEV, "queue pair already destroyed"};
    destroyed = true;
    c_.state = RdmaQpState::reset;
    c_.port.leave_all(this);
    rq_.detach();
    if (c_.scq) --c_.scq->users;
    if (c_.rcq) --c_.rcq->users;
    return {};
}

RdmaQpState QpImpl::state() const noexcept {
    auto g = c_.port.guard();
    return c_.state;
}

QpAttr QpImpl::query() const {
    auto g = c_.port.guard();
    QpAttr a = c_.attr;
    a.qp_state = c_.state;
    return a;
}

// ---- modify ----------------------------------------------------------------------------------------

Result<void> QpImpl::check_modify(const QpAttr& a, uint32_t mask) const {
    if (destroyed) return Error{ENODEV, "modify_qp: the queue pair was destroyed"};
    const RdmaQpState to = mask & attr_state ? a.qp_state : c_.state;
    if ((mask & attr_cur_state) && a.qp_state != c_.state && !(mask & attr_state))
        return Error{EINVAL, str_cat("modify_qp: the queue pair is in ", to_string(c_.state), ", not as cur_qp_state says")};
    auto need = [&](uint32_t bits, const char* names) -> Result<void> {
        if ((mask & bits) != bits)
            return Error{EINVAL, str_cat("modify_qp ", to_string(c_.state), " -> ", to_string(to), ": ", names,
                                         " must be given (IB spec table 91)")};
        return {};
    };
    const bool rc = c_.connected();
    if (mask & attr_path_mtu) {
        if (mtu_bytes(a.path_mtu) == 0) return Error{EINVAL, "modify_qp: path_mtu must be 1 (256) to 5 (4096)"};
        if (a.path_mtu > c_.port.active_mtu())
            return Error{EINVAL, str_cat("modify_qp: path MTU ", mtu_bytes(a.path_mtu), " is more than the link carries (",
                                         mtu_bytes(c_.port.active_mtu()), "): use the port's active_mtu()")};
    }
    if ((mask & attr_av) && !a.ah_attr.dgid.is_ipv4())
        return Error{EINVAL, "modify_qp: the destination GID must be IPv4-mapped (::ffff:a.b.c.d); IPv6 is not carried yet"};
    if ((mask & attr_timeout) && a.timeout > 31) return Error{EINVAL, "modify_qp: timeout is 0 to 31"};
    if ((mask & attr_retry_cnt) && a.retry_cnt > 7) return Error{EINVAL, "modify_qp: retry_cnt is 0 to 7"};
    if ((mask & attr_rnr_retry) && a.rnr_retry > 7) return Error{EINVAL, "modify_qp: rnr_retry is 0 to 7"};
    if ((mask & attr_min_rnr_timer) && a.min_rnr_timer > 31) return Error{EINVAL, "modify_qp: min_rnr_timer is 0 to 31"};
    if ((mask & attr_max_dest_rd_atomic) && a.max_dest_rd_atomic > resp_.max_resources())
        return Error{EINVAL, str_cat("modify_qp: max_dest_rd_atomic is at most ", resp_.max_resources())};
    if ((mask & attr_max_qp_rd_atomic) && a.max_rd_atomic > kMaxRdAtomic)
        return Error{EINVAL, str_cat("modify_qp: max_rd_atomic is at most ", kMaxRdAtomic)};
    if (!(mask & attr_state)) return {};
    if (to == RdmaQpState::reset || to == RdmaQpState::error) return {};
    switch (c_.state) {
    case RdmaQpState::reset:
        if (to != RdmaQpState::init) break;
        return rc ? need(attr_pkey_index | attr_port | attr_access_flags, "pkey_index, port and qp_access_flags")
                  : need(attr_pkey_index | attr_port | attr_qkey, "pkey_index, port and qkey");
    // An XRC sender has no responder (no max_dest_rd_atomic or min_rnr_timer to give) and an XRC
    // receiver no requester (no retry counts or max_rd_atomic); UC neither answers READs nor
    // acknowledges nor retries: the kernel's table has them need only the rest.
    case RdmaQpState::init:
        if (to == RdmaQpState::init) return {};
        if (to != RdmaQpState::rtr) break;
        if (c_.type == QpType::xrc_send || c_.type == QpType::uc)
            return need(attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn, "ah_attr, path_mtu, dest_qp_num and rq_psn");
        return rc ? need(attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn | attr_max_dest_rd_atomic |
                             attr_min_rnr_timer,
                         "ah_attr, path_mtu, dest_qp_num, rq_psn, max_dest_rd_atomic and min_rnr_timer")
                  : Result<void>{};
    case RdmaQpState::rtr:
        if (to != RdmaQpState::rts) break;
        if (c_.type == QpType::xrc_recv) return need(attr_sq_psn | attr_timeout, "sq_psn and timeout");
        return c_.reliable() ? need(attr_sq_psn | attr_timeout | attr_retry_cnt | attr_rnr_retry | attr_max_qp_rd_atomic,
                                 "sq_psn, timeout, retry_cnt, rnr_retry and max_rd_atomic")
                          : need(attr_sq_psn, "sq_psn");
    case RdmaQpState::rts:
    case RdmaQpState::sqd:
    case RdmaQpState::sqe:
        if (to == RdmaQpState::rts || to == RdmaQpState::sqd) return {};
        break;
    case RdmaQpState::error: break;
    }
    return Error{EINVAL, str_cat("modify_qp: ", to_string(c_.state), " -> ", to_string(to),
                                 " is not a transition of the QP state machine (IB spec 10.3.1)")};
}

Result<void> QpImpl::modify(const QpAttr& a, uint32_t mask) {
    auto g = c_.port.guard();
    if (auto r = check_modify(a, mask); !r) return r;
    c_.headers_changed();
    QpAttr& at = c_.attr;
    if (mask & attr_access_flags) at.qp_access_flags = a.qp_access_flags;
    if (mask & attr_pkey_index) at.pkey_index = a.pkey_index;
    if (mask & attr_port) at.port_num = a.port_num;
    if (mask & attr_qkey) at.qkey = a.qkey;
    if (c_.qpn == kGsiQpn) at.qkey = kGsiQkey;   // QP1's is the well-known one (13.5.1)
    if (mask & attr_av) at.ah_attr = a.ah_attr;
    if (mask & attr_path_mtu) at.path_mtu = a.path_mtu;
    if (mask & attr_timeout) at.timeout = a.timeout;
    if (mask & attr_retry_cnt) at.retry_cnt = a.retry_cnt;
    if (mask & attr_rnr_retry) at.rnr_retry = a.rnr_retry;
    if (mask & attr_rq_psn) at.rq_psn = a.rq_psn & kPsnMask;
    if (mask & attr_sq_psn) at.sq_psn = a.sq_psn & kPsnMask;
    if (mask & attr_max_qp_rd_atomic) at.max_rd_atomic = a.max_rd_atomic;
    if (mask & attr_max_dest_rd_atomic) at.max_dest_rd_atomic = a.max_dest_rd_atomic;
    if (mask & attr_min_rnr_timer) at.min_rnr_timer = a.min_rnr_timer;
    if (mask & attr_dest_qpn) at.dest_qp_num = a.dest_qp_num & kQpnMask;
    if (!(mask & attr_state)) return {};

    const RdmaQpState to = a.qp_state;
    if (to == RdmaQpState::error) {
        to_error();
        return {};
    }
    if (to == RdmaQpState::reset) {
        reset();
        return {};
    }
    if (to == RdmaQpState::rtr && c_.state == RdmaQpState::init) {
        c_.mtu = mtu_bytes(c_.connected() ? at.path_mtu : c_.port.active_mtu());
        resp_.start(at.rq_psn);
        if (c_.connected()) {
            c_.peer.ip = at.ah_attr.dgid.ipv4();
            bool failed = false;
            c_.peer.known = c_.port.resolve(c_.peer.ip, c_.peer.mac, failed);   // ARP now, before the first send
        }
    }
    if (to == RdmaQpState::rts && c_.state == RdmaQpState::rtr) {
        req_.start(at.sq_psn);
        comp_.start(at.sq_psn);
    }
    c_.state = to;
    if (c_.state == RdmaQpState::rts) ready();
    return {};
}

// Every role back to what it was when made (the receive WR in use goes back to its queue).
void QpImpl::reset() noexcept {
    req_.reset();
    comp_.reset();
    resp_.reset();
    rq_.reset();
    c_.peer = {};
    c_.headers_changed();
    c_.state = RdmaQpState::reset;
}

// ---- the error state ------------------------------------------------------------------------------

void QpImpl::to_error() noexcept {
    c_.state = RdmaQpState::error;
    comp_.stop_timers();
    resp_.stop();
    flush();
}

// Every WR still queued completes with WR_FLUSH_ERR (the first failed one already has its status).
void QpImpl::flush() noexcept {
    comp_.flush();
    rq_.flush();
}

void QpImpl::raise_event(AsyncEventType type) noexcept {
    AsyncEvent e;
    e.type = type;
    e.qp = this;
    c_.port.raise(e);
}

// A CQ of this queue pair lost a completion (it overran): no completion can say so, hence the
// affiliated asynchronous error (IB spec 11.6.3.1, "local work queue catastrophic error"), and
// the queue pair stops (as rxe's responder does on a full CQ).
void QpImpl::cq_overran() noexcept {
    if (c_.state == RdmaQpState::error || c_.state == RdmaQpState::reset) return;
    raise_event(AsyncEventType::qp_fatal);
    to_error();
}

// ---- posting and the port's calls ----------------------------------------------------------------

PostResult QpImpl::post_send(std::span<const RdmaSendWr> wrs) noexcept {
    auto g = c_.port.guard();
    if (destroyed) return {ENODEV, 0};
    uint32_t i = 0;
    PostResult r{0, 0};
    for (; i < wrs.size(); ++i)
        if (r = req_.post(wrs[i]); !r) break;
    r.posted = i;
    pump();   // the first packets leave now, in the caller's call
    c_.port.tx_flush();
    return r;
}

PostResult QpImpl::post_recv(std::span<const RecvWr> wrs) noexcept {
    auto g = c_.port.guard();
    if (destroyed) return {ENODEV, 0};
    // With an SRQ: Srq::post_recv; an XRC queue pair has no receive queue.
    if (c_.state == RdmaQpState::reset || rq_.has_srq() || c_.is_xrc()) return {EINVAL, 0};
    uint32_t i = 0;
    for (; i < wrs.size(); ++i) {
        const RecvWr& wr = wrs[i];
        const RecvQueue::Post r = rq_.post(wr);
        if (r == RecvQueue::Post::too_many_sge) return {EINVAL, i};
        if (r == RecvQueue::Post::full) return {ENOMEM, i};
        if (c_.state == RdmaQpState::error) {
            if (r == RecvQueue::Post::ok) flush();
            else rq_.error(wr.wr_id, RdmaWcStatus::wr_flush_err);
        } else if (r == RecvQueue::Post::bad_key) {
            // A bad key fails the WR and, as verbs has it, the queue pair (10.8.3.1).
            rq_.error(wr.wr_id, RdmaWcStatus::loc_prot_err);
            to_error();
        }
    }
    return {0, i};
}

void QpImpl::pump() noexcept {
    if (destroyed || !resp_.pump()) return;
    if (c_.state != RdmaQpState::rts || comp_.rnr_waiting()) return;
    req_.pump();
}

uint64_t QpImpl::deadline() const noexcept {
    if (c_.state == RdmaQpState::error || c_.state == RdmaQpState::reset) return 0;
    return comp_.deadline();
}

}  // namespace vfab::rdma::detail
