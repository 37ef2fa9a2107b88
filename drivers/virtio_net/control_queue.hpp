// The virtio-net control virtqueue (VIRTIO 1.2 §5.1.6.5): one command at a time, each a chain
// of [class, command] and its data (device-readable) then a one-byte ack (device-writable),
// answered synchronously. Used to set the number of queue pairs (VIRTIO_NET_CTRL_MQ) and the
// RSS parameters. Not on the fast path.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "vfab/dma/dma_arena.hpp"
#include "vfab/drivers/virtio/packed_queue.hpp"
#include "vfab/drivers/virtio/split_queue.hpp"
#include "vfab/result.hpp"

namespace vfab::virtio_net {

namespace ctrl {   // §5.1.6.5
inline constexpr uint8_t kOk = 0;
inline constexpr uint8_t kClassMq = 4;
inline constexpr uint8_t kMqVqPairsSet = 0;
inline constexpr uint8_t kMqRssConfig = 1;
}  // namespace ctrl

class ControlQueue {
public:
    static constexpr uint32_t kSize = 16;             // one command in flight needs 3 descriptors
    static constexpr uint32_t kMaxData = 1024;        // the RSS command: 12 + 2*128 + 40 bytes

    static Result<std::unique_ptr<ControlQueue>> create(std::shared_ptr<vfio::AddressSpace> space,
                                                        const dma::DmaMemoryOptions& where, bool packed,
                                                        virtio::RingFeatures features);
    // A fresh ring, for a device that was reset; the caller programs it at memory().
    void restart() noexcept;
    const virtio::QueueMemory& memory() const noexcept { return qmem_; }
    void set_doorbell(const virtio::Doorbell& bell) noexcept { bell_ = bell; }
    // Sends one command and waits up to two seconds for the device's ack. `what` names the
    // command in errors.
    Result<void> command(uint8_t cls, uint8_t cmd, std::span<const uint8_t> data, std::string_view what);

private:
    ControlQueue(dma::DmaArena mem) : mem_(std::move(mem)) {}
    template <class Q>
    Result<void> run(Q& q, uint32_t data_len, std::string_view what);

    dma::DmaArena mem_;
    virtio::QueueMemory qmem_;
    std::optional<virtio::SplitQueue> split_;
    std::optional<virtio::PackedQueue> packed_;
    virtio::Doorbell bell_;
};

}  // namespace vfab::virtio_net
