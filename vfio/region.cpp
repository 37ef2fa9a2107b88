#include "vfab/vfio/region.hpp"

#include "vfab/log.hpp"

#include <sys/mman.h>

#include <cstring>
#include <utility>

namespace vfab::vfio {

Result<Region> Region::open(Sys& sys, int device_fd, const RegionInfo& info) {
    Region r(sys, device_fd, info);
    if (!info.readable && !info.writable && !info.mmappable)
        return Error{ENODEV, str_cat("region ", info.index, " is not implemented by this device")};
    int prot = (info.readable ? PROT_READ : 0) | (info.writable ? PROT_WRITE : 0);
    for (const SparseArea& a : info.mmap_areas) {
        void* p = sys.mmap(nullptr, a.size, prot, MAP_SHARED, device_fd, static_cast<off_t>(info.offset + a.offset));
        if (p == MAP_FAILED) continue;   // reachable through pread/pwrite instead
        r.maps_.push_back({a.offset, a.size, static_cast<volatile uint8_t*>(p)});
        if (a.offset == 0) {
            r.direct_ = static_cast<volatile uint8_t*>(p);
            r.direct_len_ = a.size;
        }
    }
    return r;
}

Region::Region(Region&& o) noexcept
    : sys_(o.sys_), fd_(o.fd_), info_(std::move(o.info_)), maps_(std::move(o.maps_)),
      direct_(std::exchange(o.direct_, nullptr)), direct_len_(std::exchange(o.direct_len_, 0)) {
    o.maps_.clear();
}

Region& Region::operator=(Region&& o) noexcept {
    if (this != &o) {
        unmap_all();
        sys_ = o.sys_;
        fd_ = o.fd_;
        info_ = std::move(o.info_);
        maps_ = std::move(o.maps_);
        o.maps_.clear();
        direct_ = std::exchange(o.direct_, nullptr);
        direct_len_ = std::exchange(o.direct_len_, 0);
    }
    return *this;
}

Region::~Region() { unmap_all(); }

void Region::unmap_all() {
    for (const Mapping& m : maps_) sys_->munmap(const_cast<uint8_t*>(m.ptr), m.length);
    maps_.clear();
    direct_ = nullptr;
    direct_len_ = 0;
}

Result<uint64_t> Region::pread_value(uint64_t off, unsigned width) const {
    if (off > info_.size || width > info_.size - off)
        return Error{ERANGE, str_cat("read of ", width, " bytes at 0x", std::hex, off, " is outside region ",
                                     std::dec, info_.index, " (", info_.size, " bytes)")};
    uint64_t v = 0;
    if (sys_->pread(fd_, &v, width, static_cast<off_t>(info_.offset + off)) != static_cast<ssize_t>(width))
        return Error::from_errno(errno, str_cat("pread of region ", info_.index, " at 0x", std::hex, off));
    return v;
}

Result<void> Region::pwrite_value(uint64_t off, unsigned width, uint64_t value) {
    if (off > info_.size || width > info_.size - off)
        return Error{ERANGE, str_cat("write of ", width, " bytes at 0x", std::hex, off, " is outside region ",
                                     std::dec, info_.index, " (", info_.size, " bytes)")};
    if (sys_->pwrite(fd_, &value, width, static_cast<off_t>(info_.offset + off)) != static_cast<ssize_t>(width))
        return Error::from_errno(errno, str_cat("pwrite of region ", info_.index, " at 0x", std::hex, off));
    return {};
}

// Accesses outside the direct mapping: another sparse area, else a system call. A failed
// access reads as all-ones, as a PCI read of an absent device does, and is reported once.
uint64_t Region::slow_read(uint64_t off, unsigned width) const {
    for (const Mapping& m : maps_)
        if (m.covers(off, width)) {
            uint64_t v = 0;
            switch (width) {
            case 1: v = mmio::read<uint8_t>(m.ptr, off - m.offset); break;
            case 2: v = mmio::read<uint16_t>(m.ptr, off - m.offset); break;
            case 4: v = mmio::read<uint32_t>(m.ptr, off - m.offset); break;
            default: v = mmio::read<uint64_t>(m.ptr, off - m.offset); break;
            }
            return v;
        }
    auto v = pread_value(off, width);
    if (!v) {
        log(LogLevel::error, v.error().message);
        return ~uint64_t{0};
    }
    return *v;
}

void Region::slow_write(uint64_t off, unsigned width, uint64_t value) {
    for (const Mapping& m : maps_)
        if (m.covers(off, width)) {
            switch (width) {
            case 1: mmio::write<uint8_t>(m.ptr, off - m.offset, static_cast<uint8_t>(value)); break;
            case 2: mmio::write<uint16_t>(m.ptr, off - m.offset, static_cast<uint16_t>(value)); break;
            case 4: mmio::write<uint32_t>(m.ptr, off - m.offset, static_cast<uint32_t>(value)); break;
            default: mmio::write<uint64_t>(m.ptr, off - m.offset, value); break;
            }
            return;
        }
    auto r = pwrite_value(off, width, value);
    if (!r) log(LogLevel::error, r.error().message);
}

}  // namespace vfab::vfio
