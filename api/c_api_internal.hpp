// What the C API's two sources share: the device handle and error reporting.
#pragma once

#include <cerrno>
#include <memory>
#include <mutex>
#include <vector>

#include "vfab/vfab.h"
#include "vfab/vfab.hpp"

// The C handle of a device: the multiplexed device and the MRs registered through the C API
// (kept until vfab_close, so that a stale vfab_mr* reads ENODEV rather than freed memory).
struct vfab_mr {
    vfab_device* dev = nullptr;
    vfab::dma::MemoryRegion mr;
    bool registered = false;
};

struct vfab_device {
    std::unique_ptr<vfab::Device> dev;
    std::mutex mu;
    std::vector<std::unique_ptr<vfab_mr>> mrs;
};

namespace vfab::capi {

// Records `message` as the thread's last error; returns `code` (an errno value).
int fail(int code, std::string message);
// The same for a Result's error.
int fail(const Error& e);

// NULL arguments: EINVAL with "<function>: <what> is NULL".
int null_arg(const char* function, const char* what);

inline vfab::CompletionQueue* cq_of(vfab_cq* cq) { return reinterpret_cast<vfab::CompletionQueue*>(cq); }
inline vfab::QueuePair* qp_of(vfab_qp* qp) { return reinterpret_cast<vfab::QueuePair*>(qp); }
inline vfab_cq* handle_of(vfab::CompletionQueue* cq) { return reinterpret_cast<vfab_cq*>(cq); }
inline vfab_qp* handle_of(vfab::QueuePair* qp) { return reinterpret_cast<vfab_qp*>(qp); }

}  // namespace vfab::capi
