// intel::DeviceHandle's calls (include/vfab/drivers/intel/device_handle.hpp), forwarded to
// the device's DeviceImpl. A driver includes this after its device_impl.hpp and instantiates
// the handle once: `template class intel::DeviceHandle<Device, DeviceImpl, QueueTraits,
// DeviceOptions>;`.
#pragma once

#include "vfab/drivers/intel/device_handle.hpp"
#include "vfab/vfio/device.hpp"

namespace vfab::intel {

template <class D, class I, class T, class O>
DeviceHandle<D, I, T, O>::DeviceHandle(std::unique_ptr<I> impl) : impl_(std::move(impl)) {}
template <class D, class I, class T, class O>
DeviceHandle<D, I, T, O>::~DeviceHandle() = default;

template <class D, class I, class T, class O>
Result<std::unique_ptr<D>> DeviceHandle<D, I, T, O>::open(const PciAddress& addr, const O& opts) {
    auto impl = I::open(addr, opts);
    if (!impl) return impl.take_error();
    return std::unique_ptr<D>(new D(std::move(*impl)));
}

template <class D, class I, class T, class O>
const DeviceAttr& DeviceHandle<D, I, T, O>::attr() const { return impl_->attr(); }
template <class D, class I, class T, class O>
LinkState DeviceHandle<D, I, T, O>::link() const { return impl_->link(); }
template <class D, class I, class T, class O>
DeviceStats DeviceHandle<D, I, T, O>::stats() { return impl_->stats(); }
template <class D, class I, class T, class O>
dma::ProtectionDomain& DeviceHandle<D, I, T, O>::pd() { return impl_->pd(); }
template <class D, class I, class T, class O>
Result<CompletionQueue<T>*> DeviceHandle<D, I, T, O>::create_cq(uint32_t cqe) { return impl_->create_cq(cqe); }
template <class D, class I, class T, class O>
Result<QueuePair<T>*> DeviceHandle<D, I, T, O>::create_qp(const QpInitAttr<T>& attr) { return impl_->create_qp(attr); }
template <class D, class I, class T, class O>
Result<void> DeviceHandle<D, I, T, O>::configure_rss(const RssConfig& cfg) { return impl_->configure_rss(cfg); }
template <class D, class I, class T, class O>
Result<void> DeviceHandle<D, I, T, O>::set_multicast(std::span<const MacAddress> groups) {
    return impl_->set_multicast(groups);
}
template <class D, class I, class T, class O>
int DeviceHandle<D, I, T, O>::event_fd() const { return impl_->event_fd(); }
template <class D, class I, class T, class O>
Event DeviceHandle<D, I, T, O>::next_event() { return impl_->next_event(); }
template <class D, class I, class T, class O>
Result<void> DeviceHandle<D, I, T, O>::reset() { return impl_->reset(); }
template <class D, class I, class T, class O>
vfio::Device& DeviceHandle<D, I, T, O>::vfio() { return impl_->vfio(); }
template <class D, class I, class T, class O>
vfio::Region& DeviceHandle<D, I, T, O>::bar0() { return impl_->bar0(); }

}  // namespace vfab::intel
