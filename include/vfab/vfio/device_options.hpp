// How a VFIO device is opened (vfio::Device::open, and every driver's DeviceOptions::vfio):
// the IOMMU backend, a context to share, the kernel interface. On its own so that the drivers'
// public headers carry the options without the VFIO device's control path.
#pragma once

#include <memory>
#include <string>

namespace vfab::vfio {

class IommuContext;
class Sys;

// IOMMU backends (vfio/iommu.hpp): automatic picks iommufd when the device has a VFIO cdev
// and /dev/iommu exists, legacy otherwise; noiommu only when asked for.
enum class IommuBackend { automatic, legacy, iommufd, noiommu };

struct DeviceOptions {
    IommuBackend backend = IommuBackend::automatic;
    std::shared_ptr<IommuContext> context;   // join this context instead of making one
    Sys* sys = nullptr;                      // the kernel; tests pass a fake
    std::string sysfs_root = "/sys";
};

}  // namespace vfab::vfio
