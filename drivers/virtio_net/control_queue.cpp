#include "control_queue.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "vfab/mmio.hpp"

namespace vfab::virtio_net {
namespace {

// The command buffer after the ring: [class, command] at 0, data at 64, the ack at the end.
constexpr size_t kHdrOff = 0, kDataOff = 64, kAckOff = kDataOff + ControlQueue::kMaxData;
constexpr size_t kBufferBytes = kAckOff + 64;

}  // namespace

Result<std::unique_ptr<ControlQueue>> ControlQueue::create(std::shared_ptr<vfio::AddressSpace> space,
                                                           const dma::DmaMemoryOptions& where, bool packed,
                                                           virtio::RingFeatures features) {
    const virtio::RingLayout layout = packed ? virtio::PackedQueue::layout(kSize) : virtio::SplitQueue::layout(kSize);
    auto mem = dma::DmaArena::create(std::move(space), layout.total_bytes() + kBufferBytes, where);
    if (!mem) return Error{mem.error().code, str_cat("the control virtqueue's memory: ", mem.error().message)};
    std::unique_ptr<ControlQueue> cq(new ControlQueue(std::move(*mem)));
    cq->qmem_ = virtio::QueueMemory::carve(cq->mem_.data() + kBufferBytes, cq->mem_.iova() + kBufferBytes, layout);
    if (packed) {
        auto q = virtio::PackedQueue::create(kSize, cq->qmem_, features);
        if (!q) return q.take_error();
        cq->packed_.emplace(std::move(*q));
    } else {
        auto q = virtio::SplitQueue::create(kSize, cq->qmem_, features);
        if (!q) return q.take_error();
        cq->split_.emplace(std::move(*q));
    }
    return cq;
}

void ControlQueue::restart() noexcept {
    if (packed_) packed_->reset();
    if (split_) split_->reset();
}

Result<void> ControlQueue::command(uint8_t cls, uint8_t cmd, std::span<const uint8_t> data, std::string_view what) {
    if (data.size() > kMaxData) return Error{EINVAL, str_cat(what, ": ", data.size(), " bytes of command data is too much")};
    uint8_t* base = mem_.data();
    base[kHdrOff] = cls;
    base[kHdrOff + 1] = cmd;
    if (!data.empty()) std::memcpy(base + kDataOff, data.data(), data.size());
    base[kAckOff] = 0xff;   // not an ack the device would write
    return packed_ ? run(*packed_, uint32_t(data.size()), what) : run(*split_, uint32_t(data.size()), what);
}

template <class Q>
Result<void> ControlQueue::run(Q& q, uint32_t data_len, std::string_view what) {
    const uint64_t iova = mem_.iova().value;
    virtio::Buffer bufs[3];
    uint32_t n = 0;
    bufs[n++] = {iova + kHdrOff, 2, false};
    if (data_len) bufs[n++] = {iova + kDataOff, data_len, false};
    bufs[n++] = {iova + kAckOff, 1, true};
    if (!q.add(std::span<const virtio::Buffer>(bufs, n), 0))
        return Error{EBUSY, str_cat(what, ": the control virtqueue is full (an earlier command never completed); reset the device")};
    q.publish();
    bell_.ring();   // always: commands are rare
    // QEMU answers while handling the notification; hardware may take a little longer.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    uint32_t token = 0, len = 0;
    while (!q.poll_used(token, len)) {
        if (std::chrono::steady_clock::now() > deadline)
            return Error{ETIMEDOUT, str_cat(what, ": the device did not answer on the control virtqueue within 2 s; reset the device")};
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    const uint8_t ack = *reinterpret_cast<volatile uint8_t*>(mem_.data() + kAckOff);
    if (ack != ctrl::kOk) return Error{EINVAL, str_cat(what, ": the device refused the command (VIRTIO_NET_ERR)")};
    return {};
}

}  // namespace vfab::virtio_net
