// check: is this host ready for vfab? Each finding says what was seen and, for a problem,
// the exact command that fixes it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "devctl_context.hpp"
#include "devctl_hugepages.hpp"

namespace vfab::devctl {

enum class Severity { ok, info, warning, error };   // error: blocks vfab
const char* severity_name(Severity s);

struct Finding {
    Severity severity = Severity::ok;
    std::string topic;     // iommu, vfio, vfio-pci, iommufd, noiommu, memlock, hugepages, permissions, device
    std::string message;   // what was seen
    std::string fix;       // the command that fixes it; empty when nothing to do
};

// What the IOMMU looks like, for check's report and --json.
struct IommuState {
    bool on = false;
    std::vector<std::string> units;   // /sys/class/iommu entries (dmar0, ivhd0, ...)
    size_t groups = 0;
    std::string default_domain;       // the kernel's default domain type (DMA, DMA-FQ, identity)
    std::vector<std::string> cmdline; // the IOMMU-related kernel parameters
    bool noiommu_mode = false;        // vfio's enable_unsafe_noiommu_mode
};

// The calling process's side of things (not in any file): its memlock limit and identity.
struct ProcessFacts {
    uint64_t memlock = UINT64_MAX;    // soft RLIMIT_MEMLOCK in bytes; UINT64_MAX: unlimited
    bool cap_ipc_lock = false;        // then the limit does not apply to it
    uid_t uid = 0;
    std::vector<gid_t> gids;          // effective group and supplementary groups
};
ProcessFacts current_process();

// A typical vfab application's pinned memory: rings, buffers and a DMA arena.
inline constexpr uint64_t kTypicalPinnedBytes = 256ull << 20;

struct CheckReport {
    std::vector<Finding> findings;
    IommuState iommu;
    std::vector<HugepagePool> hugepages;
    bool blocked() const;             // any error
};

CheckReport check_host(const Context& ctx, const ProcessFacts& proc);

// The parts of check_host, each appending its findings.
IommuState read_iommu_state(const Paths& paths);
void check_iommu(const Context& ctx, const IommuState& iommu, std::vector<Finding>& out);
void check_vfio_modules(const Context& ctx, std::vector<Finding>& out);
void check_memlock(const ProcessFacts& proc, std::vector<Finding>& out);
void check_hugepages(const Context& ctx, const std::vector<HugepagePool>& pools, std::vector<Finding>& out);
void check_permissions(const Context& ctx, const ProcessFacts& proc, std::vector<Finding>& out);
void check_devices(const Context& ctx, std::vector<Finding>& out);

}  // namespace vfab::devctl
