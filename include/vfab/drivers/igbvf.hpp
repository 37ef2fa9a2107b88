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

#include "vfab/drivers/intel/device_handle.hpp"
#include "vfab/pci_id.hpp"
#include "vfab/drivers/igb/queues.hpp"
#include "vfab/vfio/device_options.hpp"

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

// The VF's one queue pair. link() is up when the port's link is up and the PF has cleared
// this VF to send (CTS); set_multicast takes up to 30 groups (the PF programs its hash
// filter); the PF owns RSS (configure_rss: ENOTSUP); reset() is the VF reset handshake again
// (after device_reset, once the PF is back).
class Device final : public intel::DeviceHandle<Device, DeviceImpl, igb::QueueTraits, DeviceOptions> {
public:
    // Promiscuous modes are the PF's to grant: Linux's igb allows all-multicast and refuses
    // unicast promiscuous mode (an error naming the refusal).
    Result<void> set_promiscuous(bool unicast, bool all_multicast);
    // The PF this VF belongs to ("0000:00:0a.0"), for messages and tools.
    const std::string& pf_address() const;

private:
    friend class intel::DeviceHandle<Device, DeviceImpl, igb::QueueTraits, DeviceOptions>;
    explicit Device(std::unique_ptr<DeviceImpl> impl);
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
