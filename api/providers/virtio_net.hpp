// The virtio-net provider: the virtio-net driver's direct classes behind the multiplexed API.
#pragma once

#include "vfab/drivers/virtio_net.hpp"
#include "vfab/provider.hpp"

namespace vfab::providers {

using VirtioNet = provider::Adapter<virtio_net::Device, virtio_net::CompletionQueue, virtio_net::QueuePair,
                                    virtio_net::QpInitAttr>;

inline constexpr provider::PciId kVirtioNetIds[] = {{virtio_net::kVendorId, virtio_net::kDeviceIds[0]}};
static_assert(std::size(virtio_net::kDeviceIds) == 1, "list every virtio-net device ID here");

inline constexpr provider::Record kVirtioNetRecord = provider::make_record<VirtioNet>("virtio-net", kVirtioNetIds);

}  // namespace vfab::providers
