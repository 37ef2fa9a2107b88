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
    return m;
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

Result<void> Manager::reject(ConnId id, uint16_t reason) {
    Conn* c = find(id);
    if (!c || c->state != State::req_rcvd) return Error{EINVAL, "CM reject: not a connect request waiting for an answer"};
    Rej r;
    r.local_comm_id = c->id;
    r.remote_comm_id = c->remote_id;
    r.message_rejected = rej::rejected_req;
    r.reason = reason;
    send(*c, r, false);
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

bool Manager::next_event(Event& out) {
    if (events_.empty()) return false;
    out = events_.front();
    events_.pop_front();
    return true;
}

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
    std::erase_if(conns_, [](const Conn& c) { return c.state == State::closed; });
}

// Its retries spent: a REQ or REP never answered makes the connection unreachable (12.9.6);
// a DREQ never answered still ends it.
void Manager::expire(Conn& c) {
    Event e;
    e.conn = c.id;
    e.peer_ip = c.peer_ip;
    e.type = c.state == State::dreq_sent ? EventType::disconnected : EventType::unreachable;
    events_.push_back(e);
    c.state = State::closed;
}

void Manager::on_message(const MadPort::Received& r) {
    std::visit(
        [&](const auto& m) {
            using T = std::decay_t<decltype(m)>;
            if constexpr (std::is_same_v<T, Req>) on_req(m, r);
            else if constexpr (std::is_same_v<T, Rep>) on_rep(m);
            else if constexpr (std::is_same_v<T, Rtu>) on_rtu(m);
            else if constexpr (std::is_same_v<T, Rej>) on_rej(m);
            else if constexpr (std::is_same_v<T, Dreq>) on_dreq(m, r);
            else if constexpr (std::is_same_v<T, Drep>) on_drep(m);
            // MRA and SIDR: not yet (docs/cm.md)
        },
        r.msg);
}

void Manager::on_req(const Req& m, const MadPort::Received& r) {
    if (Conn* dup = find_remote(r.src_ip, m.local_comm_id)) {   // the same REQ again (12.9.5)
        if (dup->state == State::rep_sent) send(*dup, dup->last, true);   // our REP was lost
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
    c->state = State::established;
    Rtu t;
    t.local_comm_id = c->id;
    t.remote_comm_id = c->remote_id;
    send(*c, t, false);
    Event e;
    e.type = EventType::established;
    e.conn = c->id;
    e.peer_ip = c->peer_ip;
    e.rep = m;
    events_.push_back(e);
}

void Manager::on_rtu(const Rtu& m) {
    Conn* c = find(m.remote_comm_id);
    if (!c || c->state != State::rep_sent || c->remote_id != m.local_comm_id) return;
    c->state = State::established;
    c->deadline = 0;
    Event e;
    e.type = EventType::established;
    e.conn = c->id;
    e.peer_ip = c->peer_ip;
    events_.push_back(e);
}

void Manager::on_rej(const Rej& m) {
    Conn* c = find(m.remote_comm_id);
    if (!c || (c->state != State::req_sent && c->state != State::rep_sent)) return;
    Event e;
    e.type = EventType::rejected;
    e.conn = c->id;
    e.peer_ip = c->peer_ip;
    e.reason = m.reason;
    events_.push_back(e);
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
    e.conn = c->id;
    e.peer_ip = c->peer_ip;
    events_.push_back(e);
    c->state = State::closed;
}

void Manager::on_drep(const Drep& m) {
    Conn* c = find(m.remote_comm_id);
    if (!c || c->state != State::dreq_sent) return;
    Event e;
    e.type = EventType::disconnected;
    e.conn = c->id;
    e.peer_ip = c->peer_ip;
    events_.push_back(e);
    c->state = State::closed;
}

}  // namespace vfab::cm
