// The igb provider: the Intel 82576 physical function driver's direct classes behind the
// multiplexed API.
#pragma once

#include "vfab/drivers/igb.hpp"
#include "vfab/provider.hpp"

namespace vfab::providers {

using Igb = provider::Adapter<igb::Device, igb::CompletionQueue, igb::QueuePair, igb::QpInitAttr>;

inline constexpr provider::PciId kIgbIds[] = {
    {igb::kVendorId, igb::kDeviceIds[0]}, {igb::kVendorId, igb::kDeviceIds[1]}, {igb::kVendorId, igb::kDeviceIds[2]},
    {igb::kVendorId, igb::kDeviceIds[3]}, {igb::kVendorId, igb::kDeviceIds[4]}, {igb::kVendorId, igb::kDeviceIds[5]},
    {igb::kVendorId, igb::kDeviceIds[6]}, {igb::kVendorId, igb::kDeviceIds[7]}};
static_assert(std::size(igb::kDeviceIds) == 8, "list every igb device ID here");

inline constexpr provider::Record kIgbRecord = provider::make_record<Igb>("igb", kIgbIds);

}  // namespace vfab::providers
