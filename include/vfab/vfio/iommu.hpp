// IOMMU contexts: one I/O address space that any number of devices share. Three backends
// behind one interface:
//   legacy   /dev/vfio/vfio container + /dev/vfio/N groups, VFIO_TYPE1v2_IOMMU
//   iommufd  /dev/iommu IOAS + /dev/vfio/devices/vfioN cdevs (Linux >= 6.6 with
//            CONFIG_IOMMUFD and CONFIG_VFIO_DEVICE_CDEV)
//   noiommu  VFIO_NOIOMMU_IOMMU: no translation, no isolation — the device DMAs to physical
//            addresses. Only when asked for explicitly; it prints a warning.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "vfab/iova.hpp"
#include "vfab/pci_address.hpp"
#include "vfab/result.hpp"
#include "vfab/vfio/address_space.hpp"
#include "vfab/vfio/device_options.hpp"
#include "vfab/vfio/info.hpp"
#include "vfab/vfio/pci_sysfs.hpp"
#include "vfab/vfio/sys.hpp"
#include "vfab/vfio/unique_fd.hpp"

namespace vfab::vfio {

// "auto", "legacy", "iommufd" or "noiommu": the names parse_iommu_backend() accepts.
const char* to_string(IommuBackend b);
// "auto", "legacy", "iommufd", "noiommu"; for VFAB_IOMMU_BACKEND and command lines.
Result<IommuBackend> parse_iommu_backend(std::string_view text);
// VFAB_IOMMU_BACKEND from the environment; automatic when unset.
Result<IommuBackend> iommu_backend_from_env();

// The RLIMIT_MEMLOCK soft limit as an error message states it: "N bytes" or "unlimited".
std::string memlock_limit_text();
// How to give a process more lockable memory; ends every "out of lockable memory" error.
inline constexpr const char* kRaiseMemlock =
    "raise it (`ulimit -l unlimited`, LimitMEMLOCK=infinity in a systemd unit, or memlock in "
    "/etc/security/limits.conf) or grant CAP_IPC_LOCK";

// A device's membership of a context: its VFIO device fd, and whatever keeps it attached
// (the legacy group it came through). Dropping it detaches the device.
struct DeviceAttachment {
    UniqueFd device_fd;
    std::shared_ptr<void> membership;
};

// Thread-safe: devices may join and leave, and memory be mapped and unmapped, from any thread.
class IommuContext : public AddressSpace {
public:

    // A new, empty context. Legacy and noiommu containers learn their IOMMU's properties
    // when the first device joins; iommufd narrows its IOVA ranges with each device.
    static Result<std::shared_ptr<IommuContext>> create(IommuBackend backend, Sys& sys = Sys::real());

    // The backend it was created with (never automatic).
    IommuBackend backend() const { return backend_; }
    const IommuInfo& info() const override { return info_; }
    bool translates() const override { return backend_ != IommuBackend::noiommu; }
    // Devices attached now; map_dma() is ENODEV while there is none.
    size_t device_count() const { return devices_; }

    // Makes [va, va + len) reachable by this context's devices at `iova`, for `access`.
    // va, len and iova must be page-aligned and iova + len inside info().iova_ranges.
    // Returns the address the device must use: `iova`, except in no-IOMMU mode, which cannot
    // remap: there the memory is locked and its physical address returned (the range must be
    // physically contiguous, e.g. within one hugepage).
    // The IOMMU maps by address: `file` is not needed.
    Result<Iova> map_dma(void* va, size_t len, Iova iova, unsigned access = kDmaReadWrite,
                         MemoryFile file = {}) override;
    Result<void> unmap_dma(Iova iova, size_t len) override;
    // Null for the legacy type1 container, which maps another device's memory; iommufd pins
    // host memory only, and no-IOMMU mode has no bus address for it: those say what to do.
    const char* device_memory_refusal() const override;
    // Never null: dma-bufs go through iommufd, and there they need IOMMU_IOAS_MAP_FILE, which
    // this build's kernel headers lack. Says what to use instead.
    const char* dmabuf_refusal() const override;

    // Live mappings made through this context (iova -> length).
    const std::map<uint64_t, size_t>& mappings() const override { return mappings_; }

protected:
    // For the backends; `sys` must outlive the context.
    IommuContext(IommuBackend b, Sys& sys) : backend_(b), sys_(sys) {}
    // Opens `addr` (bound to vfio-pci) into this context.
    virtual Result<DeviceAttachment> attach(const PciAddress& addr, const PciSysfs& sysfs) = 0;
    // The backend's mapping, called by map_dma() with mutex_ held and the arguments checked;
    // returns the device's address (`iova`, or the physical address without an IOMMU).
    // Errors through explain_map_failure().
    virtual Result<Iova> do_map(void* va, size_t len, Iova iova, unsigned access) = 0;
    // Undoes one do_map(); called with mutex_ held by unmap_dma() and unmap_all().
    virtual Result<void> do_unmap(Iova iova, size_t len) = 0;
    // The Error for a mapping that failed with errno `err`, saying what to do: ENOMEM names
    // RLIMIT_MEMLOCK and kRaiseMemlock, ENOSPC the type1 mapping limit; EEXIST (IOVA mapped
    // already) and EFAULT (memory not mapped) are explained, other codes keep strerror's text.
    Error explain_map_failure(int err, size_t len, Iova iova) const;
    void unmap_all();   // for destructors of the backends

    // map_dma, unmap_dma and devices joining or leaving may come from several threads.
    std::recursive_mutex mutex_;
    IommuBackend backend_;
    Sys& sys_;
    IommuInfo info_;
    size_t devices_ = 0;
    std::map<uint64_t, size_t> mappings_;

    friend class Device;
};

}  // namespace vfab::vfio
