// XRC, eXtended Reliable Connected (IB spec 9.2, 9.3.8, 11.2.x): domains, XRC SRQs with a CQ of
// their own, and the receive queue pair that puts each message in the XRC SRQ its XRCETH names
// — one of its own domain, or the message is NAKed (docs/rdma-xrc.md). The sending queue pair
// is an RC requester whose requests carry XRC opcodes and the XRCETH (requester.cpp).
#include "engine.hpp"

namespace vfab::rdma::detail {

Result<void> XrcdImpl::destroy() {
    PortImpl::Guard g(port_);
    if (destroyed) return Error{ENODEV, "XRC domain already destroyed"};
    if (users) return Error{EBUSY, str_cat("destroy XRC domain: ", users, " XRC SRQ(s) or queue pair(s) still use it")};
    destroyed = true;
    return {};
}

Result<XrcDomain*> PortImpl::create_xrcd() {
    Guard g(*this);
    xrcds_.push_back(std::make_unique<XrcdImpl>(*this));
    return xrcds_.back().get();
}

Result<Srq*> PortImpl::create_xrc_srq(const SrqAttr& a, XrcDomain* xrcd, Cq* cq) {
    Guard g(*this);
    if (!owns(xrcds_, xrcd) || !owns(cqs_, cq))
        return Error{EINVAL, "create_xrc_srq: xrcd and cq must be an XRC domain and a CQ of this port"};
    auto* d = static_cast<XrcdImpl*>(xrcd);
    auto* c = static_cast<CqImpl*>(cq);
    auto srq = new_srq(a);
    if (!srq) return srq.take_error();
    SrqImpl* s = *srq;
    s->xrcd = d;
    s->cq = c;
    ++d->users;
    ++c->users;
    return s;
}

SrqImpl* PortImpl::find_srq(uint32_t srqn) noexcept {
    const uint32_t i = srqn - kFirstSrqn;
    if (srqn < kFirstSrqn || i >= srqs_.size() || srqs_[i]->destroyed) return nullptr;
    return srqs_[i].get();
}

// The XRC SRQ a message's first packet names: of this queue pair's domain, or none (the
// caller NAKs it, 9.7.5.2.x: an invalid request).
bool QpRecvQueue::select_xrc_srq(const Packet& p) noexcept {
    SrqImpl* s = c_.port.find_srq(p.xrc_srqn);
    if (!s || s->xrcd != xrcd_) return false;
    srq_ = s;
    rq_ = &s->rq;
    return true;
}

}  // namespace vfab::rdma::detail
