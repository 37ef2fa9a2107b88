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
    static Result<std::unique_ptr<DeviceImpl>> open(const PciAddress& addr, const DeviceOptions& opts = {});
    ~DeviceImpl();

    // Up when the port's link is up and the PF has cleared this VF to send (CTS).
    LinkState link() const;
    DeviceStats stats();

    // The multicast groups this VF receives (up to 30; the PF programs its hash filter).
    Result<void> set_multicast(std::span<const MacAddress> groups);
    // Promiscuous modes are the PF's to grant: Linux's igb allows all-multicast and refuses
    // unicast promiscuous mode (an error naming the refusal).
    Result<void> set_promiscuous(bool unicast, bool all_multicast);
    // The PF owns RSS: ENOTSUP.
    Result<void> configure_rss(const RssConfig& cfg);

    int event_fd() const { return events_.fd(); }
    Event next_event();
    // The VF reset handshake again (after device_reset, once the PF is back): the queue pair
    // goes to the error state; destroy it and create it again.
    Result<void> reset();
    // The PF this VF belongs to ("0000:00:0a.0"), for messages and tools.
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
