// virtio over PCI through VFIO (VIRTIO 1.2 §4.1): the PciTransport's registers, MSI-X vectors
// as completion channels (vector 0: configuration changes), the VFIO device's IOMMU context as
// the address space, the request interrupt as removal.
#include <cerrno>

#include "transport.hpp"
#include "vfab/drivers/virtio/pci_transport.hpp"
#include "vfab/vfio/device.hpp"

namespace vfab::virtio {
namespace {

namespace vf = feature;
constexpr uint32_t kConfigVector = 0;

class VfioPciTransport final : public Transport {
public:
    VfioPciTransport(std::unique_ptr<vfio::Device> dev, PciTransport pci)
        : Transport(dev->address().to_string()), dev_(std::move(dev)), pci_(std::move(pci)) {}

    Result<void> enable_interrupts() {
        if (auto r = dev_->enable_bus_master(); !r) return r;
        auto info = dev_->irq_info(vfio::IrqIndex::msix);
        if (!info || info->count < 2)
            return Error{ENOTSUP, str_cat(where_, ": the virtio device needs MSI-X with at least 2 vectors")};
        auto msix = dev_->enable_interrupts(vfio::IrqIndex::msix, info->count);
        if (!msix) return msix.take_error();
        msix_ = *msix;
        vectors_ = info->count;
        return {};
    }

    const char* kind() const override { return "virtio 1.x"; }
    std::optional<PciAddress> pci_address() const override { return dev_->address(); }
    std::string device_hint(std::string_view qemu_option) const override {
        return str_cat(" (in QEMU: ", qemu_option, ")");
    }
    std::string gone_message() const override { return str_cat(where_, ": the device was removed; close it"); }

    std::shared_ptr<vfio::AddressSpace> address_space() const override { return dev_->iommu_shared(); }
    dma::DmaMemoryOptions memory_options() const override { return dma::near_device(dev_->address()); }

    uint32_t vectors() const override { return vectors_; }
    int channel_fd(uint32_t vector) const override { return msix_->eventfd(vector); }
    Result<void> watch(vfio::EventWaiter& events, uint64_t config_tag, uint64_t gone_tag) override {
        if (auto r = events.add(msix_->eventfd(kConfigVector), config_tag); !r) return r;
        auto req = dev_->watch_optional_interrupt(vfio::IrqIndex::req, events, gone_tag);
        if (!req) return req.take_error();
        req_ = *req;
        return {};
    }

    Result<uint64_t> begin_negotiation() override {
        if (auto r = pci_.reset(); !r) return r.take_error();
        pci_.add_status(kStatusAcknowledge);
        pci_.add_status(kStatusDriver);
        return pci_.device_features();
    }
    // vfab reaches a PCI device's memory only through the IOMMU: ACCESS_PLATFORM is required.
    Result<uint64_t> negotiate(uint64_t wanted, uint64_t required) override {
        required |= feature_bit(vf::ACCESS_PLATFORM);
        const uint64_t offered = pci_.device_features();
        if ((offered & required) != required) {
            fail();
            return Error{ENOTSUP, str_cat(where_, ": the virtio device does not offer ",
                                          !has_feature(offered, vf::VERSION_1) ? "VIRTIO_F_VERSION_1 (a legacy device)"
                                          : !has_feature(offered, vf::ACCESS_PLATFORM) ? "VIRTIO_F_ACCESS_PLATFORM"
                                                                                       : "a feature vfab needs",
                                          ": vfab drives it only through the IOMMU, as a virtio 1.x device "
                                          "(in QEMU: disable-legacy=on,iommu_platform=on)")};
        }
        auto accepted = pci_.negotiate(wanted, required);
        if (!accepted) return accepted;
        if (auto r = pci_.set_config_vector(kConfigVector); !r) return r.take_error();
        features_ = *accepted;
        required_ = required;
        return accepted;
    }
    void fail() override { pci_.add_status(kStatusFailed); }
    Result<void> restart() override {
        if (auto r = begin_negotiation(); !r) return r.take_error();
        auto again = negotiate(features_, required_);
        if (!again) return again.take_error();
        return {};
    }
    void stop() override { (void)pci_.reset(); }

    uint16_t queue_max_size(uint16_t queue) const override { return pci_.queue_max_size(queue); }
    Result<Doorbell> start_queue(uint16_t queue, uint32_t size, const QueueMemory& mem, uint32_t vector) override {
        if (auto r = pci_.setup_queue(queue, uint16_t(size), mem.desc_iova, mem.driver_iova, mem.device_iova,
                                      vector == kNoChannel ? kNoVector : uint16_t(vector));
            !r)
            return r.take_error();
        return Doorbell{pci_.notify_address(queue), -1, queue};
    }
    Result<void> driver_ok() override {
        pci_.add_status(kStatusDriverOk);
        if (pci_.status() & kStatusNeedsReset)
            return Error{EIO, str_cat(where_, ": the virtio device wants a reset right after DRIVER_OK")};
        return {};
    }

    void read_config(uint32_t offset, void* out, uint32_t len) const override {
        pci_.read_device_config(offset, out, len);
    }
    uint32_t config_length() const override { return pci_.device_config_length(); }
    uint8_t config_generation() const override { return pci_.config_generation(); }
    // The device asks for a reset (§2.1.2), or was reset behind the driver's back: a live
    // device holds at least ACKNOWLEDGE | DRIVER from open() on, a reset one reads 0 (§2.1).
    bool needs_reset() override {
        vfio::drain_eventfd(msix_->eventfd(kConfigVector));
        const uint8_t status = pci_.status();
        return (status & kStatusNeedsReset) || status == 0;
    }
    bool gone() override {
        if (!gone_ && req_) gone_ = vfio::drain_eventfd(req_->eventfd(0)) != 0;
        return gone_;
    }
    bool polls_for_gone() const override { return false; }   // the request interrupt says so
    // The device stops touching the rings and buffers before any of them is unmapped.
    void shutdown() override {
        if (!gone_) (void)pci_.reset();
        dev_->disable_bus_master();
        (void)dev_->disable_interrupts(vfio::IrqIndex::msix);
    }
    vfio::Device* vfio_device() override { return dev_.get(); }

private:
    std::unique_ptr<vfio::Device> dev_;   // first: the PciTransport maps its BARs
    PciTransport pci_;
    vfio::Interrupts* msix_ = nullptr;
    vfio::Interrupts* req_ = nullptr;
    uint32_t vectors_ = 0;
    uint64_t features_ = 0, required_ = 0;
    bool gone_ = false;
};

}  // namespace

Result<std::unique_ptr<Transport>> open_vfio_pci(std::unique_ptr<vfio::Device> dev) {
    auto pci = PciTransport::attach(*dev);
    if (!pci) return pci.take_error();
    auto t = std::make_unique<VfioPciTransport>(std::move(dev), std::move(*pci));
    if (auto r = t->enable_interrupts(); !r) return r.take_error();
    return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace vfab::virtio
