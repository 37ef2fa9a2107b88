// What the CM thread makes of the connection manager's events (docs/cm.md): connect and SIDR
// requests become new ids on their listener's channel, REPs move the active side's QP to RTS
// and become ESTABLISHED, and so on; an event for an id being destroyed is dropped.
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "cma.hpp"

namespace vfab::rdmacm {

namespace {
void copy_private(EventBox& b, const uint8_t* data, size_t len) {
    std::memcpy(b.data, data, len);
    b.ev.param.conn.private_data = b.data;
    b.ev.param.conn.private_data_len = uint8_t(len);
}

// A REQ's or REP's parameters as this side sees them: the peer's responder resources are our
// initiator depth, and back.
template <class Message>
void copy_conn_param(rdma_conn_param& p, const Message& m) {
    p.responder_resources = m.initiator_depth;
    p.initiator_depth = m.responder_resources;
    p.flow_control = m.flow_control;
    p.rnr_retry_count = m.rnr_retry_count;
    p.srq = m.srq;
    p.qp_num = m.local_qpn;
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
    // RC, or XRC (the request's id an XRC receiver); what a listener with rdma_create_ep's QP
    // description would make must be of the same kind.
    const bool xrc = e.req.transport_type == cm::kTransportXrc && e.req.extended_transport_type == cm::kExtendedTransportXrc;
    const ibv_qp_type type = xrc ? IBV_QPT_XRC_RECV : IBV_QPT_RC;
    if ((e.req.transport_type != cm::kTransportRc && !xrc) || (l->has_ep_qp_attr && l->ep_qp_attr.qp_type != type)) {
        (void)dev.mgr->reject(e.conn, uint16_t(cm::RejReason::invalid_transport_type));
        return;
    }
    Id* c = child_of(*l, dev, h, e.req.service_id, type, e.conn);
    if (!c) {
        (void)dev.mgr->reject(e.conn, uint16_t(cm::RejReason::no_resources));
        return;
    }
    c->req = e.req;
    EventBox* b = queue_request(*c, *l);
    copy_private(*b, e.req.private_data.data() + cm::kCmaHeader, cm::kReqPrivate - cm::kCmaHeader);
    copy_conn_param(b->ev.param.conn, e.req);
    b->ev.param.conn.retry_count = e.req.retry_count;   // a REQ's alone
}
}  // namespace

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
        else if (ready_qp(*id)) type = RDMA_CM_EVENT_CONNECT_ERROR, status = -errno;
        EventBox* b = queue_event(*id, type, status);
        copy_private(*b, e.rep.private_data.data(), cm::kRepPrivate);
        copy_conn_param(b->ev.param.conn, e.rep);
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
