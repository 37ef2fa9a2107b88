// A fake virtio-net PCI function behind the fake VFIO kernel (fake_kernel.hpp): config space
// with the virtio vendor capabilities (VIRTIO 1.2 §4.1.4), BAR 0 holding the structures they
// point to, and a model of the common configuration structure (§4.1.4.3) that reacts to the
// driver's register writes through MmioTrap (mmio_trap.hpp). Knobs make the device misbehave:
// refuse FEATURES_OK for some features, offer fewer features, never finish a reset.
#pragma once

#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <set>
#include <vector>

#include "fake_kernel.hpp"
#include "mmio_trap.hpp"
#include "vfab/drivers/virtio/pci_transport.hpp"
#include "vfab/vfio/pci_config.hpp"

namespace vfab::virtio::testing {

// BAR 0 layout, as QEMU lays out its virtio-pci BAR (one page per structure).
inline constexpr uint32_t kCommonOff = 0x0000, kIsrOff = 0x1000, kDeviceCfgOff = 0x2000, kNotifyOff = 0x3000;
inline constexpr uint32_t kStructLen = 0x1000;
inline constexpr uint32_t kNotifyMultiplier = 4;

// struct virtio_pci_common_cfg offsets (§4.1.4.3).
namespace common {
inline constexpr uint32_t device_feature_select = 0x00, device_feature = 0x04, driver_feature_select = 0x08,
                          driver_feature = 0x0c, config_msix_vector = 0x10, num_queues = 0x12,
                          device_status = 0x14, config_generation = 0x15, queue_select = 0x16, queue_size = 0x18,
                          queue_msix_vector = 0x1a, queue_enable = 0x1c, queue_notify_off = 0x1e;
}

// The device side of the common configuration structure. Registers the model does not react
// to (config_msix_vector, queue addresses) keep what the driver wrote: a device that takes
// any MSI-X vector. Per-queue registers are not remembered across queue_select.
class CommonCfgModel {
public:
    // Knobs, set before the BAR is mapped.
    uint64_t offered = 0;
    uint64_t refused = 0;            // accepting any of these makes the device clear FEATURES_OK
    bool wedged = false;             // a write of 0 to device_status never completes (§4.1.4.3.2)
    uint8_t initial_status = 0;      // e.g. what a previous driver left
    uint16_t queues = 2;
    uint16_t queue_max = 256;

    // What the driver did.
    uint64_t driver_features = 0;
    std::array<uint8_t, 64> status_writes{};
    size_t status_write_count = 0;

    std::vector<uint8_t> status_history() const {
        const size_t n = std::min(status_write_count, status_writes.size());
        return {status_writes.begin(), status_writes.begin() + long(n)};
    }
    bool status_ever_had(uint8_t bits) const {
        for (uint8_t s : status_history())
            if ((s & bits) == bits) return true;
        return false;
    }
    uint8_t status() const { return base_ ? base_[common::device_status] : 0; }

    void attach(uint8_t* base) {
        base_ = base;
        status_ = initial_status;
        base_[common::device_status] = initial_status;
        put<uint16_t>(common::num_queues, queues);
        put<uint16_t>(common::config_msix_vector, kNoVector);
        select_device_feature(0);
        select_queue(0);
    }
    void detach() { base_ = nullptr; }
    // A reset the driver did not ask for (a function-level reset by someone else): the status
    // reads 0 (§2.1), and the negotiation is forgotten.
    void reset_behind_the_drivers_back() {
        driver_features = 0;
        status_ = 0;
        put<uint8_t>(common::device_status, 0);
    }

    // Called after each trapped store, with the offset it wrote (MmioTrap's callback).
    static void on_write(void* self, uint32_t off) { static_cast<CommonCfgModel*>(self)->write(off); }

private:
    template <class T>
    T get(uint32_t off) const {
        T v;
        std::memcpy(&v, base_ + off, sizeof v);
        return v;
    }
    template <class T>
    void put(uint32_t off, T v) {
        std::memcpy(base_ + off, &v, sizeof v);
    }

    void select_device_feature(uint32_t sel) {
        put<uint32_t>(common::device_feature, sel < 2 ? uint32_t(offered >> (32 * sel)) : 0);
    }
    void select_queue(uint16_t q) {
        put<uint16_t>(common::queue_size, q < queues ? queue_max : 0);
        put<uint16_t>(common::queue_msix_vector, kNoVector);
        put<uint16_t>(common::queue_enable, 0);
        put<uint16_t>(common::queue_notify_off, q);
    }

    void write(uint32_t off) {
        switch (off) {
        case common::device_feature_select: select_device_feature(get<uint32_t>(off)); break;
        case common::driver_feature: {
            const uint32_t sel = get<uint32_t>(common::driver_feature_select);
            if (sel < 2) {
                driver_features &= ~(uint64_t(0xffffffff) << (32 * sel));
                driver_features |= uint64_t(get<uint32_t>(off)) << (32 * sel);
            }
            break;
        }
        case common::device_status: write_status(get<uint8_t>(off)); break;
        case common::queue_select: select_queue(get<uint16_t>(off)); break;
        default: break;
        }
    }

    void write_status(uint8_t v) {
        if (status_write_count < status_writes.size()) status_writes[status_write_count] = v;
        ++status_write_count;
        if (v == 0) {   // reset (§2.4): a wedged device keeps reading back its old status
            if (wedged) {
                put<uint8_t>(common::device_status, status_);
                return;
            }
            driver_features = 0;
            put<uint16_t>(common::config_msix_vector, kNoVector);
            select_device_feature(0);
            select_queue(0);
            status_ = 0;
            return;
        }
        // §2.2.2: a device that does not accept the driver's subset MUST fail to set
        // FEATURES_OK when the driver writes it (the driver re-reads it, §3.1.1 step 6). A bit
        // the device never offered (which §2.2.1 forbids the driver to accept) is refused too.
        if ((v & kStatusFeaturesOk) && !(status_ & kStatusFeaturesOk) &&
            (driver_features & (~offered | refused)) != 0) {
            v = uint8_t(v & ~kStatusFeaturesOk);
            put<uint8_t>(common::device_status, v);
        }
        status_ = v;
    }

    uint8_t* base_ = nullptr;
    uint8_t status_ = 0;   // the status the device holds (what a wedged reset leaves)
};

// The fake kernel plus the virtio-net function: config space through pread/pwrite, BAR 0
// through mmap (real memory, the common configuration page trapped), and real
// eventfds (the driver puts the MSI-X eventfds in an epoll set, which needs real fds).
class FakeVirtioKernel final : public vfio::Sys {
public:
    vfio::testing::FakeKernel kernel;   // container, group, device fd, region and IRQ info
    CommonCfgModel model;
    std::array<uint8_t, 256> config{};
    std::array<uint8_t, 24> net_config{};   // struct virtio_net_config (§5.1.4)

    // A modern virtio-net function (1af4:1041) with the four structures in BAR 0 (§4.1.4) and
    // an MSI-X capability; `device_id` 0x1000 is a transitional/legacy ID; no capabilities
    // makes a legacy-only device (§4.1.4: capabilities are how a modern device is found).
    void build_config(uint16_t device_id = 0x1041, bool virtio_caps = true) {
        config.fill(0);
        put16(0x00, 0x1af4);
        put16(0x02, device_id);
        put16(pci::kStatus, pci::kStatusCapList);
        config[0x08] = 1;                          // revision 1: modern (§4.1.2.1)
        config[0x0b] = 0x02;                       // class: network controller
        put16(0x2c, 0x1af4);
        put16(0x2e, 1);                            // subsystem: virtio-net
        uint8_t next = 0x40;
        config[pci::kCapabilityList] = next;
        if (virtio_caps) {
            // struct virtio_pci_cap (§4.1.4): vndr, next, len, cfg_type, bar, id, pad[2], offset, length.
            const struct { uint8_t type; uint32_t off; } caps[] = {
                {1, kCommonOff}, {3, kIsrOff}, {4, kDeviceCfgOff}, {2, kNotifyOff}};
            for (auto c : caps) {
                const uint8_t at = next;
                const uint8_t len = c.type == 2 ? 20 : 16;   // notify: + notify_off_multiplier (§4.1.4.4)
                next = uint8_t(at + len);
                config[at] = pci::kCapVendor;
                config[at + 1] = next;
                config[at + 2] = len;
                config[at + 3] = c.type;
                config[at + 4] = 0;   // BAR 0
                put32(at + 8, c.off);
                put32(at + 12, c.type == 4 ? uint32_t(net_config.size()) : kStructLen);
                if (c.type == 2) put32(at + 16, kNotifyMultiplier);
            }
        }
        config[next] = pci::kCapMsix;   // the last capability
        config[next + 1] = 0;
        put16(uint8_t(next + 2), uint16_t(kernel.msix_count - 1));
    }

    bool bar_mapped() const { return bar_ != nullptr; }
    const void* bar() const { return bar_; }
    size_t eventfds_open() const { return eventfds_.size(); }

    int open(const char* path, int flags) override { return kernel.open(path, flags); }
    int close(int fd) override {
        if (eventfds_.erase(fd)) return ::close(fd);
        return kernel.close(fd);
    }
    int ioctl(int fd, unsigned long req, void* arg) override { return kernel.ioctl(fd, req, arg); }
    int eventfd(unsigned init, int flags) override {
        int fd = ::eventfd(init, flags | EFD_CLOEXEC);
        if (fd >= 0) eventfds_.insert(fd);
        return fd;
    }

    void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) override {
        if (region_of(off) != VFIO_PCI_BAR0_REGION_INDEX) return kernel.mmap(addr, len, prot, flags, fd, off);
        if (!kernel.open_fds.count(fd) || bar_ || off != 0) {
            errno = bar_ ? EBUSY : EBADF;
            return MAP_FAILED;
        }
        // A memfd rather than anonymous memory: the mapping is named in /proc/self/maps, as a
        // real BAR (the VFIO device fd) is, so leak checks can tell it from allocator memory.
        int mfd = ::memfd_create("vfab-fake-virtio-bar0", MFD_CLOEXEC);
        if (mfd < 0) return MAP_FAILED;
        void* p = ::ftruncate(mfd, off_t(len)) == 0
                      ? ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0)
                      : MAP_FAILED;
        const int saved = errno;
        ::close(mfd);   // the mapping keeps the memory
        errno = saved;
        if (p == MAP_FAILED) return p;
        bar_ = static_cast<uint8_t*>(p);
        bar_len_ = len;
        std::memcpy(bar_ + kDeviceCfgOff, net_config.data(), net_config.size());
        model.attach(bar_ + kCommonOff);
#ifdef VFAB_MMIO_TRAP
        if (!vfab::testing::MmioTrap::arm(bar_ + kCommonOff, kStructLen, CommonCfgModel::on_write, &model)) {
            unmap_bar();
            errno = EPERM;
            return MAP_FAILED;
        }
#endif
        return p;
    }
    int munmap(void* p, size_t len) override {
        if (p != bar_ || !bar_) return kernel.munmap(p, len);
        return unmap_bar();
    }

    ssize_t pread(int fd, void* buf, size_t len, off_t off) override {
        if (region_of(off) != VFIO_PCI_CONFIG_REGION_INDEX) return kernel.pread(fd, buf, len, off);
        const size_t at = size_t(off & 0xffffffffff);
        if (at >= config.size()) return 0;
        const size_t n = std::min(len, config.size() - at);
        std::memcpy(buf, config.data() + at, n);
        return ssize_t(n);
    }
    ssize_t pwrite(int fd, const void* buf, size_t len, off_t off) override {
        if (region_of(off) != VFIO_PCI_CONFIG_REGION_INDEX) return kernel.pwrite(fd, buf, len, off);
        const size_t at = size_t(off & 0xffffffffff);
        if (at >= config.size()) return 0;
        const size_t n = std::min(len, config.size() - at);
        std::memcpy(config.data() + at, buf, n);   // command register and the like
        return ssize_t(n);
    }

private:
    // The fake kernel puts region N at offset N << 40 of the device fd.
    static uint32_t region_of(off_t off) { return uint32_t(uint64_t(off) >> 40); }
    void put16(uint8_t at, uint16_t v) { std::memcpy(&config[at], &v, 2); }
    void put32(uint8_t at, uint32_t v) { std::memcpy(&config[at], &v, 4); }

    int unmap_bar() {
#ifdef VFAB_MMIO_TRAP
        vfab::testing::MmioTrap::disarm();
#endif
        model.detach();
        int r = ::munmap(bar_, bar_len_);
        bar_ = nullptr;
        bar_len_ = 0;
        return r;
    }

    std::set<int> eventfds_;
    uint8_t* bar_ = nullptr;
    size_t bar_len_ = 0;
};

}  // namespace vfab::virtio::testing
