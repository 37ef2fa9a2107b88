// ibv_create_flow / ibv_destroy_flow: a struct ibv_flow_attr and the specs after it, as a rule
// of the transport (rdma::FlowRule, docs/rdma-raw-packet.md) steering frames to a raw-packet
// queue pair. Specs of Ethernet, IPv4 (plain and _EXT's protocol), TCP and UDP; the others,
// and fields the transport does not match on, are EOPNOTSUPP, as a device without them says.
#include <arpa/inet.h>

#include <cstring>

#include "objects.hpp"

namespace vfab::verbs {

namespace {

constexpr uint8_t kIpProtoTcp = 6, kIpProtoUdp = 17;

// The spec `s` (its header read, `size` bytes in all) into `r`; an errno when it cannot be.
int add_spec(const ibv_flow_spec* s, rdma::FlowRule& r) {
    switch (s->hdr.type) {
    case IBV_FLOW_SPEC_ETH: {
        if (s->hdr.size < sizeof(ibv_flow_spec_eth)) return EINVAL;
        const ibv_flow_spec_eth& e = s->eth;
        std::memcpy(r.dst_mac, e.val.dst_mac, 6);
        std::memcpy(r.dst_mac_mask, e.mask.dst_mac, 6);
        std::memcpy(r.src_mac, e.val.src_mac, 6);
        std::memcpy(r.src_mac_mask, e.mask.src_mac, 6);
        r.ether_type = ntohs(e.val.ether_type);
        r.ether_type_mask = ntohs(e.mask.ether_type);
        r.vlan_tag = ntohs(e.val.vlan_tag);
        r.vlan_tag_mask = ntohs(e.mask.vlan_tag);
        return 0;
    }
    case IBV_FLOW_SPEC_IPV4: {
        if (s->hdr.size < sizeof(ibv_flow_spec_ipv4)) return EINVAL;
        const ibv_flow_spec_ipv4& i = s->ipv4;
        r.src_ip = ntohl(i.val.src_ip), r.src_ip_mask = ntohl(i.mask.src_ip);
        r.dst_ip = ntohl(i.val.dst_ip), r.dst_ip_mask = ntohl(i.mask.dst_ip);
        return 0;
    }
    case IBV_FLOW_SPEC_IPV4_EXT: {
        if (s->hdr.size < sizeof(ibv_flow_spec_ipv4_ext)) return EINVAL;
        const ibv_flow_spec_ipv4_ext& i = s->ipv4_ext;
        if (i.mask.tos || i.mask.ttl || i.mask.flags) return EOPNOTSUPP;
        r.src_ip = ntohl(i.val.src_ip), r.src_ip_mask = ntohl(i.mask.src_ip);
        r.dst_ip = ntohl(i.val.dst_ip), r.dst_ip_mask = ntohl(i.mask.dst_ip);
        if (i.mask.proto) r.ip_proto = i.val.proto, r.ip_proto_mask = i.mask.proto;
        return 0;
    }
    case IBV_FLOW_SPEC_TCP:
    case IBV_FLOW_SPEC_UDP: {
        if (s->hdr.size < sizeof(ibv_flow_spec_tcp_udp)) return EINVAL;
        const ibv_flow_spec_tcp_udp& t = s->tcp_udp;
        r.ip_proto = s->hdr.type == IBV_FLOW_SPEC_TCP ? kIpProtoTcp : kIpProtoUdp;
        r.ip_proto_mask = 0xff;
        r.src_port = ntohs(t.val.src_port), r.src_port_mask = ntohs(t.mask.src_port);
        r.dst_port = ntohs(t.val.dst_port), r.dst_port_mask = ntohs(t.mask.dst_port);
        return 0;
    }
    default: return EOPNOTSUPP;
    }
}

}  // namespace

ibv_flow* create_flow(ibv_qp* qp, ibv_flow_attr* a) {
    if (!qp || !a || a->comp_mask || a->port != 1) return fail_null<ibv_flow>(EINVAL);
    if (a->flags & ~uint32_t(IBV_FLOW_ATTR_FLAGS_DONT_TRAP)) return fail_null<ibv_flow>(EOPNOTSUPP);
    rdma::FlowRule r;
    switch (a->type) {
    case IBV_FLOW_ATTR_NORMAL: r.kind = rdma::FlowRule::Kind::normal; break;
    case IBV_FLOW_ATTR_ALL_DEFAULT: r.kind = rdma::FlowRule::Kind::all_default; break;
    case IBV_FLOW_ATTR_MC_DEFAULT: r.kind = rdma::FlowRule::Kind::mc_default; break;
    case IBV_FLOW_ATTR_SNIFFER: r.kind = rdma::FlowRule::Kind::sniffer; break;
    default: return fail_null<ibv_flow>(EOPNOTSUPP);
    }
    r.priority = a->priority;
    // The specs follow the attribute, each `size` bytes long. The attribute's own size is not
    // looked at: programs set it to sizeof(ibv_flow_attr) alone (pyverbs) or with the specs
    // (perftest), and rdma-core walks num_of_specs as here.
    const auto* at = reinterpret_cast<const uint8_t*>(a + 1);
    for (uint8_t i = 0; i < a->num_of_specs; ++i) {
        const auto* s = reinterpret_cast<const ibv_flow_spec*>(at);
        if (s->hdr.size < sizeof s->hdr) return fail_null<ibv_flow>(EINVAL);
        if (int e = add_spec(s, r)) return fail_null<ibv_flow>(e);
        at += s->hdr.size;
    }
    auto t = Context::of(qp->context)->port->create_flow(Qp::of(qp)->t, r);
    if (!t) return fail_null<ibv_flow>(t.error().code);
    auto* f = new Flow{};
    f->flow.context = qp->context;
    f->t = *t;
    return &f->flow;
}

int destroy_flow(ibv_flow* flow) {
    if (!flow) return EINVAL;
    Flow* f = Flow::of(flow);
    if (auto r = f->t->destroy(); !r) return r.error().code;
    delete f;
    return 0;
}

}  // namespace vfab::verbs
