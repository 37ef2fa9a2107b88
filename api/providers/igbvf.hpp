// The igbvf provider: the Intel 82576 / I350 virtual function driver's direct classes behind
// the multiplexed API.
#pragma once

#include "vfab/drivers/igbvf.hpp"
#include "vfab/provider.hpp"

namespace vfab::providers {

using Igbvf = provider::Adapter<igbvf::Device, igbvf::CompletionQueue, igbvf::QueuePair, igbvf::QpInitAttr>;

inline constexpr provider::Record kIgbvfRecord = provider::make_record<Igbvf>("igbvf", igbvf::kPciIds);

}  // namespace vfab::providers
