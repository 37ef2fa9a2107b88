// Interrupts through VFIO_DEVICE_SET_IRQS: each vector signals an eventfd
// (linux/vfio.h, struct vfio_irq_set; Documentation/driver-api/vfio.rst).
#include <linux/vfio.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cstring>

#include "vfab/vfio/device.hpp"
#include "vfab/vfio/event_wait.hpp"

namespace vfab::vfio {

Result<IrqInfo> Device::irq_info(IrqIndex index) const {
    vfio_irq_info ii{};
    ii.argsz = sizeof ii;
    ii.index = static_cast<uint32_t>(index);
    if (ii.index >= num_irqs_)
        return Error{EINVAL, str_cat(addr_.to_string(), " has no ", to_string(index), " interrupt index")};
    if (sys_->ioctl(fd(), VFIO_DEVICE_GET_IRQ_INFO, &ii) < 0) {
        // vfio-pci answers EINVAL for an index the device cannot have (the error index of a
        // conventional PCI device): report it as present with no vectors.
        if (errno == EINVAL) return IrqInfo{ii.index, 0, false, false, false, false};
        return Error::from_errno(errno, str_cat(addr_.to_string(), ": VFIO_DEVICE_GET_IRQ_INFO(", to_string(index), ")"));
    }
    IrqInfo out;
    out.index = ii.index;
    out.count = ii.count;
    out.eventfd = ii.flags & VFIO_IRQ_INFO_EVENTFD;
    out.maskable = ii.flags & VFIO_IRQ_INFO_MASKABLE;
    out.automasked = ii.flags & VFIO_IRQ_INFO_AUTOMASKED;
    out.noresize = ii.flags & VFIO_IRQ_INFO_NORESIZE;
    return out;
}

Result<void> Device::set_irqs(uint32_t flags, IrqIndex index, uint32_t start, uint32_t count, const int32_t* fds) {
    size_t data = (flags & VFIO_IRQ_SET_DATA_EVENTFD) ? count * sizeof(int32_t) : 0;
    std::vector<uint8_t> buf(sizeof(vfio_irq_set) + data);
    auto* set = reinterpret_cast<vfio_irq_set*>(buf.data());
    set->argsz = static_cast<uint32_t>(buf.size());
    set->flags = flags;
    set->index = static_cast<uint32_t>(index);
    set->start = start;
    set->count = count;
    if (data) std::memcpy(set->data, fds, data);
    if (sys_->ioctl(fd(), VFIO_DEVICE_SET_IRQS, set) < 0)
        return Error::from_errno(errno, str_cat(addr_.to_string(), ": VFIO_DEVICE_SET_IRQS(", to_string(index),
                                                ", vectors ", start, "..", start + count, ")"));
    return {};
}

Result<Interrupts*> Device::enable_interrupts(IrqIndex index, uint32_t count) {
    std::vector<uint32_t> all(count);
    for (uint32_t i = 0; i < count; ++i) all[i] = i;
    return enable_interrupts(index, all);
}

Result<Interrupts*> Device::enable_interrupts(IrqIndex index, std::span<const uint32_t> vectors) {
    auto info = irq_info(index);
    if (!info) return info.take_error();
    if (vectors.empty()) return Error{EINVAL, "enable_interrupts: name at least one vector"};
    std::vector<uint32_t> sorted(vectors.begin(), vectors.end());
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    if (sorted.back() >= info->count)
        return Error{EINVAL, str_cat(addr_.to_string(), " has ", info->count, " ", to_string(index),
                                     " vector(s); vector ", sorted.back(), " does not exist")};
    if (!info->eventfd)
        return Error{ENOTSUP, str_cat(addr_.to_string(), ": ", to_string(index), " cannot signal an eventfd")};

    // Enabling another set of vectors replaces the old one; MSI and MSI-X exclude each other
    // and INTx, so turn everything else off first.
    for (size_t i = 0; i < kIrqIndexCount; ++i) {
        auto other = static_cast<IrqIndex>(i);
        bool exclusive = i <= static_cast<size_t>(IrqIndex::msix) && index <= IrqIndex::msix;
        if (irqs_[i] && (other == index || exclusive)) {
            if (auto r = disable_interrupts(other); !r) return r.take_error();
        }
    }
    std::unique_ptr<Interrupts> irq(new Interrupts(*this, index, *info));
    // One SET_IRQS for the span first..last; vectors not asked for get -1 (no eventfd).
    uint32_t first = sorted.front(), span = sorted.back() - first + 1;
    std::vector<int32_t> fds(span, -1);
    for (uint32_t v : sorted) {
        UniqueFd efd(sys_->eventfd(0, EFD_NONBLOCK), *sys_);
        if (!efd) return Error::from_errno(errno, "eventfd for an interrupt");
        fds[v - first] = efd.get();
        irq->vectors_.push_back(v);
        irq->fds_.push_back(std::move(efd));
    }
    auto r = set_irqs(VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER, index, first, span, fds.data());
    if (!r) return r.take_error();   // the eventfds close with `irq`
    irqs_[static_cast<size_t>(index)] = std::move(irq);
    return irqs_[static_cast<size_t>(index)].get();
}

Result<void> Device::disable_interrupts(IrqIndex index) {
    auto& slot = irqs_[static_cast<size_t>(index)];
    if (!slot) return {};
    // count = 0 with DATA_NONE|ACTION_TRIGGER disables the whole index.
    auto r = set_irqs(VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER, index, 0, 0, nullptr);
    slot.reset();   // the eventfds are closed either way; the kernel drops its references
    return r;
}

int Interrupts::eventfd(uint32_t vector) const {
    for (size_t i = 0; i < vectors_.size(); ++i)
        if (vectors_[i] == vector) return fds_[i].get();
    return -1;
}

Result<void> Interrupts::check_maskable(uint32_t vector) const {
    if (!info_.maskable)
        return Error{ENOTSUP, str_cat(dev_->address().to_string(), ": VFIO cannot mask ", to_string(index_),
                                      " vectors — disable the cause in the device instead")};
    if (eventfd(vector) < 0)
        return Error{EINVAL, str_cat(dev_->address().to_string(), ": ", to_string(index_), " vector ", vector,
                                     " is not enabled")};
    return {};
}

Result<void> Interrupts::mask(uint32_t vector) {
    if (auto r = check_maskable(vector); !r) return r;
    return dev_->set_irqs(VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_MASK, index_, vector, 1, nullptr);
}

Result<void> Interrupts::unmask(uint32_t vector) {
    if (auto r = check_maskable(vector); !r) return r;
    return dev_->set_irqs(VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_UNMASK, index_, vector, 1, nullptr);
}

Result<Interrupts*> Device::watch_optional_interrupt(IrqIndex index, EventWaiter& waiter, uint64_t tag) {
    auto info = irq_info(index);
    if (!info || info->count == 0) return nullptr;
    auto irq = enable_interrupts(index, 1);
    if (!irq) return nullptr;
    if (auto r = waiter.add((*irq)->eventfd(0), tag); !r) return r.take_error();
    return *irq;
}

}  // namespace vfab::vfio
