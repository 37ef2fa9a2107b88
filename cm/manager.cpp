// The communication state machine of one port (IB spec 12.9; see manager.hpp).
#include "manager.hpp"

#include <algorithm>
#include <ctime>
#include <type_traits>

namespace vfab::cm {

namespace {
uint64_t now_ns() noexcept {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return uint64_t(t.tv_sec) * 1000000000u + uint64_t(t.tv_nsec);
}
}  // namespace

Result<std::unique_ptr<Manager>> Manager::open(rdma::Port& port, const ManagerConfig& cfg) {
    auto mads = MadPort::open(port);
    if (!mads) return mads.take_error();
    std::unique_ptr<Manager> m(new Manager(cfg, std::move(*mads)));
    // Communication IDs start where a previous run of this port would not have been: a peer
    // tells repeated REQs by (comm ID, CA GUID).
    m->next_id_ = uint32_t(now_ns() >> 10) | 1;
    if (!cfg.ledger_path.empty()) {
        std::vector<Ledger::Entry> left;
        auto l = Ledger::open(cfg.ledger_path, left);
        if (l) m->ledger_ = std::move(*l);
        else m->ledger_error_ = l.error().message;
        for (const Ledger::Entry& e : left) m->disconnect_stale(e);
    }
    return m;
}

// A connection an earlier process on this port left established (killed, or exited without
// disconnecting): a DREQ, sent again on the timer until the DREP (a peer that no longer knows
// the connection answers one too, 12.9.7); no events. It stays in the ledger until then.
void Manager::disconnect_stale(const Ledger::Entry& e) {
    Conn c;
    c.id = e.local_comm_id;
    c.remote_id = e.remote_comm_id;
    c.peer_ip = e.peer_ip;
    c.remote_qpn = e.remote_qpn;
    c.released = true;
    conns_.push_back(c);
    set_established(conns_.back());
    (void)disconnect(c.id);
    ++stale_;
}

void Manager::set_established(Conn& c) {
    c.state = State::established;
    if (!ledger_ || c.in_ledger) return;
    ledger_->add({c.id, c.remote_id, c.peer_ip, c.remote_qpn});
    c.in_ledger = true;
}

uint64_t Manager::timeout_for(uint8_t code) const noexcept { return cfg_.retry_ns ? cfg_.retry_ns : timeout_ns(code); }

Manager::Conn* Manager::find(ConnId id) noexcept {
    for (Conn& c : conns_)
        if (c.id == id && c.state != State::closed) return &c;
    return nullptr;
}

Manager::Conn* Manager::find_remote(uint32_t peer_ip, uint32_t remote_id) noexcept {
    for (Conn& c : conns_)
        if (c.peer_ip == peer_ip && c.remote_id == remote_id && c.state != State::closed) return &c;
    return nullptr;
}

void Manager::send(Conn& c, const Message& m, bool timed) {
    c.last = m;
    (void)mads_->send(m, c.tid, c.peer_ip);   // a send refused now goes again on the timer
    c.deadline = timed ? now_ns() + c.timeout_ns : 0;
}

Result<void> Manager::listen(uint64_t service_id) {
    if (std::find(listening_.begin(), listening_.end(), service_id) != listening_.end())
        return Error{EEXIST, "CM listen: the service ID is listened on already"};
    listening_.push_back(service_id);
    return {};
}

Result<ConnId> Manager::connect(uint32_t peer_ip, Req req) {
    Conn c;
    c.id = next_id_++;
    c.peer_ip = peer_ip;
    c.tid = uint64_t(1) << 32 | c.id;   // a new transaction: ours (the kernel forms its own so)
    c.state = State::req_sent;
    c.timeout_ns = timeout_for(cfg_.response_timeout);
    c.retries_left = cfg_.max_retries;
    req.local_comm_id = c.id;
    req.local_ca_guid = cfg_.ca_guid;
    req.remote_cm_response_timeout = req.local_cm_response_timeout = cfg_.response_timeout;
    req.max_cm_retries = std::min<uint8_t>(cfg_.max_retries, 15);
    conns_.push_back(c);
    send(conns_.back(), req, true);
    return c.id;
}

Result<void> Manager::accept(ConnId id, Rep rep) {
    Conn* c = find(id);
    if (!c || c->state != State::req_rcvd) return Error{EINVAL, "CM accept: not a connect request waiting for an answer"};
    rep.local_comm_id = c->id;
    rep.remote_comm_id = c->remote_id;
    rep.local_ca_guid = cfg_.ca_guid;
    c->state = State::rep_sent;
    send(*c, rep, true);
    return {};
}

Result<void> Manager::reject(ConnId id, uint16_t reason, std::span<const uint8_t> private_data) {
    Conn* c = find(id);
    if (!c || c->state != State::req_rcvd) return Error{EINVAL, "CM reject: not a connect request waiting for an answer"};
    if (private_data.size() > kRejPrivate) return Error{EINVAL, "CM reject: at most 148 bytes of private data"};
    Rej r;
    std::copy(private_data.begin(), private_data.end(), r.private_data.begin());
    r.local_comm_id = c->id;
    r.remote_comm_id = c->remote_id;
    r.message_rejected = rej::rejected_req;
    r.reason = reason;
    send(*c, r, false);
    c->state = State::closed;
    return {};
}

Result<ConnId> Manager::resolve(uint32_t peer_ip, SidrReq req) {
    Conn c;
    c.id = next_id_++;
    c.peer_ip = peer_ip;
    c.tid = uint64_t(1) << 32 | c.id;
    c.state = State::sidr_sent;
    c.timeout_ns = timeout_for(cfg_.response_timeout);
    c.retries_left = cfg_.max_retries;
    req.request_id = c.id;
    conns_.push_back(c);
    send(conns_.back(), req, true);
    return c.id;
}

Result<void> Manager::sidr_answer(ConnId id, SidrRep rep) {
    Conn* c = find(id);
    if (!c || c->state != State::sidr_rcvd) return Error{EINVAL, "CM: not a SIDR request waiting for an answer"};
    rep.request_id = c->remote_id;
    rep.service_id = c->service_id;
    send(*c, rep, false);
    c->state = State::closed;
    return {};
}

Result<void> Manager::disconnect(ConnId id) {
    Conn* c = find(id);
    if (!c || c->state != State::established) return Error{EINVAL, "CM disconnect: not an established connection"};
    Dreq d;
    d.local_comm_id = c->id;
    d.remote_comm_id = c->remote_id;
    d.remote_qpn = c->remote_qpn;
    c->tid = uint64_t(1) << 32 | c->id;
    c->retries_left = cfg_.max_retries;
    c->timeout_ns = timeout_for(cfg_.response_timeout);
    c->state = State::dreq_sent;
    send(*c, d, true);
    return {};
}

void Manager::release(ConnId id) {
    Conn* c = find(id);
    if (!c) return;
    c->released = true;
    if (c->state == State::established) {
        (void)disconnect(id);
    } else if (c->state == State::sidr_sent || c->state == State::sidr_rcvd) {
        c->state = State::closed;   // the peer's SIDR_REQ goes unanswered: it times out
    } else if (c->state == State::req_sent) {
        // Before the REP: REJ "timeout" with this side's CA GUID as its information, the peer
        // finds the connection by our comm ID (as the kernel's ib_cm sends it).
        Rej r;
        r.local_comm_id = c->id;
        r.message_rejected = rej::rejected_other;
        r.reason = uint16_t(RejReason::timeout);
        r.ari_length = 8;
        for (int i = 0; i < 8; ++i) r.ari[size_t(i)] = uint8_t(cfg_.ca_guid >> (56 - 8 * i));
        send(*c, r, false);
        c->state = State::closed;
    } else if (c->state == State::req_rcvd || c->state == State::rep_sent) {
        Rej r;   // 12.9.6: a connection abandoned while being set up is rejected
        r.local_comm_id = c->id;
        r.remote_comm_id = c->remote_id;
        r.message_rejected = c->state == State::rep_sent ? rej::rejected_rep : rej::rejected_req;
        r.reason = uint16_t(RejReason::consumer);
        send(*c, r, false);
        c->state = State::closed;
    }
}

void Manager::emit(const Conn& c, Event e) {
    if (c.released) return;
    e.conn = c.id;
    e.peer_ip = c.peer_ip;
    events_.push_back(e);
}

bool Manager::next_event(Event& out) {
    if (events_.empty()) return false;
    out = events_.front();
    events_.pop_front();
    return true;
}

void Manager::unlisten(uint64_t service_id) { std::erase(listening_, service_id); }

void Manager::progress() {
    MadPort::Received in[16];
    for (size_t n; (n = mads_->poll(in)) > 0;)
        for (size_t i = 0; i < n; ++i) on_message(in[i]);
    const uint64_t now = now_ns();
    for (Conn& c : conns_) {
        if (c.state == State::closed || !c.deadline || now < c.deadline) continue;
        if (c.retries_left == 0) {
            expire(c);
            continue;
        }
        --c.retries_left;
        send(c, c.last, true);
    }
    std::erase_if(conns_, [&](const Conn& c) {
        if (c.state != State::closed) return false;
        if (c.in_ledger) ledger_->remove(c.id);
        return true;
    });
}

// Its retries spent: a REQ or REP never answered makes the connection unreachable (12.9.6);
// a DREQ never answered still ends it.
void Manager::expire(Conn& c) {
    Event e;
    e.type = c.state == State::dreq_sent ? EventType::disconnected : EventType::unreachable;
    emit(c, e);
    c.state = State::closed;
}

void Manager::on_message(const MadPort::Received& r) {
    std::visit(
        [&](const auto& m) {
            using T = std::decay_t<decltype(m)>;
            if constexpr (std::is_same_v<T, Req>) on_req(m, r);
            else if constexpr (std::is_same_v<T, Rep>) on_rep(m);
            else if constexpr (std::is_same_v<T, Rtu>) on_rtu(m);
            else if constexpr (std::is_same_v<T, Rej>) on_rej(m, r);
            else if constexpr (std::is_same_v<T, Dreq>) on_dreq(m, r);
            else if constexpr (std::is_same_v<T, Drep>) on_drep(m);
            else if constexpr (std::is_same_v<T, Mra>) on_mra(m);
            else if constexpr (std::is_same_v<T, SidrReq>) on_sidr_req(m, r);
            else if constexpr (std::is_same_v<T, SidrRep>) on_sidr_rep(m);
        },
        r.msg);
}

void Manager::on_req(const Req& m, const MadPort::Received& r) {
    if (Conn* dup = find_remote(r.src_ip, m.local_comm_id)) {   // the same REQ again (12.9.5)
        if (dup->state == State::rep_sent) send(*dup, dup->last, true);   // our REP was lost
        if (dup->state == State::req_rcvd) {   // the application has not answered yet: MRA (12.6.6)
            Mra a;
            a.local_comm_id = dup->id;
            a.remote_comm_id = dup->remote_id;
            a.message_mraed = 0;
            a.service_timeout = kMraServiceTimeout;
            (void)mads_->send(a, dup->tid, dup->peer_ip);
        }
        return;
    }
    Conn c;
    c.id = next_id_++;
    c.remote_id = m.local_comm_id;
    c.peer_ip = r.src_ip;
    c.remote_qpn = m.local_qpn;
    c.tid = r.tid;   // replies carry the REQ's transaction
    if (std::find(listening_.begin(), listening_.end(), m.service_id) == listening_.end()) {
        Rej j;   // nobody listens: REJ 8, as the kernel answers (no connection kept)
        j.remote_comm_id = m.local_comm_id;
        j.message_rejected = rej::rejected_req;
        j.reason = uint16_t(RejReason::invalid_service_id);
        (void)mads_->send(j, r.tid, r.src_ip);
        return;
    }
    c.state = State::req_rcvd;
    c.timeout_ns = timeout_for(m.local_cm_response_timeout);   // the REP waits as the peer asked
    c.retries_left = m.max_cm_retries;
    conns_.push_back(c);
    Event e;
    e.type = EventType::connect_request;
    e.conn = c.id;
    e.peer_ip = r.src_ip;
    e.req = m;
    events_.push_back(e);
}

void Manager::on_rep(const Rep& m) {
    Conn* c = find(m.remote_comm_id);
    if (!c) return;
    if (c->state == State::established && c->remote_id == m.local_comm_id) {   // our RTU was lost
        send(*c, c->last, false);
        return;
    }
    if (c->state != State::req_sent) return;
    c->remote_id = m.local_comm_id;
    c->remote_qpn = m.local_qpn;
    set_established(*c);
    Rtu t;
    t.local_comm_id = c->id;
    t.remote_comm_id = c->remote_id;
    send(*c, t, false);
    Event e;
    e.type = EventType::established;
    e.rep = m;
    emit(*c, e);
}

void Manager::on_rtu(const Rtu& m) {
    Conn* c = find(m.remote_comm_id);
    if (!c || c->state != State::rep_sent || c->remote_id != m.local_comm_id) return;
    set_established(*c);
    c->deadline = 0;
    Event e;
    e.type = EventType::established;
    emit(*c, e);
}

void Manager::on_rej(const Rej& m, const MadPort::Received& r) {
    // A REJ from an active side that gave up before our REP reached it names only its own
    // comm ID (12.6.7; the kernel's "timeout" REJ of a destroyed id).
    Conn* c = m.remote_comm_id ? find(m.remote_comm_id) : find_remote(r.src_ip, m.local_comm_id);
    if (!c) return;
    const bool waiting = c->state == State::req_sent || c->state == State::rep_sent || (!m.remote_comm_id && c->state == State::req_rcvd);
    if (!waiting) return;
    Event e;
    e.type = EventType::rejected;
    e.reason = m.reason;
    e.rej = m;
    emit(*c, e);
    c->state = State::closed;
}

// A DREQ is answered whether or not the connection is known (12.9.7: a DREP lost, its DREQ
// comes again after the connection is gone).
void Manager::on_dreq(const Dreq& m, const MadPort::Received& r) {
    Drep d;
    d.local_comm_id = m.remote_comm_id;
    d.remote_comm_id = m.local_comm_id;
    (void)mads_->send(d, r.tid, r.src_ip);
    Conn* c = find(m.remote_comm_id);
    if (!c || c->remote_id != m.local_comm_id || (c->state != State::established && c->state != State::dreq_sent)) return;
    Event e;
    e.type = EventType::disconnected;
    emit(*c, e);
    c->state = State::closed;
}

void Manager::on_drep(const Drep& m) {
    Conn* c = find(m.remote_comm_id);
    if (!c || c->state != State::dreq_sent) return;
    Event e;
    e.type = EventType::disconnected;
    emit(*c, e);
    c->state = State::closed;
}

// A SIDR_REQ (12.11): the service's listener answers it (sidr_request event); nobody listening,
// SIDR_REP "service ID not supported" at once, as the kernel answers. A repeated one is the same
// request while it waits for the application.
void Manager::on_sidr_req(const SidrReq& m, const MadPort::Received& r) {
    for (Conn& c : conns_)
        if (c.state == State::sidr_rcvd && c.peer_ip == r.src_ip && c.remote_id == m.request_id) return;
    if (std::find(listening_.begin(), listening_.end(), m.service_id) == listening_.end()) {
        SidrRep rep;
        rep.request_id = m.request_id;
        rep.service_id = m.service_id;
        rep.status = uint8_t(SidrStatus::unsupported_sid);
        (void)mads_->send(rep, r.tid, r.src_ip);
        return;
    }
    Conn c;
    c.id = next_id_++;
    c.remote_id = m.request_id;
    c.peer_ip = r.src_ip;
    c.tid = r.tid;
    c.service_id = m.service_id;
    c.state = State::sidr_rcvd;
    conns_.push_back(c);
    Event e;
    e.type = EventType::sidr_request;
    e.sidr_req = m;
    emit(conns_.back(), e);
}

void Manager::on_sidr_rep(const SidrRep& m) {
    Conn* c = find(m.request_id);
    if (!c || c->state != State::sidr_sent) return;
    Event e;
    e.type = EventType::sidr_reply;
    e.sidr_rep = m;
    emit(*c, e);
    c->state = State::closed;
}

// The peer needs longer to answer our REQ or REP (12.6.6): the timer waits the service timeout
// it gave on top of the response timeout, and the retries start again.
void Manager::on_mra(const Mra& m) {
    Conn* c = find(m.remote_comm_id);
    if (!c) return;
    const bool ours = (m.message_mraed == 0 && c->state == State::req_sent) || (m.message_mraed == 1 && c->state == State::rep_sent);
    if (!ours) return;
    c->deadline = now_ns() + timeout_for(m.service_timeout) + c->timeout_ns;
    c->retries_left = cfg_.max_retries;
}

}  // namespace vfab::cm
