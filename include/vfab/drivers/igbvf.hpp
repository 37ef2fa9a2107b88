// vfab's driver for the Intel 82576 virtual function (igbvf), direct API: the deployment where
// the kernel's igb driver keeps the physical function and hands SR-IOV VFs out, one to each
// application. The VF's queue pair and completion queue are igb's (igb/queues.hpp: the same
// descriptors and fast path); what differs is the bring-up, which goes through the PF/VF
// mailbox (datasheet §7.8.2.9): reset, MAC address, frame size, multicast, promiscuous modes,
// and the PF's news of link changes and of its own resets.
//
//   auto dev = vfab::igbvf::Device::open(*vfab::PciAddress::parse("0000:00:1a.0"));
//   auto* cq = *(*dev)->create_cq(1024);
//   auto* qp = *(*dev)->create_qp({.send_cq = cq, .recv_cq = cq, .caps = {256, 256, 2, 1}});
//
// When the PF resets (its interface goes down and up, its driver reloads), next_event() says
// device_reset and the queue pair is in the error state (WRs flush). Once the PF is back,
// reset() redoes the handshake; destroy the queue pair and create it again.
//
// One queue pair: the VF has two queues, but the PF owns the RSS that would spread frames over
// them. Three MSI-X vectors: 0 for the completion queue, 1 and 2 for the mailbox (QEMU's model
// raises the mailbox on vector 1 where hardware uses 2; docs/igb-model.md §8).
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "vfab/pci_id.hpp"
#include "vfab/drivers/igb/queues.hpp"
#include "vfab/vfio/event_wait.hpp"

namespace vfab::igbvf {

using igb::CompletionQueue;
using igb::QpInitAttr;
using igb::QueuePair;

// The devices this driver drives (the one list: the driver's check, the provider registry and
// vfio-devctl read it).
inline constexpr PciId kPciIds[] = {
    {0x8086, 0x10ca},   // 82576 virtual function
    {0x8086, 0x1520},   // I350 virtual function
};

using vfab::MacAddress;

struct DeviceOptions {
    vfio::DeviceOptions vfio;
    // Ask the PF for this address instead of the one it assigned; it may refuse (an
    // administrator set the VF's address with `ip link set PF vf N mac ...`).
    std::optional<MacAddress> mac;
    // How long the PF may take to answer a request or to finish its own reset.
    int pf_timeout_ms = 2000;
    int link_timeout_ms = 3000;
    dma::PdOptions pd;
};

class DeviceImpl;   // the control path: drivers/igbvf/device_impl.hpp

class Device {
public:
    static Result<std::unique_ptr<Device>> open(const PciAddress& addr, const DeviceOptions& opts = {});
    ~Device();
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    const DeviceAttr& attr() const;
    // Up when the port's link is up and the PF has cleared this VF to send (CTS).
    LinkState link() const;
    DeviceStats stats();
    dma::ProtectionDomain& pd();

    // Up to attr().max_cq completion queues on MSI-X vectors; `cqe` is a capacity hint.
    Result<CompletionQueue*> create_cq(uint32_t cqe);
    // The VF's one queue pair.
    Result<QueuePair*> create_qp(const QpInitAttr& attr);

    // The multicast groups this VF receives (up to 30; the PF programs its hash filter).
    Result<void> set_multicast(std::span<const MacAddress> groups);
    // Promiscuous modes are the PF's to grant: Linux's igb allows all-multicast and refuses
    // unicast promiscuous mode (an error naming the refusal).
    Result<void> set_promiscuous(bool unicast, bool all_multicast);
    // The PF owns RSS: ENOTSUP.
    Result<void> configure_rss(const RssConfig& cfg);

    int event_fd() const;
    Event next_event();
    // The VF reset handshake again (after device_reset, once the PF is back): the queue pair
    // goes to the error state; destroy it and create it again.
    Result<void> reset();
    // The PF this VF belongs to ("0000:00:0a.0"), for messages and tools.
    const std::string& pf_address() const;

    // Provider extensions: the VFIO device and its register BAR.
    vfio::Device& vfio();
    vfio::Region& bar0();

private:
    explicit Device(std::unique_ptr<DeviceImpl> impl);
    std::unique_ptr<DeviceImpl> impl_;
};

// The driver's classes by role, for code written once for every driver
// (examples::BasicPort<igbvf::Driver>, the lab's MqPort).
struct Driver {
    using Device = igbvf::Device;
    using DeviceOptions = igbvf::DeviceOptions;
    using CompletionQueue = igbvf::CompletionQueue;
    using QueuePair = igbvf::QueuePair;
    using QpInitAttr = igbvf::QpInitAttr;
};

}  // namespace vfab::igbvf
