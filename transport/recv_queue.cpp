// The receive queue (recv_queue.hpp): a FIFO of posted slots and a free list of slots.
#include "recv_queue.hpp"

#include <bit>

namespace vfab::rdma::detail {

void RecvQueue::init(uint32_t depth, uint32_t max_sge) {
    max_sge_ = max_sge;
    wqes_.assign(depth, RecvWqe{});
    segs_.assign(size_t(depth) * max_sge, Segment{});
    sges_.assign(size_t(depth) * max_sge, Sge{});
    fifo_.assign(std::bit_ceil(depth), 0);
    free_.reserve(depth);
    reset();
}

void RecvQueue::reset() noexcept {
    head_ = tail_ = 0;
    free_.clear();
    for (uint32_t s = depth(); s-- > 0;) free_.push_back(s);   // capacity reserved by init/grow
}

void RecvQueue::grow(uint32_t depth) {
    const uint32_t old = this->depth();
    if (depth <= old) return;
    std::vector<uint32_t> fifo(std::bit_ceil(depth));
    const uint32_t n = posted(), mask = uint32_t(fifo_.size() - 1);
    for (uint32_t i = 0; i < n; ++i) fifo[i] = fifo_[(head_ + i) & mask];
    fifo_ = std::move(fifo);
    head_ = 0;
    tail_ = n;
    wqes_.resize(depth);
    segs_.resize(size_t(depth) * max_sge_);
    sges_.resize(size_t(depth) * max_sge_);
    free_.reserve(depth);
    for (uint32_t s = depth; s-- > old;) free_.push_back(s);
}

RecvQueue::Post RecvQueue::post(const RecvWr& wr, dma::MrTable& mrs) noexcept {
    if (wr.num_sge > max_sge_) return Post::too_many_sge;
    if (free_.empty()) return Post::full;
    const uint32_t slot = free_.back();
    RecvWqe q{wr.wr_id, wr.num_sge, 0};
    Segment* seg = &segs_[size_t(slot) * max_sge_];
    Sge* kept = &sges_[size_t(slot) * max_sge_];
    for (uint32_t s = 0; s < wr.num_sge; ++s) {
        const Sge& sge = wr.sg_list[s];
        const dma::Translation t = mrs.translate_span(sge.lkey, sge.addr, sge.length, dma::Access::local_write);
        if (t.status != dma::MrStatus::ok) return Post::bad_key;
        seg[s] = Segment::of(t, sge.length);
        kept[s] = sge;
        q.length += sge.length;
    }
    free_.pop_back();
    wqes_[slot] = q;
    fifo_[tail_++ & (fifo_.size() - 1)] = slot;
    return Post::ok;
}

uint32_t RecvQueue::take() noexcept {
    if (head_ == tail_) return kNone;
    return fifo_[head_++ & (fifo_.size() - 1)];
}

void RecvQueue::put_back(uint32_t slot) noexcept { fifo_[--head_ & (fifo_.size() - 1)] = slot; }

void RecvQueue::release(uint32_t slot) noexcept { free_.push_back(slot); }

const Segment* RecvQueue::segments(uint32_t slot) const noexcept { return &segs_[size_t(slot) * max_sge_]; }

bool RecvQueue::translate(uint32_t slot, const dma::MrTable& mrs) noexcept {
    Segment* seg = &segs_[size_t(slot) * max_sge_];
    const Sge* sge = &sges_[size_t(slot) * max_sge_];
    for (uint32_t s = 0; s < wqes_[slot].nseg; ++s) {
        const dma::Translation t = mrs.translate_span(sge[s].lkey, sge[s].addr, sge[s].length, dma::Access::local_write);
        if (t.status != dma::MrStatus::ok) return false;
        seg[s] = Segment::of(t, sge[s].length);
    }
    return true;
}

}  // namespace vfab::rdma::detail
