// Shared receive queues (IB spec 10.2.9) and the port's asynchronous events (11.6.3): the SRQ
// limit event and the last-WQE-reached event of a queue pair of an SRQ.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

#include "engine.hpp"

namespace vfab::rdma::detail {

PostResult SrqImpl::post_recv(std::span<const RecvWr> wrs) noexcept {
    PortImpl::Guard g(port_);
    if (destroyed) return {ENODEV, 0};
    for (uint32_t i = 0; i < wrs.size(); ++i) {
        switch (rq.post(wrs[i], port_.mrs())) {
        case RecvQueue::Post::ok: break;
        case RecvQueue::Post::full: return {ENOMEM, i};
        case RecvQueue::Post::too_many_sge:
        case RecvQueue::Post::bad_key: return {EINVAL, i};
        }
    }
    return {0, uint32_t(wrs.size())};
}

Result<void> SrqImpl::modify(const SrqAttr& a, uint32_t mask) {
    PortImpl::Guard g(port_);
    if (destroyed) return Error{ENODEV, "modify_srq: the shared receive queue was destroyed"};
    if (mask & ~uint32_t(srq_attr_max_wr | srq_attr_limit))
        return Error{EINVAL, "modify_srq: the mask has bits other than max_wr and srq_limit"};
    const uint32_t depth = mask & srq_attr_max_wr ? a.max_wr : rq.depth();
    if (depth < rq.depth() || depth > kMaxSrqWr)
        return Error{EINVAL, str_cat("modify_srq: max_wr ", depth, ": an SRQ grows (", rq.depth(), " now) up to ", kMaxSrqWr)};
    if ((mask & srq_attr_limit) && a.srq_limit > depth)
        return Error{EINVAL, str_cat("modify_srq: srq_limit ", a.srq_limit, " is more than the queue's ", depth, " WRs")};
    rq.grow(depth);
    if (mask & srq_attr_limit) limit_ = a.srq_limit;
    return {};
}

SrqAttr SrqImpl::query() const {
    PortImpl::Guard g(port_);
    return SrqAttr{rq.depth(), rq.max_sge(), limit_};
}

Result<void> SrqImpl::destroy() {
    PortImpl::Guard g(port_);
    if (destroyed) return Error{ENODEV, "shared receive queue already destroyed"};
    if (users) return Error{EBUSY, str_cat("destroy SRQ: ", users, " queue pair(s) still use it — destroy them first")};
    destroyed = true;
    if (xrcd) --xrcd->users;
    if (cq) --cq->users;
    return {};
}

void SrqImpl::taken() noexcept {
    if (limit_ == 0 || rq.posted() >= limit_) return;
    limit_ = 0;
    AsyncEvent e;
    e.type = AsyncEventType::srq_limit_reached;
    e.srq = this;
    port_.raise(e);
}

Result<Srq*> PortImpl::create_srq(const SrqAttr& a) {
    Guard g(*this);
    auto srq = new_srq(a);
    if (!srq) return srq.take_error();
    return *srq;
}

Result<SrqImpl*> PortImpl::new_srq(const SrqAttr& a) {
    if (a.max_wr == 0 || a.max_wr > kMaxSrqWr || a.max_sge == 0 || a.max_sge > kMaxSrqSge || a.srq_limit > a.max_wr)
        return Error{EINVAL, str_cat("create_srq: max_wr 1 to ", kMaxSrqWr, ", max_sge 1 to ", kMaxSrqSge,
                                     ", srq_limit at most max_wr (", a.max_wr, ", ", a.max_sge, ", ", a.srq_limit, " asked)")};
    if (live(srqs_) >= kMaxSrq) return Error{ENOSPC, str_cat("create_srq: the port has ", kMaxSrq, " SRQs already")};
    srqs_.push_back(std::make_unique<SrqImpl>(*this, a, kFirstSrqn + uint32_t(srqs_.size())));
    return srqs_.back().get();
}

// ---- asynchronous events -----------------------------------------------------------------------------

void PortImpl::raise(const AsyncEvent& e) noexcept {
    if (async_hook_) return async_hook_(async_hook_ctx_, e);
    if (events_tail_ - events_head_ == kMaxAsyncEvents) {
        ++stats_.async_events_lost;
        return;
    }
    events_[events_tail_++ % kMaxAsyncEvents] = e;
    const uint64_t one = 1;
    (void)!::write(async_fd_.get(), &one, sizeof one);
}

bool PortImpl::get_async_event(AsyncEvent& out) noexcept {
    Guard g(*this);
    if (events_head_ == events_tail_) return false;
    out = events_[events_head_++ % kMaxAsyncEvents];
    if (events_head_ == events_tail_) {
        uint64_t drain = 0;
        (void)!::read(async_fd_.get(), &drain, sizeof drain);
    }
    return true;
}

}  // namespace vfab::rdma::detail
