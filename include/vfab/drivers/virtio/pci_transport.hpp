// Virtio over PCI, the modern (1.x) interface: the vendor-specific capabilities that locate
// the common configuration, notification, ISR and device configuration structures in the
// BARs (VIRTIO 1.2 §4.1.4), the device status handshake and feature negotiation (§3.1.1),
// virtqueue setup and MSI-X vectors (§4.1.5). Legacy (0.9.5) devices are refused.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "vfab/iova.hpp"
#include "vfab/result.hpp"
#include "vfab/vfio/device.hpp"

namespace vfab::virtio {

// Device status bits (§2.1).
inline constexpr uint8_t kStatusAcknowledge = 1;
inline constexpr uint8_t kStatusDriver = 2;
inline constexpr uint8_t kStatusDriverOk = 4;
inline constexpr uint8_t kStatusFeaturesOk = 8;
inline constexpr uint8_t kStatusNeedsReset = 64;
inline constexpr uint8_t kStatusFailed = 128;

inline constexpr uint16_t kNoVector = 0xffff;   // VIRTIO_MSI_NO_VECTOR

// Where one configuration structure lies (struct virtio_pci_cap, §4.1.4).
struct PciCapLocation {
    uint8_t bar = 0;
    uint32_t offset = 0;
    uint32_t length = 0;
};

class PciTransport {
public:
    // Finds the capabilities in config space and maps their BARs through `dev`, which must
    // outlive the transport. Errors name what is missing (a legacy-only device has none).
    static Result<PciTransport> attach(vfio::Device& dev);

    // Writes 0 to device_status and waits for the device to read back 0 (§4.1.4.3.2): the
    // device forgets features and queues. Errors after a timeout (the device is wedged).
    Result<void> reset();
    // The device_status register (§2.1, §4.1.4.3): kStatus* bits; 0 once a reset is done.
    uint8_t status() const;
    // Sets `bits` in device_status, keeping those already set (§3.1.1): a read and a write;
    // whether the device kept them shows in status().
    void add_status(uint8_t bits);

    // The 64 feature bits the device offers (device_feature, both halves, §4.1.4.3).
    uint64_t device_features() const;
    // §3.1.1 steps 4-6: offers `wanted` & what the device has, requires every bit of
    // `required`, sets FEATURES_OK and checks the device kept it. Returns the accepted set.
    Result<uint64_t> negotiate(uint64_t wanted, uint64_t required);

    // The number of virtqueues the device has (num_queues, §4.1.4.3).
    uint16_t num_queues() const;
    // The most entries virtqueue `queue` takes: its queue_size until setup_queue() writes it
    // (0: no such queue, §4.1.4.3). Selects the queue (queue_select).
    uint16_t queue_max_size(uint16_t queue) const;
    // Programs queue `queue`: size, ring addresses, MSI-X vector (kNoVector: none); then
    // enables it. The vector is read back: a device that cannot map it says so.
    Result<void> setup_queue(uint16_t queue, uint16_t size, Iova desc, Iova driver, Iova device, uint16_t vector);
    // The doorbell of `queue` (§4.1.4.4): write the queue index (16 bits) there.
    volatile uint16_t* notify_address(uint16_t queue) const;
    // Configuration-change notifications on MSI-X vector `vector` (kNoVector: none,
    // §4.1.5.1.2). ENOSPC when the device reads back another value (it could not map it).
    Result<void> set_config_vector(uint16_t vector);
    // Reads and clears the ISR status (INTx only; MSI-X users do not need it).
    uint8_t read_isr();

    // Device-specific configuration (§4.1.4.6), read consistently across config_generation.
    void read_device_config(uint32_t offset, void* out, uint32_t len) const;
    // config_generation (§4.1.4.3): one read.
    uint8_t config_generation() const;
    // Bytes of the device-specific configuration (its capability's length):
    // read_device_config() does not check offset + len against it.
    uint32_t device_config_length() const { return device_.length; }

private:
    PciTransport() = default;

    volatile uint8_t* common_ = nullptr;
    volatile uint8_t* notify_base_ = nullptr;
    volatile uint8_t* isr_ = nullptr;
    volatile uint8_t* device_cfg_ = nullptr;
    uint32_t notify_multiplier_ = 0;
    PciCapLocation device_;
    std::string where_;
};

}  // namespace vfab::virtio
