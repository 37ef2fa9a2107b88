// A device region (a BAR): mmapped where VFIO allows it, pread/pwrite on the device fd
// elsewhere. Register accessors pick the mapping when the access falls inside it (the fast,
// inline case) and fall back to a system call otherwise.
#pragma once

#include <cstdint>
#include <vector>

#include "vfab/mmio.hpp"
#include "vfab/result.hpp"
#include "vfab/vfio/info.hpp"
#include "vfab/vfio/sys.hpp"

namespace vfab::vfio {

class Region {
public:
    // Maps what `info` says is mappable (each sparse area separately). Mapping failures are
    // not fatal: those parts are then reached through pread/pwrite.
    static Result<Region> open(Sys& sys, int device_fd, const RegionInfo& info);
    Region(Region&& o) noexcept;
    Region& operator=(Region&& o) noexcept;
    Region(const Region&) = delete;
    Region& operator=(const Region&) = delete;
    ~Region();

    const RegionInfo& info() const { return info_; }
    uint64_t size() const { return info_.size; }

    // The mapping that starts at offset 0, and its length: drivers take their hot registers
    // (doorbells, tails) from here. nullptr when the start of the region is not mapped.
    volatile uint8_t* base() const { return direct_; }
    uint64_t mapped_length() const { return direct_len_; }
    bool fully_mapped() const { return direct_ && direct_len_ >= info_.size; }

    uint8_t read8(uint64_t off) const { return read<uint8_t>(off); }
    uint16_t read16(uint64_t off) const { return read<uint16_t>(off); }
    uint32_t read32(uint64_t off) const { return read<uint32_t>(off); }
    uint64_t read64(uint64_t off) const { return read<uint64_t>(off); }
    void write8(uint64_t off, uint8_t v) { write<uint8_t>(off, v); }
    void write16(uint64_t off, uint16_t v) { write<uint16_t>(off, v); }
    void write32(uint64_t off, uint32_t v) { write<uint32_t>(off, v); }
    void write64(uint64_t off, uint64_t v) { write<uint64_t>(off, v); }

    // For tests and tools: the same, through pread/pwrite on the device fd only.
    Result<uint64_t> pread_value(uint64_t off, unsigned width) const;
    Result<void> pwrite_value(uint64_t off, unsigned width, uint64_t value);

    template <class T>
    T read(uint64_t off) const {
        if (off + sizeof(T) <= direct_len_) [[likely]]
            return mmio::read<T>(direct_, off);
        return static_cast<T>(slow_read(off, sizeof(T)));
    }
    template <class T>
    void write(uint64_t off, T v) {
        if (off + sizeof(T) <= direct_len_) [[likely]]
            return mmio::write<T>(direct_, off, v);
        slow_write(off, sizeof(T), v);
    }

private:
    struct Mapping {
        uint64_t offset;   // within the region
        uint64_t length;
        volatile uint8_t* ptr;
    };
    Region(Sys& sys, int fd, RegionInfo info) : sys_(&sys), fd_(fd), info_(std::move(info)) {}
    uint64_t slow_read(uint64_t off, unsigned width) const;
    void slow_write(uint64_t off, unsigned width, uint64_t v);
    void unmap_all();

    Sys* sys_;
    int fd_;
    RegionInfo info_;
    std::vector<Mapping> maps_;
    volatile uint8_t* direct_ = nullptr;
    uint64_t direct_len_ = 0;
};

}  // namespace vfab::vfio
