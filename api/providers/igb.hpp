// The igb provider: the Intel 82576 physical function driver's direct classes behind the
// multiplexed API.
#pragma once

#include "vfab/drivers/igb.hpp"
#include "vfab/provider.hpp"

namespace vfab::providers {

using Igb = provider::Adapter<igb::Device, igb::CompletionQueue, igb::QueuePair, igb::QpInitAttr>;

inline constexpr provider::Record kIgbRecord = provider::make_record<Igb>("igb", igb::kPciIds);

}  // namespace vfab::providers
