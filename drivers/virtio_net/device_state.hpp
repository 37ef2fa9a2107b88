// virtio-net's control path: what a Device holds and does behind its public calls (queue
// pairs and completion queues by index, the transport, negotiation, device restarts, RSS).
// Private to the driver: the public header (include/vfab/drivers/virtio_net.hpp) keeps only
// the fast path and the calls.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "../virtio/transport.hpp"
#include "control_queue.hpp"
#include "vfab/drivers/virtio_net.hpp"
#include "vfab/vfio/event_wait.hpp"

namespace vfab::virtio_net {

class DeviceState {
public:
    DeviceState(std::unique_ptr<virtio::Transport> t, vfio::EventWaiter ev)
        : transport_(std::move(t)), events_(std::move(ev)) {}
    ~DeviceState();
    // A Device over `t`, set up with `opts`.
    static Result<std::unique_ptr<Device>> open(Result<std::unique_ptr<virtio::Transport>> t, const DeviceOptions& opts);

    // The calls of Device, under mu_ where they change state.
    Result<void> init(const DeviceOptions& opts);
    LinkState link() const;
    DeviceStats stats();
    Result<CompletionQueue*> create_cq(uint32_t cqe);
    Result<QueuePair*> create_qp(const QpInitAttr& attr);
    Result<void> configure_rss(const RssConfig& cfg);
    Event next_event();
    Result<void> reset();

    Result<void> negotiate();
    bool check_gone();   // caller holds mu_
    Result<void> start_device();
    Result<void> program_qp(QueuePair& qp);
    Result<void> send_queue_config();
    void set_ring_interrupts(QueuePair& qp, bool on);
    void enter_error_state();
    void release_qp(QueuePair& qp);
    QueuePair* qp_at(uint32_t i) const { return i < qps_.size() ? qps_[i].get() : nullptr; }

    Device* self_ = nullptr;                          // the Device this is the state of
    std::unique_ptr<virtio::Transport> transport_;   // first: outlives what it maps
    vfio::EventWaiter events_;
    std::unique_ptr<dma::ProtectionDomain> pd_;
    DeviceOptions opts_;
    DeviceAttr attr_;
    uint64_t features_ = 0;
    uint64_t offered_ = 0;
    bool packed_ = false;
    uint32_t vectors_ = 0;
    bool link_up_ = false;
    // next_event()'s link state and the config_generation it was read under: once the device
    // runs, read again only when the generation moves (one register read a call, not four).
    bool link_now_ = false;
    bool link_cached_ = false;
    uint8_t link_gen_ = 0;
    bool removed_ = false;         // the device (or vhost-user back-end) is gone
    bool gone_reported_ = false;   // ... and next_event() said so
    bool fatal_reported_ = false;  // next_event() said the device needs a reset (until reset())
    bool driver_ok_ = false;

    std::recursive_mutex mu_;
    std::vector<std::unique_ptr<CompletionQueue>> cqs_;
    std::vector<std::unique_ptr<QueuePair>> qps_;   // by queue index; null when free
    std::vector<std::unique_ptr<QueuePair>> dead_qps_;
    std::unique_ptr<ControlQueue> ctrl_;            // with VIRTIO_NET_F_CTRL_VQ
    uint16_t ctrl_index_ = 0;
    std::vector<uint8_t> rss_key_;                  // configure_rss(), replayed on restarts
    std::vector<uint16_t> rss_table_;
    uint32_t rss_types_ = 0;
    DeviceStats retired_;   // counters of destroyed queue pairs
};

}  // namespace vfab::virtio_net
