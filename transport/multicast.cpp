// UD multicast (IB spec 10.5.2.x; RoCEv2 over IPv4 multicast, Annex A17.4.5.2): queue pairs
// attached to groups, the device's multicast filter kept in step with them, datagrams to a
// group handed to each member — from the wire, and from this port's own queue pairs (a NIC
// does not hear its own sends), except to a sender made with qp_create_block_self_mcast_lb.
#include <algorithm>

#include "engine.hpp"

namespace vfab::rdma::detail {

using namespace wire;

namespace {
Result<uint32_t> group_of(const Gid& gid, const char* verb) {
    if (!gid.is_ipv4() || !is_ipv4_multicast(gid.ipv4()))
        return Error{EINVAL, str_cat(verb, ": the group must be an IPv4-mapped multicast GID (::ffff:224.0.0.0/4)")};
    return gid.ipv4();
}
}  // namespace

Result<void> QpImpl::attach_mcast(const Gid& gid, uint16_t) {
    auto g = c_.port.guard();
    if (destroyed) return Error{ENODEV, "attach_mcast: the queue pair was destroyed"};
    if (c_.type != QpType::ud) return Error{EINVAL, "attach_mcast: only UD queue pairs join multicast groups"};
    auto ip = group_of(gid, "attach_mcast");
    if (!ip) return ip.take_error();
    return c_.port.join(this, *ip);
}

Result<void> QpImpl::detach_mcast(const Gid& gid, uint16_t) {
    auto g = c_.port.guard();
    if (destroyed) return Error{ENODEV, "detach_mcast: the queue pair was destroyed"};
    auto ip = group_of(gid, "detach_mcast");
    if (!ip) return ip.take_error();
    return c_.port.leave(this, *ip);
}

// The device's filter for `groups` (their Ethernet addresses, once each), before the port's
// list changes to it: a refusal leaves everything as it was.
Result<void> PortImpl::update_multicast_filter(const std::vector<McastGroup>& groups) {
    std::vector<MacAddress> macs;
    for (const McastGroup& g : groups) {
        MacAddress m;
        ipv4_multicast_mac(g.ip, m.data());
        if (std::find(macs.begin(), macs.end(), m) == macs.end()) macs.push_back(m);
    }
    if (auto r = link_->set_multicast(macs); !r)
        return Error{r.error().code, "attach_mcast: the device's multicast filter: " + r.error().message};
    return {};
}

std::vector<PortImpl::McastGroup>::iterator PortImpl::find_group(uint32_t ip) noexcept {
    return std::find_if(mcast_.begin(), mcast_.end(), [&](const McastGroup& x) { return x.ip == ip; });
}

Result<void> PortImpl::join(QpImpl* qp, uint32_t ip) {
    auto g = find_group(ip);
    if (g != mcast_.end()) {
        if (std::find(g->qps.begin(), g->qps.end(), qp) != g->qps.end()) return {};   // already in: as ibv
        if (g->qps.size() >= kMaxMcastQpAttach)
            return Error{ENOMEM, str_cat("attach_mcast: the group has ", kMaxMcastQpAttach, " queue pairs already")};
        g->qps.push_back(qp);
        return {};
    }
    if (mcast_.size() >= kMaxMcastGroups)
        return Error{ENOMEM, str_cat("attach_mcast: the port is in ", kMaxMcastGroups, " groups already")};
    std::vector<McastGroup> next = mcast_;
    next.push_back({ip, {qp}});
    if (auto r = update_multicast_filter(next); !r) return r;
    mcast_ = std::move(next);
    return {};
}

Result<void> PortImpl::leave(QpImpl* qp, uint32_t ip) {
    auto g = find_group(ip);
    if (g == mcast_.end() || std::find(g->qps.begin(), g->qps.end(), qp) == g->qps.end())
        return Error{EINVAL, "detach_mcast: the queue pair is not in that group"};
    std::erase(g->qps, qp);
    if (g->qps.empty()) {
        mcast_.erase(g);
        (void)update_multicast_filter(mcast_);   // a filter passing one group more is harmless
    }
    return {};
}

void PortImpl::leave_all(QpImpl* qp) noexcept {
    const size_t before = mcast_.size();
    for (McastGroup& g : mcast_) std::erase(g.qps, qp);
    std::erase_if(mcast_, [](const McastGroup& g) { return g.qps.empty(); });
    if (mcast_.size() != before) (void)update_multicast_filter(mcast_);
}

}  // namespace vfab::rdma::detail
