// What a virtio device driver needs of the transport its device sits on (VIRTIO 1.2 §4): the
// status handshake and feature negotiation, virtqueue set-up and doorbells, completion
// channels, device configuration, removal. Two transports implement it:
//   VfioPciTransport   a virtio PCI device bound to vfio-pci (§4.1): MMIO registers, MSI-X
//                      eventfds, the IOMMU context as address space, the request interrupt;
//   VhostUserTransport a back-end process serving the virtqueues (docs/vhost-user.md):
//                      messages, kick and call eventfds, the vhost-user memory table as
//                      address space, the socket's hang-up.
// A driver (virtio_net::Device) is written once over this interface. Control path only: the
// fast path sees a Doorbell and the virtqueues.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "vfab/dma/dma_memory.hpp"
#include "vfab/drivers/virtio/virtqueue.hpp"
#include "vfab/pci_address.hpp"
#include "vfab/result.hpp"
#include "vfab/vfio/address_space.hpp"
#include "vfab/vfio/event_wait.hpp"

namespace vfab::vfio {
class Device;
struct DeviceOptions;
}  // namespace vfab::vfio
namespace vfab::virtio {

class VhostUserFrontend;

// A queue with no completion channel (the control virtqueue: polled).
inline constexpr uint32_t kNoChannel = 0xffffffff;

class Transport {
public:
    virtual ~Transport() = default;
    Transport(const Transport&) = delete;
    Transport& operator=(const Transport&) = delete;

    // How messages name the device: "0000:00:03.0" or "the vhost-user backend at PATH".
    const std::string& where() const { return where_; }
    // "virtio 1.x" or "vhost-user", for DeviceAttr::name.
    virtual const char* kind() const = 0;
    // The PCI function, over PCI.
    virtual std::optional<PciAddress> pci_address() const { return std::nullopt; }
    // What error messages add when the device's side must change ("in QEMU: mq=on"): a
    // QEMU device's option over PCI, nothing over vhost-user.
    virtual std::string device_hint(std::string_view qemu_option) const = 0;
    // What the device says once it is gone, with what to do ("close it").
    virtual std::string gone_message() const = 0;

    // Where ring and buffer memory is mapped, and how to allocate it (near the device).
    virtual std::shared_ptr<vfio::AddressSpace> address_space() const = 0;
    virtual dma::DmaMemoryOptions memory_options() const = 0;

    // Completion channels: vector 0 stands for configuration changes, 1 .. vectors() - 1 for
    // completion queues. The eventfd of each (not owned by the caller).
    virtual uint32_t vectors() const = 0;
    virtual int channel_fd(uint32_t vector) const = 0;
    // Puts the transport's own events (configuration change, removal) in `events`.
    virtual Result<void> watch(vfio::EventWaiter& events, uint64_t config_tag, uint64_t gone_tag) = 0;

    // §3.1.1 steps 1-3 (reset, ACKNOWLEDGE, DRIVER) and what the device offers.
    virtual Result<uint64_t> begin_negotiation() = 0;
    // Steps 4-6: accepts `wanted` & what is offered (less what this transport cannot carry)
    // and every bit of `required` (plus what the transport itself requires), or fails with
    // what to change. Returns the accepted features.
    virtual Result<uint64_t> negotiate(uint64_t wanted, uint64_t required) = 0;
    // The driver gives up on the device (FAILED, §3.1.1).
    virtual void fail() = 0;
    // Stops the device using every queue, then puts it back where negotiate() left it, with
    // the same features: queues can be set up again.
    virtual Result<void> restart() = 0;
    // Stops the device using every queue (a reset over PCI); for the error state and before
    // buffers are freed. Nothing is sent to a device that is gone.
    virtual void stop() = 0;

    virtual uint16_t queue_max_size(uint16_t queue) const = 0;
    // Sets up and enables queue `queue` at `mem` with `size` entries, its used-buffer
    // notifications on completion channel `vector` (kNoChannel: none); returns its doorbell.
    virtual Result<Doorbell> start_queue(uint16_t queue, uint32_t size, const QueueMemory& mem, uint32_t vector) = 0;
    // §3.1.1 step 8, once the queues are set up.
    virtual Result<void> driver_ok() = 0;

    // Device-specific configuration (§2.5); zeros where the transport has none.
    virtual void read_config(uint32_t offset, void* out, uint32_t len) const = 0;
    virtual uint32_t config_length() const = 0;
    // config_generation (§4.1.4.3): unchanged since a read_config() means nothing that read
    // saw has changed since (§2.5.1), so a cached value still holds. 0 where nothing changes.
    virtual uint8_t config_generation() const = 0;
    // Clears the configuration-change channel; true when the device asks to be reset (§2.1.2).
    virtual bool needs_reset() = 0;
    // Whether the device has gone (PCI: the kernel asked for it back; vhost-user: the
    // back-end hung up). Non-blocking; true from then on.
    virtual bool gone() = 0;
    // Whether gone() is worth asking now and then from an idle busy-polling completion queue
    // (no interrupt says so).
    virtual bool polls_for_gone() const = 0;
    // The driver told the application the device is gone: stop watching what said so (a
    // hung-up socket stays readable).
    virtual void removal_reported(vfio::EventWaiter&) {}
    // The device closes: it stops using memory, which may be unmapped after this.
    virtual void shutdown() = 0;

    // The VFIO device, over PCI; null otherwise.
    virtual vfio::Device* vfio_device() { return nullptr; }

protected:
    explicit Transport(std::string where) : where_(std::move(where)) {}

    std::string where_;
};

// A virtio PCI device through VFIO: `dev` must be a modern virtio device (the driver checked
// its ID). Enables bus mastering and MSI-X (at least two vectors).
Result<std::unique_ptr<Transport>> open_vfio_pci(std::unique_ptr<vfio::Device> dev);

struct VhostUserTransportOptions {
    uint32_t channels = 8;        // completion channels (call eventfds) offered to completion queues
    uint16_t max_queue = 1024;    // entries per virtqueue (QEMU's limit, DPDK's default)
};
// The back-end listening on the UNIX socket `path`.
Result<std::unique_ptr<Transport>> open_vhost_user(std::string_view path, const VhostUserTransportOptions& opts = {});

}  // namespace vfab::virtio
