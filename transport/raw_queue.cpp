// Raw frames beside RDMA: the port's software queue pair and CQ (raw_queue.hpp).
#include "raw_queue.hpp"

#include <unistd.h>

#include <bit>
#include <cstring>

#include "engine.hpp"

namespace vfab::rdma::detail {

RawCq::RawCq(PortImpl& port, uint32_t depth) : port_(port), ring_(std::bit_ceil(depth)) {}

Result<void> RawCq::init() { return channel_.open(port_, "raw queue"); }

void RawCq::push(const Completion& c) noexcept {
    if (tail_ - head_ == ring_.size()) {
        ++overruns;
        return;
    }
    ring_[tail_++ & (ring_.size() - 1)] = c;
    channel_.notify();
}

int RawCq::poll(std::span<Completion> out) noexcept {
    PortImpl::Guard g(port_);
    port_.run();
    int n = 0;
    while (n < int(out.size()) && head_ != tail_) out[n++] = ring_[head_++ & (ring_.size() - 1)];
    return n;
}

Result<void> RawCq::arm() {
    PortImpl::Guard g(port_);
    port_.program_waits();
    return channel_.arm(port_, head_ != tail_);
}

uint64_t RawCq::take_events() noexcept {
    PortImpl::Guard g(port_);
    return channel_.take(port_);
}

RawQp::RawQp(PortImpl& port, RawCq& cq, uint32_t depth)
    : port_(port), cq_(cq), rq_(std::bit_ceil(depth)), rq_sges_(rq_.size()) {
    caps_ = {depth, uint32_t(rq_.size()), kRawMaxSge, 1};
}

PostResult RawQp::post_recv(std::span<const vfab::RecvWr> wrs) noexcept {
    PortImpl::Guard g(port_);
    uint32_t i = 0;
    for (; i < wrs.size(); ++i) {
        if (wrs[i].num_sge != 1 || !wrs[i].sg_list) return {EINVAL, i};
        if (rq_tail_ - rq_head_ == rq_.size()) return {ENOMEM, i};
        const uint32_t slot = rq_tail_++ & uint32_t(rq_.size() - 1);
        rq_sges_[slot] = wrs[i].sg_list[0];
        rq_[slot] = {wrs[i].wr_id, &rq_sges_[slot], 1, 0};
    }
    return {0, i};
}

bool RawQp::deliver(const uint8_t* frame, uint32_t len) noexcept {
    if (rq_head_ == rq_tail_) return false;
    const RecvWr& r = rq_[rq_head_++ & uint32_t(rq_.size() - 1)];
    const Sge& s = r.sg_list[0];
    Completion c{r.wr_id, vfab::WcStatus::success, vfab::WcOpcode::recv, 0, len, 0, 0};
    const dma::Translation t = port_.mrs().translate_span(s.lkey, s.addr, s.length, dma::Access::local_write);
    if (t.status != dma::MrStatus::ok) {
        c.status = vfab::WcStatus::local_protection_error;
    } else if (len > s.length) {
        c.status = vfab::WcStatus::local_length_error;
    } else {
        copy_to(Segment::of(t, s.length), 0, frame, len);
        ++stats_.rx_packets;
        stats_.rx_bytes += len;
    }
    cq_.push(c);
    return true;
}

bool gather_frame(dma::MrTable& mrs, const Sge* sgl, uint32_t n, bool inline_data, uint8_t* to) noexcept {
    for (uint32_t s = 0; s < n; ++s) {
        const Sge& sge = sgl[s];
        if (inline_data) {
            std::memcpy(to, reinterpret_cast<const void*>(sge.addr), sge.length);
        } else {
            const dma::Translation t = mrs.translate_span(sge.lkey, sge.addr, sge.length, dma::Access::none);
            if (t.status != dma::MrStatus::ok) return false;
            copy_from(Segment::of(t, sge.length), 0, to, sge.length);
        }
        to += sge.length;
    }
    return true;
}

// Each frame is gathered into one of the port's send buffers and leaves with the port's frames.
PostResult RawQp::post_send(std::span<const vfab::SendWr> wrs) noexcept {
    PortImpl::Guard g(port_);
    uint32_t i = 0;
    for (; i < wrs.size(); ++i) {
        const vfab::SendWr& wr = wrs[i];
        if (wr.num_sge == 0 || wr.num_sge > kRawMaxSge || !wr.sg_list) return {EINVAL, i};
        uint64_t total = 0;
        for (uint32_t s = 0; s < wr.num_sge; ++s) total += wr.sg_list[s].length;
        if (total < 14 || total > port_.max_frame()) return {EINVAL, i};
        uint8_t* buf = port_.tx_buffer();
        if (!buf) return {ENOMEM, i};
        Completion c{wr.wr_id, vfab::WcStatus::success, vfab::WcOpcode::send, 0, uint32_t(total), 0, 0};
        if (!gather_frame(port_.mrs(), wr.sg_list, wr.num_sge, false, buf)) c.status = vfab::WcStatus::local_protection_error;
        if (c.status == vfab::WcStatus::success) {
            port_.tx_queue(buf, uint32_t(total));
            ++stats_.tx_packets;
            stats_.tx_bytes += total;
        } else {
            port_.tx_release(buf);
        }
        if ((wr.flags & send_signaled) || c.status != vfab::WcStatus::success) cq_.push(c);
    }
    port_.tx_flush();
    return {0, i};
}

}  // namespace vfab::rdma::detail
