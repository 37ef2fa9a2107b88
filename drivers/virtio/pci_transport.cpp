// Virtio PCI modern transport (VIRTIO 1.2 §4.1).
#include "vfab/drivers/virtio/pci_transport.hpp"

#include <chrono>
#include <cstring>
#include <thread>

#include "vfab/mmio.hpp"
#include "vfab/vfio/pci_config.hpp"

namespace vfab::virtio {
namespace {

// struct virtio_pci_cap field offsets and cfg_type values (§4.1.4).
constexpr uint16_t kCapCfgType = 3, kCapBar = 4, kCapOffset = 8, kCapLength = 12, kCapNotifyMultiplier = 16;
constexpr uint8_t kCommonCfg = 1, kNotifyCfg = 2, kIsrCfg = 3, kDeviceCfg = 4;

// struct virtio_pci_common_cfg (§4.1.4.3).
constexpr uint32_t kDeviceFeatureSelect = 0x00, kDeviceFeature = 0x04, kDriverFeatureSelect = 0x08,
                   kDriverFeature = 0x0c, kConfigMsixVector = 0x10, kNumQueues = 0x12, kDeviceStatus = 0x14,
                   kConfigGeneration = 0x15, kQueueSelect = 0x16, kQueueSize = 0x18, kQueueMsixVector = 0x1a,
                   kQueueEnable = 0x1c, kQueueNotifyOff = 0x1e, kQueueDesc = 0x20, kQueueDriver = 0x28,
                   kQueueDevice = 0x30;
constexpr uint32_t kCommonCfgMinLength = 0x38;

template <class T>
T rd(volatile uint8_t* base, uint32_t off) {
    return mmio::read<T>(base, off);
}
template <class T>
void wr(volatile uint8_t* base, uint32_t off, T v) {
    mmio::write<T>(base, off, v);
}

}  // namespace

Result<PciTransport> PciTransport::attach(vfio::Device& dev) {
    PciTransport t;
    t.where_ = dev.address().to_string();
    auto caps = dev.capabilities();
    if (!caps) return caps.take_error();
    std::optional<PciCapLocation> loc[5];
    uint32_t multiplier = 0;
    for (const pci::Capability& c : *caps) {
        if (c.extended || c.id != pci::kCapVendor) continue;
        auto type = dev.config_read(uint16_t(c.offset + kCapCfgType), 1);
        auto bar = dev.config_read(uint16_t(c.offset + kCapBar), 1);
        auto off = dev.config_read(uint16_t(c.offset + kCapOffset), 4);
        auto len = dev.config_read(uint16_t(c.offset + kCapLength), 4);
        if (!type || !bar || !off || !len) return Error{EIO, str_cat(t.where_, ": cannot read a virtio capability")};
        if (*type < kCommonCfg || *type > kDeviceCfg || *bar > 5 || loc[*type]) continue;   // the first of each type
        loc[*type] = PciCapLocation{uint8_t(*bar), *off, *len};
        if (*type == kNotifyCfg) {
            auto m = dev.config_read(uint16_t(c.offset + kCapNotifyMultiplier), 4);
            if (!m) return m.take_error();
            multiplier = *m;
        }
    }
    const char* names[] = {"", "common configuration", "notification", "ISR", "device configuration"};
    volatile uint8_t* ptr[5] = {};
    for (uint8_t type = kCommonCfg; type <= kDeviceCfg; ++type) {
        if (!loc[type])
            return Error{ENODEV, str_cat(t.where_, ": no virtio ", names[type],
                                         " capability: not a modern (virtio 1.x) device; vfab does not drive "
                                         "legacy virtio (in QEMU: disable-legacy=on)")};
        auto region = dev.region(loc[type]->bar);
        if (!region) return region.take_error();
        if (!(*region)->base() || uint64_t(loc[type]->offset) + loc[type]->length > (*region)->mapped_length())
            return Error{EIO, str_cat(t.where_, ": the virtio ", names[type], " structure (BAR ", int(loc[type]->bar),
                                      " +0x", std::hex, loc[type]->offset, ") is not in an mmappable part of the BAR")};
        ptr[type] = (*region)->base() + loc[type]->offset;
    }
    if (loc[kCommonCfg]->length < kCommonCfgMinLength)
        return Error{EIO, str_cat(t.where_, ": the virtio common configuration is too short (", loc[kCommonCfg]->length,
                                  " bytes)")};
    t.common_ = ptr[kCommonCfg];
    t.notify_base_ = ptr[kNotifyCfg];
    t.isr_ = ptr[kIsrCfg];
    t.device_cfg_ = ptr[kDeviceCfg];
    t.device_ = *loc[kDeviceCfg];
    t.notify_multiplier_ = multiplier;
    return t;
}

Result<void> PciTransport::reset() {
    wr<uint8_t>(common_, kDeviceStatus, 0);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (rd<uint8_t>(common_, kDeviceStatus) != 0) {
        if (std::chrono::steady_clock::now() > end)
            return Error{EIO, str_cat(where_, ": the virtio device did not finish its reset within 1 s")};
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return {};
}

uint8_t PciTransport::status() const { return rd<uint8_t>(common_, kDeviceStatus); }
void PciTransport::add_status(uint8_t bits) { wr<uint8_t>(common_, kDeviceStatus, uint8_t(status() | bits)); }

uint64_t PciTransport::device_features() const {
    uint64_t f = 0;
    for (uint32_t word = 0; word < 2; ++word) {
        wr<uint32_t>(common_, kDeviceFeatureSelect, word);
        f |= uint64_t(rd<uint32_t>(common_, kDeviceFeature)) << (32 * word);
    }
    return f;
}

Result<uint64_t> PciTransport::negotiate(uint64_t wanted, uint64_t required) {
    const uint64_t offered = device_features();
    if ((offered & required) != required)
        return Error{ENOTSUP, str_cat(where_, ": the virtio device lacks required features 0x", std::hex,
                                      required & ~offered, " (it offers 0x", offered, ")")};
    const uint64_t accepted = offered & (wanted | required);
    for (uint32_t word = 0; word < 2; ++word) {
        wr<uint32_t>(common_, kDriverFeatureSelect, word);
        wr<uint32_t>(common_, kDriverFeature, uint32_t(accepted >> (32 * word)));
    }
    add_status(kStatusFeaturesOk);
    if (!(status() & kStatusFeaturesOk)) {
        add_status(kStatusFailed);
        return Error{ENOTSUP, str_cat(where_, ": the virtio device refused the features 0x", std::hex, accepted,
                                      " (FEATURES_OK not kept)")};
    }
    return accepted;
}

uint16_t PciTransport::num_queues() const { return rd<uint16_t>(common_, kNumQueues); }

uint16_t PciTransport::queue_max_size(uint16_t queue) const {
    wr<uint16_t>(common_, kQueueSelect, queue);
    return rd<uint16_t>(common_, kQueueSize);
}

Result<void> PciTransport::setup_queue(uint16_t queue, uint16_t size, Iova desc, Iova driver, Iova device,
                                       uint16_t vector) {
    wr<uint16_t>(common_, kQueueSelect, queue);
    const uint16_t max = rd<uint16_t>(common_, kQueueSize);
    if (max == 0) return Error{EINVAL, str_cat(where_, ": virtqueue ", queue, " does not exist")};
    if (size == 0 || size > max)
        return Error{EINVAL, str_cat(where_, ": virtqueue ", queue, " takes at most ", max, " entries, not ", size)};
    wr<uint16_t>(common_, kQueueSize, size);
    wr<uint64_t>(common_, kQueueDesc, desc.value);
    wr<uint64_t>(common_, kQueueDriver, driver.value);
    wr<uint64_t>(common_, kQueueDevice, device.value);
    wr<uint16_t>(common_, kQueueMsixVector, vector);
    if (rd<uint16_t>(common_, kQueueMsixVector) != vector)
        return Error{ENOSPC, str_cat(where_, ": the virtio device could not give virtqueue ", queue, " MSI-X vector ",
                                     vector)};
    wr<uint16_t>(common_, kQueueEnable, 1);
    return {};
}

volatile uint16_t* PciTransport::notify_address(uint16_t queue) const {
    wr<uint16_t>(common_, kQueueSelect, queue);
    const uint32_t off = uint32_t(rd<uint16_t>(common_, kQueueNotifyOff)) * notify_multiplier_;
    return reinterpret_cast<volatile uint16_t*>(notify_base_ + off);
}

Result<void> PciTransport::set_config_vector(uint16_t vector) {
    wr<uint16_t>(common_, kConfigMsixVector, vector);
    if (rd<uint16_t>(common_, kConfigMsixVector) != vector)
        return Error{ENOSPC, str_cat(where_, ": the virtio device could not use MSI-X vector ", vector,
                                     " for configuration changes")};
    return {};
}

uint8_t PciTransport::read_isr() { return rd<uint8_t>(isr_, 0); }

uint8_t PciTransport::config_generation() const { return rd<uint8_t>(common_, kConfigGeneration); }

void PciTransport::read_device_config(uint32_t offset, void* out, uint32_t len) const {
    auto* dst = static_cast<uint8_t*>(out);
    uint8_t before, after;
    do {
        before = rd<uint8_t>(common_, kConfigGeneration);
        for (uint32_t i = 0; i < len; ++i) dst[i] = rd<uint8_t>(device_cfg_, offset + i);
        after = rd<uint8_t>(common_, kConfigGeneration);
    } while (before != after);
}

}  // namespace vfab::virtio
