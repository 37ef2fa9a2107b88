#include "devctl_hugepages.hpp"

#include <algorithm>
#include <charconv>

#include "devctl_fs.hpp"

namespace vfab::devctl {
namespace {

// "hugepages-2048kB" -> 2048.
std::optional<uint64_t> dir_page_kb(const std::string& name) {
    if (!name.starts_with("hugepages-") || !name.ends_with("kB")) return std::nullopt;
    uint64_t kb = 0;
    const char* first = name.data() + 10;
    const char* last = name.data() + name.size() - 2;
    auto [end, ec] = std::from_chars(first, last, kb);
    if (ec != std::errc() || end != last) return std::nullopt;
    return kb;
}

void add_pools(const std::string& dir, int node, std::vector<HugepagePool>& out) {
    for (const std::string& name : list_dir(dir)) {
        auto kb = dir_page_kb(name);
        if (!kb) continue;
        HugepagePool p{*kb, node, 0, 0};
        p.total = read_number(str_cat(dir, "/", name, "/nr_hugepages")).value_or(0);
        p.free = read_number(str_cat(dir, "/", name, "/free_hugepages")).value_or(0);
        out.push_back(p);
    }
}

std::string nodes_dir(const Paths& paths) { return paths.sysfs + "/devices/system/node"; }

std::string pool_dir(const Paths& paths, uint64_t page_kb, std::optional<int> node) {
    std::string base = node ? str_cat(nodes_dir(paths), "/node", *node, "/hugepages")
                            : paths.sysfs + "/kernel/mm/hugepages";
    return str_cat(base, "/hugepages-", page_kb, "kB");
}

std::string size_list(const Paths& paths) {
    std::string out;
    for (const HugepagePool& p : hugepage_pools(paths))
        if (p.node < 0) out += (out.empty() ? "" : ", ") + human_bytes(p.page_kb * 1024);
    return out.empty() ? "none (kernel without HUGETLBFS?)" : out;
}

}  // namespace

std::vector<HugepagePool> hugepage_pools(const Paths& paths) {
    std::vector<HugepagePool> out;
    add_pools(paths.sysfs + "/kernel/mm/hugepages", -1, out);
    for (const std::string& n : list_dir(nodes_dir(paths))) {
        int node = 0;
        if (!n.starts_with("node")) continue;
        auto [end, ec] = std::from_chars(n.data() + 4, n.data() + n.size(), node);
        if (ec != std::errc() || end != n.data() + n.size()) continue;
        add_pools(str_cat(nodes_dir(paths), "/", n, "/hugepages"), node, out);
    }
    std::stable_sort(out.begin(), out.end(), [](const HugepagePool& a, const HugepagePool& b) {
        return a.node != b.node ? a.node < b.node : a.page_kb < b.page_kb;
    });
    return out;
}

Result<uint64_t> parse_page_size(std::string_view text) {
    uint64_t n = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    std::string_view unit(end, static_cast<size_t>(text.data() + text.size() - end));
    uint64_t scale = 0;
    for (auto [names, kb] : {std::pair{"kK", 1ull}, {"mM", 1024ull}, {"gG", 1024ull * 1024}})
        if (!unit.empty() && std::string_view(names).find(unit[0]) != std::string_view::npos) scale = kb;
    std::string_view rest = unit.empty() ? unit : unit.substr(1);
    bool suffix_ok = rest.empty() || rest == "B" || rest == "b" || rest == "iB";
    if (ec != std::errc() || n == 0 || scale == 0 || !suffix_ok)
        return Error{EINVAL, str_cat("'", text, "' is not a page size: use 2M or 1G")};
    return n * scale;
}

Result<std::string> reserve_hugepages(const Context& ctx, uint64_t count, uint64_t page_kb, std::optional<int> node) {
    const Paths& p = ctx.paths;
    if (node && !is_dir(str_cat(nodes_dir(p), "/node", *node))) {
        std::vector<std::string> nodes = list_dir(nodes_dir(p));
        auto n = std::count_if(nodes.begin(), nodes.end(), [](const std::string& s) { return s.starts_with("node"); });
        return Error{ENODEV, str_cat("no NUMA node ", *node, ": this machine has ", n, " (nodes 0..", n - 1, ")")};
    }
    std::string dir = pool_dir(p, page_kb, node);
    if (!is_dir(dir))
        return Error{EINVAL, str_cat("this kernel has no ", human_bytes(page_kb * 1024), " hugepages; sizes: ",
                                     size_list(p), " (1G pages need the CPU flag pdpe1gb)")};
    if (auto w = write_text(dir + "/nr_hugepages", std::to_string(count)); !w) return w.take_error();
    uint64_t got = read_number(dir + "/nr_hugepages").value_or(0);
    std::string where = node ? str_cat(" on node ", *node) : std::string();
    std::string size = human_bytes(page_kb * 1024);
    if (got < count) {
        std::string boot = str_cat("hugepagesz=", page_kb >= 1024 * 1024 ? str_cat(page_kb / 1024 / 1024, "G")
                                                                         : str_cat(page_kb / 1024, "M"),
                                   " hugepages=", count);
        return Error{ENOMEM, str_cat("asked for ", count, " x ", size, " pages", where, ", the kernel reserved ",
                                     got, ": memory is too fragmented or too small. Free memory "
                                     "(echo 3 > /proc/sys/vm/drop_caches; echo 1 > /proc/sys/vm/compact_memory) "
                                     "and retry, or reserve them at boot (", boot, " on the kernel command line)")};
    }
    std::string keep = page_kb == 2048 && !node ? str_cat("vm.nr_hugepages = ", got, " in /etc/sysctl.d/vfab.conf")
                                                : str_cat("hugepagesz=/hugepages= on the kernel command line");
    return str_cat("reserved ", got, " x ", size, " pages", where, " (", human_bytes(got * page_kb * 1024),
                   "); to keep them across reboots: ", keep);
}

}  // namespace vfab::devctl
