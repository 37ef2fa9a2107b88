// The igbvf (82576 virtual function) device's control path, private to the driver: the
// mailbox with the PF, reset handshake, events. The public igbvf::Device is a handle on it.
#pragma once

#include <memory>

#include "../igb/queue_set.hpp"
#include "mailbox.hpp"
#include "vfab/drivers/igbvf.hpp"
#include "vfab/vfio/event_wait.hpp"

namespace vfab::igbvf {

class DeviceImpl final : public igb::QueueSet {
public:
    // The calls of the public Device (include/vfab/drivers/igbvf.hpp documents them).
    static Result<std::unique_ptr<DeviceImpl>> open(const PciAddress& addr, const DeviceOptions& opts = {});
    ~DeviceImpl();
    LinkState link() const;
    DeviceStats stats();
    Result<void> set_multicast(std::span<const MacAddress> groups);
    Result<void> set_promiscuous(bool unicast, bool all_multicast);
    Result<void> configure_rss(const RssConfig& cfg);
    int event_fd() const { return events_.fd(); }
    Event next_event();
    Result<void> reset();
    const std::string& pf_address() const { return pf_; }

private:
    DeviceImpl(std::unique_ptr<vfio::Device> vdev, vfio::Region* bar, vfio::EventWaiter events);
    Result<void> init(const DeviceOptions& opts);
    Result<void> handshake();
    Result<uint32_t> request(std::span<const uint32_t> words, std::span<uint32_t> reply, const char* what);
    Result<uint32_t> send_multicast(std::span<const uint16_t> hashes);
    void setup_interrupts();
    void lose_pf();
    std::string pf_state() const;

    std::unique_ptr<Mailbox> mbx_;
    vfio::Interrupts* req_ = nullptr;
    vfio::EventWaiter events_;
    DeviceOptions opts_;
    DeviceStats stats_;
    uint32_t raw_[5] = {};   // the last readings of the VF's free-running counters (kCounters)
    std::string pf_;
    // The PF completed this VF's reset and has not taken it back; link() reads it from any thread.
    std::atomic<bool> cts_{false};
    bool link_up_ = false;
    bool reset_reported_ = false;
    std::vector<uint16_t> multicast_;   // replayed after every reset
    uint32_t promisc_ = 0;
};

}  // namespace vfab::igbvf
