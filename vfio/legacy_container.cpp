// The legacy VFIO backend: a container (/dev/vfio/vfio) holding groups (/dev/vfio/N), with the
// type1v2 IOMMU driver — or, in no-IOMMU mode, VFIO_NOIOMMU_IOMMU and groups named
// /dev/vfio/noiommu-N. Several groups may share one container, so several devices share one
// I/O address space. linux/vfio.h and Documentation/driver-api/vfio.rst.
#include <fcntl.h>
#include <linux/vfio.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "vfab/log.hpp"
#include "vfio/backends.hpp"

namespace vfab::vfio {
namespace {

struct Group {
    UniqueFd fd;
    unsigned number = 0;
};

class LegacyContainer;

// Held by each device: keeps its group attached and the container's device count right.
struct Membership {
    Membership(std::shared_ptr<Group> g, LegacyContainer& c);
    ~Membership();
    Membership(const Membership&) = delete;
    Membership& operator=(const Membership&) = delete;
    std::shared_ptr<Group> group;
    LegacyContainer* container;
};

class LegacyContainer final : public IommuContext {
public:
    LegacyContainer(Sys& sys, bool noiommu, UniqueFd container)
        : IommuContext(noiommu ? IommuBackend::noiommu : IommuBackend::legacy, sys),
          container_(std::move(container)), noiommu_(noiommu) {}
    ~LegacyContainer() override { unmap_all(); }

    Result<DeviceAttachment> attach(const PciAddress& addr, const PciSysfs& sysfs) override;

private:
    friend struct Membership;
    // When the last group leaves, the kernel tears the container's IOMMU down with every
    // mapping in it: unmap first (while the group still holds it), and set the IOMMU up again
    // for the next device.
    void last_device_leaving() {
        unmap_all();
        iommu_set_ = false;
    }
    Result<std::shared_ptr<Group>> open_group(unsigned number, const PciAddress& addr, const PciSysfs& sysfs);
    Result<void> set_iommu();
    Result<Iova> do_map(void* va, size_t len, Iova iova, unsigned access) override;
    Result<void> do_unmap(Iova iova, size_t len) override;

    UniqueFd container_;
    bool noiommu_;
    bool iommu_set_ = false;
    std::map<unsigned, std::weak_ptr<Group>> groups_;
    std::map<uint64_t, void*> noiommu_va_;   // no-IOMMU: physical address -> locked VA
};

Membership::Membership(std::shared_ptr<Group> g, LegacyContainer& c) : group(std::move(g)), container(&c) {
    ++container->devices_;
}

Membership::~Membership() {
    if (--container->devices_ == 0) container->last_device_leaving();
}

std::string group_path(unsigned n, bool noiommu) {
    return str_cat("/dev/vfio/", noiommu ? "noiommu-" : "", n);
}

// "group 7 not viable: 0000:03:00.1 is bound to ixgbe — run `vfio-devctl bind 0000:03:00.1`"
Error not_viable(unsigned number, const PciSysfs& sysfs) {
    std::string why;
    auto members = sysfs.group_devices(number);
    if (members) {
        for (const PciAddress& m : *members) {
            auto drv = sysfs.driver(m);
            if (!drv || !drv->has_value() || **drv == "vfio-pci" || **drv == "pci-stub") continue;
            why += str_cat(why.empty() ? "" : "; ", m.to_string(), " is bound to ", **drv,
                           " — run `vfio-devctl bind ", m.to_string(), "`");
        }
    }
    if (why.empty()) why = "a device in the group is bound to a kernel driver — see `vfio-devctl show`";
    return Error{EPERM, str_cat("IOMMU group ", number, " not viable: ", why,
                                " (every device of a group must be bound to vfio-pci or to no driver)")};
}

Result<std::shared_ptr<Group>> LegacyContainer::open_group(unsigned number, const PciAddress& addr,
                                                           const PciSysfs& sysfs) {
    if (auto it = groups_.find(number); it != groups_.end())
        if (auto g = it->second.lock()) return g;
    std::string path = group_path(number, noiommu_);
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
        if (!noiommu_ && std::filesystem::exists(group_path(number, true), ec))
            return Error{EPERM, str_cat(addr.to_string(), " is in no-IOMMU group ", number,
                                        ": its DMA is not isolated. Ask for no-IOMMU mode explicitly "
                                        "(IommuBackend::noiommu or VFAB_IOMMU_BACKEND=noiommu)")};
        if (noiommu_ && std::filesystem::exists(group_path(number, false), ec))
            return Error{EINVAL, str_cat(addr.to_string(), " is behind an IOMMU (group ", number,
                                         "): no-IOMMU mode is only for hosts without one — use the "
                                         "legacy or iommufd backend")};
    }
    auto g = std::make_shared<Group>();
    g->number = number;
    g->fd = UniqueFd(sys_.open(path.c_str(), O_RDWR), sys_);
    if (!g->fd) return explain_open_failure(errno, path, addr.to_string());

    vfio_group_status status{sizeof status, 0};
    if (sys_.ioctl(g->fd.get(), VFIO_GROUP_GET_STATUS, &status) < 0)
        return Error::from_errno(errno, str_cat("VFIO_GROUP_GET_STATUS on ", path));
    if (!(status.flags & VFIO_GROUP_FLAGS_VIABLE)) return not_viable(number, sysfs);
    int cfd = container_.get();
    if (sys_.ioctl(g->fd.get(), VFIO_GROUP_SET_CONTAINER, &cfd) < 0)
        return Error::from_errno(errno, str_cat("adding IOMMU group ", number, " to the VFIO container"));
    if (!iommu_set_) {
        auto r = set_iommu();
        if (!r) return r.take_error();   // closing the group fd takes it out of the container
    }
    groups_[number] = g;
    return g;
}

// The IOMMU driver is chosen once the container holds its first group.
Result<void> LegacyContainer::set_iommu() {
    unsigned long type = noiommu_ ? VFIO_NOIOMMU_IOMMU : VFIO_TYPE1v2_IOMMU;
    if (sys_.ioctl(container_.get(), VFIO_SET_IOMMU, reinterpret_cast<void*>(type)) < 0)
        return Error::from_errno(errno, str_cat("VFIO_SET_IOMMU(", noiommu_ ? "no-IOMMU" : "type1v2", ")"));
    iommu_set_ = true;
    if (noiommu_) {
        info_.page_sizes = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
        info_.iova_ranges = {{0, ~uint64_t{0}}};
        return {};
    }
    std::vector<uint8_t> buf(sizeof(vfio_iommu_type1_info));
    auto got = ioctl_argsz(sys_, container_.get(), VFIO_IOMMU_GET_INFO, std::move(buf), "VFIO_IOMMU_GET_INFO");
    if (!got) return got.take_error();
    auto info = parse_type1_info(*got);
    if (!info) return info.take_error();
    info_ = std::move(*info);
    return {};
}

Result<DeviceAttachment> LegacyContainer::attach(const PciAddress& addr, const PciSysfs& sysfs) {
    auto number = sysfs.iommu_group(addr);
    if (!number) return number.take_error();
    auto group = open_group(*number, addr, sysfs);
    if (!group) return group.take_error();
    std::string bdf = addr.to_string();
    int fd = sys_.ioctl((*group)->fd.get(), VFIO_GROUP_GET_DEVICE_FD, bdf.data());
    if (fd < 0) {
        int err = errno;
        // The group closes with `group`; if it was the only one, so goes the IOMMU.
        if (devices_ == 0) iommu_set_ = false;
        errno = err;
        return Error::from_errno(errno, str_cat("VFIO_GROUP_GET_DEVICE_FD(", bdf, ")"),
                                 errno == EBUSY ? "the device is already open (in this or another process)"
                                                : "is it bound to vfio-pci? `vfio-devctl show " + bdf + "`");
    }
    DeviceAttachment a;
    a.device_fd = UniqueFd(fd, sys_);
    a.membership = std::make_shared<Membership>(*group, *this);
    return a;
}

// The physical address of `va`, for no-IOMMU DMA: [va, va + len) must be physically
// contiguous. /proc/self/pagemap has one u64 per page, PFN in bits 0-54, bit 63 = present
// (Documentation/admin-guide/mm/pagemap.rst); PFNs read as 0 without CAP_SYS_ADMIN. All the
// range's entries come in one read.
Result<uint64_t> contiguous_physical_address(const void* va, size_t len) {
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const auto addr = reinterpret_cast<uintptr_t>(va);
    std::vector<uint64_t> entries((addr % page + len + page - 1) / page);
    int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Error::from_errno(errno, "open /proc/self/pagemap");
    const size_t bytes = entries.size() * sizeof(uint64_t);
    ssize_t n = ::pread(fd, entries.data(), bytes, static_cast<off_t>(addr / page * sizeof(uint64_t)));
    ::close(fd);
    if (n != static_cast<ssize_t>(bytes)) return Error{EIO, "reading /proc/self/pagemap failed"};
    auto pfn = [](uint64_t e) { return e & ((uint64_t{1} << 55) - 1); };
    for (size_t i = 0; i < entries.size(); ++i) {
        if (!(entries[i] >> 63) || pfn(entries[i]) == 0)
            return Error{EPERM, "no physical address for DMA in no-IOMMU mode: the page is not present or "
                                "the process lacks CAP_SYS_ADMIN to read /proc/self/pagemap"};
        if (pfn(entries[i]) != pfn(entries[0]) + i)
            return Error{EINVAL, "no-IOMMU mode needs physically contiguous DMA memory: map within one hugepage"};
    }
    return pfn(entries[0]) * page + addr % page;
}

Result<Iova> LegacyContainer::do_map(void* va, size_t len, Iova iova, unsigned access) {
    if (noiommu_) {
        // No translation: lock the pages in place and hand out their physical address.
        if (::mlock(va, len) < 0) return explain_map_failure(errno == EAGAIN ? ENOMEM : errno, len, iova);
        auto base = contiguous_physical_address(va, len);
        if (!base) {
            ::munlock(va, len);
            return base.take_error();
        }
        noiommu_va_[*base] = va;
        return Iova(*base);
    }
    vfio_iommu_type1_dma_map map{};
    map.argsz = sizeof map;
    map.flags = ((access & kDmaRead) ? VFIO_DMA_MAP_FLAG_READ : 0) | ((access & kDmaWrite) ? VFIO_DMA_MAP_FLAG_WRITE : 0);
    map.vaddr = reinterpret_cast<uintptr_t>(va);
    map.iova = iova.value;
    map.size = len;
    if (sys_.ioctl(container_.get(), VFIO_IOMMU_MAP_DMA, &map) < 0) return explain_map_failure(errno, len, iova);
    if (info_.dma_mappings_available && *info_.dma_mappings_available > 0) --*info_.dma_mappings_available;
    return iova;
}

Result<void> LegacyContainer::do_unmap(Iova iova, size_t len) {
    if (noiommu_) {
        auto it = noiommu_va_.find(iova.value);
        if (it != noiommu_va_.end()) ::munlock(it->second, len);
        noiommu_va_.erase(iova.value);
        return {};
    }
    vfio_iommu_type1_dma_unmap unmap{};
    unmap.argsz = sizeof unmap;
    unmap.iova = iova.value;
    unmap.size = len;
    if (sys_.ioctl(container_.get(), VFIO_IOMMU_UNMAP_DMA, &unmap) < 0)
        return Error::from_errno(errno, str_cat("VFIO_IOMMU_UNMAP_DMA at IOVA 0x", std::hex, iova.value));
    if (info_.dma_mappings_available) ++*info_.dma_mappings_available;
    return {};
}

}  // namespace

Result<std::shared_ptr<IommuContext>> create_legacy_container(Sys& sys, bool noiommu) {
    const char* path = "/dev/vfio/vfio";
    UniqueFd fd(sys.open(path, O_RDWR), sys);
    if (!fd) return explain_open_failure(errno, path, "");
    int version = sys.ioctl(fd.get(), VFIO_GET_API_VERSION, nullptr);
    if (version != VFIO_API_VERSION)
        return Error{ENOTSUP, str_cat("VFIO API version ", version, " (this vfab speaks ", VFIO_API_VERSION, ")")};
    unsigned long type = noiommu ? VFIO_NOIOMMU_IOMMU : VFIO_TYPE1v2_IOMMU;
    if (sys.ioctl(fd.get(), VFIO_CHECK_EXTENSION, reinterpret_cast<void*>(type)) <= 0) {
        if (noiommu)
            return Error{ENOTSUP, "no-IOMMU mode is not enabled: it needs a kernel with "
                                  "CONFIG_VFIO_NOIOMMU and `echo 1 > /sys/module/vfio/parameters/"
                                  "enable_unsafe_noiommu_mode` (this gives up DMA isolation)"};
        return Error{ENOTSUP, "the VFIO container offers no type1v2 IOMMU: no IOMMU is enabled — boot "
                              "with intel_iommu=on (Intel) or amd_iommu=on (AMD), or ask for no-IOMMU mode"};
    }
    if (noiommu)
        log(LogLevel::warning, "no-IOMMU mode — devices DMA to physical addresses with no isolation; a driver "
                               "bug can corrupt any memory on this machine");
    return std::shared_ptr<IommuContext>(std::make_shared<LegacyContainer>(sys, noiommu, std::move(fd)));
}

}  // namespace vfab::vfio
