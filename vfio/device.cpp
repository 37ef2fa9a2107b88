// Opening a device through VFIO, its regions and config space, reset.
#include "vfab/vfio/device.hpp"

#include <linux/vfio.h>
#include <unistd.h>

#include <filesystem>

#include "vfio/backends.hpp"

namespace vfab::vfio {
namespace {

// Which backend for this device: explicit > environment > the context's > automatic.
Result<IommuBackend> choose_backend(const PciAddress& addr, const DeviceOptions& opts, const PciSysfs& sysfs) {
    IommuBackend b = opts.backend;
    if (b == IommuBackend::automatic) {
        auto env = iommu_backend_from_env();
        if (!env) return env.take_error();
        b = *env;
    }
    if (opts.context) {
        if (b != IommuBackend::automatic && b != opts.context->backend())
            return Error{EINVAL, str_cat("cannot open ", addr.to_string(), " with the ", to_string(b),
                                         " backend into a ", to_string(opts.context->backend()), " context")};
        return opts.context->backend();
    }
    if (b != IommuBackend::automatic) return b;
    // sysfs names a cdev even where the kernel made no node for it (6.1; no-IOMMU groups). A
    // user given the device but not /dev/iommu (`vfio-devctl bind --user`) gets the legacy
    // container, which needs only the group.
    auto cdev = sysfs.vfio_cdev(addr);
    std::error_code ec;
    bool iommufd = cdev && cdev->has_value() && ::access("/dev/iommu", R_OK | W_OK) == 0 &&
                   std::filesystem::exists("/dev/vfio/devices/" + **cdev, ec);
    return iommufd ? IommuBackend::iommufd : IommuBackend::legacy;
}

Result<void> check_bound_to_vfio(const PciAddress& addr, const PciSysfs& sysfs) {
    auto drv = sysfs.driver(addr);
    if (!drv) return drv.take_error();   // names an absent device
    std::string bdf = addr.to_string();
    if (!drv->has_value())
        return Error{ENODEV, str_cat(bdf, " is not bound to any driver — run `vfio-devctl bind ", bdf, "`")};
    if (**drv != "vfio-pci")
        return Error{EBUSY, str_cat(bdf, " is bound to ", **drv, ", not vfio-pci — run `vfio-devctl bind ", bdf, "`")};
    return {};
}

}  // namespace

const char* to_string(IrqIndex i) {
    static const char* names[] = {"INTx", "MSI", "MSI-X", "error", "request"};
    auto n = static_cast<uint32_t>(i);
    return n < kIrqIndexCount ? names[n] : "?";
}

Result<std::unique_ptr<Device>> Device::open(const PciAddress& addr, const DeviceOptions& opts) {
    Sys& sys = opts.sys ? *opts.sys : Sys::real();
    PciSysfs sysfs(opts.sysfs_root);
    if (auto r = check_bound_to_vfio(addr, sysfs); !r) return r.take_error();
    auto backend = choose_backend(addr, opts, sysfs);
    if (!backend) return backend.take_error();

    std::shared_ptr<IommuContext> ctx = opts.context;
    if (!ctx) {
        auto c = IommuContext::create(*backend, sys);
        if (!c) return Error{c.error().code, str_cat(addr.to_string(), ": ", c.error().message)};
        ctx = std::move(*c);
    }
    auto a = [&] {
        std::lock_guard lock(ctx->mutex_);
        return ctx->attach(addr, sysfs);
    }();
    if (!a) return a.take_error();
    std::unique_ptr<Device> dev(new Device(addr, sys, std::move(ctx), std::move(*a)));

    vfio_device_info info{};
    info.argsz = sizeof info;
    if (sys.ioctl(dev->fd(), VFIO_DEVICE_GET_INFO, &info) < 0)
        return Error::from_errno(errno, str_cat("VFIO_DEVICE_GET_INFO on ", addr.to_string()));
    if (!(info.flags & VFIO_DEVICE_FLAGS_PCI))
        return Error{ENODEV, str_cat(addr.to_string(), " is not a PCI device to VFIO")};
    dev->num_regions_ = info.num_regions;
    dev->num_irqs_ = info.num_irqs;
    dev->can_reset_ = info.flags & VFIO_DEVICE_FLAGS_RESET;
    dev->regions_.resize(info.num_regions);
    auto cfg = dev->region_info(VFIO_PCI_CONFIG_REGION_INDEX);
    if (!cfg) return cfg.take_error();
    dev->config_ = std::move(*cfg);
    return dev;
}

Device::Device(const PciAddress& addr, Sys& sys, std::shared_ptr<IommuContext> ctx, DeviceAttachment a)
    : addr_(addr), sys_(&sys), ctx_(std::move(ctx)), attachment_(std::move(a)) {}

Device::~Device() {
    // Interrupts off before their eventfds close; BARs unmapped before the device fd closes;
    // the device leaves its IOMMU context (group, IOAS) last.
    for (size_t i = 0; i < irqs_.size(); ++i)
        if (irqs_[i]) (void)disable_interrupts(static_cast<IrqIndex>(i));
    regions_.clear();
    attachment_.device_fd.reset();
    std::lock_guard lock(ctx_->mutex_);
    attachment_.membership.reset();
}

Result<RegionInfo> Device::region_info(uint32_t index) const {
    if (index >= num_regions_)
        return Error{EINVAL, str_cat(addr_.to_string(), " has ", num_regions_, " regions; there is no region ", index)};
    std::vector<uint8_t> buf(sizeof(vfio_region_info));
    vfio_region_info ri{};
    ri.argsz = sizeof ri;
    ri.index = index;
    std::memcpy(buf.data(), &ri, sizeof ri);
    auto got = ioctl_argsz(*sys_, fd(), VFIO_DEVICE_GET_REGION_INFO, std::move(buf),
                           "VFIO_DEVICE_GET_REGION_INFO");
    if (!got) return got.take_error();
    return parse_region_info(*got);
}

Result<Region*> Device::region(uint32_t index) {
    if (index < regions_.size() && regions_[index]) return regions_[index].get();
    auto info = region_info(index);
    if (!info) return info.take_error();
    if (info->size == 0)
        return Error{ENODEV, str_cat(addr_.to_string(), " does not implement region (BAR) ", index)};
    auto r = Region::open(*sys_, fd(), *info);
    if (!r) return r.take_error();
    regions_[index] = std::make_unique<Region>(std::move(*r));
    return regions_[index].get();
}

Result<uint32_t> Device::config_read(uint16_t offset, unsigned width) const {
    if (!(width == 1 || width == 2 || width == 4) || offset % width || offset + width > config_->size)
        return Error{EINVAL, str_cat("config read of ", width, " bytes at 0x", std::hex, offset,
                                     ": width must be 1, 2 or 4, naturally aligned, within config space")};
    uint32_t v = 0;
    if (sys_->pread(fd(), &v, width, static_cast<off_t>(config_->offset + offset)) != static_cast<ssize_t>(width))
        return Error::from_errno(errno, str_cat(addr_.to_string(), ": config read at 0x", std::hex, offset));
    return v;
}

Result<void> Device::config_write(uint16_t offset, unsigned width, uint32_t value) {
    if (!(width == 1 || width == 2 || width == 4) || offset % width || offset + width > config_->size)
        return Error{EINVAL, str_cat("config write of ", width, " bytes at 0x", std::hex, offset,
                                     ": width must be 1, 2 or 4, naturally aligned, within config space")};
    if (sys_->pwrite(fd(), &value, width, static_cast<off_t>(config_->offset + offset)) != static_cast<ssize_t>(width))
        return Error::from_errno(errno, str_cat(addr_.to_string(), ": config write at 0x", std::hex, offset));
    return {};
}

Result<std::vector<pci::Capability>> Device::capabilities() const {
    std::vector<uint8_t> cfg(std::min<uint64_t>(config_->size, 4096));
    ssize_t n = sys_->pread(fd(), cfg.data(), cfg.size(), static_cast<off_t>(config_->offset));
    if (n < 0x40) return Error::from_errno(errno ? errno : EIO, str_cat(addr_.to_string(), ": reading config space"));
    cfg.resize(static_cast<size_t>(n));
    return pci::parse_capabilities(cfg);
}

Result<PciId> Device::pci_id() const {
    auto vendor = config_read(pci::kVendorId, 2), device = config_read(pci::kDeviceId, 2);
    if (!vendor || !device)
        return Error{EIO, str_cat(addr_.to_string(), ": cannot read the PCI IDs from config space")};
    return PciId{uint16_t(*vendor), uint16_t(*device)};
}

void Device::disable_bus_master() noexcept {
    if (auto cmd = config_read(pci::kCommand, 2)) (void)config_write(pci::kCommand, 2, *cmd & ~pci::kCommandBusMaster);
}

Result<void> Device::enable_bus_master() {
    auto cmd = config_read(pci::kCommand, 2);
    if (!cmd) return cmd.take_error();
    if (*cmd & pci::kCommandBusMaster) return {};
    return config_write(pci::kCommand, 2, *cmd | pci::kCommandBusMaster | pci::kCommandMemory);
}

Result<void> Device::reset() {
    if (!can_reset_)
        return Error{ENOTSUP, str_cat(addr_.to_string(), " offers VFIO no reset method (no FLR, PM or "
                                      "bus reset available) — see hot_reset_info()")};
    if (sys_->ioctl(fd(), VFIO_DEVICE_RESET, nullptr) < 0)
        return Error::from_errno(errno, str_cat("VFIO_DEVICE_RESET on ", addr_.to_string()));
    // The kernel turns interrupts off as part of the reset.
    for (auto& irq : irqs_) irq.reset();
    return {};
}

Result<std::vector<HotResetDevice>> Device::hot_reset_info() const {
    std::vector<uint8_t> buf(sizeof(vfio_pci_hot_reset_info) + 8 * sizeof(vfio_pci_dependent_device));
    for (int attempt = 0; attempt < 3; ++attempt) {
        auto* info = reinterpret_cast<vfio_pci_hot_reset_info*>(buf.data());
        info->argsz = static_cast<uint32_t>(buf.size());
        if (sys_->ioctl(fd(), VFIO_DEVICE_GET_PCI_HOT_RESET_INFO, info) == 0) {
            std::vector<HotResetDevice> out;
            for (uint32_t i = 0; i < info->count; ++i) {
                const vfio_pci_dependent_device& d = info->devices[i];
                PciAddress a{static_cast<uint16_t>(d.segment), d.bus, static_cast<uint8_t>(d.devfn >> 3),
                             static_cast<uint8_t>(d.devfn & 7)};
                out.push_back({a, d.group_id});
            }
            return out;
        }
        if (errno != ENOSPC)
            return Error::from_errno(errno, str_cat(addr_.to_string(), ": VFIO_DEVICE_GET_PCI_HOT_RESET_INFO"),
                                     errno == ENODEV ? "the device cannot be reset at bus level" : "");
        buf.resize(sizeof(vfio_pci_hot_reset_info) + info->count * sizeof(vfio_pci_dependent_device));
    }
    return Error{EPROTO, "VFIO_DEVICE_GET_PCI_HOT_RESET_INFO kept growing"};
}

}  // namespace vfab::vfio
