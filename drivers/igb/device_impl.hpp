// The igb (82576 physical function) device's control path, private to the driver: bring-up,
// link, events, reset, RSS, timestamps. The public igb::Device is a handle on it.
#pragma once

#include <memory>

#include "queue_set.hpp"
#include "vfab/drivers/igb.hpp"
#include "vfab/drivers/igb/regs.hpp"
#include "vfab/vfio/event_wait.hpp"

namespace vfab::igb {

class DeviceImpl final : public QueueSet {
public:
    // The calls of the public Device (include/vfab/drivers/igb.hpp documents them).
    static Result<std::unique_ptr<DeviceImpl>> open(const PciAddress& addr, const DeviceOptions& opts = {});
    ~DeviceImpl();
    LinkState link() const;
    DeviceStats stats();
    Result<void> configure_rss(const RssConfig& cfg);
    Result<void> set_multicast(std::span<const MacAddress> groups);
    Result<void> enable_timestamps(const TimestampConfig& cfg);
    uint64_t clock_ns();
    void set_clock_ns(uint64_t ns);
    std::optional<uint64_t> take_tx_timestamp();
    std::optional<RxTimestamp> take_rx_timestamp();
    int event_fd() const { return events_.fd(); }
    Event next_event();
    Result<void> reset();

private:
    DeviceImpl(std::unique_ptr<vfio::Device> vdev, vfio::Region* bar, vfio::EventWaiter events)
        : QueueSet(std::move(vdev), bar), events_(std::move(events)) {}
    Result<void> init(const DeviceOptions& opts);
    Result<void> hw_reset();
    void hw_setup();
    void accumulate_stats();
    void write_rss();
    void write_timestamps();

    vfio::Interrupts* req_ = nullptr;
    vfio::EventWaiter events_;
    DeviceOptions opts_;
    DeviceStats stats_;
    uint32_t vectors_ = 0, other_vector_ = 0;
    bool link_up_ = false;
    bool setup_lost_ = false;   // reported: the device was reset behind the driver's back
    std::array<uint8_t, reg::kRssKeyBytes> rss_key_{};
    std::vector<uint16_t> rss_table_;
    uint32_t rss_types_ = 0;
    std::vector<MacAddress> multicast_;   // set_multicast()
    std::optional<TimestampConfig> timestamps_;
    uint64_t clock_offset_ = 0;   // set_clock_ns(): added to SYSTIM and the latched times
};

}  // namespace vfab::igb
