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
    // Takes over `o`'s mappings; `o` keeps none (its accesses then go through pread/pwrite).
    Region(Region&& o) noexcept;
    // Unmaps this region's mappings and takes over `o`'s.
    Region& operator=(Region&& o) noexcept;
    Region(const Region&) = delete;
    Region& operator=(const Region&) = delete;
    ~Region();

    // The region as VFIO describes it: index, size, offset in the device fd, mmappable areas.
    const RegionInfo& info() const { return info_; }
    // The region's size in bytes.
    uint64_t size() const { return info_.size; }

    // The mapping that starts at offset 0, and its length: drivers take their hot registers
    // (doorbells, tails) from here. nullptr when the start of the region is not mapped.
    volatile uint8_t* base() const { return direct_; }
    // The length of base()'s mapping in bytes (0 when there is none): accesses below it take
    // the inline fast path.
    uint64_t mapped_length() const { return direct_len_; }
    // Whether base() maps the whole region, so that no access needs a system call.
    // ProtectionDomain::register_device_memory requires it.
    bool fully_mapped() const { return direct_ && direct_len_ >= info_.size; }

    // The 8-bit register at byte offset `off`: read<uint8_t>().
    uint8_t read8(uint64_t off) const { return read<uint8_t>(off); }
    // The 16-bit register at byte offset `off` (naturally aligned): read<uint16_t>().
    uint16_t read16(uint64_t off) const { return read<uint16_t>(off); }
    // The 32-bit register at byte offset `off` (naturally aligned): read<uint32_t>().
    uint32_t read32(uint64_t off) const { return read<uint32_t>(off); }
    // The 64-bit register at byte offset `off` (naturally aligned): read<uint64_t>().
    uint64_t read64(uint64_t off) const { return read<uint64_t>(off); }
    // Writes the 8-bit register at byte offset `off`: write<uint8_t>().
    void write8(uint64_t off, uint8_t v) { write<uint8_t>(off, v); }
    // Writes the 16-bit register at byte offset `off` (naturally aligned): write<uint16_t>().
    void write16(uint64_t off, uint16_t v) { write<uint16_t>(off, v); }
    // Writes the 32-bit register at byte offset `off` (naturally aligned): write<uint32_t>().
    void write32(uint64_t off, uint32_t v) { write<uint32_t>(off, v); }
    // Writes the 64-bit register at byte offset `off` (naturally aligned): write<uint64_t>().
    void write64(uint64_t off, uint64_t v) { write<uint64_t>(off, v); }

    // For tests and tools: reads `width` bytes at `off` with pread on the device fd, never
    // through a mapping. ERANGE outside the region; the pread's errno on failure.
    Result<uint64_t> pread_value(uint64_t off, unsigned width) const;
    // For tests and tools: writes the low `width` bytes of `value` at `off` with pwrite on the
    // device fd, never through a mapping. Errors as pread_value().
    Result<void> pwrite_value(uint64_t off, unsigned width, uint64_t value);

    // Reads a T (1, 2, 4 or 8 bytes) at byte offset `off`: an inline volatile load when base()'s
    // mapping covers it (the fast path), else another mapped area or a pread. A failed pread
    // is logged and reads as all-ones, as a PCI read of an absent device does.
    template <class T>
    T read(uint64_t off) const {
        if (off < direct_len_ && direct_len_ - off >= sizeof(T)) [[likely]]   // no off + size: it may wrap
            return mmio::read<T>(direct_, off);
        return static_cast<T>(slow_read(off, sizeof(T)));
    }
    // Writes a T (1, 2, 4 or 8 bytes) at byte offset `off`: an inline volatile store when
    // base()'s mapping covers it (the fast path), else another mapped area or a pwrite, whose
    // failure is logged only.
    template <class T>
    void write(uint64_t off, T v) {
        if (off < direct_len_ && direct_len_ - off >= sizeof(T)) [[likely]]
            return mmio::write<T>(direct_, off, v);
        slow_write(off, sizeof(T), v);
    }

private:
    struct Mapping {
        uint64_t offset;   // within the region
        uint64_t length;
        // [off, off + width) lies inside (written so that no sum can wrap).
        bool covers(uint64_t off, unsigned width) const {
            return off >= offset && width <= length && off - offset <= length - width;
        }
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
