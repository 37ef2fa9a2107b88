// Hugepage reservations, per page size and per NUMA node (sysfs /kernel/mm/hugepages and
// /devices/system/node/node*/hugepages).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "devctl_context.hpp"

namespace vfab::devctl {

struct HugepagePool {
    uint64_t page_kb = 0;   // 2048, 1048576
    int node = -1;          // -1: the whole system
    uint64_t total = 0;     // nr_hugepages
    uint64_t free = 0;      // free_hugepages
};

// The system-wide pools first (by page size), then each node's.
std::vector<HugepagePool> hugepage_pools(const Paths& paths);

// "2M", "1G", "2048k", "2MB", "1GiB" -> KiB.
Result<uint64_t> parse_page_size(std::string_view text);

// Sets the reservation of `count` pages of `page_kb` (on `node`, or system-wide) and reads
// back what the kernel managed; an error when it reserved fewer, saying how to get them.
Result<std::string> reserve_hugepages(const Context& ctx, uint64_t count, uint64_t page_kb, std::optional<int> node);

}  // namespace vfab::devctl
