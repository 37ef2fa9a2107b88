// Connections: the QP of an id, connect / accept / reject / disconnect, and what the CM thread
// makes of the connection manager's events (docs/cm.md). The QP goes through its states as the
// kernel's librdmacm takes it: INIT when made, RTR and RTS on the passive side before the REP,
// on the active side when the REP comes (before the event), ERROR on rdma_disconnect.
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "cma.hpp"

namespace vfab::rdmacm {

namespace {

uint32_t random_psn() {
    static std::minstd_rand rng(uint32_t(time(nullptr)) ^ 0x9e3779b9u);
    return uint32_t(rng()) & 0xFFFFFFu;
}

ibv_qp_attr to_ibv(const cm::QpTransition& t, int& mask) {
    const rdma::QpAttr& a = t.attr;
    ibv_qp_attr q{};
    q.qp_state = ibv_qp_state(a.qp_state);   // rdma::RdmaQpState has ibv_qp_state's values
    q.path_mtu = ibv_mtu(a.path_mtu);
    q.qkey = a.qkey;
    q.rq_psn = a.rq_psn;
    q.sq_psn = a.sq_psn;
    q.dest_qp_num = a.dest_qp_num;
    q.qp_access_flags = a.qp_access_flags;
    q.pkey_index = a.pkey_index;
    q.port_num = a.port_num;
    q.max_rd_atomic = a.max_rd_atomic;
    q.max_dest_rd_atomic = a.max_dest_rd_atomic;
    q.min_rnr_timer = a.min_rnr_timer;
    q.timeout = a.timeout;
    q.retry_cnt = a.retry_cnt;
    q.rnr_retry = a.rnr_retry;
    q.ah_attr.is_global = 1;
    q.ah_attr.port_num = 1;
    std::memcpy(q.ah_attr.grh.dgid.raw, a.ah_attr.dgid.raw, 16);
    q.ah_attr.grh.hop_limit = a.ah_attr.hop_limit;
    q.ah_attr.grh.traffic_class = a.ah_attr.traffic_class;
    q.ah_attr.grh.flow_label = a.ah_attr.flow_label;
    q.ah_attr.grh.sgid_index = a.ah_attr.sgid_index;
    mask = int(t.mask);   // rdma::QpAttrMask has ibv_qp_attr_mask's values
    return q;
}

uint32_t peer_ip_of(const Id& id) { return ipv4_of(&id.id.route.addr.dst_addr); }

// A QP's first INIT, before any connection: the partition, the port, and a UD QP's Q_Key (a
// connected QP gets its rights with the connection: INIT again).
void first_init(const Id& id, ibv_qp_attr& out, int& mask) {
    out = {};
    out.qp_state = IBV_QPS_INIT;
    out.pkey_index = 0;
    out.port_num = 1;
    mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    if (id.id.qp_type == IBV_QPT_UD) {
        out.qkey = cm::kRdmaUdpQkey;
        mask |= IBV_QP_QKEY;
    } else {
        out.qp_access_flags = 0;
        mask |= IBV_QP_ACCESS_FLAGS;
    }
}

// The attributes for `state` of the id's QP, as rdma_init_qp_attr gives them: a UD QP's need
// no peer; a connected QP's come from the REQ and REP.
int qp_attr_for(const Id& id, ibv_qp_state state, ibv_qp_attr& out, int& mask) {
    if (id.id.qp_type == IBV_QPT_UD) {
        switch (state) {
        case IBV_QPS_INIT: first_init(id, out, mask); return 0;
        case IBV_QPS_RTR:
            out = {};
            out.qp_state = IBV_QPS_RTR;
            mask = IBV_QP_STATE;
            return 0;
        case IBV_QPS_RTS:
            out = {};
            out.qp_state = IBV_QPS_RTS;
            out.sq_psn = 0;
            mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
            return 0;
        default: return fail(EINVAL);
        }
    }
    const bool connected = id.has_conn || id.state == IdState::established;
    if (!connected) {
        if (state != IBV_QPS_INIT) return fail(EINVAL);
        first_init(id, out, mask);
        return 0;
    }
    if (id.side == cm::Side::active && id.state == IdState::connecting) {   // no REP yet
        if (state != IBV_QPS_INIT) return fail(EINVAL);
        first_init(id, out, mask);
        return 0;
    }
    switch (state) {
    case IBV_QPS_INIT: out = to_ibv(cm::to_init(id.req, id.rep, id.side), mask); return 0;
    case IBV_QPS_RTR: out = to_ibv(cm::to_rtr(id.req, id.rep, id.side, peer_ip_of(id)), mask); return 0;
    case IBV_QPS_RTS: out = to_ibv(cm::to_rts(id.req, id.rep, id.side), mask); return 0;
    default: return fail(EINVAL);
    }
}

int modify(Id& id, ibv_qp_state state) {
    ibv_qp_attr a{};
    int mask = 0;
    if (qp_attr_for(id, state, a, mask)) return -1;
    const int r = ibv_modify_qp(id.id.qp, &a, mask);
    debug("QP %u to %d (mask 0x%x): dest QP %u, rq_psn %u, sq_psn %u, mtu %d, access 0x%x, rd_atomic %u/%u, timeout %u, "
          "retry %u/%u, dgid ::ffff:%08x hop %u: %s",
          id.id.qp->qp_num, int(state), mask, a.dest_qp_num, a.rq_psn, a.sq_psn, int(a.path_mtu), a.qp_access_flags,
          a.max_rd_atomic, a.max_dest_rd_atomic, a.timeout, a.retry_cnt, a.rnr_retry,
          be32toh(*reinterpret_cast<const uint32_t*>(a.ah_attr.grh.dgid.raw + 12)), a.ah_attr.grh.hop_limit,
          r ? strerror(r) : "ok");
    return r ? fail(r) : 0;
}

void copy_private(EventBox& b, const uint8_t* data, size_t len) {
    std::memcpy(b.data, data, len);
    b.ev.param.conn.private_data = b.data;
    b.ev.param.conn.private_data_len = uint8_t(len);
}

// The address vector of the peer at `ip` (host order), for a UD event's ah_attr.
ibv_ah_attr ah_to(uint32_t ip) {
    ibv_ah_attr a{};
    a.is_global = 1;
    a.port_num = 1;
    a.grh.hop_limit = 64;
    set_gid(a.grh.dgid, ip);
    return a;
}

void copy_ud_private(EventBox& b, const uint8_t* data, size_t len) {
    std::memcpy(b.data, data, len);
    b.ev.param.ud.private_data = b.data;
    b.ev.param.ud.private_data_len = uint8_t(len);
}

Id* id_of_conn(CmDevice& dev, cm::ConnId conn) {
    for (Id* i : cma().ids)
        if (i->has_conn && i->dev == &dev && i->conn == conn) return i;
    return nullptr;
}

Id* listener_of(CmDevice& dev, uint64_t service_id) {
    for (Id* i : cma().ids)
        if (i->state == IdState::listening && !i->destroying && i->service_id == service_id && (!i->dev || i->dev == &dev))
            return i;
    return nullptr;
}

// A request's child id: on the listener's channel (or one of its own for a synchronous
// listener), bound to the device, its addresses from the IP CM header.
Id* child_of(Id& l, CmDevice& dev, const cm::CmaHeader& h, uint64_t service_id, ibv_qp_type type, cm::ConnId conn) {
    Channel* own = nullptr;
    if (l.sync && !(own = make_channel())) return nullptr;
    Id* c = new_id(l.id.channel, l.id.context, l.id.ps, type);
    bind_device(*c, &dev);
    set_sin(c->id.route.addr.src_storage, dev.ip, cm::port_of(service_id));
    set_sin(c->id.route.addr.dst_storage, h.src_ipv4(), h.src_port);
    set_gid(c->id.route.addr.addr.ibaddr.dgid, h.src_ipv4());
    make_path(*c);
    c->has_conn = true;
    c->conn = conn;
    c->side = cm::Side::passive;
    c->state = IdState::request;
    if (own) {
        c->sync = true;
        c->own_channel = own;
        l.requests.push_back(c);
    }
    return c;
}

// Queues the request's event on the listener's channel (its child's own comes after it).
EventBox* queue_request(Id& c, Id& l) {
    rdma_event_channel* mine = c.id.channel;
    c.id.channel = l.id.channel;
    EventBox* b = queue_event(c, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
    b->ev.listen_id = &l.id;
    if (c.own_channel) c.id.channel = &c.own_channel->ch;
    else c.id.channel = mine;
    return b;
}

void on_sidr_request(CmDevice& dev, const cm::Event& e) {
    Id* l = listener_of(dev, e.sidr_req.service_id);
    cm::CmaHeader h;
    Id* c = nullptr;
    if (l && cm::read_cma_header(e.sidr_req.private_data.data(), h) && h.ip_version == 4 && h.dst_ipv4() == dev.ip)
        c = child_of(*l, dev, h, e.sidr_req.service_id, IBV_QPT_UD, e.conn);
    if (!c) {
        cm::SidrRep no;
        no.status = uint8_t(cm::SidrStatus::reject);
        (void)dev.mgr->sidr_answer(e.conn, no);
        return;
    }
    EventBox* b = queue_request(*c, *l);
    copy_ud_private(*b, e.sidr_req.private_data.data() + cm::kCmaHeader, cm::kSidrReqPrivate - cm::kCmaHeader);
    b->ev.param.ud.ah_attr = ah_to(h.src_ipv4());
}

void on_connect_request(CmDevice& dev, const cm::Event& e) {
    Id* l = listener_of(dev, e.req.service_id);
    cm::CmaHeader h;
    if (!l || !cm::read_cma_header(e.req.private_data.data(), h) || h.ip_version != 4 || h.dst_ipv4() != dev.ip) {
        (void)dev.mgr->reject(e.conn, uint16_t(cm::RejReason::consumer));   // what rdma_cm answers
        return;
    }
    Id* c = child_of(*l, dev, h, e.req.service_id, IBV_QPT_RC, e.conn);
    if (!c) {
        (void)dev.mgr->reject(e.conn, uint16_t(cm::RejReason::no_resources));
        return;
    }
    c->req = e.req;
    EventBox* b = queue_request(*c, *l);
    copy_private(*b, e.req.private_data.data() + cm::kCmaHeader, cm::kReqPrivate - cm::kCmaHeader);
    rdma_conn_param& p = b->ev.param.conn;
    p.responder_resources = e.req.initiator_depth;   // as this side sees them
    p.initiator_depth = e.req.responder_resources;
    p.flow_control = e.req.flow_control;
    p.retry_count = e.req.retry_count;
    p.rnr_retry_count = e.req.rnr_retry_count;
    p.srq = e.req.srq;
    p.qp_num = e.req.local_qpn;
}
}  // namespace

int ready_qp(Id& id, uint32_t) {
    if (modify(id, IBV_QPS_INIT) || modify(id, IBV_QPS_RTR) || modify(id, IBV_QPS_RTS)) return -1;
    return 0;
}

void on_cm_event(CmDevice& dev, const cm::Event& e) {
    debug("CM event %d on connection %u from %08x: REQ qpn %u psn %u mtu %u resp %u init %u hop %u ack %u; REP qpn %u psn %u "
          "resp %u init %u; reason %u",
          int(e.type), e.conn, e.peer_ip, e.req.local_qpn, e.req.starting_psn, e.req.path_mtu, e.req.responder_resources,
          e.req.initiator_depth, e.req.hop_limit, e.req.local_ack_timeout, e.rep.local_qpn, e.rep.starting_psn,
          e.rep.responder_resources, e.rep.initiator_depth, e.reason);
    if (e.type == cm::EventType::connect_request) {
        on_connect_request(dev, e);
        return;
    }
    if (e.type == cm::EventType::sidr_request) {
        on_sidr_request(dev, e);
        return;
    }
    Id* id = id_of_conn(dev, e.conn);
    if (!id || id->destroying) return;
    switch (e.type) {
    case cm::EventType::established: {
        if (id->side == cm::Side::passive) {
            id->state = IdState::established;
            queue_event(*id, RDMA_CM_EVENT_ESTABLISHED, 0);
            break;
        }
        id->rep = e.rep;
        id->state = IdState::established;
        rdma_cm_event_type type = RDMA_CM_EVENT_ESTABLISHED;
        int status = 0;
        if (!id->id.qp) type = RDMA_CM_EVENT_CONNECT_RESPONSE;   // the program moves its QP (rdma_init_qp_attr)
        else if (ready_qp(*id, e.peer_ip)) type = RDMA_CM_EVENT_CONNECT_ERROR, status = -errno;
        EventBox* b = queue_event(*id, type, status);
        copy_private(*b, e.rep.private_data.data(), cm::kRepPrivate);
        rdma_conn_param& p = b->ev.param.conn;
        p.responder_resources = e.rep.initiator_depth;
        p.initiator_depth = e.rep.responder_resources;
        p.flow_control = e.rep.flow_control;
        p.rnr_retry_count = e.rep.rnr_retry_count;
        p.srq = e.rep.srq;
        p.qp_num = e.rep.local_qpn;
        if (type == RDMA_CM_EVENT_CONNECT_ERROR) {
            dev.mgr->release(id->conn);
            id->has_conn = false;
            id->state = IdState::disconnected;
        }
        break;
    }
    case cm::EventType::rejected: {
        id->has_conn = false;
        id->state = IdState::disconnected;
        EventBox* b = queue_event(*id, RDMA_CM_EVENT_REJECTED, e.reason);
        copy_private(*b, e.rej.private_data.data(), cm::kRejPrivate);
        break;
    }
    case cm::EventType::unreachable:
        id->has_conn = false;
        id->state = IdState::disconnected;
        queue_event(*id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
        break;
    case cm::EventType::disconnected: {
        const rdma::PortStats st = dev.port->stats();
        debug("port: rx %lu roce %lu dropped %lu icrc %lu other %lu, tx %lu retransmits %lu naks %lu arp %lu/%lu",
              st.rx_frames, st.rx_roce, st.rx_dropped, st.rx_icrc_errors, st.rx_other, st.tx_frames, st.retransmits,
              st.naks_sent, st.arp_requests, st.arp_replies);
    }
        id->has_conn = false;
        id->state = IdState::disconnected;
        queue_event(*id, RDMA_CM_EVENT_DISCONNECTED, 0);
        break;
    case cm::EventType::sidr_reply: {
        id->has_conn = false;
        const bool ok = e.sidr_rep.status == uint8_t(cm::SidrStatus::success);
        id->state = ok ? IdState::established : IdState::disconnected;
        EventBox* b = queue_event(*id, ok ? RDMA_CM_EVENT_ESTABLISHED : RDMA_CM_EVENT_UNREACHABLE, ok ? 0 : e.sidr_rep.status);
        copy_ud_private(*b, e.sidr_rep.private_data.data(), cm::kSidrRepPrivate);
        b->ev.param.ud.ah_attr = ah_to(e.peer_ip);
        b->ev.param.ud.qp_num = e.sidr_rep.qpn;
        b->ev.param.ud.qkey = e.sidr_rep.qkey;
        break;
    }
    case cm::EventType::connect_request:
    case cm::EventType::sidr_request: break;
    }
}

}  // namespace vfab::rdmacm

using namespace vfab::rdmacm;

extern "C" int rdma_create_qp_ex(rdma_cm_id* cm_id, ibv_qp_init_attr_ex* attr) {
    if (!cm_id || !attr) return fail(EINVAL);
    Id& id = *Id::of(cm_id);
    std::lock_guard g(cma().mu);
    if (!id.dev) return fail(EINVAL);   // not bound to a device yet
    if (id.id.qp) return fail(EINVAL);
    if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
        if (!id.id.pd && !id.dev->default_pd) id.dev->default_pd = ibv_alloc_pd(id.dev->verbs);
        attr->pd = id.id.pd ? id.id.pd : id.dev->default_pd;
        if (!attr->pd) return -1;
        attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
    }
    if (attr->pd->context != id.dev->verbs) return fail(EINVAL);
    bool made_cqs = false;
    if (!attr->send_cq || !attr->recv_cq) {   // as rdma_create_ep's ids: CQs with channels of their own
        if (!id.id.recv_cq) {
            id.id.recv_cq_channel = ibv_create_comp_channel(id.dev->verbs);
            id.id.recv_cq = id.id.recv_cq_channel
                                ? ibv_create_cq(id.dev->verbs, int(std::max(attr->cap.max_recv_wr, 1u)), &id.id, id.id.recv_cq_channel, 0)
                                : nullptr;
            id.id.send_cq_channel = ibv_create_comp_channel(id.dev->verbs);
            id.id.send_cq = id.id.send_cq_channel
                                ? ibv_create_cq(id.dev->verbs, int(std::max(attr->cap.max_send_wr, 1u)), &id.id, id.id.send_cq_channel, 0)
                                : nullptr;
            made_cqs = true;
            id.owns_cqs = true;
        }
        if (!attr->send_cq) attr->send_cq = id.id.send_cq;
        if (!attr->recv_cq) attr->recv_cq = id.id.recv_cq;
    }
    if (!attr->srq && id.id.srq) attr->srq = id.id.srq;
    ibv_qp* qp = attr->send_cq && attr->recv_cq ? ibv_create_qp_ex(id.dev->verbs, attr) : nullptr;
    if (!qp) {
        const int e = errno ? errno : ENOMEM;
        if (made_cqs) {
            if (id.id.send_cq) ibv_destroy_cq(id.id.send_cq);
            if (id.id.recv_cq) ibv_destroy_cq(id.id.recv_cq);
            if (id.id.send_cq_channel) ibv_destroy_comp_channel(id.id.send_cq_channel);
            if (id.id.recv_cq_channel) ibv_destroy_comp_channel(id.id.recv_cq_channel);
            id.id.send_cq = id.id.recv_cq = nullptr;
            id.id.send_cq_channel = id.id.recv_cq_channel = nullptr;
            id.owns_cqs = false;
        }
        return fail(e);
    }
    id.id.qp = qp;
    id.id.pd = qp->pd;   // as librdmacm: rdma_reg_msgs and the other helpers of <rdma/rdma_verbs.h> use it
    // INIT now, ready for receives (a passive side's QP with its connection's rights); a UD QP
    // on to RTS, ready to send (it has no connection).
    ibv_qp_attr a{};
    int mask = 0;
    int r = 0;
    if (id.has_conn && id.side == vfab::cm::Side::passive && id.id.qp_type != IBV_QPT_UD) {
        r = qp_attr_for(id, IBV_QPS_INIT, a, mask) ? errno : ibv_modify_qp(qp, &a, mask);
    } else {
        first_init(id, a, mask);
        r = ibv_modify_qp(qp, &a, mask);
    }
    for (ibv_qp_state next : {IBV_QPS_RTR, IBV_QPS_RTS}) {
        if (r || id.id.qp_type != IBV_QPT_UD) break;
        r = qp_attr_for(id, next, a, mask) ? errno : ibv_modify_qp(qp, &a, mask);
    }
    if (r) {
        ibv_destroy_qp(qp);
        id.id.qp = nullptr;
        return fail(r);
    }
    return 0;
}

extern "C" int rdma_create_qp(rdma_cm_id* cm_id, ibv_pd* pd, ibv_qp_init_attr* attr) {
    if (!cm_id || !attr) return fail(EINVAL);
    ibv_qp_init_attr_ex ex{};
    std::memcpy(&ex, attr, sizeof *attr);
    ex.comp_mask = pd ? IBV_QP_INIT_ATTR_PD : 0;
    ex.pd = pd;
    if (rdma_create_qp_ex(cm_id, &ex)) return -1;
    attr->cap = ex.cap;
    attr->send_cq = ex.send_cq;
    attr->recv_cq = ex.recv_cq;
    return 0;
}

extern "C" void rdma_destroy_qp(rdma_cm_id* cm_id) {
    if (!cm_id || !cm_id->qp) return;
    ibv_destroy_qp(cm_id->qp);
    cm_id->qp = nullptr;
    Id& id = *Id::of(cm_id);
    if (!id.owns_cqs) return;
    ibv_destroy_cq(cm_id->send_cq);
    ibv_destroy_cq(cm_id->recv_cq);
    ibv_destroy_comp_channel(cm_id->send_cq_channel);
    ibv_destroy_comp_channel(cm_id->recv_cq_channel);
    cm_id->send_cq = cm_id->recv_cq = nullptr;
    cm_id->send_cq_channel = cm_id->recv_cq_channel = nullptr;
    id.owns_cqs = false;
}

extern "C" int rdma_init_qp_attr(rdma_cm_id* cm_id, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
    if (!cm_id || !qp_attr || !qp_attr_mask) return fail(EINVAL);
    std::lock_guard g(cma().mu);
    return qp_attr_for(*Id::of(cm_id), qp_attr->qp_state, *qp_attr, *qp_attr_mask);
}

namespace {
// rdma_connect on a UD id: a SIDR_REQ to the peer's service (12.11), the answer as ESTABLISHED
// (its QP number and Q_Key) or UNREACHABLE.
int resolve_service(Id& id, const rdma_conn_param* param) {
    namespace cm = vfab::cm;
    if (param && param->private_data_len > cm::kSidrReqPrivate - cm::kCmaHeader) return fail(EINVAL);
    cm::SidrReq r;
    r.service_id = cm::service_id(ps_code(id.id.ps), port_of(&id.id.route.addr.dst_addr));
    const uint32_t dst = ipv4_of(&id.id.route.addr.dst_addr);
    cm::write_cma_header(r.private_data.data(), cm::CmaHeader::ipv4(id.dev->ip, port_of(&id.id.route.addr.src_addr), dst));
    if (param && param->private_data_len)
        std::memcpy(r.private_data.data() + cm::kCmaHeader, param->private_data, param->private_data_len);
    auto c = id.dev->mgr->resolve(dst, r);
    if (!c) return fail(c.error().code);
    id.has_conn = true;
    id.conn = *c;
    id.side = cm::Side::active;
    id.state = IdState::connecting;
    return 0;
}
}  // namespace

namespace {
// rdma_connect on an RC id: a REQ with the IP CM header and the program's private data.
int send_req(Id& id, const rdma_conn_param* param) {
    namespace cm = vfab::cm;
    if (id.id.qp_type != IBV_QPT_RC) return fail(EOPNOTSUPP);
    if (param && param->private_data_len > cm::kReqPrivate - cm::kCmaHeader) return fail(EINVAL);
    if (!id.id.qp && !param) return fail(EINVAL);   // the QP number comes from somewhere
    CmDevice& dev = *id.dev;
    const uint8_t max_rd = uint8_t(std::min<uint32_t>(dev.max_rd_atomic, 255));
    cm::Req r;
    r.service_id = cm::service_id(ps_code(id.id.ps), port_of(&id.id.route.addr.dst_addr));
    r.local_qpn = id.id.qp ? id.id.qp->qp_num : param->qp_num;
    r.starting_psn = random_psn();
    r.responder_resources = param ? std::min(param->responder_resources, max_rd) : max_rd;
    r.initiator_depth = param ? std::min(param->initiator_depth, max_rd) : max_rd;
    r.flow_control = param ? param->flow_control : true;
    r.retry_count = param ? std::min<uint8_t>(param->retry_count, 7) : 7;
    r.rnr_retry_count = param ? std::min<uint8_t>(param->rnr_retry_count, 7) : 7;
    r.srq = id.id.qp ? id.id.qp->srq != nullptr : param->srq;
    r.path_mtu = dev.active_mtu;
    const uint32_t src = dev.ip, dst = peer_ip_of(id);
    const vfab::rdma::Gid sg = vfab::rdma::Gid::from_ipv4(src), dg = vfab::rdma::Gid::from_ipv4(dst);
    std::copy(std::begin(sg.raw), std::end(sg.raw), r.local_gid.begin());
    std::copy(std::begin(dg.raw), std::end(dg.raw), r.remote_gid.begin());
    cm::write_cma_header(r.private_data.data(), cm::CmaHeader::ipv4(src, port_of(&id.id.route.addr.src_addr), dst));
    if (param && param->private_data_len)
        std::memcpy(r.private_data.data() + cm::kCmaHeader, param->private_data, param->private_data_len);
    auto c = dev.mgr->connect(dst, r);
    if (!c) return fail(c.error().code);
    id.req = r;
    id.has_conn = true;
    id.conn = *c;
    id.side = cm::Side::active;
    id.state = IdState::connecting;
    return 0;
}
}  // namespace

extern "C" int rdma_connect(rdma_cm_id* cm_id, rdma_conn_param* param) {
    if (!cm_id) return fail(EINVAL);
    Id& id = *Id::of(cm_id);
    rdma_cm_event_type expect = RDMA_CM_EVENT_ESTABLISHED;
    {
        std::lock_guard g(cma().mu);
        if (id.state != IdState::route_resolved) return fail(EINVAL);
        const bool ud = id.id.qp_type == IBV_QPT_UD;
        if (ud ? resolve_service(id, param) : send_req(id, param)) return -1;
        if (!ud && !id.id.qp) expect = RDMA_CM_EVENT_CONNECT_RESPONSE;
    }
    kick();
    return id.sync ? wait_sync(id, expect) : 0;
}

extern "C" int rdma_establish(rdma_cm_id* cm_id) {
    if (!cm_id) return fail(EINVAL);
    std::lock_guard g(cma().mu);
    Id& id = *Id::of(cm_id);
    // The RTU went when the REP came: the connection is established on both sides already.
    return id.state == IdState::established && id.side == vfab::cm::Side::active ? 0 : fail(EINVAL);
}

extern "C" int rdma_accept(rdma_cm_id* cm_id, rdma_conn_param* param) {
    if (!cm_id) return fail(EINVAL);
    Id& id = *Id::of(cm_id);
    if (id.id.qp_type == IBV_QPT_UD) {   // a SIDR request: the QP that serves it (12.11.2)
        std::lock_guard g(cma().mu);
        if (id.state != IdState::request || !id.has_conn) return fail(EINVAL);
        if (param && param->private_data_len > vfab::cm::kSidrRepPrivate) return fail(EINVAL);
        if (!id.id.qp && !param) return fail(EINVAL);
        vfab::cm::SidrRep r;
        r.status = uint8_t(vfab::cm::SidrStatus::success);
        r.qpn = id.id.qp ? id.id.qp->qp_num : param->qp_num;
        r.qkey = vfab::cm::kRdmaUdpQkey;
        if (param && param->private_data_len) std::memcpy(r.private_data.data(), param->private_data, param->private_data_len);
        if (auto a = id.dev->mgr->sidr_answer(id.conn, r); !a) return fail(a.error().code);
        id.has_conn = false;
        id.state = IdState::established;
        kick();
        return 0;
    }
    {
        std::lock_guard g(cma().mu);
        if (id.state != IdState::request || !id.has_conn) return fail(EINVAL);
        if (param && param->private_data_len > vfab::cm::kRepPrivate) return fail(EINVAL);
        if (!id.id.qp && !param) return fail(EINVAL);
        CmDevice& dev = *id.dev;
        const uint8_t max_rd = uint8_t(std::min<uint32_t>(dev.max_rd_atomic, 255));
        vfab::cm::Rep r;
        r.local_qpn = id.id.qp ? id.id.qp->qp_num : param->qp_num;
        r.starting_psn = random_psn();
        // No more READs in flight than the peer answers, nor answered than it sends.
        r.responder_resources = std::min({param ? param->responder_resources : max_rd, max_rd, id.req.initiator_depth});
        r.initiator_depth = std::min({param ? param->initiator_depth : max_rd, max_rd, id.req.responder_resources});
        r.rnr_retry_count = param ? std::min<uint8_t>(param->rnr_retry_count, 7) : 7;
        r.flow_control = param ? param->flow_control : true;
        r.srq = id.id.qp ? id.id.qp->srq != nullptr : param->srq;
        if (param && param->private_data_len) std::memcpy(r.private_data.data(), param->private_data, param->private_data_len);
        id.rep = r;
        if (id.id.qp && ready_qp(id, peer_ip_of(id))) return -1;
        if (auto a = dev.mgr->accept(id.conn, r); !a) return fail(a.error().code);
        id.state = IdState::accepted;
    }
    kick();
    return id.sync ? wait_sync(id, RDMA_CM_EVENT_ESTABLISHED) : 0;
}

extern "C" int rdma_reject(rdma_cm_id* cm_id, const void* private_data, uint8_t private_data_len) {
    if (!cm_id || (private_data_len && !private_data)) return fail(EINVAL);
    std::lock_guard g(cma().mu);
    Id& id = *Id::of(cm_id);
    if (id.state != IdState::request || !id.has_conn) return fail(EINVAL);
    if (id.id.qp_type == IBV_QPT_UD) {
        vfab::cm::SidrRep no;
        no.status = uint8_t(vfab::cm::SidrStatus::reject);
        if (private_data_len > vfab::cm::kSidrRepPrivate) return fail(EINVAL);
        if (private_data_len) std::memcpy(no.private_data.data(), private_data, private_data_len);
        if (auto a = id.dev->mgr->sidr_answer(id.conn, no); !a) return fail(a.error().code);
        id.has_conn = false;
        id.state = IdState::disconnected;
        kick();
        return 0;
    }
    auto r = id.dev->mgr->reject(id.conn, uint16_t(vfab::cm::RejReason::consumer),
                                 std::span(static_cast<const uint8_t*>(private_data), private_data_len));
    if (!r) return fail(r.error().code);
    id.has_conn = false;
    id.state = IdState::disconnected;
    kick();
    return 0;
}

extern "C" int rdma_reject_ece(rdma_cm_id* cm_id, const void* private_data, uint8_t private_data_len) {
    return rdma_reject(cm_id, private_data, private_data_len);
}

extern "C" int rdma_disconnect(rdma_cm_id* cm_id) {
    if (!cm_id) return fail(EINVAL);
    if (cm_id->qp) {   // the QP's outstanding work completes in error (as librdmacm's ucma_shutdown)
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_ERR;
        (void)ibv_modify_qp(cm_id->qp, &a, IBV_QP_STATE);
    }
    std::lock_guard g(cma().mu);
    Id& id = *Id::of(cm_id);
    switch (id.state) {
    case IdState::established:
        if (id.has_conn) (void)id.dev->mgr->disconnect(id.conn);   // DREQ; DISCONNECTED on the DREP
        kick();
        return 0;
    case IdState::connecting:
    case IdState::accepted:
        if (id.has_conn) id.dev->mgr->release(id.conn);
        id.has_conn = false;
        id.state = IdState::disconnected;
        queue_event(id, RDMA_CM_EVENT_DISCONNECTED, 0);
        kick();
        return 0;
    case IdState::disconnected: return 0;   // the peer's DREQ came first
    default: return fail(EINVAL);
    }
}

extern "C" int rdma_notify(rdma_cm_id* cm_id, ibv_event_type) { return cm_id ? 0 : fail(EINVAL); }

extern "C" int rdma_set_local_ece(rdma_cm_id* cm_id, ibv_ece* ece) { return cm_id && ece ? 0 : fail(EINVAL); }

extern "C" int rdma_get_remote_ece(rdma_cm_id* cm_id, ibv_ece* ece) {
    if (!cm_id || !ece) return fail(EINVAL);
    *ece = {};   // the peer offered no enhanced connection options
    return 0;
}
