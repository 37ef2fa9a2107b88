// Helpers the VFIO backends and the device share.
#include <cstring>

#include "vfio/backends.hpp"

namespace vfab::vfio {

Result<std::vector<uint8_t>> ioctl_argsz(Sys& sys, int fd, unsigned long req, std::vector<uint8_t> buf,
                                         const char* what) {
    // argsz is the first u32 of every variable-size VFIO info struct; the kernel raises it to
    // the size it needs when capabilities do not fit. Bounded: a buggy kernel cannot loop us.
    for (int attempt = 0; attempt < 4; ++attempt) {
        uint32_t argsz = static_cast<uint32_t>(buf.size());
        std::memcpy(buf.data(), &argsz, sizeof argsz);
        if (sys.ioctl(fd, req, buf.data()) < 0) return Error::from_errno(errno, what);
        uint32_t need;
        std::memcpy(&need, buf.data(), sizeof need);
        if (need <= buf.size()) return buf;
        if (need > (1u << 20)) break;
        std::vector<uint8_t> bigger(need);
        std::memcpy(bigger.data(), buf.data(), buf.size());   // keep the caller's input fields
        buf = std::move(bigger);
    }
    return Error{EPROTO, str_cat(what, ": the kernel kept asking for a larger buffer")};
}

Error explain_open_failure(int err, const std::string& path, const std::string& bdf) {
    std::string dev = bdf.empty() ? std::string("the device") : bdf;
    switch (err) {
    case ENOENT:
        if (path == "/dev/vfio/vfio")
            return Error{ENOENT, "no /dev/vfio/vfio: VFIO is not loaded — run `modprobe vfio-pci`"};
        return Error{ENOENT, str_cat("no ", path, ": ", dev, " is not bound to vfio-pci — run "
                                     "`vfio-devctl bind ", bdf.empty() ? "BDF" : bdf, "`")};
    case EACCES:
    case EPERM:
        return Error{err, str_cat("permission denied opening ", path, " — run as root, or give this user the "
                                  "device: `vfio-devctl bind ", bdf.empty() ? "BDF" : bdf, " --user $USER`")};
    case EBUSY:
        return Error{EBUSY, str_cat(path, " (", dev, ") is busy: another process (or another IOMMU context "
                                    "in this one) has it open — `fuser -v ", path, "` shows who")};
    default:
        return Error::from_errno(err, str_cat("open ", path));
    }
}

}  // namespace vfab::vfio
