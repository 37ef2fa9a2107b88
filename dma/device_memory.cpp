// Peer-to-peer DMA: registering another device's memory (a VFIO device's BAR) or a dma-buf in a
// protection domain (docs/rdma-p2p.md).
#include <cerrno>

#include "vfab/dma/protection_domain.hpp"
#include "vfab/vfio/device.hpp"

namespace vfab::dma {

bool ProtectionDomain::maps_device_memory() const noexcept { return ctx_->maps_device_memory(); }

Result<MemoryRegion> ProtectionDomain::register_device_memory(std::shared_ptr<vfio::Device> dev, uint32_t bar,
                                                              uint64_t offset, uint64_t len, Access access) {
    if (const char* why = ctx_->device_memory_refusal())   // first: what the IOMMU can do, whatever is asked
        return Error{ENOTSUP, str_cat("device memory registration: ", why)};
    if (!dev) return Error{EINVAL, "device memory registration: no device"};
    auto region = dev->region(bar);
    if (!region) return region.take_error();
    vfio::Region& r = **region;
    if (!r.fully_mapped())
        return Error{EINVAL, str_cat("device memory registration: region ", bar, " of ", dev->address().to_string(),
                                     " is not mmapped whole (", r.mapped_length(), " of ", r.size(),
                                     " bytes): only a memory BAR the kernel lets user space map can be DMAed to")};
    if (len == 0 || offset >= r.size() || len > r.size() - offset)
        return Error{EINVAL, str_cat("device memory registration: ", len, " bytes from ", offset, " do not fit region ",
                                     bar, " (", r.size(), " bytes)")};
    WriterGuard writer(*this);
    std::lock_guard lock(mu_);
    auto mr = register_locked(const_cast<uint8_t*>(r.base()) + offset, len, access);
    if (!mr) return mr;
    mr->device_memory = true;
    mr_devices_[key_index(mr->lkey)] = std::move(dev);
    return mr;
}

Result<MemoryRegion> ProtectionDomain::register_dmabuf(int fd, uint64_t, uint64_t len, Access) {
    if (fd < 0 || len == 0) return Error{EINVAL, "dma-buf registration: a file descriptor and a length are needed"};
    return Error{ENOTSUP, ctx_->dmabuf_refusal()};
}

}  // namespace vfab::dma
