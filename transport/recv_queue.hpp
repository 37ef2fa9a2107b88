// A receive queue: the WRs posted by post_recv, their keys already checked, handed out oldest
// first. A queue pair's own receive queue and a shared receive queue (SRQ, IB spec 10.2.9) are
// the same structure: a queue pair takes the oldest WR when a message starts, holds it while
// the message arrives and releases its slot when the completion is made — with an SRQ, other
// queue pairs take and release WRs in between, so slots are a free list and the posted WRs a
// FIFO of slot numbers.
#pragma once

#include <cstdint>
#include <vector>

#include "segment.hpp"
#include "vfab/types.hpp"

namespace vfab::rdma::detail {


struct RecvWqe {
    uint64_t wr_id = 0;
    uint32_t nseg = 0;
    uint32_t length = 0;
};

class RecvQueue {
public:
    static constexpr uint32_t kNone = UINT32_MAX;
    enum class Post { ok, too_many_sge, full, bad_key };

    void init(uint32_t depth, uint32_t max_sge);
    void grow(uint32_t depth);   // more slots; the posted WRs keep their order
    void reset() noexcept;       // every slot free, nothing posted

    Post post(const RecvWr& wr, dma::MrTable& mrs) noexcept;
    uint32_t take() noexcept;                  // the oldest posted WR's slot, kNone when none
    void put_back(uint32_t slot) noexcept;     // a taken WR goes back to the head, unused
    void release(uint32_t slot) noexcept;      // its completion was made

    uint32_t posted() const noexcept { return tail_ - head_; }
    uint32_t depth() const noexcept { return uint32_t(wqes_.size()); }
    uint32_t max_sge() const noexcept { return max_sge_; }
    const RecvWqe& wqe(uint32_t slot) const noexcept { return wqes_[slot]; }
    const Segment* segments(uint32_t slot) const noexcept;
    // The WR's memory translated again through its keys, as the data arrives: false when a key
    // was revoked since it was posted (deregistered, invalidated: the memory may be gone), and
    // nothing may be written (IB spec 10.6.3.2: keys are checked when the WQE is executed).
    bool translate(uint32_t slot, const dma::MrTable& mrs) noexcept;

private:
    std::vector<RecvWqe> wqes_;
    std::vector<Segment> segs_;      // max_sge_ per slot
    std::vector<Sge> sges_;          // as posted, max_sge_ per slot: translated again on arrival
    std::vector<uint32_t> fifo_;     // posted slots, a ring of a power-of-two size
    std::vector<uint32_t> free_;     // free slots, a stack
    uint32_t max_sge_ = 0;
    uint32_t head_ = 0, tail_ = 0;   // free-running indices into fifo_
};

}  // namespace vfab::rdma::detail
