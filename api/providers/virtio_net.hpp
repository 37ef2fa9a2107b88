// The virtio-net provider: the virtio-net driver's direct classes behind the multiplexed API.
#pragma once

#include "vfab/drivers/virtio_net.hpp"
#include "vfab/provider.hpp"

namespace vfab::providers {

using VirtioNet = provider::Adapter<virtio_net::Device, virtio_net::CompletionQueue, virtio_net::QueuePair,
                                    virtio_net::QpInitAttr>;

inline constexpr provider::Record kVirtioNetRecord = provider::make_record<VirtioNet>("virtio-net", virtio_net::kPciIds);

}  // namespace vfab::providers
