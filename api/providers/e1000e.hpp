// The e1000e provider: the Intel 82574L driver's direct classes behind the multiplexed API.
// Used by the built-in table (builtin_providers.cpp) and by the plugin libvfab-e1000e.so.
#pragma once

#include "vfab/drivers/e1000e.hpp"
#include "vfab/provider.hpp"

namespace vfab::providers {

using E1000e = provider::Adapter<e1000e::Device, e1000e::CompletionQueue, e1000e::QueuePair, e1000e::QpInitAttr>;

// The driver's own list (e1000e::kPciIds), which it also checks when it opens a device.
inline constexpr provider::Record kE1000eRecord = provider::make_record<E1000e>("e1000e", e1000e::kPciIds);

}  // namespace vfab::providers
