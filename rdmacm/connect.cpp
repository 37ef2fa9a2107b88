// Connections: connect (a REQ, or a SIDR_REQ for UD) / accept / reject / disconnect, as the
// kernel's librdmacm does them over the connection manager (cm/manager.hpp); the QP's moves
// are qp.cpp's, what the peer answers is cm_events.cpp's.
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
}  // namespace
}  // namespace vfab::rdmacm

using namespace vfab::rdmacm;

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
    if (id.id.qp_type != IBV_QPT_RC && id.id.qp_type != IBV_QPT_XRC_SEND) return fail(EOPNOTSUPP);
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
    if (id.id.qp_type == IBV_QPT_XRC_SEND) {   // XRC (IB spec Annex A14 14.6.3.1)
        r.transport_type = cm::kTransportXrc;
        r.extended_transport_type = cm::kExtendedTransportXrc;
        r.srq = true;
    }
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
        r.srq = id.id.qp ? id.id.qp->srq != nullptr || id.id.qp_type == IBV_QPT_XRC_RECV : param->srq;
        if (param && param->private_data_len) std::memcpy(r.private_data.data(), param->private_data, param->private_data_len);
        id.rep = r;
        if (id.id.qp && ready_qp(id)) return -1;
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
