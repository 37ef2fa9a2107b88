// A PCI device opened through VFIO: its regions (BARs), config space, interrupts and reset.
//
//   auto dev = vfab::vfio::Device::open(*vfab::PciAddress::parse("0000:03:00.0"));
//   if (!dev) { fprintf(stderr, "%s\n", dev.error().message.c_str()); return 1; }
//   vfab::vfio::Region* bar0 = *(*dev)->region(0);
//   uint32_t status = bar0->read32(0x08);
//
// The device joins an IOMMU context: a new one by default, or DeviceOptions::context to share
// one I/O address space among several devices. The backend is iommufd when the device has a
// VFIO cdev and /dev/iommu exists, legacy otherwise; DeviceOptions::backend or the environment
// variable VFAB_IOMMU_BACKEND (auto|legacy|iommufd|noiommu) override that. No-IOMMU mode is
// never chosen automatically.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "vfab/pci_address.hpp"
#include "vfab/pci_id.hpp"
#include "vfab/result.hpp"
#include "vfab/vfio/device_options.hpp"
#include "vfab/vfio/info.hpp"
#include "vfab/vfio/iommu.hpp"
#include "vfab/vfio/pci_config.hpp"
#include "vfab/vfio/region.hpp"

namespace vfab::vfio {

// VFIO's interrupt indices for PCI devices (linux/vfio.h VFIO_PCI_*_IRQ_INDEX).
enum class IrqIndex : uint32_t { intx = 0, msi = 1, msix = 2, err = 3, req = 4 };
inline constexpr size_t kIrqIndexCount = 5;
// "INTx", "MSI", "MSI-X", "error" or "request", for messages; "?" for another value.
const char* to_string(IrqIndex i);

class Device;
class EventWaiter;

// The enabled vectors of one interrupt index, each signalling its own eventfd.
class Interrupts {
public:
    // The interrupt index these vectors belong to.
    IrqIndex index() const { return index_; }
    // The eventfd of `vector`, or -1 when that vector is not enabled.
    int eventfd(uint32_t vector) const;
    // The enabled vectors, ascending and without duplicates.
    std::span<const uint32_t> vectors() const { return vectors_; }
    // Masks one vector: the INTx line; MSI/MSI-X only where VFIO reports the index maskable
    // (vfio-pci does not). ENOTSUP when the index is not maskable, EINVAL when `vector` is not
    // enabled. A system call (VFIO_DEVICE_SET_IRQS).
    Result<void> mask(uint32_t vector = 0);
    // Unmasks one vector: after each INTx the kernel masks the line until this is called
    // (IrqInfo::automasked). Errors as mask(); a system call.
    Result<void> unmask(uint32_t vector = 0);

private:
    friend class Device;
    Interrupts(Device& dev, IrqIndex index, IrqInfo info) : dev_(&dev), index_(index), info_(info) {}
    Result<void> check_maskable(uint32_t vector) const;
    Device* dev_;
    IrqIndex index_;
    IrqInfo info_;
    std::vector<uint32_t> vectors_;
    std::vector<UniqueFd> fds_;   // parallel to vectors_
};

struct HotResetDevice {
    PciAddress address;
    uint32_t group_or_devid = 0;   // IOMMU group (legacy) or iommufd device id
};

class Device {
public:
    // Opens the function at `addr`, which must be bound to vfio-pci, into opts.context or a new
    // IOMMU context (its backend picked as IommuBackend says). Set-up path. Errors say what to
    // do: ENODEV (no such device, bound to no driver, or no IOMMU group), EBUSY (bound to another
    // driver, or open already), EPERM (IOMMU group not viable), EINVAL (a backend other than
    // opts.context's), and the errors of opening /dev/vfio or /dev/iommu.
    static Result<std::unique_ptr<Device>> open(const PciAddress& addr, const DeviceOptions& opts = {});
    ~Device();
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    // The PCI address it was opened at.
    const PciAddress& address() const { return addr_; }
    // The IOMMU context the device is attached to, shared with every device opened into it.
    IommuContext& iommu() { return *ctx_; }
    // The same, shared: for ProtectionDomain::create, DmaArena, or DeviceOptions::context to
    // open more devices into one I/O address space. The context outlives the device if held.
    const std::shared_ptr<IommuContext>& iommu_shared() const { return ctx_; }
    // The VFIO device fd; the Device owns it and closes it: do not close it.
    int fd() const { return attachment_.device_fd.get(); }
    // How many regions VFIO reports (VFIO_DEVICE_GET_INFO): valid region indices are below it.
    uint32_t num_regions() const { return num_regions_; }
    // How many interrupt indices VFIO reports: IrqIndex values below it exist.
    uint32_t num_irqs() const { return num_irqs_; }
    // Whether VFIO offers a reset (VFIO_DEVICE_FLAGS_RESET); reset() is ENOTSUP otherwise.
    bool can_reset() const { return can_reset_; }

    // Region (BAR 0-5, ROM 6, config 7, VGA 8) description, with its capabilities.
    Result<RegionInfo> region_info(uint32_t index) const;
    // The region, mapped on first use and kept until the device closes.
    Result<Region*> region(uint32_t index);

    // Reads `width` (1, 2 or 4) bytes of config space at `offset`, naturally aligned, through
    // VFIO (the kernel virtualizes parts of it). EINVAL for a bad width or offset, else the
    // pread's errno. A system call: not for the fast path.
    Result<uint32_t> config_read(uint16_t offset, unsigned width) const;
    // Writes the low `width` (1, 2 or 4) bytes of `value` at `offset`; rules and errors as
    // config_read(). The kernel may filter or virtualize the write.
    Result<void> config_write(uint16_t offset, unsigned width, uint32_t value);
    // The standard and extended capabilities (pci::parse_capabilities over a snapshot of up to
    // 4096 bytes of config space). EIO, or the pread's errno, when the 64-byte header is unreadable.
    Result<std::vector<pci::Capability>> capabilities() const;
    // The vendor and device IDs (config space 0x00, 0x02).
    Result<PciId> pci_id() const;
    // vfio-pci leaves Bus Master Enable off: without it the device's DMA goes nowhere.
    Result<void> enable_bus_master();
    // Bus Master Enable off: the device's DMA stops (a driver's last step when it closes).
    void disable_bus_master() noexcept;

    // What VFIO reports about interrupt index `index` (vector count, eventfd, maskable...).
    // EINVAL when index >= num_irqs(); an index the device cannot have (err on conventional
    // PCI) reads as present with 0 vectors.
    Result<IrqInfo> irq_info(IrqIndex index) const;
    // Enables `vectors` of `index`, each with a new non-blocking eventfd, replacing whatever
    // that index had. The Interrupts stay valid until disabled or the device closes.
    Result<Interrupts*> enable_interrupts(IrqIndex index, std::span<const uint32_t> vectors);
    // The same for vectors 0 to count - 1 (EINVAL for count 0 or more than the index has).
    Result<Interrupts*> enable_interrupts(IrqIndex index, uint32_t count);
    // Disables every vector of `index` and destroys its Interrupts (the eventfds close even when
    // VFIO_DEVICE_SET_IRQS fails, whose error is returned). Nothing to do when none is enabled.
    Result<void> disable_interrupts(IrqIndex index);
    // For the one-vector interrupts a driver may do without (req, err): enables `index` if the
    // device has it and has `waiter` watch its eventfd under `tag`. nullptr when the device lacks
    // it or VFIO cannot enable it (such a device never reports that event); an error only when
    // the waiter cannot take the eventfd.
    Result<Interrupts*> watch_optional_interrupt(IrqIndex index, EventWaiter& waiter, uint64_t tag);

    // VFIO_DEVICE_RESET (function-level or equivalent). Interrupts are disabled by it.
    Result<void> reset();
    // The devices a bus-level (hot) reset of this one would also reset.
    Result<std::vector<HotResetDevice>> hot_reset_info() const;

private:
    friend class Interrupts;
    Device(const PciAddress& addr, Sys& sys, std::shared_ptr<IommuContext> ctx, DeviceAttachment a);
    Result<void> set_irqs(uint32_t flags, IrqIndex index, uint32_t start, uint32_t count, const int32_t* fds);

    PciAddress addr_;
    Sys* sys_;
    std::shared_ptr<IommuContext> ctx_;
    DeviceAttachment attachment_;
    uint32_t num_regions_ = 0;
    uint32_t num_irqs_ = 0;
    bool can_reset_ = false;
    std::optional<RegionInfo> config_;
    std::vector<std::unique_ptr<Region>> regions_;
    std::array<std::unique_ptr<Interrupts>, kIrqIndexCount> irqs_;
};

}  // namespace vfab::vfio
