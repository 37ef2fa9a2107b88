// The iommufd backend: an I/O address space (IOAS) in /dev/iommu, with devices opened through
// their VFIO cdevs (/dev/vfio/devices/vfioN), bound to the iommufd and attached to the IOAS.
// linux/iommufd.h, linux/vfio.h (VFIO_DEVICE_BIND_IOMMUFD, VFIO_DEVICE_ATTACH_IOMMUFD_PT),
// Documentation/userspace-api/iommufd.rst.
#include <fcntl.h>
#include <linux/iommufd.h>
#include <linux/vfio.h>

#include "vfio/backends.hpp"

namespace vfab::vfio {
namespace {

struct Membership {
    explicit Membership(size_t& count) : devices(&count) { ++*devices; }
    ~Membership() { --*devices; }
    Membership(const Membership&) = delete;
    Membership& operator=(const Membership&) = delete;
    size_t* devices;
};

class IommufdContext final : public IommuContext {
public:
    IommufdContext(Sys& sys, UniqueFd iommufd, uint32_t ioas)
        : IommuContext(IommuBackend::iommufd, sys), iommufd_(std::move(iommufd)), ioas_(ioas) {}
    ~IommufdContext() override {
        unmap_all();
        iommu_destroy d{sizeof d, ioas_};
        sys_.ioctl(iommufd_.get(), IOMMU_DESTROY, &d);
    }

    Result<DeviceAttachment> attach(const PciAddress& addr, const PciSysfs& sysfs) override;

private:
    Result<void> refresh_ranges();
    Result<Iova> do_map(void* va, size_t len, Iova iova, unsigned access) override;
    Result<void> do_unmap(Iova iova, size_t len) override;

    UniqueFd iommufd_;
    uint32_t ioas_;
};

Result<DeviceAttachment> IommufdContext::attach(const PciAddress& addr, const PciSysfs& sysfs) {
    std::string bdf = addr.to_string();
    auto cdev = sysfs.vfio_cdev(addr);
    if (!cdev) return cdev.take_error();
    if (!cdev->has_value())
        return Error{ENODEV, str_cat(bdf, " has no VFIO device cdev: the kernel lacks "
                                     "CONFIG_VFIO_DEVICE_CDEV (use the legacy backend: "
                                     "VFAB_IOMMU_BACKEND=legacy) or the device is not bound to "
                                     "vfio-pci (`vfio-devctl bind ", bdf, "`)")};
    std::string path = "/dev/vfio/devices/" + **cdev;
    UniqueFd dev(sys_.open(path.c_str(), O_RDWR), sys_);
    if (!dev) return explain_open_failure(errno, path, bdf);

    vfio_device_bind_iommufd bind{};
    bind.argsz = sizeof bind;
    bind.iommufd = iommufd_.get();
    if (sys_.ioctl(dev.get(), VFIO_DEVICE_BIND_IOMMUFD, &bind) < 0) {
        // The kernel answers EINVAL (6.12: vfio_df_open) when the device is already open.
        if (errno == EINVAL || errno == EBUSY)
            return Error{EBUSY, str_cat(bdf, " is busy: it is already open, through ", path, " or its IOMMU "
                                        "group, in this or another process — `fuser -v ", path, "` shows who")};
        return Error::from_errno(errno, str_cat("binding ", bdf, " (", path, ") to iommufd"));
    }
    vfio_device_attach_iommufd_pt attach{};
    attach.argsz = sizeof attach;
    attach.pt_id = ioas_;
    if (sys_.ioctl(dev.get(), VFIO_DEVICE_ATTACH_IOMMUFD_PT, &attach) < 0)
        return Error::from_errno(errno, str_cat("attaching ", bdf, " to IOAS ", ioas_));
    // Each device may reserve IOVAs (e.g. its MSI window): the usable ranges narrow.
    if (auto r = refresh_ranges(); !r) return r.take_error();
    DeviceAttachment a;
    a.device_fd = std::move(dev);
    a.membership = std::make_shared<Membership>(devices_);
    return a;
}

Result<void> IommufdContext::refresh_ranges() {
    iommu_ioas_iova_ranges q{};
    q.size = sizeof q;
    q.ioas_id = ioas_;
    std::vector<iommu_iova_range> ranges;
    // The kernel answers EMSGSIZE with the number of ranges when the array is too small.
    for (int attempt = 0; attempt < 4; ++attempt) {
        q.num_iovas = static_cast<uint32_t>(ranges.size());
        q.allowed_iovas = reinterpret_cast<uintptr_t>(ranges.data());
        if (sys_.ioctl(iommufd_.get(), IOMMU_IOAS_IOVA_RANGES, &q) == 0) break;
        if (errno != EMSGSIZE) return Error::from_errno(errno, "IOMMU_IOAS_IOVA_RANGES");
        ranges.resize(q.num_iovas);
    }
    info_.iova_ranges.clear();
    for (uint32_t i = 0; i < q.num_iovas && i < ranges.size(); ++i)
        info_.iova_ranges.push_back({ranges[i].start, ranges[i].last});
    // iommufd reports the minimum IOVA alignment, which is the smallest IOMMU page size.
    info_.page_sizes = q.out_iova_alignment ? q.out_iova_alignment : 4096;
    return {};
}

Result<Iova> IommufdContext::do_map(void* va, size_t len, Iova iova, unsigned access) {
    iommu_ioas_map map{};
    map.size = sizeof map;
    map.flags = IOMMU_IOAS_MAP_FIXED_IOVA | ((access & kDmaRead) ? IOMMU_IOAS_MAP_READABLE : 0) |
                ((access & kDmaWrite) ? IOMMU_IOAS_MAP_WRITEABLE : 0);
    map.ioas_id = ioas_;
    map.user_va = reinterpret_cast<uintptr_t>(va);
    map.length = len;
    map.iova = iova.value;
    if (sys_.ioctl(iommufd_.get(), IOMMU_IOAS_MAP, &map) < 0) return explain_map_failure(errno, len, iova);
    return iova;
}

Result<void> IommufdContext::do_unmap(Iova iova, size_t len) {
    iommu_ioas_unmap unmap{};
    unmap.size = sizeof unmap;
    unmap.ioas_id = ioas_;
    unmap.iova = iova.value;
    unmap.length = len;
    if (sys_.ioctl(iommufd_.get(), IOMMU_IOAS_UNMAP, &unmap) < 0)
        return Error::from_errno(errno, str_cat("IOMMU_IOAS_UNMAP at IOVA 0x", std::hex, iova.value));
    return {};
}

}  // namespace

Result<std::shared_ptr<IommuContext>> create_iommufd_context(Sys& sys) {
    const char* path = "/dev/iommu";
    UniqueFd fd(sys.open(path, O_RDWR), sys);
    if (!fd) {
        if (errno == ENOENT)
            return Error{ENOENT, "no /dev/iommu: this kernel has no iommufd (CONFIG_IOMMUFD) — use the "
                                 "legacy backend (VFAB_IOMMU_BACKEND=legacy)"};
        if (errno == EACCES || errno == EPERM)   // the devices' own files are not enough here
            return Error{errno, "permission denied opening /dev/iommu, which the iommufd backend needs (root's by "
                                "default; `vfio-devctl bind --user` hands over the devices only) — give this user "
                                "read-write access to it (a udev rule: KERNEL==\"iommu\", GROUP=\"vfio\", "
                                "MODE=\"0660\"), or use the legacy backend (VFAB_IOMMU_BACKEND=legacy)"};
        return explain_open_failure(errno, path, "");
    }
    iommu_ioas_alloc alloc{};
    alloc.size = sizeof alloc;
    if (sys.ioctl(fd.get(), IOMMU_IOAS_ALLOC, &alloc) < 0) return Error::from_errno(errno, "IOMMU_IOAS_ALLOC");
    return std::shared_ptr<IommuContext>(std::make_shared<IommufdContext>(sys, std::move(fd), alloc.out_ioas_id));
}

}  // namespace vfab::vfio
