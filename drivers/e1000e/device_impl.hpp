// The e1000e device's control path, private to the driver: bring-up, link, events, reset and
// the 82574L's queue steps over intel::QueueSet. The public e1000e::Device
// (include/vfab/drivers/e1000e.hpp) is a handle on it.
#pragma once

#include <memory>
#include <vector>

#include "../intel/queue_set.hpp"
#include "vfab/drivers/e1000e.hpp"
#include "vfab/drivers/e1000e/regs.hpp"
#include "vfab/vfio/event_wait.hpp"

namespace vfab::e1000e {

class DeviceImpl final : public intel::QueueSet<QueueTraits> {
public:
    // The calls of the public Device (include/vfab/drivers/e1000e.hpp documents them).
    static Result<std::unique_ptr<DeviceImpl>> open(const PciAddress& addr, const DeviceOptions& opts = {});
    ~DeviceImpl();
    LinkState link() const;
    DeviceStats stats();
    Result<void> configure_rss(const RssConfig& cfg);
    Result<void> set_multicast(std::span<const MacAddress> groups);
    int event_fd() const { return events_.fd(); }
    Event next_event();
    Result<void> reset();

private:
    DeviceImpl(std::unique_ptr<vfio::Device> vdev, vfio::Region* bar, vfio::EventWaiter events)
        : QueueSet(std::move(vdev), bar), events_(std::move(events)) {}
    Result<void> init(const DeviceOptions& opts);
    Result<void> hw_reset();
    Result<void> hw_setup();
    Result<void> start_queues(const QueueRegs& q) override;
    void stop_queues(uint32_t q) override;
    void arm_vector(uint32_t vector, bool sends, bool recvs) override;
    void enter_error_state();
    void program_ivar(const QueueRegs* q);   // routes queue 0's causes to its CQs' vectors (null: none)
    int64_t probe_trailing_notification();
    void accumulate_stats();

    vfio::Interrupts* req_ = nullptr;
    vfio::Interrupts* err_ = nullptr;
    vfio::EventWaiter events_;
    DeviceOptions opts_;
    DeviceStats stats_;
    bool link_up_ = false;
    bool setup_lost_ = false;   // reported: the device was reset behind the driver's back
    std::vector<MacAddress> multicast_;   // set_multicast()
};

}  // namespace vfab::e1000e
