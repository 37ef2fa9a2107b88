// Private to the VFIO layer: the IOMMU backends' factories and shared helpers.
#pragma once

#include <memory>
#include <vector>

#include "vfab/vfio/iommu.hpp"

namespace vfab::vfio {

Result<std::shared_ptr<IommuContext>> create_legacy_container(Sys& sys, bool noiommu);
Result<std::shared_ptr<IommuContext>> create_iommufd_context(Sys& sys);

// Calls ioctl(fd, req, buf) for a variable-size VFIO info struct whose first u32 is argsz:
// grows the buffer and asks again while the kernel says it needs more.
Result<std::vector<uint8_t>> ioctl_argsz(Sys& sys, int fd, unsigned long req, std::vector<uint8_t> buf,
                                         const char* what);

// "open(path)" failed with err: an Error that says what to do about it.
Error explain_open_failure(int err, const std::string& path, const std::string& bdf);

}  // namespace vfab::vfio
